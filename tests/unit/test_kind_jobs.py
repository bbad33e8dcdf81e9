"""gm/kinds/jobs: the JobSpec rules ReidJob and VideoAnalyticsJob share, stepped through the
real build, child diff and status of ReidJob (tests/jobsim.py)."""

from __future__ import annotations

import copy

import pytest

from gm.kindlib import jobs
from gm.kinds import reid
from gm.reconcile.declaration import Observed
from gm.reports import ReportInvalid
from gm.workers.specerrors import InvalidSpec
from shared.objects import find_condition, spec_hash_of
from tests.crdcheck import crd_schema, server_check, validate
from tests.jobsim import T0, JobSim

UID = "7d0c4c52-1b7e-4d8e-9c0e-5f1e2a3b4c5d"


def reid_job(**knobs) -> dict:
    return {
        "apiVersion": "sedna.io/v1alpha1", "kind": "ReidJob",
        "metadata": {"name": "reid", "namespace": "default", "uid": UID, "generation": 1},
        "spec": {"template": {"spec": {"containers": [{"name": "reid", "image": "reid:v1"}]}},
                 **knobs},
    }


def sim(**knobs) -> JobSim:
    return JobSim(reid.DECLARATION, reid_job(**knobs))


def failed_condition(status: dict) -> dict | None:
    cond = find_condition(status.get("conditions"), "Failed")
    return cond if cond and cond["status"] == "True" else None


def true_types(status: dict) -> list[str]:
    return [c["type"] for c in status.get("conditions") or () if c["status"] == "True"]


# -- the JobSpec ---------------------------------------------------------------------


def test_defaults_are_a_single_pod_with_six_retries():
    assert jobs.job_spec({}) == jobs.JobSpec(parallelism=1, completions=1, backoff_limit=6,
                                              deadline=None, ttl=None)


def test_completions_default_to_parallelism():
    spec = jobs.job_spec({"parallelism": 3})
    assert (spec.parallelism, spec.completions) == (3, 3)
    assert jobs.job_spec({"parallelism": 2, "completions": 5}).completions == 5


@pytest.mark.parametrize(("knobs", "field"), [
    pytest.param({"backoffLimit": -1}, "spec.backoffLimit", id="negative-backoff"),
    pytest.param({"parallelism": 0}, "spec.parallelism", id="no-parallelism"),
    pytest.param({"completions": "2"}, "spec.completions", id="string-completions"),
    pytest.param({"completions": True}, "spec.completions", id="bool-completions"),
    pytest.param({"activeDeadlineSeconds": 0}, "spec.activeDeadlineSeconds", id="zero-deadline"),
    pytest.param({"ttlSecondsAfterFinished": -5}, "spec.ttlSecondsAfterFinished", id="negative-ttl"),
    pytest.param({"completions": jobs.MAX_COMPLETIONS + 1}, "spec.completions", id="huge"),
])
def test_bad_job_specs_name_the_field(knobs, field):
    with pytest.raises(InvalidSpec) as err:
        jobs.job_spec(knobs)
    assert err.value.reason == "InvalidJobSpec"
    assert field in err.value.message


# -- retries -------------------------------------------------------------------------


def test_a_failed_pod_is_recreated_under_its_name_until_the_backoff_limit():
    job = sim(backoffLimit=2)
    job.reconcile()
    assert list(job.pods) == ["reid-reid-0"]
    uids = [job.pods["reid-reid-0"]["metadata"]["uid"]]
    for attempt in (1, 2):
        job.end("reid-reid-0", "Failed")
        status = job.settle()
        pod = job.pods["reid-reid-0"]
        assert pod["metadata"]["annotations"][jobs.ATTEMPT_ANNOTATION] == str(attempt)
        assert pod["metadata"]["uid"] not in uids and pod["status"]["phase"] == "Running"
        uids.append(pod["metadata"]["uid"])
        assert (status["phase"], status["failed"], status["indexFailures"]) == ("Running", attempt, [attempt])
        assert true_types(status) == ["Running"]
    job.end("reid-reid-0", "Failed")
    status = job.settle()
    assert (status["phase"], status["failed"], status["active"]) == ("Failed", 3, 0)
    assert failed_condition(status)["reason"] == jobs.BACKOFF_LIMIT_EXCEEDED
    assert "backoffLimit 2" in failed_condition(status)["message"]
    assert job.pods["reid-reid-0"]["status"]["phase"] == "Failed"  # kept, not retried
    assert job.pods["reid-reid-0"]["metadata"]["uid"] == uids[-1]
    assert jobs.finished(job.cr) and status["completionTime"] == job.now


