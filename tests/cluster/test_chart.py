"""The chart on both clusters of the tier, with its default values (node identity on).

The real helm installs it. The GM runs here, outside the cluster, from the chart's own config
(the installed ConfigMap) and with a token of the chart's GM ServiceAccount (`kubectl create
token`), so every call it makes is under the chart's RBAC. An LC holding a token of the chart's
LC ServiceAccount, bound to the chart's LC pod on edge-node-1 and made for the GM's audience,
is admitted as edge-node-1 once the cluster's TokenReview says where that pod runs; an LC
claiming another node, or a token of another ServiceAccount or for the API server's audience,
is refused. A worker template naming the GM's own ServiceAccount in the GM's namespace gets a
refusal, not a worker, until it is fixed.

The cluster runs no pod (kwok, or the dev cluster's simulated kubelet): the chart's GM and LC
pods only show that the cluster admits them (Pod Security included) and where they land.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import yaml

from gm.app import GlobalManager
from gm.config import parse_config
from gm.kube.apierrors import NotFound
from gm.kube.resources import DATASETS, DEPLOYMENTS, EVENTS, PODS, sedna_gvr
from proto import SUBPROTOCOL
from shared import apis
from tests.cluster.conftest import WITHIN, in_namespace
from tests.cluster.plugin import ROOT, Cluster
from tests.conftest import eventually
from tests.e2e.conftest import load_example
from tests.e2e.test_system import lc_env, local_controller
from tests.helm.helmbin import helm_env, helm_path

CHART = ROOT / "charts" / "sedna"
NODE, OTHER = "edge-node-1", "edge-node-2"
AUDIENCE = "sedna-gm"  # values.yaml auth.tokenReview.audience
GM_ACCOUNT, LC_ACCOUNT = "sedna", "sedna-lc"  # serviceAccount.name, auth.tokenReview.serviceAccount
HELM_TIMEOUT = 120.0
JI = "helmet-detection-inference-example"


@dataclass
class Release:
    """The installed chart: its namespaces and the cluster it is on."""

    target: Cluster
    namespace: str  # the GM's (the release namespace)
    home: Path

    @property
    def lc_namespace(self) -> str:
        return f"{self.namespace}-lc"  # lc.namespace left empty

    async def helm(self, *args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            str(helm_path()), "--kubeconfig", str(self.target.kubeconfig), *args, env=helm_env(self.home / "helm"),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), HELM_TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise AssertionError(f"[{self.target}] helm {' '.join(args)} did not finish in {HELM_TIMEOUT}s") from None
        assert proc.returncode == 0, f"[{self.target}] helm {' '.join(args)}: {err.decode()}"
        return out.decode()

    async def token(self, account: str, namespace: str, *args: str) -> str:
        """`kubectl create token`: what a pod's projected volume would hold."""
        return (await self.target.kubectl("create", "token", account, "-n", namespace, "--duration=10m",
                                          *args)).strip()

    def kubeconfig(self, token: str) -> Path:
        """The target's kubeconfig with `token` as its only user (what an in-cluster pod has)."""
        config = yaml.safe_load(self.target.kubeconfig.read_text())
        context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c for c in config["clusters"] if c["name"] == context["context"]["cluster"])
        path = self.home / "gm-kubeconfig"
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
            "users": [{"name": "gm", "user": {"token": token}}],
            "contexts": [{"name": "gm", "context": {"cluster": cluster["name"], "user": "gm"}}],
            "current-context": "gm"}))
        return path

    async def pods(self, namespace: str, selector: str) -> list[dict]:
        items = (await self.target.get_json("pods", "-n", namespace, "-l", selector))["items"]
        return [p for p in items if (p.get("status") or {}).get("phase") == "Running"]


@pytest.fixture
async def release(target: Cluster, tmp_path: Path) -> AsyncIterator[Release]:
    """`helm install` with the chart's defaults into a namespace of its own (--create-namespace).
    The tier applied the CRDs already, server-side: Helm's own apply of them would conflict."""
    rel = Release(target, f"sedna-{uuid.uuid4().hex[:6]}", tmp_path)
    await rel.helm("install", "sedna", str(CHART), "--namespace", rel.namespace, "--create-namespace",
                   "--skip-crds")
    try:
        yield rel
    finally:
        await rel.helm("uninstall", "sedna", "--namespace", rel.namespace, "--wait", "--timeout=60s")
        # kept by uninstall (helm.sh/resource-policy: keep), as --create-namespace's are
        await target.kubectl("delete", "namespace", rel.namespace, "--wait=false", check=False)


