"""Process runtime projection: volumes, the service-account mount, the API server's address and
Service names reach a local process as the kubelet would give them to a container."""

from __future__ import annotations

import base64
import json
import sys

import pytest

from devcluster.cluster import DevCluster
from devcluster.runtime.projection import Projection, rewrite_path
from tests.conftest import assert_no_crashes, eventually
from tests.devcluster.helpers import pod, rt

# Reads what a pod reads: its config file (an argument), its service-account mount (a path
# compiled into the program), and calls the API server in-cluster over HTTPS with the token.
SCRIPT_INCLUSTER = """
import json, os, ssl, sys, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
token = open(sa + "/token").read()
ns = open(sa + "/namespace").read()
ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
url = f"https://{host}:{port}/api/v1/namespaces/{ns}/pods/{os.environ['POD_NAME']}"
req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
me = json.load(urllib.request.urlopen(req, context=ctx, timeout=10))
print(json.dumps({"self": me["metadata"]["name"], "config": open(sys.argv[1]).read(),
                  "secret": open("/etc/creds/password").read(), "gm": os.environ["GM_ADDRESS"],
                  "rootfs": os.environ["ROOTFS"], "isfile": os.path.isfile(sa + "/token"),
                  "listing": sorted(os.listdir(sa))}), flush=True)
"""
SCRIPT_WRITE = "import sys; open(sys.argv[1] + '/marker', 'w').write('from-pod')"


@pytest.fixture
async def pdc():
    dc = DevCluster(start_delay=0, termination_delay=0, resync=0.5, process_runtime=True, restart_backoff=0.05,
                    image_map={"sim/incluster:v1": [sys.executable, "-c", SCRIPT_INCLUSTER],
                               "sim/write:v1": [sys.executable, "-c", SCRIPT_WRITE],
                               "tool:v1": {"command": [sys.executable, "-c", "raise SystemExit(9)"],
                                           "programs": {"greet": [sys.executable, "-c",
                                                                  "import sys; print('greet', sys.argv[1:])"]}}})
    await dc.start("127.0.0.1", 0)
    try:
        yield dc
    finally:
        await dc.stop()
    assert_no_crashes(dc)


def _pod(store, name):
    return store.get(rt(store, "pods"), "default", name)


async def _finished(dc, name, phase="Succeeded"):
    def done():
        p = _pod(dc.store, name)
        return p.get("status", {}).get("phase") in ("Succeeded", "Failed") and p
    p = await eventually(done, f"pod {name} to finish", within=20)
    assert p["status"]["phase"] == phase, dc.runtime.logs("default", name)
    return dc.runtime.logs("default", name).decode()


def _incluster_pod():
    p = pod("inside", image="sim/incluster:v1", nodeName="edge-node-1", restartPolicy="Never")
    p["spec"]["volumes"] = [
        {"name": "config", "configMap": {"name": "app-config"}},
        {"name": "creds", "secret": {"secretName": "app-secret", "items": [{"key": "pw", "path": "password"}]}},
        {"name": "root", "hostPath": {"path": "/"}},
        {"name": "gm-token", "projected": {"sources": [
            {"serviceAccountToken": {"audience": "sedna-gm", "expirationSeconds": 600, "path": "token"}}]}},
    ]
    p["spec"]["containers"][0].update(
        args=["/config/app.yaml"],
        env=[{"name": "GM_ADDRESS", "value": "gm.default:9000"}, {"name": "ROOTFS", "value": "/rootfs"}],
        volumeMounts=[{"name": "config", "mountPath": "/config"}, {"name": "creds", "mountPath": "/etc/creds"},
                      {"name": "root", "mountPath": "/rootfs"},
                      {"name": "gm-token", "mountPath": "/var/run/secrets/sedna"}])
    return p


