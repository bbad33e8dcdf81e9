"""The chart's LC DaemonSet and GM Deployment, as rendered, land on the nodes they select."""

from __future__ import annotations

from tests.conftest import eventually
from tests.devcluster.helpers import rt
from tests.helm.chart import render_chart


def _running_nodes(store, ns, labels):
    pods, _ = store.list(rt(store, "pods"), ns, label_selector=labels)
    return sorted(p["spec"]["nodeName"] for p in pods
                  if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"))


async def test_chart_lc_runs_on_edge_nodes_and_gm_on_the_cloud_node(live):
    store = live.store
    rendered = render_chart()
    every = [d for docs in rendered.values() for d in docs]
    docs = {d["kind"]: d for d in every if d["kind"] in ("DaemonSet", "Deployment")}
    ns, gm_ns = docs["DaemonSet"]["metadata"]["namespace"], docs["Deployment"]["metadata"]["namespace"]
    # the chart's namespaces (the LC has one of its own; both labelled for Pod Security, so the pods
    # below pass their admission) and the ServiceAccounts the pods run as
    for kind, resource in (("Namespace", "namespaces"), ("ServiceAccount", "serviceaccounts")):
        for doc in (d for d in every if d["kind"] == kind):
            store.create(rt(store, resource), doc["metadata"].get("namespace"), doc)
    store.create(rt(store, "daemonsets", "apps"), ns, docs["DaemonSet"])
    store.create(rt(store, "deployments", "apps"), gm_ns, docs["Deployment"])
    await eventually(lambda: _running_nodes(store, ns, "sedna=lc") == ["edge-node-1", "edge-node-2"],
                     message="LC on both edge nodes")
    # both replicas: the anti-affinity across hostnames is a preference, and the one cloud node
    # is the only one off the edge
    await eventually(lambda: _running_nodes(store, gm_ns, "sedna=gm") == ["cloud-node", "cloud-node"],
                     message="both GM replicas on the cloud node")
    ds = store.get(rt(store, "daemonsets", "apps"), ns, docs["DaemonSet"]["metadata"]["name"])
    await eventually(lambda: store.get(rt(store, "daemonsets", "apps"), ns, ds["metadata"]["name"])["status"].get(
        "numberAvailable") == 2, message="ds status")
    status = store.get(rt(store, "daemonsets", "apps"), ns, ds["metadata"]["name"])["status"]
    assert (status["desiredNumberScheduled"], status["numberMisscheduled"]) == (2, 0)
