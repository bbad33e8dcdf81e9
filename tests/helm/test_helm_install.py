"""`helm install charts/sedna` on the dev cluster, then the GM doing its whole job under the
chart's ServiceAccount token with RBAC enforced, and admitting the LC (in its own namespace)
as its node by a TokenReview of its projected token; `helm upgrade` rolls the GM; `helm
uninstall` leaves nothing of the release behind but the labelled release namespace.

The GM and LC pods run as local processes (the process runtime projects their config file,
service-account tokens, CA and API address); the workers the GM creates are simulated pods.
"""

from __future__ import annotations

import json
import logging

import aiohttp
import pytest

from shared import apis
from shared.ports import free_port
from tests.conftest import eventually
from tests.helm.conftest import CHART
from tests.helm.helmbin import ROOT

NS = "sedna"
LC_NS = "sedna-lc"
GM_SA = f"system:serviceaccount:{NS}:sedna"
EXAMPLES = [ROOT / "examples" / "upstream" / n
            for n in ("joint-inference-helmet-detection.yaml", "federated-learning-surface-defect.yaml")]
READY_WITHIN = 60.0


def _rt(dc, resource, group=""):
    version = "v1"
    return dc.store.registry.lookup(group=group, version=version, resource=resource)


def _items(dc, resource, ns=NS, group="", selector=None):
    items, _ = dc.store.list(_rt(dc, resource, group), ns, label_selector=selector)
    return items


def _running(pods):
    return [p for p in pods if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get(
        "deletionTimestamp")]


def _lease(dc):
    items = _items(dc, "leases", group="coordination.k8s.io")
    lease = next((x for x in items if x["metadata"]["name"] == "sedna-gm"), None)
    return (lease or {}).get("spec", {}).get("holderIdentity")


def _owned_by(items, owner):
    return [o for o in items if any(r.get("uid") == owner["metadata"]["uid"] and r.get("controller")
                                    for r in o["metadata"].get("ownerReferences") or [])]


def _cr(dc, kind, name):
    api = apis.by_kind(kind) if hasattr(apis, "by_kind") else None
    rt = dc.store.registry.for_kind("sedna.io/v1alpha1", kind)
    assert rt is not None, f"{kind} is not served (api {api})"
    return dc.store.get(rt, "default", name)


def _install_args(gm_port: int, lc_port: int) -> list[str]:
    # One GM replica: the process runtime runs every pod on this host's network, where a second
    # GM could not bind the same port (two replicas and their failover: tests/e2e/test_gm_failover.py)
    return [CHART.as_posix(), "--namespace", NS, "--create-namespace", "--set", "gm.replicas=1",
            "--set", f"gm.config.websocket.port={gm_port}", "--set", f"lc.bindPort={lc_port}",
            "--set-json", 'lc.nodeSelector={"kubernetes.io/hostname":"edge-node-1"}',
            "--set", "gm.config.log.format=text",
            "--set", "gm.config.leaderElection.leaseDurationSeconds=6",
            "--set", "gm.config.leaderElection.renewDeadlineSeconds=4",
            "--set", "gm.config.leaderElection.retryPeriodSeconds=1"]


async def _lc_link(port: int) -> str | None:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s, \
                s.get(f"http://127.0.0.1:{port}/readyz") as r:
            return (await r.json()).get("link")
    except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError):
        return None


async def _installed(dc, lc_port):
    """LC on the selected node only, GM on the cloud node, the GM leading, the LC linked."""
    lcs = await eventually(lambda: _running(_items(dc, "pods", LC_NS, selector="sedna=lc")), "the LC pod Running",
                           within=READY_WITHIN)
    assert [p["spec"]["nodeName"] for p in lcs] == ["edge-node-1"]
    gms = await eventually(lambda: _running(_items(dc, "pods", selector="sedna=gm")), "the GM pod Running",
                           within=READY_WITHIN)
    assert [p["spec"]["nodeName"] for p in gms] == ["cloud-node"]
    await eventually(lambda: _lease(dc), "the GM to hold its leader Lease", within=READY_WITHIN)
    async def linked():
        return await _lc_link(lc_port) == "connected"
    await eventually(linked, "the LC to reach the GM through the Service", within=READY_WITHIN, interval=0.2)
    return gms[0]


