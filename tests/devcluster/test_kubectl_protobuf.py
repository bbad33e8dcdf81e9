"""The real kubectl's typed commands send protobuf bodies; the dev cluster stores what they meant.

Each command runs twice: `--dry-run=client -o json` prints the object kubectl builds (Go's JSON
encoding of it), then the real create sends it as application/vnd.kubernetes.protobuf; `kubectl
get -o json` must show every field sent. Commands for APIs the dev cluster does not serve are
skipped (their decoding is covered from bytes in test_protobody.py).
"""

from __future__ import annotations

import aiohttp
import orjson
import pytest

from devcluster.server.protobody import CONTENT_TYPE
from tests.conftest import eventually
from tests.devcluster.conformance.test_conformance import match
from tests.devcluster.test_protobody import envelope, ld, vi

COMMANDS = [
    pytest.param(["create", "namespace", "demo"], ["namespace", "demo"], id="namespace"),
    pytest.param(["create", "secret", "generic", "s1", "--from-literal=user=admin", "--from-literal=pw=p@ss w"],
                 ["secret", "s1"], id="secret-generic"),
    pytest.param(["create", "configmap", "c1", "--from-literal=a=1", "--from-literal=b=two"], ["configmap", "c1"],
                 id="configmap"),
    pytest.param(["create", "serviceaccount", "sa1"], ["serviceaccount", "sa1"], id="serviceaccount"),
    pytest.param(["create", "deployment", "web", "--image=nginx:1.25", "--replicas=2", "--port=80"],
                 ["deployment", "web"], id="deployment"),
    pytest.param(["create", "service", "clusterip", "svc1", "--tcp=80:8080"], ["service", "svc1"], id="service"),
    pytest.param(["create", "role", "r1", "--verb=get,list", "--resource=pods"], ["role", "r1"], id="role"),
    pytest.param(["create", "rolebinding", "rb1", "--role=r1", "--serviceaccount=default:sa1"],
                 ["rolebinding", "rb1"], id="rolebinding"),
    pytest.param(["create", "clusterrole", "cr1", "--verb=get", "--resource=nodes"], ["clusterrole", "cr1"],
                 id="clusterrole"),
    pytest.param(["create", "clusterrolebinding", "crb1", "--clusterrole=cr1", "--user=alice"],
                 ["clusterrolebinding", "crb1"], id="clusterrolebinding"),
    pytest.param(["create", "job", "j1", "--image=busybox", "--", "echo", "hi"], ["job", "j1"], id="job"),
    pytest.param(["create", "cronjob", "cj1", "--image=busybox", "--schedule=*/5 * * * *", "--", "date"],
                 ["cronjob", "cj1"], id="cronjob"),
    pytest.param(["create", "pdb", "pdb1", "--selector=app=web", "--min-available=1"], ["pdb", "pdb1"], id="pdb"),
    pytest.param(["create", "priorityclass", "pc1", "--value=1000", "--description=high"],
                 ["priorityclass", "pc1"], id="priorityclass"),
    pytest.param(["create", "quota", "q1", "--hard=cpu=1,memory=1Gi,pods=10"], ["resourcequota", "q1"], id="quota"),
    pytest.param(["create", "ingress", "ing1", "--rule=foo.com/bar=svc1:80"], ["ingress", "ing1"], id="ingress"),
]


_NOT_SERVED = "the server could not find the requested resource"


def _without_nulls(value):
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _with_flags(command: list[str], *flags: str) -> list[str]:
    """Flags go before a `--` that starts the container's command."""
    cut = command.index("--") if "--" in command else len(command)
    return [*command[:cut], *flags, *command[cut:]]


@pytest.mark.parametrize(("command", "get"), COMMANDS)
async def test_typed_create_stores_every_field_kubectl_sent(kubectl, command, get):
    rc, out, err = await kubectl(*_with_flags(command, "--dry-run=client", "-o", "json"))
    if rc != 0 and _NOT_SERVED in err:
        pytest.skip(f"the dev cluster does not serve {get[0]} yet")
    assert rc == 0, err
    sent = _without_nulls(orjson.loads(out))

    rc, out, err = await kubectl(*_with_flags(command, "-v=8"))
    if rc != 0 and _NOT_SERVED in err:
        pytest.skip(f"the dev cluster does not serve {get[0]} yet")
    assert rc == 0, err
    assert f"Content-Type: {CONTENT_TYPE}" in err, "kubectl did not send protobuf"
    assert "201 Created" in err

    rc, out, err = await kubectl("get", *get, "-o", "json")
    assert rc == 0, err
    stored = orjson.loads(out)
    assert match(sent, stored) == []


