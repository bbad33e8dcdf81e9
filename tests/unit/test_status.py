import pytest

from gm.kindlib.conditions import pod_counts
from gm.kinds.federatedlearning import fl_phase, fl_status
from gm.kinds.jointinference import ji_status
from gm.reports import round_of
from shared.objects import find_condition

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def pod(phase, *, terminating=False):
    meta = {"name": "p"}
    if terminating:
        meta["deletionTimestamp"] = T0
    return {"metadata": meta, "status": {"phase": phase}}


def test_pod_counts():
    pods = [pod("Running"), pod("Pending"), pod("Succeeded"), pod("Failed"), pod("Running", terminating=True)]
    assert pod_counts(pods) == (2, 1, 1)


@pytest.mark.parametrize("phases, all_present, expected", [
    pytest.param([], False, "Pending", id="no-pods"),
    pytest.param(["Running", "Pending"], True, "Running", id="running"),
    pytest.param(["Succeeded", "Succeeded"], True, "Succeeded", id="all-succeeded"),
    pytest.param(["Succeeded", "Succeeded"], False, "Running", id="succeeded-but-one-missing"),
    pytest.param(["Succeeded", "Running"], True, "Running", id="aggregator-still-running"),
    pytest.param(["Failed", "Running"], True, "Failed", id="one-failed"),
])
def test_fl_phase(phases, all_present, expected):
    assert fl_phase([pod(p) for p in phases], all_present=all_present) == expected


def test_fl_status_running_then_complete():
    job = {"metadata": {"generation": 2}, "status": {}}
    st = fl_status(job, [pod("Running"), pod("Running")], all_present=True, converged_generation=2,
                   problem=None, now=T0)
    assert (st["phase"], st["active"], st["startTime"], st["observedGeneration"]) == ("Running", 2, T0, 2)
    training = find_condition(st["conditions"], "Training")
    assert training["status"] == "True" and training["lastTransitionTime"] == T0
    job["status"] = st
    st2 = fl_status(job, [pod("Succeeded"), pod("Succeeded")], all_present=True, converged_generation=2,
                    problem=None, now=T1)
    assert st2["phase"] == "Succeeded" and st2["completionTime"] == T1 and st2["startTime"] == T0
    assert find_condition(st2["conditions"], "Complete")["status"] == "True"
    assert find_condition(st2["conditions"], "Training")["status"] == "False"
    assert [c["type"] for c in st2["conditions"]].count("Training") == 1


def test_fl_status_keeps_round_message_reported_upstream():
    cond = {"type": "Training", "status": "True", "reason": "DoTraining",
            "message": "Round 3 reaches at 2026-01-01T00:01:00Z", "lastTransitionTime": T0}
    job = {"metadata": {"generation": 1}, "status": {"conditions": [cond], "startTime": T0}}
    st = fl_status(job, [pod("Running")], all_present=True, converged_generation=1, problem=None, now=T1)
    assert st["conditions"] == [cond]


def test_fl_status_unchanged_state_is_identical():
    job = {"metadata": {"generation": 1}, "status": {}}
    st = fl_status(job, [pod("Running")], all_present=True, converged_generation=1, problem=None, now=T0)
    again = fl_status({**job, "status": st}, [pod("Running")], all_present=True, converged_generation=1,
                      problem=None, now=T1)
    assert again == st


def test_fl_problem_sets_failed_condition_and_recovers():
    job = {"metadata": {"generation": 1}, "status": {}}
    st = fl_status(job, [], all_present=False, converged_generation=None,
                   problem=("InvalidSpec", "spec.trainingWorkers needs at least one worker"), now=T0)
    failed = find_condition(st["conditions"], "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "InvalidSpec")
    assert "observedGeneration" not in st and st["phase"] == "Pending"
    st2 = fl_status({**job, "status": st}, [pod("Running")], all_present=True, converged_generation=1,
                    problem=None, now=T1)
    assert find_condition(st2["conditions"], "Failed")["status"] == "False"
    assert find_condition(st2["conditions"], "Training")["status"] == "True"


def test_fl_missing_dataset_waits_pending_with_its_reason_and_recovers():
    job = {"metadata": {"generation": 1}, "status": {}}
    missing = ("DatasetNotFound", "Dataset default/d1 does not exist")
    st = fl_status(job, [], all_present=False, converged_generation=None, problem=missing, now=T0,
                   retrying=True)
    assert st["phase"] == "Pending" and find_condition(st["conditions"], "Failed") is None
    waiting = find_condition(st["conditions"], "Waiting")
    assert (waiting["status"], waiting["reason"], waiting["message"]) == ("True", *missing)
    st2 = fl_status({**job, "status": st}, [pod("Running")], all_present=True, converged_generation=1,
                    problem=None, now=T1)
    assert st2["phase"] == "Running"
    assert find_condition(st2["conditions"], "Training")["status"] == "True"
    cleared = find_condition(st2["conditions"], "Waiting")
    assert (cleared["status"], cleared["reason"]) == ("False", "NothingMissing")
    assert all(c["reason"] and c["message"] for c in st2["conditions"])


def dep(name, available, conditions=()):
    return {"metadata": {"name": name}, "status": {"availableReplicas": available, "conditions": list(conditions)}}


def test_ji_status_pending_running_failed():
    ji = {"metadata": {"generation": 1}, "status": {"metrics": [{"key": "a", "value": "1"}]}}
    st = ji_status(ji, [dep("c", 1), dep("e", 0)], expected=2, converged_generation=1, problem=None, now=T0)
    assert (st["active"], st["failed"]) == (1, 0)
    assert find_condition(st["conditions"], "Pending")["status"] == "True"
    assert st["metrics"] == [{"key": "a", "value": "1"}]
    st = ji_status({**ji, "status": st}, [dep("c", 1), dep("e", 1)], expected=2, converged_generation=1,
                   problem=None, now=T1)
    running = find_condition(st["conditions"], "Running")
    assert running["status"] == "True" and running["lastTransitionTime"] == T1
    assert find_condition(st["conditions"], "Pending")["status"] == "False"
    stuck = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
             "message": "ReplicaSet has timed out progressing."}
    st = ji_status({**ji, "status": st}, [dep("c", 1), dep("e", 0, [stuck])], expected=2,
                   converged_generation=1, problem=None, now=T1)
    failed = find_condition(st["conditions"], "Failed")
    assert failed["status"] == "True" and "deployment e" in failed["message"]
    assert st["failed"] == 1
    assert sorted(c["type"] for c in st["conditions"]) == ["Failed", "Pending", "Running"]


