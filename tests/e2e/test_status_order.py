"""Status never moves backwards: replayed, late and deferred reports against the dev cluster.

The first tests drive gm/edge/status.py's handler directly (real StatusWriter, real API server)
with reports in the orders an LC can produce: replays, older seqs, a new outbox epoch,
upstream reports ordered by their own time. The last one is the reproduction of the
field report: a real GM and a real LC, JI status writes failing half the time, twenty
worker reports answered 200, the deferred ones resent after the LC's ack timeout; every
status version a watch delivers must be at least as new as the one before, and the last
one is report #20.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devcluster.server.faults import ErrorRule
from gm.edge.order import FIELD
from gm.edge.pipeline import StatusPipeline
from gm.edge.status import UpstreamStatus
from gm.kube.resources import DATASETS, FL, GVR, JI, MODELS
from gm.kube.statuswriter import StatusWriter
from gm.reports import ReportRefused
from lc.app import LocalController
from lc.config import load
from lc.link.dialer import link_factory
from proto import Message, Op
from tests.conftest import eventually
from tests.e2e.conftest import load_example

NS = "default"
NODE = "edge-node-1"
EPOCH = "0123456789abcdef"
DATASET = "edge1-surface-defect-detection-dataset"
FL_JOB = "surface-defect-detection"
FL_MODEL = "surface-defect-detection-model"
JI_NAME = "helmet-detection-inference-example"
PLURALS = {"Dataset": DATASETS, "Model": MODELS, "FederatedLearningJob": FL, "JointInferenceService": JI}


async def create_examples(api, *files: str) -> None:
    for file in files:
        for obj in load_example(file):
            await api.create(PLURALS[obj["kind"]], obj, namespace=NS)


@pytest.fixture
async def handler(api, sedna_cluster) -> UpstreamStatus:
    await create_examples(api, "federated-learning-surface-defect.yaml", "joint-inference-helmet-detection.yaml")
    return UpstreamStatus(StatusPipeline(StatusWriter(api)))


async def report(handler: UpstreamStatus, kind: str, name: str, seq: int, body: dict[str, Any], *,
                 epoch: str = EPOCH) -> None:
    await handler.handle_status(NODE, Message(Op.STATUS, seq, kind, NS, name, body), epoch=epoch)


async def read(api, gvr: GVR, name: str) -> tuple[dict[str, Any], str]:
    obj = await api.get(gvr, name, namespace=NS)
    return obj.get("status") or {}, obj["metadata"]["resourceVersion"]


def ji_body(n: int, update_time: str = "2026-01-01 10:00:00") -> dict[str, Any]:
    return {"phase": "inference", "status": "", "output": {"models": None, "ownerInfo": {
        "inferenceNumber": n, "hardExampleNumber": n // 2, "startTime": "2026-01-01 09:00:00",
        "updateTime": update_time}}}


def fl_body(round_: int, loss: float) -> dict[str, Any]:
    return {"phase": "train", "status": "running", "output": {
        "models": [{"format": "pb", "url": "/model/model.pb", "metrics": {"loss": loss}}],
        "ownerInfo": {"currentRound": round_, "updateTime": f"2026-01-01 10:0{round_}:00"}}}


def records(status: dict[str, Any]) -> list[dict[str, Any]]:
    """`status.lastReports` without `appliedAt` (checked to be a time when present)."""
    out = []
    for record in status[FIELD]:
        record = dict(record)
        if "appliedAt" in record:
            assert record.pop("appliedAt").endswith("Z")
        out.append(record)
    return out


def inference_number(status: dict[str, Any]) -> int | None:
    return next((int(m["value"]) for m in status.get("metrics") or [] if m["key"] == "inferenceNumber"), None)


async def test_dataset_replay_and_older_seq_are_no_ops(handler, api):
    await report(handler, "Dataset", DATASET, 5, {"numberOfSamples": 50})
    status, rv = await read(api, DATASETS, DATASET)
    assert status["numberOfSamples"] == 50
    assert records(status) == [{"node": NODE, "epoch": EPOCH, "seq": 5}]
    await report(handler, "Dataset", DATASET, 5, {"numberOfSamples": 50})  # replay
    await report(handler, "Dataset", DATASET, 4, {"numberOfSamples": 40})  # deferred earlier, resent late
    assert await read(api, DATASETS, DATASET) == (status, rv)  # nothing written at all
    await report(handler, "Dataset", DATASET, 6, {"numberOfSamples": 50})  # same count, newer report
    status, _ = await read(api, DATASETS, DATASET)
    assert (status["numberOfSamples"], status[FIELD][0]["seq"]) == (50, 6)


async def test_ji_older_reports_are_no_ops_and_a_new_outbox_epoch_is_not_ignored(handler, api):
    await report(handler, "JointInferenceService", JI_NAME, 900, ji_body(20))
    await report(handler, "JointInferenceService", JI_NAME, 899, ji_body(19))
    status, rv = await read(api, JI, JI_NAME)
    assert inference_number(status) == 20
    await report(handler, "JointInferenceService", JI_NAME, 900, ji_body(20))
    assert (await read(api, JI, JI_NAME))[1] == rv
    # The LC's database was wiped: its seqs start again at 1 under a new epoch.
    await report(handler, "JointInferenceService", JI_NAME, 1, ji_body(21), epoch="fedcba9876543210")
    status, _ = await read(api, JI, JI_NAME)
    assert inference_number(status) == 21
    assert records(status) == [{"node": NODE, "epoch": "fedcba9876543210", "seq": 1,
                                "time": "2026-01-01 10:00:00"}]


async def test_upstream_reports_are_ordered_by_their_own_time(handler, api):
    await report(handler, "JointInferenceService", JI_NAME, 0, ji_body(7, "2026-01-01 10:00:30"), epoch="")
    await report(handler, "JointInferenceService", JI_NAME, 0, ji_body(6, "2026-01-01 10:00:00"), epoch="")
    status, _ = await read(api, JI, JI_NAME)
    assert inference_number(status) == 7
    await report(handler, "JointInferenceService", JI_NAME, 0, ji_body(8, "2026-01-01 10:00:30"), epoch="")
    status, _ = await read(api, JI, JI_NAME)
    assert inference_number(status) == 8  # same second: arrival order
    assert status[FIELD] == [{"node": NODE, "time": "2026-01-01 10:00:30"}]


async def test_fl_late_round_report_changes_neither_job_nor_model(handler, api):
    await report(handler, "FederatedLearningJob", FL_JOB, 11, fl_body(3, 0.3))
    await report(handler, "FederatedLearningJob", FL_JOB, 10, fl_body(2, 0.5))
    job, job_rv = await read(api, FL, FL_JOB)
    model, model_rv = await read(api, MODELS, FL_MODEL)
    training = next(c for c in job["conditions"] if c["type"] == "Training")
    assert training["message"] == "Round 3 reaches at 2026-01-01 10:03:00"
    assert model["metrics"] == [{"key": "loss", "value": "0.3"}]
    await report(handler, "FederatedLearningJob", FL_JOB, 11, fl_body(3, 0.3))  # replay
    assert ((await read(api, FL, FL_JOB))[1], (await read(api, MODELS, FL_MODEL))[1]) == (job_rv, model_rv)


async def test_fl_report_whose_model_write_fails_is_retried_by_the_gm(handler, api, sedna_cluster):
    sedna_cluster.faults.errors = [ErrorRule(rate=1.0, verb="patch", resource="models")]
    pending = asyncio.ensure_future(report(handler, "FederatedLearningJob", FL_JOB, 3, fl_body(1, 0.9)))
    await eventually(lambda: handler.pipeline.stats.retries >= 2, message="the Model write retried")
    assert not pending.done()  # not acked while the Model still owes the metrics
    sedna_cluster.faults.reset()
    await asyncio.wait_for(pending, 10)
    model, _ = await read(api, MODELS, FL_MODEL)
    assert model["metrics"] == [{"key": "loss", "value": "0.9"}]
    _, job_rv = await read(api, FL, FL_JOB)
    await report(handler, "FederatedLearningJob", FL_JOB, 3, fl_body(1, 0.9))  # a resend: no-op
    assert (await read(api, FL, FL_JOB))[1] == job_rv


async def test_a_status_the_api_server_refuses_is_refused_and_other_reports_still_apply(handler, api):
    huge = {f"k{i}": "x" * 64 for i in range(40_000)}  # ~3 MiB of metrics: over the request limit
    body = ji_body(30)
    body["output"]["ownerInfo"].update(huge)
    with pytest.raises(ReportRefused, match="refused the status"):
        await report(handler, "JointInferenceService", JI_NAME, 40, body)
    await report(handler, "JointInferenceService", JI_NAME, 41, ji_body(31))
    await report(handler, "Dataset", DATASET, 42, {"numberOfSamples": 7})
    status, _ = await read(api, JI, JI_NAME)
    assert inference_number(status) == 31
    assert (await read(api, DATASETS, DATASET))[0]["numberOfSamples"] == 7


async def test_forged_far_future_seq_changes_nothing(handler, api):
    await report(handler, "Dataset", DATASET, 5, {"numberOfSamples": 50})
    with pytest.raises(ReportRefused, match="beyond any its LC could have reached"):
        await report(handler, "Dataset", DATASET, 2**63 - 1, {"numberOfSamples": 0})
    status, _ = await read(api, DATASETS, DATASET)
    assert (status["numberOfSamples"], records(status)[0]["seq"]) == (50, 5)
    await report(handler, "Dataset", DATASET, 6, {"numberOfSamples": 60})  # the real LC goes on
    assert (await read(api, DATASETS, DATASET))[0]["numberOfSamples"] == 60


async def test_reports_from_two_nodes_share_one_write(handler, api):
    gvr_writes = handler.pipeline.stats.writes
    jobs = [handler.submit(node, Message(Op.STATUS, seq, "FederatedLearningJob", NS, FL_JOB, fl_body(r, 0.1 * r)),
                           epoch=EPOCH)
            for node, seq, r in (("edge-node-1", 1, 1), ("edge-node-2", 1, 2), ("edge-node-1", 2, 3))]
    await asyncio.gather(*jobs)
    job, _ = await read(api, FL, FL_JOB)
    assert {r["node"] for r in job[FIELD]} == {"edge-node-1", "edge-node-2"}
    training = next(c for c in job["conditions"] if c["type"] == "Training")
    assert training["message"].startswith("Round 3 ")
    # the job: one write for the first report, one for the two that queued behind it
    assert handler.pipeline.stats.writes - gvr_writes <= 2 + 3  # + at most one Model write each


# ---- the reproduction: a real GM and LC, half the JI status writes failing -----------------------


def lc_env(tmp_path: Path, gm_port: int) -> dict[str, str]:
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir(exist_ok=True)
    return {"GM_ADDRESS": f"127.0.0.1:{gm_port}", "NODENAME": NODE, "BIND_ADDRESS": "127.0.0.1",
            "BIND_PORT": "0", "ROOTFS_MOUNT_DIR": str(rootfs), "LC_DB_PATH": str(tmp_path / "lc.db")}


class StatusWatch:
    """The report number of every JI status version the API server publishes, in order."""

    def __init__(self) -> None:
        self.numbers: list[int] = []
        self.resource_version = 0
        self.opened = asyncio.Event()

    async def run(self, api) -> None:
        _, rv = await read(api, JI, JI_NAME)
        async with api.watch(JI, namespace=NS, resource_version=rv,
                             field_selector=f"metadata.name={JI_NAME}") as stream:
            self.opened.set()
            async for kind, obj in stream:
                if kind != "MODIFIED":
                    continue
                n = inference_number(obj.get("status") or {})
                if n is not None and (not self.numbers or self.numbers[-1] != n):
                    self.numbers.append(n)
                self.resource_version = int(obj["metadata"]["resourceVersion"])


def workers_running(api):
    async def check() -> bool:
        status, _ = await read(api, JI, JI_NAME)
        return status.get("active") == 2 and status.get("observedGeneration") == 1 and any(
            c["type"] == "Running" and c["status"] == "True" for c in status.get("conditions") or [])
    return check


def worker_report(n: int) -> dict[str, Any]:
    return {"name": f"{JI_NAME}-edge-abc12", "namespace": NS, "ownerName": JI_NAME,
            "ownerKind": "jointinferenceservice", "kind": "inference", "results": [],
            "ownerInfo": {"inferenceNumber": n, "hardExampleNumber": n // 2, "startTime": "2026-01-01 09:00:00",
                          "updateTime": f"2026-01-01 10:{n:02d}:00"}}


async def test_half_the_status_writes_failing_reports_reach_the_cr_and_never_move_it_back(
        start_gm, api, sedna_cluster, tmp_path):
    gm = await start_gm()
    await create_examples(api, "joint-inference-helmet-detection.yaml")
    watch = StatusWatch()
    watcher = asyncio.create_task(watch.run(api), name="test-ji-watch")
    lc = LocalController(load(lc_env(tmp_path, gm.port)), link_factory=link_factory)  # ack timeout 60 s
    await lc.start()
    try:
        await asyncio.wait_for(watch.opened.wait(), 10)
        await eventually(lambda: lc.store.get_resource("JointInferenceService", NS, JI_NAME),
                         within=10, message="the JI reached the LC")
        # The faults hit every JI status write: let the GM's reconciler finish its own first.
        await eventually(workers_running(api), within=15, message="both JI workers running")
        sedna_cluster.faults.errors = [ErrorRule(rate=0.5, verb="patch", resource="jointinferenceservices")]
        async with aiohttp.ClientSession() as http:
            for n in range(1, 21):
                async with http.post(f"http://127.0.0.1:{lc.port}/sedna/workers/{JI_NAME}-edge-abc12/info",
                                     json=worker_report(n)) as resp:
                    assert resp.status == 200, await resp.text()
        # the GM retries failed writes itself: no wait for the LC's resend
        await eventually(lambda: lc.store.outbox_size == 0, within=30, message="every report acked")
        assert gm.pipeline.stats.retries >= 1 and gm.hub.stats.deferred == 0
        sedna_cluster.faults.reset()
        _, rv = await read(api, JI, JI_NAME)
        await eventually(lambda: watch.resource_version >= int(rv), within=10, message="the watch caught up")
    finally:
        sedna_cluster.faults.reset()
        await lc.stop()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    assert watch.numbers == sorted(watch.numbers), f"status moved backwards: {watch.numbers}"
    assert watch.numbers[-1] == 20
    status, _ = await read(api, JI, JI_NAME)
    [record] = status[FIELD]  # the LC's own outbox epoch came through its hello
    assert (record["node"], record["epoch"], record["time"]) == (NODE, lc.store.outbox_epoch, "2026-01-01 10:20:00")


async def test_gm_dying_between_write_and_ack_loses_nothing_and_repeats_nothing(start_gm, api, tmp_path):
    gm = await start_gm()
    port = gm.port
    await create_examples(api, "joint-inference-helmet-detection.yaml")
    lc = LocalController(load(lc_env(tmp_path, port)), link_factory=link_factory)
    await lc.start()
    try:
        await eventually(lambda: lc.store.get_resource("JointInferenceService", NS, JI_NAME),
                         within=10, message="the JI reached the LC")
        await eventually(workers_running(api), within=15, message="both JI workers running")
        committed = asyncio.Event()
        assert gm.pipeline is not None
        gm.pipeline._settle = lambda batch, verdicts: committed.set()  # the write lands; the ack never leaves
        async with aiohttp.ClientSession() as http:
            async with http.post(f"http://127.0.0.1:{lc.port}/sedna/workers/{JI_NAME}-edge-abc12/info",
                                 json=worker_report(7)) as resp:
                assert resp.status == 200
        await asyncio.wait_for(committed.wait(), 10)
        status, rv = await read(api, JI, JI_NAME)
        assert inference_number(status) == 7 and lc.store.outbox_size == 1  # written, not acked
        await gm.stop()  # the GM goes away between the write and the ack
        gm2 = await start_gm(websocket=f"{{address: 127.0.0.1, port: {port}}}")
        await eventually(lambda: lc.store.outbox_size == 0, within=30, message="the resend acked")
        assert (await read(api, JI, JI_NAME))[1] == rv  # the resend was stale: nothing written again
        assert gm2.pipeline is not None and gm2.pipeline.stats.stale >= 1
    finally:
        await lc.stop()
