"""Pure parts of the ReplicaSet controller: pod building, deletion ranking, status counts."""

from devcluster.controllers.ranking import pods_to_delete
from devcluster.controllers.replicaset import build_pod, compute_status


def _pod(name, *, node="n1", phase="Running", ready_at=None, restarts=0, created="2026-01-01T00:00:00Z",
         cost=None, labels=None):
    conds = [{"type": "Ready", "status": "True" if ready_at else "False",
              "lastTransitionTime": ready_at or created}]
    ann = {"controller.kubernetes.io/pod-deletion-cost": str(cost)} if cost is not None else {}
    return {"metadata": {"name": name, "creationTimestamp": created, "annotations": ann,
                         "labels": labels or {"app": "web"}},
            "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "conditions": conds,
                       "containerStatuses": [{"restartCount": restarts}]}}


def _names(pods):
    return [p["metadata"]["name"] for p in pods]


def test_unscheduled_then_pending_then_not_ready_go_first():
    pods = [
        _pod("ready", ready_at="2026-01-01T00:00:01Z"),
        _pod("unready"),
        _pod("pending", phase="Pending"),
        _pod("unscheduled", node=None, phase="Pending"),
    ]
    assert _names(pods_to_delete(pods, 4)) == ["unscheduled", "pending", "unready", "ready"]
    assert _names(pods_to_delete(pods, 1)) == ["unscheduled"]
    assert pods_to_delete(pods, 0) == []


def test_cost_readiness_age_restarts_and_creation_break_ties():
    assert _names(pods_to_delete([_pod("cheap", cost=-5), _pod("dear", cost=5)], 1)) == ["cheap"]
    young = _pod("young", ready_at="2026-01-01T00:10:00Z")
    old = _pod("old", ready_at="2026-01-01T00:00:00Z")
    assert _names(pods_to_delete([old, young], 1)) == ["young"]
    assert _names(pods_to_delete([_pod("calm"), _pod("crashy", restarts=3)], 1)) == ["crashy"]
    assert _names(pods_to_delete([_pod("first"), _pod("second", created="2026-01-02T00:00:00Z")], 1)) == ["second"]


def test_build_pod_copies_template_and_owner():
    rs = {"metadata": {"name": "web-abc", "namespace": "ns1", "uid": "rs-uid"},
          "apiVersion": "apps/v1", "kind": "ReplicaSet",
          "spec": {"template": {"metadata": {"labels": {"app": "web"}, "annotations": {"a": "1"}},
                                "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    pod = build_pod(rs)
    assert pod["metadata"]["generateName"] == "web-abc-"
    assert pod["metadata"]["namespace"] == "ns1"
    assert pod["metadata"]["labels"] == {"app": "web"}
    assert pod["metadata"]["annotations"] == {"a": "1"}
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "rs-uid"
    assert pod["spec"] == {"containers": [{"name": "c", "image": "i"}]}
    pod["spec"]["containers"][0]["image"] = "changed"
    assert rs["spec"]["template"]["spec"]["containers"][0]["image"] == "i"


def test_compute_status_counts_ready_and_available():
    rs = {"metadata": {"generation": 3}, "spec": {"minReadySeconds": 0,
                                                  "template": {"metadata": {"labels": {"app": "web"}}}}}
    pods = [_pod("a", ready_at="2026-01-01T00:00:00Z"), _pod("b"), _pod("c", labels={"x": "y"})]
    status, wake = compute_status(rs, pods)
    assert status == {"replicas": 3, "fullyLabeledReplicas": 2, "readyReplicas": 1,
                      "availableReplicas": 1, "observedGeneration": 3}
    assert wake is None
