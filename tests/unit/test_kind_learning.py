"""gm/kinds/learning: the stage machine, the bounded condition list and the stage report rule."""

from __future__ import annotations

import json

import pytest

from gm.kindlib import learning
from gm.kindlib.learning import (
    COMPLETED,
    DEPLOY,
    EVAL,
    FAILED,
    READY,
    RUNNING,
    STARTING,
    TRAIN,
    WAITING,
    Position,
    parse_stage_report,
    position,
    step,
    with_position,
)
from gm.reports import ReportInvalid

NOW = "2026-03-01T10:00:00Z"
LATER = "2026-03-01T10:05:00Z"
TRAIN_INPUT = json.dumps({"input": {"models": [{"format": "ckpt", "url": "/models/base"}],
                                    "dataURL": "/output/data/train/1/data.txt", "outputDir": "/output/train/1"}})


def ok(_stage: str, _data: str) -> str | None:
    return None


def no_pods(_stage: str, _cycle: int) -> str | None:
    return None


def phase(value: str):
    return lambda _stage, _cycle: value


def test_a_new_job_waits_for_the_train_trigger():
    pos = step(position({}), no_pods, hot=False, check=ok)
    assert (pos.stage, pos.type, pos.cycle, pos.deploys) == (TRAIN, WAITING, 0, 0)
    assert step(pos, no_pods, hot=False, check=ok) == pos  # Waiting: the LC reports Ready


def test_train_ready_starts_the_next_cycle_and_keeps_the_input():
    ready = Position(stage=TRAIN, type=READY, data=TRAIN_INPUT, cycle=2)
    pos = step(ready, no_pods, hot=False, check=ok)
    assert (pos.stage, pos.type, pos.cycle, pos.data) == (TRAIN, STARTING, 3, TRAIN_INPUT)
    assert pos.running_stage_pod


def test_eval_ready_runs_in_the_same_cycle():
    pos = step(Position(stage=EVAL, type=READY, data="{}", cycle=3), no_pods, hot=False, check=ok)
    assert (pos.stage, pos.type, pos.cycle) == (EVAL, STARTING, 3)


def test_a_ready_without_usable_input_is_failed_not_a_crash():
    pos = step(Position(stage=TRAIN, type=READY, data=""), no_pods, hot=False,
               check=lambda stage, data: "the reported stage data has no input")
    assert (pos.stage, pos.type, pos.reason, pos.cycle) == (TRAIN, FAILED, "InvalidInput", 0)
    assert "no input" in pos.message


@pytest.mark.parametrize(("pod_phase", "expected"), [
    (None, STARTING), ("Pending", STARTING), ("Running", RUNNING), ("Succeeded", COMPLETED), ("Failed", FAILED)])
def test_the_stage_pod_moves_a_started_stage(pod_phase, expected):
    asked = []

    def phase_of(stage, cycle):
        asked.append((stage, cycle))
        return pod_phase

    pos = step(Position(stage=EVAL, type=STARTING, data="{}", cycle=4), phase_of, hot=False, check=ok)
    assert pos.type == expected and pos.stage == EVAL and pos.data == "{}"
    assert asked == [(EVAL, 4)]


def test_completed_moves_to_the_next_stage_and_deploy_back_to_train():
    for stage, nxt in ((TRAIN, EVAL), (EVAL, DEPLOY), (DEPLOY, TRAIN)):
        pos = step(Position(stage=stage, type=COMPLETED, data="x", cycle=1), no_pods, hot=False, check=ok)
        assert (pos.stage, pos.type, pos.data, pos.cycle) == (nxt, WAITING, "", 1)


def test_failed_goes_back_to_train_waiting():
    pos = step(Position(stage=EVAL, type=FAILED, cycle=2, deploys=1), no_pods, hot=False, check=ok)
    assert (pos.stage, pos.type, pos.cycle, pos.deploys) == (TRAIN, WAITING, 2, 1)


def test_deploy_ready_restarts_the_inference_pod_without_hot_update():
    pos = step(Position(stage=DEPLOY, type=READY, deploys=1), no_pods, hot=False, check=ok)
    assert (pos.stage, pos.type, pos.deploys) == (DEPLOY, COMPLETED, 2)


def test_deploy_with_hot_update_waits_for_the_running_inference_pod():
    pos = step(Position(stage=DEPLOY, type=READY, deploys=1), no_pods, hot=True, check=ok)
    assert (pos.type, pos.deploys) == (STARTING, 1)
    pos = step(pos, phase("Running"), hot=True, check=ok)
    assert (pos.stage, pos.type) == (DEPLOY, RUNNING)
    assert step(pos, phase("Running"), hot=True, check=ok) == pos  # the worker reports completion