def test_backoff_limit_zero_fails_on_the_first_failure():
    job = sim(backoffLimit=0)
    job.reconcile()
    job.end("reid-reid-0", "Failed")
    status = job.settle()
    assert status["phase"] == "Failed" and failed_condition(status)["reason"] == jobs.BACKOFF_LIMIT_EXCEEDED


def test_a_failure_is_recorded_before_its_pod_is_replaced():
    """The failed pod stays until status.indexFailures holds its failure: deleting it first
    could lose the count if the status write never happened."""
    job = sim()
    job.reconcile()
    job.end("reid-reid-0", "Failed")
    failed_uid = job.pods["reid-reid-0"]["metadata"]["uid"]
    status = job.reconcile()
    assert status["indexFailures"] == [1]
    assert job.pods["reid-reid-0"]["metadata"]["uid"] == failed_uid  # not yet replaced
    job.reconcile()
    assert "reid-reid-0" not in job.pods  # deleted; recreated once gone
    job.reconcile()
    assert job.pods["reid-reid-0"]["metadata"]["annotations"][jobs.ATTEMPT_ANNOTATION] == "1"


def test_a_deleted_running_pod_comes_back_with_its_attempt():
    job = sim()
    job.reconcile()
    job.end("reid-reid-0", "Failed")
    job.settle()
    before = copy.deepcopy(job.pods["reid-reid-0"])
    del job.pods["reid-reid-0"]
    status = job.reconcile()
    again = job.pods["reid-reid-0"]
    assert again["metadata"]["uid"] != before["metadata"]["uid"]
    assert spec_hash_of(again) == spec_hash_of(before)  # same attempt, same spec
    assert status["failed"] == 1  # a deletion is not a failure


# -- parallelism and completions -----------------------------------------------------


def test_parallelism_bounds_the_running_pods_and_completions_the_successes():
    job = sim(parallelism=2, completions=3)
    status = job.reconcile()
    assert sorted(job.pods) == ["reid-reid-0", "reid-reid-1"]
    assert (status["phase"], status["active"], status["succeeded"]) == ("Running", 2, 0)
    job.end("reid-reid-0", "Succeeded")
    status = job.settle()
    assert sorted(job.pods) == ["reid-reid-0", "reid-reid-1", "reid-reid-2"]
    assert job.pods["reid-reid-0"]["status"]["phase"] == "Succeeded"  # kept, not rerun
    assert (status["active"], status["succeeded"]) == (2, 1)
    env = {e["name"]: e.get("value") for e in job.pods["reid-reid-2"]["spec"]["containers"][0]["env"]}
    assert env["JOB_COMPLETION_INDEX"] == "2"
    for name in ("reid-reid-1", "reid-reid-2"):
        job.end(name, "Succeeded")
    status = job.settle()
    assert (status["phase"], status["active"], status["succeeded"], status["failed"]) == ("Succeeded", 0, 3, 0)
    assert true_types(status) == ["Completed"]
    assert find_condition(status["conditions"], "Completed")["reason"] == "Completed"
    assert find_condition(status["conditions"], "Running")["status"] == "False"
    assert status["completionTime"] == job.now


def test_a_free_slot_goes_to_the_lowest_waiting_index():
    job = sim(parallelism=1, completions=3)
    job.reconcile()
    assert list(job.pods) == ["reid-reid-0"]
    job.end("reid-reid-0", "Succeeded")
    job.settle()
    assert sorted(job.pods) == ["reid-reid-0", "reid-reid-1"]


