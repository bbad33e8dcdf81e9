"""ReidJob and VideoAnalyticsJob end to end: the Job rules the shared kind body does not reach
(retries up to backoffLimit, activeDeadlineSeconds, ttlSecondsAfterFinished, parallel
completions) and a worker report relayed by a LocalController into `status.metrics`.

Pods end the way a test ends them on the dev cluster: the `devcluster.sedna.io/phase`
annotation (devcluster/controllers/kubelet.py)."""

from __future__ import annotations

import copy

import aiohttp

from gm.kindlib.jobs import ATTEMPT_ANNOTATION
from gm.kube.apierrors import NotFound
from gm.kube.resources import PODS, sedna_gvr
from shared import apis
from tests.conftest import eventually
from tests.e2e.kindcases import reid as reid_case
from tests.e2e.kindcases import videoanalytics as va_case
from tests.e2e.test_system import lc_env, local_controller, post_report

NS = "default"
REID = sedna_gvr(apis.REID)
VA = sedna_gvr(apis.VIDEO_ANALYTICS)
MODELS = sedna_gvr(apis.MODEL)
PHASE = "devcluster.sedna.io/phase"
WAIT = 15.0


async def read(api, gvr, name: str) -> dict | None:
    try:
        return await api.get(gvr, name, namespace=NS)
    except NotFound:
        return None


async def create_reid(api, **knobs) -> dict:
    [case] = reid_case.CASES
    manifest = copy.deepcopy(case.manifest)
    manifest["spec"].update(knobs)
    return await api.create(REID, manifest, namespace=NS)


async def running(api, name: str, *, attempt: str = "0") -> dict | None:
    pod = await read(api, PODS, name)
    if pod is None or pod["metadata"].get("deletionTimestamp"):
        return None
    ok = (pod["metadata"]["annotations"].get(ATTEMPT_ANNOTATION) == attempt
          and (pod.get("status") or {}).get("phase") == "Running")
    return pod if ok else None


async def end(api, name: str, phase: str) -> None:
    await api.patch(PODS, name, {"metadata": {"annotations": {PHASE: phase}}}, namespace=NS)


async def status(api, gvr, name: str) -> dict:
    return ((await read(api, gvr, name)) or {}).get("status") or {}


def condition(status_: dict, type_: str) -> dict | None:
    return next((c for c in status_.get("conditions") or () if c["type"] == type_
                 and c["status"] == "True"), None)


async def test_failed_pods_are_retried_under_their_name_until_the_backoff_limit(gm, api):
    job = await create_reid(api, backoffLimit=1)
    name, pod = job["metadata"]["name"], reid_case.POD
    uids = []
    for attempt in ("0", "1"):
        found = await eventually(lambda a=attempt: running(api, pod, attempt=a), within=WAIT,
                                 message=f"{pod} running, attempt {attempt}")
        uids.append(found["metadata"]["uid"])
        await end(api, pod, "Failed")
    assert len(set(uids)) == 2
    final = await eventually(lambda: _phase(api, REID, name, "Failed"), within=WAIT, message="job Failed")
    assert condition(final, "Failed")["reason"] == "BackoffLimitExceeded"
    assert (final["failed"], final["active"], final["indexFailures"]) == (2, 0, [2])
    left = await read(api, PODS, pod)
    assert left["metadata"]["uid"] == uids[-1] and left["status"]["phase"] == "Failed"  # not retried


async def _phase(api, gvr, name: str, phase: str) -> dict | None:
    current = await status(api, gvr, name)
    return current if current.get("phase") == phase else None


async def test_past_the_deadline_the_job_fails_and_its_ttl_deletes_it(gm, api):
    job = await create_reid(api, activeDeadlineSeconds=1, ttlSecondsAfterFinished=1)
    name = job["metadata"]["name"]
    await eventually(lambda: running(api, reid_case.POD), within=WAIT, message="pod running")
    final = await eventually(lambda: _phase(api, REID, name, "Failed"), within=WAIT,
                             message="job Failed at its deadline")
    assert condition(final, "Failed")["reason"] == "DeadlineExceeded"
    assert final["completionTime"]
    await eventually(lambda: _gone(api, REID, name), within=WAIT, message="job deleted after its ttl")
    await eventually(lambda: _gone(api, PODS, reid_case.POD), within=WAIT, message="pod gone with it")


async def _gone(api, gvr, name: str) -> bool:
    return await read(api, gvr, name) is None


async def test_parallel_completions_and_a_finished_job_stays_finished(gm, api):
    job = await create_reid(api, parallelism=2, completions=3)
    name = job["metadata"]["name"]
    pods = [f"{name}-reid-{i}" for i in range(3)]
    for pod in pods[:2]:
        await eventually(lambda p=pod: running(api, p), within=WAIT, message=f"{pod} running")
    assert await read(api, PODS, pods[2]) is None  # parallelism 2
    await end(api, pods[0], "Succeeded")
    await eventually(lambda: running(api, pods[2]), within=WAIT, message="the third index starts")
    for pod in pods[1:]:
        await end(api, pod, "Succeeded")
    final = await eventually(lambda: _phase(api, REID, name, "Succeeded"), within=WAIT, message="Succeeded")
    assert (final["succeeded"], final["active"], final["failed"]) == (3, 0, 0)
    assert condition(final, "Completed")["reason"] == "Completed"
    await api.delete(PODS, pods[0], namespace=NS)
    await eventually(lambda: _gone(api, PODS, pods[0]), within=WAIT, message="pod deleted")
    ctrl = next(c for c in gm.controllers.values() if c.kind == "ReidJob")
    await ctrl.reconcile(f"{NS}/{name}")
    assert await read(api, PODS, pods[0]) is None  # a finished job's pod never comes back
    assert (await status(api, REID, name))["succeeded"] == 3


async def test_a_worker_report_becomes_status_metrics(start_gm, api, tmp_path):
    gm = await start_gm()
    [case] = va_case.CASES
    for obj in case.prerequisites:
        await api.create(MODELS, copy.deepcopy(obj), namespace=NS)
    job = await api.create(VA, copy.deepcopy(case.manifest), namespace=NS)
    name = job["metadata"]["name"]
    node = case.manifest["spec"]["template"]["spec"]["nodeName"]
    async with local_controller(lc_env(tmp_path, node, gm.port)) as (lc, base):
        await eventually(lambda: lc.store.get_resource("VideoAnalyticsJob", NS, name), within=WAIT,
                         message="the job reached its node's LC")
        report = {"name": va_case.POD, "namespace": NS, "ownerName": name,
                  "ownerKind": "videoanalyticsjob", "kind": "inference", "status": "running",
                  "ownerInfo": {"fps": 25, "tracked": "12", "startTime": "2026-01-01 10:00:00",
                                "updateTime": "2026-01-01 10:01:00"}}
        async with aiohttp.ClientSession() as session:
            assert await post_report(session, base, report) == (200, {"Status": 200, "Message": "OK"})

        async def metrics():
            return (await status(api, VA, name)).get("metrics")

        got = await eventually(metrics, within=WAIT, message="status.metrics")
    assert got == [{"key": "fps", "value": "25"}, {"key": "tracked", "value": "12"}]
    assert (await status(api, VA, name))["phase"] == "Running"  # the report leaves the job rules alone