async def _gm_does_its_job(dc):
    """JI and FL children with controller owner references, status and events, by the GM."""
    dc.apply_manifests(*EXAMPLES)
    ji = _cr(dc, "JointInferenceService", "helmet-detection-inference-example")
    fl = _cr(dc, "FederatedLearningJob", "surface-defect-detection")
    deployments = await eventually(lambda: len(_owned_by(_items(dc, "deployments", "default", "apps"), ji)) == 2
                                   and _owned_by(_items(dc, "deployments", "default", "apps"), ji),
                                   "the JI's Deployments", within=READY_WITHIN)
    assert all(r["kind"] == "JointInferenceService" and r["blockOwnerDeletion"]
               for d in deployments for r in d["metadata"]["ownerReferences"])
    await eventually(lambda: len(_owned_by(_items(dc, "pods", "default"), fl)) == 3, "the FL's pods",
                     within=READY_WITHIN)
    await eventually(lambda: _cr(dc, "JointInferenceService", ji["metadata"]["name"]).get("status", {})
                     .get("conditions"), "JI status written by the GM", within=READY_WITHIN)
    await eventually(lambda: _cr(dc, "FederatedLearningJob", fl["metadata"]["name"]).get("status", {})
                     .get("conditions"), "FL status written by the GM", within=READY_WITHIN)
    events = await eventually(lambda: [e for e in _items(dc, "events", "default")
                                       if e.get("involvedObject", {}).get("uid") in
                                       (ji["metadata"]["uid"], fl["metadata"]["uid"])],
                              "events about the jobs", within=READY_WITHIN)
    assert events


def _forbidden_for_gm(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "devcluster.access" and "forbidden" in r.getMessage() and GM_SA in r.getMessage()]


def _release_objects(dc) -> list[str]:
    left = [f"namespaces/{n['metadata']['name']}" for n in _items(dc, "namespaces", None)
            if n["metadata"]["name"] == LC_NS]
    for resource, group, ns in (("deployments", "apps", NS), ("daemonsets", "apps", LC_NS), ("replicasets", "apps", NS),
                                ("pods", "", NS), ("pods", "", LC_NS), ("services", "", NS),
                                ("poddisruptionbudgets", "policy", NS),
                                ("serviceaccounts", "", NS), ("serviceaccounts", "", LC_NS),
                                ("configmaps", "", NS), ("secrets", "", NS),
                                ("clusterroles", "rbac.authorization.k8s.io", None),
                                ("clusterrolebindings", "rbac.authorization.k8s.io", None),
                                ("roles", "rbac.authorization.k8s.io", NS),
                                ("rolebindings", "rbac.authorization.k8s.io", NS)):
        for o in _items(dc, resource, ns, group):
            meta = o["metadata"]
            labels = meta.get("labels") or {}
            if labels.get("app.kubernetes.io/part-of") == "sedna" or labels.get("owner") == "helm" or \
                    labels.get("sedna") in ("gm", "lc") or _owned_by_release(o):
                left.append(f"{resource}/{meta['name']}")
    return left


def _owned_by_release(obj) -> bool:
    return bool(obj["metadata"].get("ownerReferences")) and obj["metadata"].get("namespace") in (NS, LC_NS)


def _pod_security(dc, ns) -> dict[str, str]:
    labels = dc.store.get(_rt(dc, "namespaces"), None, ns)["metadata"].get("labels") or {}
    return {k: v for k, v in labels.items() if k.startswith("pod-security.kubernetes.io/enforce")}