# -- deadline and ttl ------------------------------------------------------------------


def test_past_the_deadline_active_pods_are_deleted_and_the_job_fails():
    job = sim(activeDeadlineSeconds=60)
    status = job.reconcile()
    assert status["startTime"] == job.now
    job.tick(10)
    assert jobs.wake(job.cr, job.now) == 50
    job.tick(50)
    status = job.reconcile()
    assert job.pods == {}
    assert status["phase"] == "Failed" and failed_condition(status)["reason"] == jobs.DEADLINE_EXCEEDED
    assert status["active"] == 0
    assert jobs.finished(job.cr) and jobs.wake(job.cr, job.now) is None
    job.tick(600)
    job.settle()
    assert job.pods == {}  # never comes back


def test_ttl_after_finished_expires_the_job():
    job = sim(ttlSecondsAfterFinished=30)
    job.reconcile()
    assert jobs.wake(job.cr, job.now) is None and not jobs.expired(job.cr, job.now)
    job.end("reid-reid-0", "Succeeded")
    job.settle()
    assert jobs.finished(job.cr)
    job.tick(20)
    assert jobs.wake(job.cr, job.now) == 10 and not jobs.expired(job.cr, job.now)
    job.tick(10)
    assert jobs.expired(job.cr, job.now)


def test_a_running_job_never_expires():
    job = sim(ttlSecondsAfterFinished=0)
    job.reconcile()
    job.tick(3600)
    assert not jobs.expired(job.cr, job.now)


# -- finished stays finished --------------------------------------------------------


def test_a_finished_job_gets_no_pod_back_and_keeps_its_status():
    job = sim(completions=2, parallelism=2)
    job.reconcile()
    for name in list(job.pods):
        job.end(name, "Succeeded")
    final = copy.deepcopy(job.settle())
    assert final["phase"] == "Succeeded"
    job.pods.clear()  # a user deletes the pods
    job.edit(lambda spec: spec["template"]["spec"]["containers"][0].update(image="reid:v2"))
    job.tick(60)
    assert job.settle() == final
    assert job.pods == {}


def test_a_finished_job_keeps_its_pods_through_an_edit():
    job = sim()
    job.reconcile()
    job.end("reid-reid-0", "Succeeded")
    job.settle()
    before = copy.deepcopy(job.pods)
    job.edit(lambda spec: spec["template"]["spec"]["containers"][0].update(image="reid:v2"))
    job.settle()
    assert job.pods == before


def test_a_bad_spec_is_not_an_end():
    job = sim()
    cr = job.cr
    observed = Observed(children={"pods": []}, desired=None, converged=False, now="2026-03-01T10:00:00Z",
                        problem=("InvalidJobSpec", "spec.backoffLimit must be an integer >= 0, got -1"))
    status = reid.DECLARATION.status(cr, observed)
    assert status["phase"] == "Pending" and failed_condition(status)["reason"] == "InvalidJobSpec"
    assert not jobs.finished({**cr, "status": status})
    job.cr["status"] = status
    assert job.reconcile()["phase"] == "Running"
    assert true_types(job.status) == ["Running"]


# -- pods ------------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "want"), [(None, "Never"), ("Always", "Never"),
                                              ("OnFailure", "OnFailure"), ("Never", "Never")])
def test_restart_policy_lets_the_pod_end(policy, want):
    job = sim()
    if policy:
        job.cr["spec"]["template"]["spec"]["restartPolicy"] = policy
    job.reconcile()
    assert job.pods["reid-reid-0"]["spec"]["restartPolicy"] == want