def test_conditions_stay_bounded_over_many_cycles_current_last():
    status: dict = {}
    now = 0
    for _ in range(5):
        for stage in (TRAIN, EVAL):
            for type_ in (WAITING, READY, STARTING, RUNNING, COMPLETED):
                now += 1
                status = with_position(status, Position(stage=stage, type=type_, data="{}"), now=f"t{now}")
        status = with_position(status, Position(stage=DEPLOY, type=READY), now="t")
        status = with_position(status, Position(stage=DEPLOY, type=COMPLETED), now="t")
        status = with_position(status, Position(stage=EVAL, type=FAILED), now="t")
    conditions = status["conditions"]
    keys = [learning.condition_key(c) for c in conditions]
    assert len(keys) == len(set(keys)) <= 8
    assert [c["status"] for c in conditions].count("True") == 1
    assert conditions[-1]["status"] == "True" and conditions[-1]["type"] == FAILED
    assert {c["stage"] for c in conditions if c["type"] == COMPLETED} == {TRAIN, EVAL, DEPLOY}


def test_an_unchanged_position_writes_an_identical_status():
    pos = Position(stage=TRAIN, type=RUNNING, data=TRAIN_INPUT, cycle=1)
    first = with_position({}, pos, now=NOW)
    again = with_position(first, pos, now=LATER)
    assert again == first
    assert first["startTime"] == NOW and first["cycle"] == 1 and first["deploys"] == 0


def test_a_new_state_moves_the_transition_time_of_both_entries():
    first = with_position({}, Position(stage=TRAIN, type=WAITING), now=NOW)
    second = with_position(first, Position(stage=TRAIN, type=READY, data="{}"), now=LATER)
    waiting, ready = second["conditions"]
    assert (waiting["type"], waiting["status"], waiting["lastTransitionTime"]) == (WAITING, "False", LATER)
    assert (ready["type"], ready["status"], ready["lastTransitionTime"]) == (READY, "True", LATER)


def test_the_current_position_is_the_last_true_condition():
    status = with_position({}, Position(stage=EVAL, type=RUNNING, data="d", cycle=2, deploys=1), now=NOW)
    assert position(status) == Position(stage=EVAL, type=RUNNING, data="d", cycle=2, deploys=1,
                                        reason="Running", message="the eval stage is running")


def test_every_condition_written_says_why_even_one_upstream_left_bare():
    """Upstream's GM writes its states with empty reasons and messages; ours never does."""
    bare = {"conditions": [{"type": "Completed", "status": "True", "stage": TRAIN, "data": "d"},
                           {"type": "Waiting", "status": "True", "stage": EVAL}]}
    status = with_position(bare, position(bare), now=NOW)
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in status["conditions"]] == [
        ("Completed", "False", "Superseded", "the job is Eval/Waiting now"),
        ("Waiting", "True", "Waiting", "waiting for the eval trigger")]


def test_pods_are_found_by_worker_type_label_and_cycle_name_not_by_name_alone():
    prefix = "incrementallearningjob.sedna.io/worker-type"

    def pod(name, worker_type, phase_, deleting=False):
        meta = {"name": name, "labels": {prefix: worker_type}}
        if deleting:
            meta["deletionTimestamp"] = NOW
        return {"metadata": meta, "status": {"phase": phase_}}

    phase_of = learning.phases("IncrementalLearningJob", "job", [
        pod("job-train-1", "eval", "Running"),        # wrong type label
        pod("job-train-2", "train", "Succeeded"),
        pod("job-eval-2", "eval", "Running", deleting=True),
        pod("job-infer", "inference", "Running"),
    ])
    assert phase_of(TRAIN, 1) is None
    assert phase_of(TRAIN, 2) == "Succeeded"
    assert phase_of(EVAL, 2) is None
    assert phase_of(DEPLOY, 2) == "Running"


# -- reports -------------------------------------------------------------------------


def test_a_ready_report_becomes_the_current_condition_in_upstream_key_order():
    body = {"phase": "Train", "status": "Ready",
            "input": {"outputDir": "/o/train/1", "dataURL": "/o/d.txt",
                      "models": [{"url": "/m/base", "format": "ckpt", "extra": 1}], "junk": True},
            "output": None}
    mutate = learning.stage_report_rule()(body, NOW)
    status = mutate(with_position({}, Position(stage=TRAIN, type=WAITING), now=NOW))
    current = status["conditions"][-1]
    assert (current["type"], current["stage"], current["status"], current["reason"], current["message"]) == (
        READY, TRAIN, "True", "ReportedByLC", "reported by lc")
    assert current["data"] == ('{"input":{"models":[{"format":"ckpt","url":"/m/base","classes":null}],'
                               '"dataURL":"/o/d.txt","outputDir":"/o/train/1"}}')
    assert [c["status"] for c in status["conditions"]] == ["False", "True"]


def test_the_lcs_reason_and_message_become_the_conditions():
    body = {"phase": "deploy", "status": "completed", "output": None, "reason": "DeployTriggerNotFired",
            "message": "precision_delta > 0.1 is false: element 2 is 0.05 in [0.2, 0.2, 0.05]"}
    status = learning.stage_report_rule()(body, NOW)(with_position({}, Position(stage=DEPLOY, type=WAITING),
                                                                    now=NOW))
    current = status["conditions"][-1]
    assert (current["type"], current["reason"], current["message"]) == (COMPLETED, body["reason"], body["message"])
    long = parse_stage_report({**body, "message": "x" * 5000})
    assert len(long.message) == learning.MAX_MESSAGE and long.message.endswith("...")
    with pytest.raises(ReportInvalid, match="message must be a string"):
        parse_stage_report({**body, "message": 3})