async def test_chart_installs_the_gm_works_under_its_rbac_upgrade_rolls_uninstall_cleans(
        chart_cluster, helm, caplog):
    dc = chart_cluster
    caplog.set_level(logging.INFO, logger="devcluster.access")
    gm_port, lc_port = free_port(), free_port()
    rc, out, err = await helm("install", "sedna", *_install_args(gm_port, lc_port))
    assert rc == 0, out + err
    assert "Node identity:\n  on (auth.tokenReview)" in out  # NOTES.txt
    assert f"kubectl -n {NS} logs deploy/gm -f" in out and f"kubectl -n {LC_NS} get pods -l sedna=lc" in out
    # --create-namespace made it, the chart labelled it; the LC has a namespace of its own
    assert _pod_security(dc, NS) == {"pod-security.kubernetes.io/enforce": "restricted",
                                     "pod-security.kubernetes.io/enforce-version": "latest"}
    assert _pod_security(dc, LC_NS)["pod-security.kubernetes.io/enforce"] == "privileged"
    first_gm = await _installed(dc, lc_port)
    await _gm_does_its_job(dc)
    assert _forbidden_for_gm(caplog) == []
    gm_log = dc.runtime.logs(NS, first_gm["metadata"]["name"]).decode()
    assert "403" not in gm_log and "orbidden" not in gm_log, gm_log[-3000:]
    # the LC linked as edge-node-1 by proving it (TokenReview), and the GM checked nothing else
    assert "methods=TokenReviewAuth" in gm_log, gm_log[-3000:]
    [lc] = _items(dc, "pods", LC_NS, selector="sedna=lc")
    assert lc["spec"]["serviceAccountName"] == "sedna-lc"

    # a changed value rolls the GM: a new pod takes over and the old one goes
    first_holder = _lease(dc)
    rc, out, err = await helm("upgrade", "sedna", CHART.as_posix(), "--namespace", NS, "--reuse-values",
                              "--set", "gm.config.workers=2")
    assert rc == 0, out + err

    def rolled():
        gms = _items(dc, "pods", selector="sedna=gm")
        return len(gms) == 1 and gms[0]["metadata"]["uid"] != first_gm["metadata"]["uid"] and _running(gms)
    await eventually(rolled, "the GM rolled to a new pod", within=READY_WITHIN)
    await eventually(lambda: _lease(dc) not in (None, first_holder), "the new GM to lead", within=READY_WITHIN)
    configmap = dc.store.get(_rt(dc, "configmaps"), NS, "gm-config")
    assert "workers: 2" in configmap["data"]["sedna-gm.yaml"]
    assert _forbidden_for_gm(caplog) == []

    rc, out, err = await helm("uninstall", "sedna", "--namespace", NS, "--wait")
    assert rc == 0, out + err
    await eventually(lambda: not _release_objects(dc), "no object of the release left", within=READY_WITHIN)
    assert not [s for s in _items(dc, "secrets") if s["metadata"]["name"].startswith("sh.helm.release")]
    # kept (helm.sh/resource-policy), as Helm keeps a namespace it made with --create-namespace
    assert _pod_security(dc, NS)["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("values", [pytest.param({}, id="defaults")])
async def test_chart_passes_helm_lint_and_validation_against_the_dev_cluster(chart_cluster, helm, values):
    """`helm install --dry-run=server` validates every object against the dev cluster's OpenAPI."""
    rc, out, err = await helm("install", "sedna", CHART.as_posix(), "--namespace", NS, "--create-namespace",
                              "--dry-run=server")
    assert rc == 0, out + err
    assert "kind: DaemonSet" in out and "kind: ClusterRole" in out
    # two GM replicas by default, kept available through drains
    assert "kind: PodDisruptionBudget" in out and "replicas: 2" in out
    rc, out, err = await helm("lint", CHART.as_posix())
    assert rc == 0, out + err


async def test_node_identity_off_the_lc_links_without_a_credential(chart_cluster, helm):
    """auth.tokenReview.enabled=false: upstream's behaviour, the LC presents nothing and the GM
    believes its Node-Name; NOTES.txt says what that costs."""
    dc = chart_cluster
    gm_port, lc_port = free_port(), free_port()
    rc, out, err = await helm("install", "sedna", *_install_args(gm_port, lc_port),
                              "--set", "auth.tokenReview.enabled=false")
    assert rc == 0, out + err
    assert "Node identity:\n  OFF." in out
    gm = await _installed(dc, lc_port)
    [lc] = _items(dc, "pods", LC_NS, selector="sedna=lc")
    assert "serviceAccountName" not in lc["spec"] or lc["spec"]["serviceAccountName"] == "default"
    assert "methods=none" in dc.runtime.logs(NS, gm["metadata"]["name"]).decode()
