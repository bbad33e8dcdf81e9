"""shared.objects: ownership, labels, hashes, keys and conditions on plain dicts."""

from __future__ import annotations

import copy
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from shared.objects import (
    SPEC_HASH_ANNOTATION,
    ObjectError,
    controller_of,
    controller_ref,
    deep_get,
    find_condition,
    format_rfc3339,
    format_selector,
    is_controlled_by,
    label_prefix,
    matches_labels,
    now_rfc3339,
    object_key,
    owner_labels,
    set_condition,
    spec_hash,
    spec_hash_of,
    worker_labels,
)

JI = {
    "apiVersion": "sedna.io/v1alpha1",
    "kind": "JointInferenceService",
    "metadata": {"name": "helmet-detection-inference-example", "namespace": "default",
                 "uid": "2f0c6a4e-1b7d-4f57-9a51-0c8e7e8f2a11"},
    "spec": {},
}


def test_controller_ref_from_owner_fields():
    assert controller_ref(JI) == {
        "apiVersion": "sedna.io/v1alpha1",
        "kind": "JointInferenceService",
        "name": "helmet-detection-inference-example",
        "uid": "2f0c6a4e-1b7d-4f57-9a51-0c8e7e8f2a11",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_controller_ref_for_list_item_without_type_fields():
    item = {"metadata": JI["metadata"]}
    ref = controller_ref(item, kind="FederatedLearningJob", api_version="sedna.io/v1alpha1")
    assert (ref["kind"], ref["apiVersion"]) == ("FederatedLearningJob", "sedna.io/v1alpha1")


@pytest.mark.parametrize("drop,missing", [
    pytest.param(("kind",), "kind", id="no-kind"),
    pytest.param(("metadata", "uid"), "uid", id="no-uid"),
    pytest.param(("apiVersion",), "apiVersion", id="no-apiversion"),
])
def test_controller_ref_rejects_incomplete_owner(drop, missing):
    owner = copy.deepcopy(JI)
    target = owner
    for step in drop[:-1]:
        target = target[step]
    del target[drop[-1]]
    with pytest.raises(ObjectError, match=f"owner lacks .*{missing}"):
        controller_ref(owner)


def test_is_controlled_by_matches_uid_of_controller_ref_only():
    child = {"metadata": {"ownerReferences": [controller_ref(JI)]}}
    assert is_controlled_by(child, JI)
    other = copy.deepcopy(JI)
    other["metadata"]["uid"] = "another-uid"
    assert not is_controlled_by(child, other)
    non_controller = {"metadata": {"ownerReferences": [
        {**controller_ref(JI), "controller": False}]}}
    assert not is_controlled_by(non_controller, JI)
    assert controller_of(non_controller) is None
    assert not is_controlled_by({"metadata": {}}, JI)


def test_labels_use_lowercased_kind_prefix():
    assert label_prefix("FederatedLearningJob") == "federatedlearningjob.sedna.io/"
    assert owner_labels(JI) == {
        "jointinferenceservice.sedna.io/name": "helmet-detection-inference-example",
        "jointinferenceservice.sedna.io/uid": "2f0c6a4e-1b7d-4f57-9a51-0c8e7e8f2a11",
    }
    labels = worker_labels(JI, worker_type="Cloud")
    assert labels["jointinferenceservice.sedna.io/worker-type"] == "cloud"
    assert len(labels) == 3


def test_owner_labels_need_a_kind():
    with pytest.raises(ObjectError, match="kind"):
        owner_labels({"metadata": JI["metadata"]})


def test_selector_is_sorted_and_matches():
    assert format_selector({"b": "2", "a": "1"}) == "a=1,b=2"
    obj = {"metadata": {"labels": {"a": "1", "b": "2", "c": "3"}}}
    assert matches_labels(obj, {"a": "1", "b": "2"})
    assert not matches_labels(obj, {"a": "2"})
    assert not matches_labels({"metadata": {}}, {"a": "1"})


def test_spec_hash_is_independent_of_key_order_and_sensitive_to_values():
    a = {"x": 1, "y": {"p": [1, 2], "q": "v"}}
    b = {"y": {"q": "v", "p": [1, 2]}, "x": 1}
    assert spec_hash(a) == spec_hash(b)
    assert re.fullmatch(r"[0-9a-f]{16}", spec_hash(a))
    assert spec_hash(a) != spec_hash({"x": 1, "y": {"p": [2, 1], "q": "v"}})
    assert spec_hash_of({"metadata": {"annotations": {SPEC_HASH_ANNOTATION: "abc"}}}) == "abc"
    assert spec_hash_of({"metadata": {}}) == ""


def test_object_key_and_deep_get():
    assert object_key(JI) == "default/helmet-detection-inference-example"
    assert object_key({"metadata": {"name": "edge-node-1"}}) == "edge-node-1"
    with pytest.raises(ObjectError, match="metadata.name"):
        object_key({"metadata": {"namespace": "default"}})
    pod = {"spec": {"containers": [{"name": "a", "env": [{"name": "X"}]}]}}
    assert deep_get(pod, "spec", "containers", 0, "env", -1, "name") == "X"
    assert deep_get(pod, "spec", "containers", 3, "name", default="none") == "none"
    assert deep_get(pod, "spec", "containers", "name") is None
    assert deep_get(pod, "spec", "nodeName", "x") is None


def test_rfc3339_second_precision_utc():
    moment = datetime(2025, 3, 1, 11, 0, 30, 987654, tzinfo=timezone(timedelta(hours=1)))
    assert format_rfc3339(moment) == "2025-03-01T10:00:30Z"
    with pytest.raises(ObjectError):
        format_rfc3339(datetime(2025, 3, 1))
    text = now_rfc3339()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", text)
    parsed = datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - parsed).total_seconds()) < 5