def test_report_keys_match_ignoring_case_and_models_keep_their_fields():
    report = parse_stage_report({"PHASE": "eval", "Status": "completed", "output": {"models": [
        {"format": "pb", "url": "/a.pb", "metrics": {"recall": [0.5]}, "number_of_model": 0}]}})
    assert (report.stage, report.type) == (EVAL, COMPLETED)
    assert json.loads(report.data) == {"output": {"models": [
        {"format": "pb", "url": "/a.pb", "metrics": {"recall": [0.5]}, "classes": None}]}}


def test_a_report_without_input_or_output_has_empty_data():
    report = parse_stage_report({"phase": "deploy", "status": "completed", "output": None})
    assert (report.stage, report.type, report.data, report.models) == (DEPLOY, COMPLETED, "", ())


@pytest.mark.parametrize("body", [
    {"phase": "serve", "status": "ready"},
    {"phase": "train", "status": "running"},
    {"status": "ready"},
    {"phase": "train", "status": "ready", "input": "x"},
    {"phase": "train", "status": "ready", "input": {"models": {"url": "x"}}},
    {"phase": "train", "status": "ready", "input": {"models": [{"url": 3}]}},
    {"phase": "train", "status": "ready", "input": {"dataURL": 7}},
    {"phase": "eval", "status": "completed", "output": {"models": [{"classes": "a"}]}},
    {"phase": "eval", "status": "completed", "output": {"models": [{"number_of_model": -1}]}},
])
def test_malformed_reports_are_invalid(body):
    with pytest.raises(ReportInvalid):
        learning.stage_report_rule()(body, NOW)


def test_completed_data_is_kept_per_stage_after_the_stage_moves_on():
    rule = learning.stage_report_rule()
    out = json.dumps({"output": {"models": [{"format": "pb", "url": "/t.pb"}]}})
    status = rule({"phase": "train", "status": "completed", "output": json.loads(out)["output"]}, NOW)({})
    status = with_position(status, Position(stage=EVAL, type=WAITING), now=LATER)
    assert learning.completed_data(status, TRAIN)["output"]["models"][0]["url"] == "/t.pb"
    assert learning.has_completed(status, TRAIN) and not learning.has_completed(status, EVAL)


def test_an_upstream_appended_list_shrinks_to_the_newest_entry_per_key():
    appended = []
    for i, (stage, type_) in enumerate([(TRAIN, WAITING), (TRAIN, READY), (TRAIN, STARTING), (TRAIN, RUNNING),
                                        (TRAIN, COMPLETED), (EVAL, WAITING), (EVAL, READY), (EVAL, COMPLETED),
                                        (DEPLOY, WAITING), (DEPLOY, COMPLETED), (TRAIN, WAITING)]):
        appended.append({"type": type_, "status": "True", "stage": stage, "data": f"d{i}"})
    pos = position({"conditions": appended})
    assert (pos.stage, pos.type, pos.data) == (TRAIN, WAITING, "d10")
    conditions = with_position({"conditions": appended}, pos, now=NOW)["conditions"]
    keys = [learning.condition_key(c) for c in conditions]
    assert len(keys) == len(set(keys)) == 7 and keys[-1] == WAITING
    assert [c["status"] for c in conditions].count("True") == 1
    assert learning.completed_data({"conditions": conditions}, TRAIN) == {}  # "d4" is no JSON
    assert next(c for c in conditions if learning.condition_key(c) == "Completed/Eval")["data"] == "d7"


def test_models_are_re_emitted_in_upstream_field_order_with_maps_sorted():
    model = {"number_of_unseen_sample": 4, "classes": ["a<b"], "current_metric": {"t2": {"z": 1, "a": 2}, "t1": {}},
             "history_metric": 0.5, "metrics": {"recall": [0.1], "precision": [0.2]},
             "device_soc_versions": ["x"], "url": "/m.pb", "format": "pb", "number_of_labeled_unseen_sample": 3}
    report = parse_stage_report({"phase": "eval", "status": "completed",
                                 "output": {"ownerInfo": {"b": 1, "a": 2}, "models": [model]}})
    assert report.data == (
        '{"output":{"models":[{"format":"pb","url":"/m.pb","device_soc_versions":["x"],'
        '"metrics":{"precision":[0.2],"recall":[0.1]},"history_metric":0.5,'
        '"current_metric":{"t1":{},"t2":{"a":2,"z":1}},"classes":["a\\u003cb"],'
        '"number_of_labeled_unseen_sample":3,"number_of_unseen_sample":4}],"ownerInfo":{"a":2,"b":1}}}')
    assert json.loads(report.data)["output"]["models"][0]["classes"] == ["a<b"]
