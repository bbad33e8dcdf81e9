"""gm/controllers/waiting.py: what a job's workers wait on, named with since when."""

from __future__ import annotations

from gm.kindlib.waiting import SHOWN, Wait, stranded, summary, waits

T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"
NODES = {"edge-node-1", "cloud-node"}


def pod(name, *, node=None, phase="Pending", created=T0, deleted=None, conditions=None):
    meta = {"name": name, "creationTimestamp": created}
    if deleted:
        meta["deletionTimestamp"] = deleted
    spec = {"nodeName": node} if node else {}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase, "conditions": conditions or []}}


def test_terminating_pod_says_whether_its_node_is_gone():
    found = waits([pod("a", node="edge-node-1", deleted=T1), pod("b", node="edge-node-2", deleted=T2)],
                  nodes=NODES)
    assert found == [Wait("a", "PodTerminating", "is terminating", T1),
                     Wait("b", "PodTerminating", "is terminating (its node edge-node-2 does not exist)", T2)]


def test_missing_node_since_creation():
    found = waits([pod("a", node="edge-node-9", created=T1, phase="Pending")], nodes=NODES)
    assert found == [Wait("a", "NodeNotFound", "is bound to node edge-node-9, which does not exist", T1)]
    assert found[0].describe() == f"pod a is bound to node edge-node-9, which does not exist since {T1}"


def test_unschedulable_since_the_scheduler_said_so():
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/3 nodes are available", "lastTransitionTime": T2}
    found = waits([pod("a", conditions=[cond])], nodes=NODES)
    assert found == [Wait("a", "Unschedulable", "is unschedulable (0/3 nodes are available)", T2)]


def test_running_and_finished_pods_wait_on_nothing():
    pods = [pod("a", node="edge-node-1", phase="Running"), pod("b", node="edge-node-9", phase="Succeeded"),
            pod("c")]
    assert waits(pods, nodes=NODES) == []
    assert summary([]) is None


def test_stranded_is_live_pods_on_missing_nodes_only():
    pods = [pod("a", node="edge-node-9"), pod("b", node="edge-node-9", deleted=T1),
            pod("c", node="edge-node-9", phase="Failed"), pod("d", node="edge-node-1")]
    assert stranded(pods, nodes=NODES) == {"a"}


def test_summary_names_the_oldest_first_and_counts_the_rest():
    pods = [pod(f"p{i}", node="gone", created=f"2026-01-01T00:0{i}:00Z") for i in range(SHOWN + 2)][::-1]
    reason, message = summary(waits(pods, nodes=NODES))
    assert reason == "NodeNotFound"
    assert message.startswith("waiting: pod p0 is bound to node gone, which does not exist since "
                              "2026-01-01T00:00:00Z; pod p1 ")
    assert message.endswith("; and 2 more")
    assert "p3" not in message