T0, T1, T2 = "2025-03-01T10:00:00Z", "2025-03-01T10:05:00Z", "2025-03-01T10:09:00Z"


def test_set_condition_appends_new_type():
    conds = set_condition([], "Running", "True", reason="WorkersAvailable", message="all up", now=T0)
    assert conds == [{"type": "Running", "status": "True", "reason": "WorkersAvailable",
                      "message": "all up", "lastHeartbeatTime": T0, "lastTransitionTime": T0}]


@pytest.mark.parametrize(("reason", "message"), [("", "m"), ("R", ""), (" ", "m"), ("R", "  ")])
def test_set_condition_refuses_a_condition_that_does_not_say_why(reason: str, message: str):
    with pytest.raises(ObjectError, match="needs a reason and a message"):
        set_condition([], "Pending", "False", reason=reason, message=message, now=T0)


def test_set_condition_moves_transition_time_only_on_status_change():
    conds = set_condition([], "Running", "True", reason="a", message="m", now=T0)
    same_status = set_condition(conds, "Running", "True", reason="b", message="m2", now=T1)
    assert same_status[0]["lastTransitionTime"] == T0
    assert same_status[0]["lastHeartbeatTime"] == T1
    assert same_status[0]["reason"] == "b"
    flipped = set_condition(same_status, "Running", "False", reason="b", message="m2", now=T2)
    assert flipped[0]["lastTransitionTime"] == T2


def test_set_condition_unchanged_returns_equal_list_and_never_mutates():
    conds = set_condition([], "Failed", "True", reason="workerFailed", message="x", now=T0)
    before = copy.deepcopy(conds)
    again = set_condition(conds, "Failed", "True", reason="workerFailed", message="x", now=T2)
    assert again == before
    assert conds == before


def test_set_condition_keeps_one_entry_per_type_in_place():
    conds = [{"type": "Running", "status": "True"}, {"type": "Failed", "status": "False"},
             {"type": "Running", "status": "False"}]
    out = set_condition(conds, "Running", "False", reason="r", message="m", now=T1)
    assert [c["type"] for c in out] == ["Running", "Failed"]
    assert find_condition(out, "Running")["status"] == "False"
    assert find_condition(out, "Complete") is None


def test_set_condition_without_transition_key_and_with_extra():
    conds = set_condition(None, "Training", "True", reason="DoTraining",
                          message="Round 3 reaches at 2025-03-01 10:02:10", now=T0,
                          transition_key=None, extra={"lastProbeTime": T0})
    assert conds == [{"type": "Training", "status": "True", "reason": "DoTraining",
                      "message": "Round 3 reaches at 2025-03-01 10:02:10",
                      "lastProbeTime": T0, "lastHeartbeatTime": T0}]


def test_set_condition_rejects_bad_status():
    with pytest.raises(ObjectError, match="True, False or Unknown"):
        set_condition([], "Running", "true", reason="R", message="m", now=T0)