@pytest.fixture
async def chart_gm(release: Release) -> AsyncIterator[GlobalManager]:
    """The GM from the installed ConfigMap, authenticating as the chart's GM ServiceAccount;
    only the address it serves LCs on is changed (a free local port)."""
    text = await release.target.kubectl("get", "configmap", "gm-config", "-n", release.namespace,
                                        "-o", "jsonpath={.data.sedna-gm\\.yaml}")
    config = yaml.safe_load(text)
    config["kubeConfig"] = str(release.kubeconfig(await release.token(GM_ACCOUNT, release.namespace)))
    config["websocket"].update(address="127.0.0.1", port=0)
    manager = GlobalManager(parse_config(yaml.safe_dump(config)))
    await manager.start()
    try:
        yield manager
    finally:
        await manager.stop()


async def refused_with(gm: GlobalManager, node: str, token: str | None) -> int:
    """Dial the GM as the LC does, as `node` with `token`; the HTTP status it refuses with."""
    headers = {"Node-Name": node} | ({"Authorization": f"Bearer {token}"} if token else {})
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await http.ws_connect(f"http://127.0.0.1:{gm.port}/", headers=headers, protocols=(SUBPROTOCOL,))
    return info.value.status


def write(path: Path, text: str) -> str:
    path.write_text(text + "\n")
    return str(path)


async def test_chart_defaults_node_identity_rbac_and_pod_security(release: Release, chart_gm: GlobalManager,
                                                                  target: Cluster, ns: str, api, tmp_path: Path):
    gm, rel = chart_gm, release
    # the chart's namespaces, labelled; its GM pod admitted under `restricted`, its LC pods on the
    # edge nodes (tolerating their taint) under `privileged`
    for name, level in ((rel.namespace, "restricted"), (rel.lc_namespace, "privileged")):
        labels = (await target.get_json("namespace", name))["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == level, (name, labels)
    async def gm_pods() -> list[dict]:
        pods = await rel.pods(rel.namespace, "sedna=gm")
        return pods if len(pods) == 2 else []
    # both replicas, on the one node off the edge (their anti-affinity is only preferred)
    gms = await eventually(gm_pods, "the chart's two GM pods Running", within=WITHIN, interval=0.5)
    assert [p["spec"]["nodeName"] for p in gms] == ["cloud-node", "cloud-node"]
    pdb = await target.get_json("poddisruptionbudget", "gm", "-n", rel.namespace)
    assert pdb["spec"]["minAvailable"] == 1

    async def lc_pods() -> dict[str, str]:
        pods = await rel.pods(rel.lc_namespace, "sedna=lc")
        return {p["spec"]["nodeName"]: p["metadata"]["name"] for p in pods} if len(pods) == 2 else {}
    lc_pod = await eventually(lc_pods, "the chart's LC pods on both edge nodes", within=WITHIN, interval=0.5)
    assert set(lc_pod) == {NODE, OTHER}

    # an LC with the chart's LC token for its pod on edge-node-1 is admitted as edge-node-1 and
    # gets that node's objects (the GM's informers, hub and TokenReview under the chart's RBAC)
    bound = ("--bound-object-kind=Pod", f"--bound-object-name={lc_pod[NODE]}")
    lc_token = await rel.token(LC_ACCOUNT, rel.lc_namespace, f"--audience={AUDIENCE}", *bound)
    dataset = in_namespace(next(d for d in load_example("federated-learning-surface-defect.yaml")
                                if d["kind"] == "Dataset" and d["spec"]["nodeName"] == NODE), ns)
    await api.create(DATASETS, dataset, namespace=ns)
    env = lc_env(tmp_path, NODE, gm.port, GM_TOKEN_FILE=write(tmp_path / "lc-token", lc_token))
    async with local_controller(env) as (lc, _):
        await eventually(lambda: NODE in gm.hub.connected_nodes(), "the LC admitted as edge-node-1", within=WITHIN)
        await eventually(lambda: lc.store.get_resource("Dataset", ns, dataset["metadata"]["name"]),
                         "edge-node-1's Dataset on the LC", within=WITHIN, interval=0.05)

        # refused: the same token claiming edge-node-2 (a real LC, then the raw handshake) ...
        impostor_env = lc_env(tmp_path, OTHER, gm.port, GM_TOKEN_FILE=str(tmp_path / "lc-token"),
                              LC_DB_PATH=str(tmp_path / "impostor.db"))
        async with local_controller(impostor_env) as (impostor, _):
            await eventually(lambda: "403" in impostor.link.info.last_error, "the impostor LC refused (403)",
                             within=WITHIN)
            assert impostor.link.info.sessions == 0
        assert await refused_with(gm, OTHER, lc_token) == 403
        # ... another ServiceAccount's token bound to a pod on edge-node-1, for the GM's audience ...
        await api.create(PODS, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "impostor"},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]}}, namespace=ns)
        other_account = await rel.token("default", ns, f"--audience={AUDIENCE}", "--bound-object-kind=Pod",
                                        "--bound-object-name=impostor")
        assert await refused_with(gm, NODE, other_account) == 403
        # ... the GM's own token, the LC's token for the API server's audience, and no token at all
        assert await refused_with(gm, NODE, await rel.token(GM_ACCOUNT, rel.namespace, f"--audience={AUDIENCE}")) == 403
        assert await refused_with(gm, NODE, await rel.token(LC_ACCOUNT, rel.lc_namespace, *bound)) == 401
        assert await refused_with(gm, NODE, None) == 401
        # and the real LC keeps its one session
        assert (lc.link.info.sessions, lc.link.state) == (1, "connected")
        assert gm.hub.stats.sessions_replaced == 0

    await _worker_as_the_gm_is_refused_until_fixed(rel, target, api)
    # all of it within the chart's RBAC: not one call of the GM was forbidden
    calls = [(s.labels["verb"], s.labels["code"]) for family in gm.kube_metrics.api_requests.collect()
             for s in family.samples if s.name.endswith("_total") and s.value]
    assert ("create", "201") in calls, calls
    assert [c for c in calls if c[1] == "403"] == []


