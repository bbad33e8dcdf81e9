"""Scheduler and kubelet stand-ins through the store: phases, scheduling, deletion, nodes."""

import pytest
from kubernetes_asyncio.client import ApiClient

from devcluster.cluster import DevCluster
from tests.conftest import assert_no_crashes, eventually
from tests.devcluster.helpers import pod, rt


def _get(store, rtype, name, ns="default"):
    try:
        return store.get(rtype, ns, name)
    except Exception as err:
        if getattr(err, "code", None) == 404:
            return None
        raise


def _phase(store, name):
    p = _get(store, rt(store, "pods"), name)
    return p and p["status"].get("phase")


async def _deserialize(obj, klass):
    async with ApiClient() as api:
        return api._ApiClient__deserialize(obj, klass)


async def test_nodes_and_leases_exist_and_deserialize(live):
    store = live.store
    nodes, _ = store.list(rt(store, "nodes"), None)
    assert [n["metadata"]["name"] for n in nodes] == ["cloud-node", "edge-node-1", "edge-node-2"]
    for n in nodes:
        model = await _deserialize(n, "V1Node")
        assert model.status.node_info.kubelet_version == "v1.32.0"
    lease_rt = rt(store, "leases", "coordination.k8s.io")
    await eventually(lambda: len(store.list(lease_rt, "kube-node-lease")[0]) == 3, message="leases")
    first = store.get(lease_rt, "kube-node-lease", "edge-node-1")["spec"]["renewTime"]
    await eventually(lambda: store.get(lease_rt, "kube-node-lease", "edge-node-1")["spec"]["renewTime"] != first,
                   within=3, message="lease renewal")


async def test_pod_goes_pending_then_running_after_start_delay():
    dc = DevCluster(start_delay=0.3, termination_delay=0, resync=0.5)
    dc.start_controllers()
    try:
        store = dc.store
        store.create(rt(store, "pods"), "default", pod("slow"))
        await eventually(lambda: _get(store, rt(store, "pods"), "slow")["status"].get("hostIP"), message="pending")
        p = _get(store, rt(store, "pods"), "slow")
        assert p["status"]["phase"] == "Pending"
        assert p["status"]["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
        await _deserialize(p, "V1Pod")
        await eventually(lambda: _phase(store, "slow") == "Running", message="running")
        p = _get(store, rt(store, "pods"), "slow")
        assert p["status"]["podIP"].startswith("10.244.")
        assert p["status"]["hostIP"].startswith("10.0.0.")
        model = await _deserialize(p, "V1Pod")
        assert model.status.container_statuses[0].ready is True
        assert model.status.container_statuses[0].state.running.started_at is not None
    finally:
        await dc.stop()
    assert_no_crashes(dc)


async def test_scheduler_honours_node_name_and_selector(live):
    store = live.store
    pod_rt = rt(store, "pods")
    store.create(pod_rt, "default", pod("pinned", nodeName="edge-node-2"))
    store.create(pod_rt, "default", pod("cloudy", nodeSelector={"kubernetes.io/hostname": "cloud-node"}))
    await eventually(lambda: _phase(store, "pinned") == "Running" and _phase(store, "cloudy") == "Running",
                   message="running")
    assert store.get(pod_rt, "default", "pinned")["spec"]["nodeName"] == "edge-node-2"
    assert store.get(pod_rt, "default", "cloudy")["spec"]["nodeName"] == "cloud-node"
    events, _ = store.list(rt(store, "events"), "default")
    assert any(e["reason"] == "Scheduled" and e["message"] == "Successfully assigned default/cloudy to cloud-node"
               for e in events)


async def test_unschedulable_pod_is_retried_when_a_node_appears(live):
    store = live.store
    pod_rt = rt(store, "pods")
    store.create(pod_rt, "default", pod("picky", nodeSelector={"zone": "moon"}))

    def unschedulable():
        conds = _get(store, pod_rt, "picky")["status"].get("conditions") or []
        return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conds)

    await eventually(unschedulable, message="FailedScheduling")
    cond = next(c for c in store.get(pod_rt, "default", "picky")["status"]["conditions"]
                if c["type"] == "PodScheduled")
    assert cond["reason"] == "Unschedulable"
    assert cond["message"] == ("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. "
                               "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.")
    events, _ = store.list(rt(store, "events"), "default")
    assert any(e["reason"] == "FailedScheduling" and e["type"] == "Warning" for e in events)
    from devcluster.controllers.nodes import build_node
    moon = build_node("moon-1", 7)
    moon["metadata"]["labels"]["zone"] = "moon"
    store.create(rt(store, "nodes"), None, moon)
    await eventually(lambda: _phase(store, "picky") == "Running", message="scheduled after node change")
    assert store.get(pod_rt, "default", "picky")["spec"]["nodeName"] == "moon-1"


@pytest.mark.parametrize(("phase", "code"), [pytest.param("Succeeded", 0, id="succeeded"),
                                             pytest.param("Failed", 1, id="failed")])
async def test_phase_annotation_ends_the_pod(live, phase, code):
    store = live.store
    pod_rt = rt(store, "pods")
    store.create(pod_rt, "default", pod("job"))
    await eventually(lambda: _phase(store, "job") == "Running", message="running")
    store.patch(pod_rt, "default", "job", "merge",
                {"metadata": {"annotations": {"devcluster.sedna.io/phase": phase}}})
    await eventually(lambda: _phase(store, "job") == phase, message=phase)
    p = store.get(pod_rt, "default", "job")
    cs = p["status"]["containerStatuses"][0]
    assert cs["ready"] is False
    assert cs["state"]["terminated"]["exitCode"] == code
    ready = next(c for c in p["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "PodCompleted"
    await _deserialize(p, "V1Pod")


async def test_graceful_deletion_is_finished_by_the_kubelet(live):
    store = live.store
    pod_rt = rt(store, "pods")
    store.create(pod_rt, "default", pod("bye"))
    await eventually(lambda: _phase(store, "bye") == "Running", message="running")
    live.controller("kubelet").freeze()
    store.delete(pod_rt, "default", "bye")
    p = store.get(pod_rt, "default", "bye")
    assert p["metadata"]["deletionTimestamp"] and p["metadata"]["deletionGracePeriodSeconds"] == 30
    live.controller("kubelet").unfreeze()
    await eventually(lambda: _get(store, pod_rt, "bye") is None, message="pod removed")


async def test_pod_on_unknown_node_stays_pending(live):
    store = live.store
    kubelet = live.controller("kubelet")
    before = kubelet.syncs
    store.create(rt(store, "pods"), "default", pod("lost", nodeName="nowhere"))
    await eventually(lambda: kubelet.syncs > before and len(kubelet.queue) == 0, message="kubelet looked at it")
    p = store.get(rt(store, "pods"), "default", "lost")
    assert p["status"]["phase"] == "Pending" and "hostIP" not in p["status"]
