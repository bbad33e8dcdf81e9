import pytest

from gm.reconcile.planning import merge_for_update, outdated, plan_children

HASH = "sedna.io/spec-hash"
UID = "uid-1"


def child(name, h, *, owner=UID, terminating=False):
    meta = {"name": name, "annotations": {HASH: h},
            "ownerReferences": [{"uid": owner, "controller": True, "kind": "X", "name": "x", "apiVersion": "v"}]}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"v": h}}


def test_missing_children_are_created():
    desired = {"a": child("a", "1"), "b": child("b", "1")}
    plan = plan_children(desired, {"a": child("a", "1")}, owner_uid=UID, hash_key=HASH, mutable=False)
    assert [c["metadata"]["name"] for c in plan.create] == ["b"]
    assert not plan.delete and not plan.update and not plan.converged


def test_converged_when_equal():
    desired = {"a": child("a", "1")}
    plan = plan_children(desired, {"a": child("a", "1")}, owner_uid=UID, hash_key=HASH, mutable=True)
    assert plan.converged


def test_outdated_pod_is_deleted_and_waited_for():
    desired = {"a": child("a", "2")}
    plan = plan_children(desired, {"a": child("a", "1")}, owner_uid=UID, hash_key=HASH, mutable=False)
    assert [c["metadata"]["name"] for c in plan.delete] == ["a"]
    assert plan.waiting == ["a"]
    assert not plan.create  # recreated only once the old pod is gone


def test_outdated_deployment_is_updated_in_place():
    desired = {"a": child("a", "2")}
    plan = plan_children(desired, {"a": child("a", "1")}, owner_uid=UID, hash_key=HASH, mutable=True)
    assert [(o["spec"]["v"], d["spec"]["v"]) for o, d in plan.update] == [("1", "2")]


def test_terminating_child_is_waited_for_not_recreated():
    desired = {"a": child("a", "1")}
    plan = plan_children(desired, {"a": child("a", "1", terminating=True)}, owner_uid=UID,
                         hash_key=HASH, mutable=False)
    assert plan.waiting == ["a"] and not plan.create and not plan.delete


def test_foreign_object_with_our_name_is_a_conflict():
    desired = {"a": child("a", "1")}
    plan = plan_children(desired, {"a": child("a", "1", owner="someone-else")}, owner_uid=UID,
                         hash_key=HASH, mutable=False)
    assert plan.conflicts == ["a"] and not plan.delete and not plan.create


def test_extra_owned_children_are_deleted_foreign_ones_left():
    observed = {"a": child("a", "1"), "old": child("old", "1"), "theirs": child("theirs", "1", owner="o")}
    plan = plan_children({"a": child("a", "1")}, observed, owner_uid=UID, hash_key=HASH, mutable=False)
    assert [c["metadata"]["name"] for c in plan.delete] == ["old"]


def test_create_missing_false_freezes_creation():
    plan = plan_children({"a": child("a", "1")}, {}, owner_uid=UID, hash_key=HASH, mutable=False,
                         create_missing=False)
    assert not plan.create


def test_outdated_names():
    desired = {"a": child("a", "2"), "b": child("b", "1")}
    observed = {"a": child("a", "1"), "b": child("b", "1")}
    assert outdated(desired, observed, hash_key=HASH) == ["a"]


@pytest.mark.parametrize("kind_spec, expect_ip", [
    pytest.param({"clusterIP": "10.96.0.5", "ports": [1]}, "10.96.0.5", id="service-keeps-allocated-ip"),
    pytest.param({"ports": [1]}, None, id="nothing-allocated"),
])
def test_merge_for_update_keeps_identity_and_server_fields(kind_spec, expect_ip):
    observed = {"apiVersion": "v1", "kind": "Service", "status": {"x": 1},
                "metadata": {"name": "s", "resourceVersion": "7", "uid": "u", "labels": {"keep": "1"},
                             "annotations": {HASH: "1"}},
                "spec": kind_spec}
    desired = {"metadata": {"name": "s", "labels": {"app": "a"}, "annotations": {HASH: "2"}},
               "spec": {"ports": [2]}}
    merged = merge_for_update(observed, desired)
    assert merged["metadata"]["resourceVersion"] == "7"
    assert merged["metadata"]["labels"] == {"keep": "1", "app": "a"}
    assert merged["metadata"]["annotations"][HASH] == "2"
    assert merged["spec"]["ports"] == [2]
    assert merged["spec"].get("clusterIP") == expect_ip
    assert merged["status"] == {"x": 1}


def test_merge_for_update_keeps_replicas_the_cr_does_not_set():
    observed = {"metadata": {"name": "d"}, "spec": {"replicas": 3, "template": {"a": 1}}}
    merged = merge_for_update(observed, {"metadata": {"name": "d"}, "spec": {"template": {"a": 2}}})
    assert merged["spec"] == {"replicas": 3, "template": {"a": 2}}
    merged = merge_for_update(observed, {"metadata": {"name": "d"}, "spec": {"replicas": 1, "template": {}}})
    assert merged["spec"]["replicas"] == 1