def _grant_pod_reads(store):
    """The pod's ServiceAccount (default) may read pods: its token meets RBAC as on a real server."""
    group = "rbac.authorization.k8s.io"
    store.create(rt(store, "roles", group), "default", {
        "metadata": {"name": "pod-reader"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})
    store.create(rt(store, "rolebindings", group), "default", {
        "metadata": {"name": "pod-reader"}, "roleRef": {"apiGroup": group, "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}]})


def _service(store):
    store.create(rt(store, "services"), "default", {
        "metadata": {"name": "gm"},
        "spec": {"selector": {"app": "gm"}, "ports": [{"port": 9000, "targetPort": 9100}]}})


async def test_pod_process_gets_volumes_sa_mount_api_address_and_service_names(pdc):
    store = pdc.store
    store.create(rt(store, "configmaps"), "default", {"metadata": {"name": "app-config"}, "data": {"app.yaml": "a: 1\n"}})
    store.create(rt(store, "secrets"), "default", {
        "metadata": {"name": "app-secret"}, "data": {"pw": base64.b64encode(b"s3cret").decode()}})
    _service(store)
    _grant_pod_reads(store)
    created = store.create(rt(store, "pods"), "default", _incluster_pod())
    seen = json.loads((await _finished(pdc, "inside")).strip().splitlines()[-1])
    assert seen["self"] == "inside"  # the HTTPS call with the projected token and CA worked
    assert seen["config"] == "a: 1\n"
    assert seen["secret"] == "s3cret"
    assert seen["gm"] == "127.0.0.1:9100"
    assert seen["rootfs"] == pdc.runtime.node_root("edge-node-1")
    assert seen["isfile"] is True
    assert seen["listing"] == ["ca.crt", "namespace", "token"]
    # the projected token carries its own audience: the GM's reviewer accepts it, the API's would not
    token = (pdc.pod_root / "pods" / created["metadata"]["uid"] / "volumes" / "gm-token" / "token").read_text()
    review = pdc.tokens.review({"spec": {"token": token, "audiences": ["sedna-gm"]}})
    assert review["status"]["authenticated"] is True
    assert review["status"]["user"]["extra"]["authentication.kubernetes.io/node-name"] == ["edge-node-1"]
    assert pdc.tokens.review({"spec": {"token": token}})["status"]["authenticated"] is False


async def test_hostpath_is_the_nodes_own_root_filesystem(pdc):
    store = pdc.store
    for i, node in enumerate(("edge-node-1", "edge-node-2")):
        p = pod(f"w{i}", image="sim/write:v1", nodeName=node, restartPolicy="Never")
        p["spec"]["volumes"] = [{"name": "data", "hostPath": {"path": "/var/lib/app"}}]
        p["spec"]["containers"][0].update(args=["/data"], volumeMounts=[{"name": "data", "mountPath": "/data"}])
        store.create(rt(store, "pods"), "default", p)
    for i, node in enumerate(("edge-node-1", "edge-node-2")):
        await _finished(pdc, f"w{i}")
        marker = pdc.pod_root / "nodes" / node / "var" / "lib" / "app" / "marker"
        assert marker.read_text() == "from-pod"


async def test_missing_config_map_holds_the_pod_until_it_exists(pdc):
    store = pdc.store
    _service(store)
    _grant_pod_reads(store)
    store.create(rt(store, "secrets"), "default", {"metadata": {"name": "app-secret"}, "stringData": {"pw": "x"}})
    store.create(rt(store, "pods"), "default", _incluster_pod())

    def waiting_reason():
        cs = (_pod(store, "inside").get("status") or {}).get("containerStatuses") or [{}]
        return (cs[0].get("state") or {}).get("waiting", {}).get("reason")
    await eventually(lambda: waiting_reason() == "CreateContainerConfigError", "CreateContainerConfigError")
    store.create(rt(store, "configmaps"), "default", {"metadata": {"name": "app-config"}, "data": {"app.yaml": "b"}})
    seen = json.loads((await _finished(pdc, "inside")).strip().splitlines()[-1])
    assert seen["config"] == "b"


async def test_automount_false_gives_no_service_account_mount(pdc):
    store = pdc.store
    p = pod("plain", image="sim/write:v1", nodeName="edge-node-1", restartPolicy="Never",
            automountServiceAccountToken=False)
    p["spec"]["containers"][0]["args"] = ["/var/run/secrets/kubernetes.io/serviceaccount"]
    store.create(rt(store, "pods"), "default", p)
    assert "No such file or directory" in await _finished(pdc, "plain", "Failed")


async def test_program_named_by_the_container_command_is_mapped(pdc):
    store = pdc.store
    p = pod("tool", image="tool:v1", nodeName="edge-node-1", restartPolicy="Never")
    p["spec"]["containers"][0].update(command=["greet", "--name"], args=["x"])
    store.create(rt(store, "pods"), "default", p)
    assert "greet ['--name', 'x']" in await _finished(pdc, "tool")


@pytest.mark.parametrize(("value", "expected"), [
    pytest.param("/config/a.yaml", "/host/cfg/a.yaml", id="under-mount"),
    pytest.param("/config", "/host/cfg", id="mount-itself"),
    pytest.param("/configs/a", "/configs/a", id="prefix-is-not-a-dir"),
    pytest.param("--config=/config/a", "--config=/host/cfg/a", id="flag-form"),
    pytest.param("/config/sub/x", "/host/sub/x", id="longest-match"),
    pytest.param("relative/config", "relative/config", id="relative"),
])
def test_rewrite_path(value, expected):
    mounts = {"/config": "/host/cfg", "/config/sub": "/host/sub"}
    assert rewrite_path(value, mounts) == expected
    assert Projection(env={}, mounts=mounts).rewrite(value) == expected


async def test_without_a_role_binding_the_pods_token_is_forbidden(pdc):
    store = pdc.store
    store.create(rt(store, "configmaps"), "default", {"metadata": {"name": "app-config"}, "data": {"app.yaml": "a"}})
    store.create(rt(store, "secrets"), "default", {"metadata": {"name": "app-secret"}, "stringData": {"pw": "x"}})
    _service(store)
    store.create(rt(store, "pods"), "default", _incluster_pod())
    assert "HTTP Error 403: Forbidden" in await _finished(pdc, "inside", "Failed")