async def _worker_as_the_gm_is_refused_until_fixed(rel: Release, target: Cluster, api) -> None:
    """A JointInferenceService in the GM's namespace whose workers would run as the GM."""
    gvr = sedna_gvr(apis.JOINT_INFERENCE)
    docs = [in_namespace(d, rel.namespace) for d in load_example("joint-inference-helmet-detection.yaml")]
    for doc in docs:
        if doc["kind"] == "JointInferenceService":
            for worker in ("edgeWorker", "cloudWorker"):
                doc["spec"][worker]["template"]["spec"]["serviceAccountName"] = GM_ACCOUNT
        await api.create(sedna_gvr(apis.require(doc["kind"])), doc, namespace=rel.namespace)

    async def refused() -> dict | None:
        status = (await api.get(gvr, JI, namespace=rel.namespace)).get("status") or {}
        return next((c for c in status.get("conditions") or ()
                     if c["type"] == "Failed" and c["status"] == "True"), None)
    cond = await eventually(refused, "the ServiceAccountForbidden condition", within=WITHIN, interval=0.2)
    assert cond["reason"] == "ServiceAccountForbidden", cond
    assert f"ServiceAccount {rel.namespace}/{GM_ACCOUNT}, the GlobalManager's own" in cond["message"]
    uid = (await api.get(gvr, JI, namespace=rel.namespace))["metadata"]["uid"]

    async def warned() -> bool:
        events = (await api.list(EVENTS, namespace=rel.namespace,
                                 field_selector=f"involvedObject.uid={uid}"))["items"]
        return any(e["reason"] == "ServiceAccountForbidden" and e["type"] == "Warning" for e in events)
    await eventually(warned, "the Warning event", within=WITHIN, interval=0.2)
    assert await _deployments(api, rel.namespace) == []

    # fixed: the workers come
    patch = [{"op": "remove", "path": f"/spec/{w}/template/spec/serviceAccountName"}
             for w in ("edgeWorker", "cloudWorker")]
    await target.kubectl("patch", "jointinferenceservice", JI, "-n", rel.namespace, "--type=json",
                         "-p", json.dumps(patch))
    await eventually(lambda: _deployments(api, rel.namespace), "the JI's Deployments once fixed", within=WITHIN,
                     interval=0.2)
    # `restricted` keeps the example's workers (root, no seccomp profile) out of the GM's namespace
    async def refused_pods() -> list[str]:
        events = (await target.get_json("events", "-n", rel.namespace,
                                        "--field-selector=reason=FailedCreate"))["items"]
        return [e["message"] for e in events if "violates PodSecurity" in e["message"]]
    messages = await eventually(refused_pods, "the workers' pods refused by Pod Security", within=WITHIN,
                                interval=0.5)
    assert 'violates PodSecurity "restricted:latest"' in messages[0], messages


async def _deployments(api, namespace: str) -> list[str]:
    try:
        items = (await api.list(DEPLOYMENTS, namespace=namespace))["items"]
    except NotFound:
        return []
    return [d["metadata"]["name"] for d in items if d["metadata"]["name"].startswith(JI)]

