"""The GM's job metrics against the dev cluster: a job's series come with the job, move with
its workers' reports, and go with it."""

from __future__ import annotations

import aiohttp
import pytest

from gm.kube.resources import DATASETS, FL, JI, MODELS
from tests.conftest import eventually
from tests.e2e.conftest import load_example
from tests.e2e.test_gm_edge import (
    DS1,
    JOB,
    NS,
    PLURALS,
    connect,  # noqa: F401 - the fixture: native LCs on the hub
    create_fl_example,
    round_report,
)
from tests.scrape import samples, value

JI_KIND = "JointInferenceService"


@pytest.fixture
async def http():
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def scrape(http: aiohttp.ClientSession, gm) -> str:
    async with http.get(f"http://127.0.0.1:{gm.port}/metrics") as resp:
        assert resp.status == 200
        return await resp.text()


def of(text: str, name: str) -> dict[str, float]:
    """The job series of object `name`: family{extra labels} -> value."""
    out = {}
    for s in samples(text):
        if s.labels.get("name") == name and s.name.startswith("sedna_gm_") and "kind" in s.labels:
            extra = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())
                             if k not in ("namespace", "name", "kind"))
            out[f"{s.name}{{{extra}}}" if extra else s.name] = s.value
    return out


async def test_a_ji_services_series_come_move_with_reports_and_go(gm, api, connect, http):  # noqa: F811
    objs = load_example("joint-inference-helmet-detection.yaml")
    ji = objs[-1]
    name, node = ji["metadata"]["name"], ji["spec"]["edgeWorker"]["template"]["spec"]["nodeName"]
    for obj in objs:
        await api.create(PLURALS[obj["kind"]], obj, namespace=NS)

    async def reconciled() -> str | None:
        text = await scrape(http, gm)  # its phase at once, its workers with its first status
        return text if "sedna_gm_job_workers_active" in of(text, name) else None

    text = await eventually(reconciled, within=10, message="the JI's workers series")
    assert [k for k in of(text, name) if k.startswith("sedna_gm_job_phase")] in (
        ["sedna_gm_job_phase{phase=Pending}"], ["sedna_gm_job_phase{phase=Running}"])
    assert value(text, "sedna_gm_ji_inferences", namespace=NS, name=name, kind=JI_KIND) is None

    lc = await connect.native(node)
    body = {"phase": "inference", "status": "", "output": {"models": None, "ownerInfo": {
        "startTime": "2025-03-01 10:00:00", "updateTime": "2025-03-01 10:00:30", "uploadCloudRatio": 0.125,
        "inferenceNumber": 240, "hardExampleNumber": 31, "queue depth\n\"x\"": 3}}}
    assert (await lc.report(1, JI_KIND, name, body)).body is None
    text = await scrape(http, gm)
    series = of(text, name)
    assert {k: v for k, v in series.items() if k.startswith(("sedna_gm_ji_", "sedna_gm_job_reported"))} == {
        "sedna_gm_ji_inferences": 240, "sedna_gm_ji_hard_examples": 31, "sedna_gm_ji_upload_cloud_ratio": 0.125,
        "sedna_gm_job_reported_metric{metric=queue_depth__x_}": 3}
    assert f"sedna_gm_job_last_report_time_seconds{{node={node}}}" in series

    body["output"]["ownerInfo"]["inferenceNumber"] = 300
    assert (await lc.report(2, JI_KIND, name, body)).body is None
    assert value(await scrape(http, gm), "sedna_gm_ji_inferences", namespace=NS, name=name, kind=JI_KIND) == 300

    await api.delete(JI, name, namespace=NS)

    async def gone() -> bool:
        return not of(await scrape(http, gm), name)

    await eventually(gone, within=10, message="every series of the deleted JI gone")


async def test_fl_rounds_training_metrics_and_dataset_samples(gm, api, connect, http):  # noqa: F811
    await create_fl_example(api, gm)
    await eventually(lambda: (gm.informers.get_cached(FL, NS, JOB) or {}).get("status", {}).get("phase") == "Running",
                     within=10, message="the job Running")
    text = await scrape(http, gm)
    assert value(text, "sedna_gm_job_phase", namespace=NS, name=JOB, kind="FederatedLearningJob",
                 phase="Running") == 1
    assert value(text, "sedna_gm_fl_round", namespace=NS, name=JOB, kind="FederatedLearningJob") is None

    lc = await connect.native("edge-node-1")
    assert (await lc.report(1, "FederatedLearningJob", JOB,
                            round_report(3, metrics={"accuracy": [0.86, 0.9], "loss": 0.41}))).body is None
    assert (await lc.report(2, "Dataset", DS1, {"numberOfSamples": 500})).body is None
    await eventually(lambda: (gm.informers.get_cached(MODELS, NS, "surface-defect-detection-model") or {})
                     .get("status", {}).get("metrics"), within=10, message="the Model's metrics cached")
    await eventually(lambda: (gm.informers.get_cached(DATASETS, NS, DS1) or {}).get("status", {})
                     .get("numberOfSamples") == 500, within=10, message="the Dataset's count cached")
    series = of(await scrape(http, gm), JOB)
    assert series["sedna_gm_fl_round"] == 3
    assert series["sedna_gm_job_reported_metric{metric=accuracy}"] == pytest.approx(0.88)
    assert series["sedna_gm_job_reported_metric{metric=loss}"] == 0.41
    text = await scrape(http, gm)
    assert value(text, "sedna_gm_dataset_samples", namespace=NS, name=DS1, node="edge-node-1") == 500

    await api.delete(FL, JOB, namespace=NS)

    async def gone() -> bool:
        return not of(await scrape(http, gm), JOB)

    await eventually(gone, within=10, message="every series of the deleted FL job gone")