def test_an_edit_recreates_running_pods_and_keeps_succeeded_ones():
    job = sim(parallelism=2)
    job.reconcile()
    job.end("reid-reid-0", "Succeeded")
    job.settle()
    done = copy.deepcopy(job.pods["reid-reid-0"])
    running = copy.deepcopy(job.pods["reid-reid-1"])
    assert job.desired() == job.desired()  # an unchanged spec builds identical children
    assert job.desired()["pods"]["reid-reid-1"]["metadata"]["annotations"] == running["metadata"]["annotations"]
    job.edit(lambda spec: spec["template"]["spec"]["containers"][0].update(image="reid:v2"))
    job.settle()
    assert job.pods["reid-reid-0"] == done
    new = job.pods["reid-reid-1"]
    assert new["spec"]["containers"][0]["image"] == "reid:v2"
    assert new["metadata"]["uid"] != running["metadata"]["uid"]
    assert spec_hash_of(new) != spec_hash_of(running)


# -- status ----------------------------------------------------------------------------


def test_conditions_are_one_per_type():
    job = sim(backoffLimit=1)
    job.reconcile()
    job.end("reid-reid-0", "Failed")
    job.settle()
    job.end("reid-reid-0", "Failed")
    status = job.settle()
    types = [c["type"] for c in status["conditions"]]
    assert sorted(types) == ["Failed", "Running"] and true_types(status) == ["Failed"]


@pytest.mark.parametrize("kind", ["ReidJob", "VideoAnalyticsJob"])
def test_the_written_status_fits_the_crd(kind):
    job = sim(parallelism=2, backoffLimit=1)
    job.reconcile()
    job.end("reid-reid-0", "Failed")
    status = job.settle()
    status["metrics"] = [{"key": "fps", "value": "25"}]
    status["lastReports"] = [{"node": "edge-node-1", "epoch": "9f2c01d4", "seq": 3}]
    status["observedGeneration"] = 1
    spec = {"template": {}, **({"model": {"name": "m"}} if kind == "VideoAnalyticsJob" else {})}
    obj = {"apiVersion": "sedna.io/v1alpha1", "kind": kind, "metadata": {"name": "j"},
           "spec": spec, "status": status}
    assert validate(crd_schema(kind), obj) == []
    stored, errors = server_check(kind, obj)
    assert errors == [] and stored["status"] == status


# -- reports ---------------------------------------------------------------------------


def test_a_report_becomes_sorted_metrics_without_its_times():
    body = {"phase": "running", "status": "ok", "output": {"ownerInfo": {
        "startTime": "2026-03-01 10:00:00", "updateTime": "2026-03-01 10:01:00",
        "fps": 25, "tracked": "12", "camera": {"id": 3}}}}
    mutate = reid.DECLARATION.report(body, T0.isoformat())
    assert mutate({"phase": "Running"}) == {"phase": "Running", "metrics": [
        {"key": "camera", "value": '{"id":3}'}, {"key": "fps", "value": "25"},
        {"key": "tracked", "value": "12"}]}


def test_a_report_without_owner_info_changes_nothing():
    assert reid.DECLARATION.report({"phase": "running", "output": {"models": []}}, "") is None


def test_a_malformed_report_is_refused():
    with pytest.raises(ReportInvalid):
        reid.DECLARATION.report({"output": {"ownerInfo": ["not", "a", "map"]}}, "")


def test_no_wake_past_a_deadline_that_cannot_end_the_job():
    """Past the deadline but held by a bad spec: waking at once would only spin."""
    job = sim(activeDeadlineSeconds=5)
    job.reconcile()
    job.tick(10)
    job.cr["status"]["conditions"] = [{"type": "Failed", "status": "True", "reason": "InvalidTemplate"}]
    assert not jobs.finished(job.cr)
    assert jobs.wake(job.cr, job.now) is None


def test_a_job_failed_by_a_bad_spec_never_expires():
    cr = reid_job(ttlSecondsAfterFinished=0)
    cr["status"] = {"phase": "Failed", "completionTime": "2026-03-01T10:00:00Z",
                    "conditions": [{"type": "Failed", "status": "True", "reason": "InvalidJobSpec"}]}
    assert not jobs.finished(cr) and not jobs.expired(cr, "2026-03-01T11:00:00Z")