async def test_autoscale_sends_a_protobuf_horizontal_pod_autoscaler(kubectl):
    rc, _, err = await kubectl("create", "deployment", "web", "--image=nginx")
    assert rc == 0, err
    command = ["autoscale", "deployment", "web", "--max=3", "--cpu-percent=70"]
    rc, out, err = await kubectl(*command, "--dry-run=client", "-o", "json")
    assert rc == 0, err
    sent = _without_nulls(orjson.loads(out))
    rc, out, err = await kubectl(*command, "-v=8")
    if rc != 0 and _NOT_SERVED in err:
        pytest.skip("the dev cluster does not serve horizontalpodautoscalers yet")
    assert rc == 0 and f"Content-Type: {CONTENT_TYPE}" in err, err
    # read back in the version kubectl wrote (the dev cluster stores HPAs as autoscaling/v2)
    rc, out, err = await kubectl("get", "horizontalpodautoscalers.v1.autoscaling", "web", "-o", "json")
    assert rc == 0, err
    assert match({k: v for k, v in sent.items() if k != "status"}, orjson.loads(out)) == []


async def test_secret_bytes_survive_exactly(kubectl):
    rc, _, err = await kubectl("create", "secret", "generic", "bin", "--from-literal=k=\u00e9\u00e8 \t\\n")
    assert rc == 0, err
    rc, out, _ = await kubectl("get", "secret", "bin", "-o", "jsonpath={.data.k}")
    assert out == "w6nDqCAJXG4="  # base64 of the UTF-8 bytes kubectl sent: "éè", space, tab, backslash, "n"


async def _send(cluster, method: str, path: str, body: bytes) -> tuple[int, dict]:
    headers = {"Content-Type": CONTENT_TYPE, "Accept": f"{CONTENT_TYPE}, application/json"}
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        async with http.request(method, cluster.url + path, data=body, headers=headers) as resp:
            assert resp.content_type == "application/json"
            return resp.status, await resp.json()


async def test_protobuf_update_replaces_the_object(cluster, kubectl):
    rc, _, err = await kubectl("create", "configmap", "cm", "--from-literal=a=1")
    assert rc == 0, err
    rc, rv, _ = await kubectl("get", "configmap", "cm", "-o", "jsonpath={.metadata.resourceVersion}")
    meta = ld(1, "cm") + ld(3, "default") + ld(6, rv)
    body = envelope("v1", "ConfigMap", ld(1, meta) + ld(2, ld(1, "b") + ld(2, "2")))
    status, obj = await _send(cluster, "PUT", "/api/v1/namespaces/default/configmaps/cm", body)
    assert status == 200, obj
    assert obj["data"] == {"b": "2"} and obj["metadata"]["resourceVersion"] != rv


async def test_protobuf_delete_options_orphan_the_dependents(cluster, kubectl):
    rc, _, err = await kubectl("create", "deployment", "web", "--image=nginx")
    assert rc == 0, err

    replicasets = cluster.store.registry.lookup(group="apps", version="v1", resource="replicasets")

    def replica_set() -> dict | None:
        items, _ = cluster.store.list(replicasets, "default", label_selector="app=web", field_selector=None)
        return items[0] if items else None

    await eventually(replica_set, "the Deployment's ReplicaSet appears", within=20)
    options = envelope("apps/v1", "DeleteOptions", vi(1, 0) + ld(4, "Orphan"))
    status, obj = await _send(cluster, "DELETE", "/apis/apps/v1/namespaces/default/deployments/web", options)
    assert status == 200, obj

    def orphaned() -> bool:
        rs = replica_set()
        return rs is not None and not rs["metadata"].get("ownerReferences")

    await eventually(orphaned, "the ReplicaSet outlives its Deployment without an owner", within=20)
