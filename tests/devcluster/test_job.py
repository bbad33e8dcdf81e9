"""Job controller through the store and the real kubectl: completions, limits, generated selector."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devcluster.controllers.job import TRACKING_FINALIZER
from devcluster.machinery.errors import ApiError
from tests.conftest import eventually
from tests.devcluster.helpers import rt

PHASE = "devcluster.sedna.io/phase"  # the kubelet stand-in ends a pod in this phase


def job(name: str, *, phase: str | None = "Succeeded", restart: str = "Never", **spec: Any) -> dict[str, Any]:
    meta = {"annotations": {PHASE: phase}} if phase else {}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
            "spec": {"template": {"metadata": meta, "spec": {
                "restartPolicy": restart, "containers": [{"name": "c", "image": "work:1"}]}}, **spec}}


def _job(store, name):
    return store.get(rt(store, "jobs", "batch"), "default", name)


def _cond(store, name, ctype):
    for c in (_job(store, name).get("status") or {}).get("conditions") or []:
        if c["type"] == ctype and c["status"] == "True":
            return c
    return None


def _pods(store, j):
    return store.controlled_by(rt(store, "pods"), j["metadata"]["uid"], "default")


async def test_job_runs_to_completion_with_generated_selector(live):
    store = live.store
    created = store.create(rt(store, "jobs", "batch"), "default", job("batch", completions=3, parallelism=2))
    uid = created["metadata"]["uid"]
    assert created["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    want_labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": "batch",
                   "controller-uid": uid, "job-name": "batch"}
    assert created["spec"]["template"]["metadata"]["labels"] == want_labels
    assert created["metadata"]["labels"] == want_labels
    assert (created["spec"]["backoffLimit"], created["spec"]["completionMode"]) == (6, "NonIndexed")
    await eventually(lambda: _cond(store, "batch", "Complete"), message="Complete")
    j = _job(store, "batch")
    st = j["status"]
    assert st["succeeded"] == 3 and st.get("failed", 0) == 0 and st.get("active", 0) == 0
    assert st["startTime"] and st["completionTime"] and st["uncountedTerminatedPods"] == {}
    assert _cond(store, "batch", "SuccessCriteriaMet")["reason"] == "CompletionsReached"
    assert _cond(store, "batch", "Complete")["message"] == "Reached expected number of succeeded pods"
    pods = _pods(store, j)
    assert len(pods) == 3
    for pod in pods:
        assert TRACKING_FINALIZER not in (pod["metadata"].get("finalizers") or [])
        assert pod["metadata"]["labels"]["job-name"] == "batch"
        assert pod["metadata"]["name"].startswith("batch-")


async def test_backoff_limit_counts_pod_failures(live):
    store = live.store
    store.create(rt(store, "jobs", "batch"), "default", job("flaky", phase="Failed", backoffLimit=1))
    await eventually(lambda: _cond(store, "flaky", "Failed"), message="Failed")
    cond = _cond(store, "flaky", "Failed")
    assert (cond["reason"], cond["message"]) == ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
    assert _cond(store, "flaky", "FailureTarget")["reason"] == "BackoffLimitExceeded"
    st = _job(store, "flaky")["status"]
    assert st["failed"] == 2 and st.get("succeeded", 0) == 0 and "completionTime" not in st
    events, _ = store.list(rt(store, "events"), "default")
    assert any(e["reason"] == "BackoffLimitExceeded" and e["type"] == "Warning" for e in events)


async def test_active_deadline_fails_the_job_and_deletes_its_pods(live):
    store = live.store
    store.create(rt(store, "jobs", "batch"), "default", job("slow", phase=None, activeDeadlineSeconds=1,
                                                            parallelism=2, completions=2))
    await eventually(lambda: _cond(store, "slow", "Failed"), message="DeadlineExceeded")
    assert _cond(store, "slow", "Failed")["reason"] == "DeadlineExceeded"
    await eventually(lambda: not _pods(store, _job(store, "slow")), message="pods deleted")


async def test_deleting_a_job_removes_its_tracked_pods(live):
    store = live.store
    store.create(rt(store, "jobs", "batch"), "default", job("gone", phase=None))
    await eventually(lambda: len(_pods(store, _job(store, "gone"))) == 1, message="pod created")
    store.delete(rt(store, "jobs", "batch"), "default", "gone", propagation="Background")

    def no_pods():
        pods, _ = store.list(rt(store, "pods"), "default")
        return not [p for p in pods if (p["metadata"].get("labels") or {}).get("job-name") == "gone"]

    await eventually(no_pods, message="pods of the deleted job are gone")


@pytest.mark.parametrize("body, field, detail", [
    pytest.param(job("always", restart="Always"), "spec.template.spec.restartPolicy",
                 'Required value: valid values: "OnFailure", "Never"', id="restart-always"),
    pytest.param(job("neg", backoffLimit=-1), "spec.backoffLimit", "Invalid value: -1: must be greater than or equal to 0",
                 id="negative-backoff"),
])
async def test_invalid_jobs_are_422(live, body, field, detail):
    with pytest.raises(ApiError) as info:
        live.store.create(rt(live.store, "jobs", "batch"), "default", body)
    assert info.value.code == 422
    assert f"{field}: {detail}" in info.value.message


async def test_cronjob_is_stored_and_needs_a_schedule(live):
    store = live.store
    cj_rt = rt(store, "cronjobs", "batch")
    body = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
            "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": job("x")["spec"]}}}
    stored = store.create(cj_rt, "default", body)
    assert (stored["spec"]["concurrencyPolicy"], stored["spec"]["successfulJobsHistoryLimit"]) == ("Allow", 3)
    del body["spec"]["schedule"]
    body["metadata"] = {"name": "never"}
    with pytest.raises(ApiError) as info:
        store.create(cj_rt, "default", body)
    assert info.value.code == 422 and "spec.schedule: Required value" in info.value.message


async def test_kubectl_create_job_and_wait_for_complete(cluster, kubectl):
    rc, out, err = await kubectl("create", "job", "pi", "--image=perl:5", "--dry-run=client", "-o", "json",
                                 "--", "perl", "-e", "print 1")
    assert rc == 0, err
    body = json.loads(out)
    body["spec"]["template"]["metadata"]["annotations"] = {PHASE: "Succeeded"}
    rc, out, err = await kubectl("create", "-f", "-", stdin=json.dumps(body))
    assert rc == 0, err
    rc, out, err = await kubectl("wait", "--for=condition=complete", "job/pi", "--timeout=20s", within=30)
    assert rc == 0, err
    assert "job.batch/pi condition met" in out
    rc, out, err = await kubectl("get", "job", "pi")
    assert rc == 0, err
    header, row = out.splitlines()
    assert header.split()[:4] == ["NAME", "STATUS", "COMPLETIONS", "DURATION"]
    assert row.split()[:3] == ["pi", "Complete", "1/1"]