def named(name, phase, **meta):
    return {"metadata": {"name": name, **meta}, "status": {"phase": phase}}


def test_stranded_pod_is_not_active_and_alone_is_pending():
    pods = [named("a", "Pending"), named("b", "Running")]
    assert pod_counts(pods, stranded={"a"}) == (1, 0, 0)
    assert fl_phase(pods, all_present=True, stranded={"a"}) == "Running"
    assert fl_phase([named("a", "Pending")], all_present=True, stranded={"a"}) == "Pending"


def test_stranded_pod_keeps_a_job_from_succeeding():
    pods = [named("a", "Pending"), named("b", "Succeeded")]
    assert fl_phase(pods, all_present=True, stranded={"a"}) == "Running"


def test_waiting_condition_set_kept_and_cleared():
    job = {"metadata": {"generation": 1}, "status": {}}
    pods = [named("a", "Running")]
    st = fl_status(job, pods, all_present=True, converged_generation=1, problem=None, now=T0)
    assert find_condition(st["conditions"], "Waiting") is None  # never waited: no entry
    waiting = ("PodTerminating", "waiting: pod a is terminating since " + T0)
    st = fl_status({**job, "status": st}, pods, all_present=True, converged_generation=1, problem=None,
                   now=T0, waiting=waiting)
    cond = find_condition(st["conditions"], "Waiting")
    assert (cond["status"], cond["reason"], cond["message"], cond["lastTransitionTime"]) == \
        ("True", "PodTerminating", waiting[1], T0)
    again = fl_status({**job, "status": st}, pods, all_present=True, converged_generation=1, problem=None,
                      now=T1, waiting=waiting)
    assert again == st  # same wait later: nothing to write
    st = fl_status({**job, "status": st}, pods, all_present=True, converged_generation=1, problem=None, now=T1)
    cond = find_condition(st["conditions"], "Waiting")
    assert (cond["status"], cond["lastTransitionTime"]) == ("False", T1)


def test_waiting_survives_the_no_pods_reset():
    job = {"metadata": {"generation": 1}, "status": {}}
    waiting = ("NodeNotFound", "waiting: pod a is bound to node x, which does not exist since " + T0)
    st = fl_status(job, [], all_present=False, converged_generation=None, problem=None, now=T0, waiting=waiting)
    st2 = fl_status({**job, "status": st}, [], all_present=False, converged_generation=None, problem=None,
                    now=T1, waiting=waiting)
    assert find_condition(st2["conditions"], "Waiting")["lastTransitionTime"] == T0


@pytest.mark.parametrize(("phase", "condition"), [("Succeeded", "Complete"), ("Failed", "Failed")])
def test_a_finished_fl_job_keeps_its_last_round(phase, condition):
    """The finish turns the Training condition False; its message keeps the last round, which
    the metrics and the status page read (round_of), and it stays put on later passes."""
    training = {"type": "Training", "status": "True", "reason": "DoTraining",
                "message": "Round 7 reaches at 2026-01-01T00:01:00Z", "lastTransitionTime": T0}
    job = {"metadata": {"generation": 1}, "status": {"conditions": [training], "startTime": T0}}
    st = fl_status(job, [pod(phase)], all_present=True, converged_generation=1, problem=None, now=T1)
    done = find_condition(st["conditions"], "Training")
    assert done["status"] == "False" and round_of(done) == 7
    assert find_condition(st["conditions"], condition)["message"].endswith(" after round 7")
    again = fl_status({**job, "status": st}, [pod(phase)], all_present=True, converged_generation=1,
                      problem=None, now=T1)
    assert again == st


def test_a_job_that_never_reported_a_round_finishes_without_one():
    job = {"metadata": {"generation": 1}, "status": {}}
    st = fl_status(job, [pod("Succeeded")], all_present=True, converged_generation=1, problem=None, now=T1)
    assert find_condition(st["conditions"], "Complete")["message"] == "all workers succeeded"
    assert round_of(find_condition(st["conditions"], "Training")) == 0
