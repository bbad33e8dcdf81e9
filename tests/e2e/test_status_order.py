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

from devcluster.faults import ErrorRule
from gm.controllers.common import DATASETS, FL, JI, MODELS
from gm.edge.order import FIELD
from gm.edge.reports import ReportDeferred
from gm.edge.status import UpstreamStatus
from gm.kube.resources import GVR
from gm.kube.status import StatusWriter
from lc.app import LocalController
from lc.config import load
from lc.link.dialer import GMLink, LinkSettings
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
    return UpstreamStatus(StatusWriter(api))


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


def inference_number(status: dict[str, Any]) -> int | None:
    return next((int(m["value"]) for m in status.get("metrics") or [] if m["key"] == "inferenceNumber"), None)


async def test_dataset_replay_and_older_seq_are_no_ops(handler, api):
    await report(handler, "Dataset", DATASET, 5, {"numberOfSamples": 50})
    status, rv = await read(api, DATASETS, DATASET)
    assert status["numberOfSamples"] == 50
    assert status[FIELD] == [{"node": NODE, "epoch": EPOCH, "seq": 5}]
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
    assert status[FIELD] == [{"node": NODE, "epoch": "fedcba9876543210", "seq": 1,
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


async def test_fl_report_resent_after_its_model_write_failed_still_reaches_the_model(handler, api, sedna_cluster):
    sedna_cluster.faults.errors = [ErrorRule(rate=1.0, verb="update", resource="models")]
    with pytest.raises(ReportDeferred, match="Model default/surface-defect-detection-model"):
        await report(handler, "FederatedLearningJob", FL_JOB, 3, fl_body(1, 0.9))
    sedna_cluster.faults.reset()
    _, job_rv = await read(api, FL, FL_JOB)
    await report(handler, "FederatedLearningJob", FL_JOB, 3, fl_body(1, 0.9))  # the LC resends it
    assert (await read(api, FL, FL_JOB))[1] == job_rv  # the job already had it
    model, _ = await read(api, MODELS, FL_MODEL)
    assert model["metrics"] == [{"key": "loss", "value": "0.9"}]


# ---- the reproduction: a real GM and LC, half the JI status writes failing -----------------------


def lc_env(tmp_path: Path, gm_port: int) -> dict[str, str]:
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir(exist_ok=True)
    return {"GM_ADDRESS": f"127.0.0.1:{gm_port}", "NODENAME": NODE, "BIND_ADDRESS": "127.0.0.1",
            "BIND_PORT": "0", "ROOTFS_MOUNT_DIR": str(rootfs), "LC_DB_PATH": str(tmp_path / "lc.db")}


def quick_resend_link(lc: LocalController) -> GMLink:
    """The production link with a short ack timeout, so deferred reports come back within the test."""
    cfg = lc.config
    assert cfg.gm_url is not None and lc.store is not None
    settings = LinkSettings(url=cfg.gm_url, node=cfg.node_name, ack_timeout=0.5, idle_poll=0.2)
    return GMLink(settings, store=lc.store, sink=lc, registry=lc.metrics.registry)


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


async def test_deferred_reports_resent_after_the_ack_timeout_never_move_the_status_back(
        start_gm, api, sedna_cluster, tmp_path):
    gm = await start_gm()
    await create_examples(api, "joint-inference-helmet-detection.yaml")
    watch = StatusWatch()
    watcher = asyncio.create_task(watch.run(api), name="test-ji-watch")
    lc = LocalController(load(lc_env(tmp_path, gm.port)), link_factory=quick_resend_link)
    await lc.start()
    try:
        await asyncio.wait_for(watch.opened.wait(), 10)
        await eventually(lambda: lc.store.get_resource("JointInferenceService", NS, JI_NAME),
                         within=10, message="the JI reached the LC")
        # The faults hit every JI status write: let the GM's reconciler finish its own first.
        await eventually(workers_running(api), within=15, message="both JI workers running")
        sedna_cluster.faults.errors = [ErrorRule(rate=0.5, verb="update", resource="jointinferenceservices")]
        async with aiohttp.ClientSession() as http:
            for n in range(1, 21):
                async with http.post(f"http://127.0.0.1:{lc.port}/sedna/workers/{JI_NAME}-edge-abc12/info",
                                     json=worker_report(n)) as resp:
                    assert resp.status == 200, await resp.text()
        await eventually(lambda: gm.hub.stats.deferred >= 3, within=20, message="reports deferred and resent")
        sedna_cluster.faults.reset()
        await eventually(lambda: lc.store.outbox_size == 0, within=30, message="every report acked")
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
    assert gm.hub.stats.held_back >= 1  # later reports waited for a deferred one
