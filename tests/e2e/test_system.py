"""The whole system: dev cluster, GM, LocalControllers and worker reports, end to end."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import orjson

from gm.kube.resources import GVR
from lc.app import LocalController
from lc.config import load
from lc.link.dialer import link_factory
from shared.ports import free_port
from tests.conftest import eventually
from tests.e2e.conftest import load_example

NS = "default"
JOB = "surface-defect-detection"
TRAINER = f"{JOB}-trainworker-0"


def lc_env(tmp_path: Path, node: str, gm_port: int, **extra: str) -> dict[str, str]:
    rootfs = tmp_path / f"rootfs-{node}"
    rootfs.mkdir(exist_ok=True)
    return {"GM_ADDRESS": f"127.0.0.1:{gm_port}", "NODENAME": node, "BIND_ADDRESS": "127.0.0.1",
            "BIND_PORT": "0", "ROOTFS_MOUNT_DIR": str(rootfs), "LC_DB_PATH": str(tmp_path / f"{node}.db"),
            "LC_DATASET_PERIOD": "0.2", **extra}


@asynccontextmanager
async def local_controller(env: dict[str, str]):
    lc = LocalController(load(env), link_factory=link_factory)
    await lc.start()
    try:
        yield lc, f"http://127.0.0.1:{lc.port}"
    finally:
        await lc.stop()


async def create_fl_example(api) -> None:
    for obj in load_example("federated-learning-surface-defect.yaml"):
        plural = {"Dataset": "datasets", "Model": "models", "FederatedLearningJob": "federatedlearningjobs"}
        await api.create(GVR("sedna.io", "v1alpha1", plural[obj["kind"]]), obj, namespace=NS)


def round_report(rnd: int, *, worker: str = TRAINER) -> dict:
    """What upstream's Python library sends after a federated round (upstream-lc.md §2.6 b)."""
    return {"name": worker, "namespace": NS, "ownerName": JOB, "ownerKind": "default", "kind": "train",
            "status": "running",
            "results": [{"format": "pb", "url": "/model/model.pb",
                         "metrics": {"loss": [round(1 / rnd, 3)], "accuracy": [0.5 + rnd / 100]}}],
            "ownerInfo": {"currentRound": rnd, "sampleCount": 1200, "startTime": "2026-01-01 10:00:00",
                          "updateTime": f"2026-01-01 10:0{rnd}:00"}}


async def post_report(session: aiohttp.ClientSession, base: str, body: dict) -> tuple[int, dict]:
    async with session.post(f"{base}/sedna/workers/{body['name']}/info", json=body) as r:
        return r.status, await r.json(content_type=None)


def job_in_lc_db(path: Path) -> bool:
    """Read the LC's SQLite file as an operator would (the LC keeps running)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT 1 FROM lc_resources WHERE kind = ? AND name = ?",
                            ("FederatedLearningJob", JOB)).fetchone() is not None


def training_condition(dc) -> dict | None:
    rt = dc.store.registry.lookup(group="sedna.io", version="v1alpha1", resource="federatedlearningjobs")
    st = dc.store.get(rt, NS, JOB).get("status") or {}
    return next((c for c in st.get("conditions", []) if c["type"] == "Training"), None)


async def test_worker_report_becomes_cr_status_visible_to_kubectl(start_gm, api, sedna_cluster, tmp_path,
                                                                   kubectl):
    dc = sedna_cluster
    gm = await start_gm()
    await create_fl_example(api)
    (tmp_path / "rootfs-edge-node-1" / "data").mkdir(parents=True)
    (tmp_path / "rootfs-edge-node-1" / "data" / "1.txt").write_text("a.jpg 1\nb.jpg 0\nc.jpg 1\n")
    async with local_controller(lc_env(tmp_path, "edge-node-1", gm.port)) as (lc, base):
        await eventually(lambda: "edge-node-1" in gm.hub.connected_nodes(), within=10, message="LC connected")
        async with aiohttp.ClientSession() as session:
            async def job_on_node():
                return await lc.store.get_resource("FederatedLearningJob", NS, JOB)
            deadline = time.monotonic() + 10
            while await job_on_node() is None:
                assert time.monotonic() < deadline, "job never reached the LC"
                await asyncio.sleep(0.02)
            status, body = await post_report(session, base, round_report(2))
            assert (status, body) == (200, {"Status": 200, "Message": "OK"})
        cond = await eventually(lambda: (c := training_condition(dc)) and "Round 2" in c["message"] and c,
                              within=10, message="round reported")
        assert cond["reason"] == "DoTraining"
        # the Dataset's sample count, counted by the LC's dataset monitor from the node's file
        await eventually(lambda: dc.store.get(dc.store.registry.lookup(
            group="sedna.io", version="v1alpha1", resource="datasets"), NS,
            "edge1-surface-defect-detection-dataset").get("status", {}).get("numberOfSamples") == 3,
            within=10, message="numberOfSamples")
    rc, out, err = await kubectl("get", "fl", JOB, "-o", "json")
    assert rc == 0, err
    conditions = orjson.loads(out)["status"]["conditions"]
    assert any(c["type"] == "Training" and c["message"].startswith("Round 2 reaches at") for c in conditions)
    rc, out, err = await kubectl("get", "dataset", "edge1-surface-defect-detection-dataset",
                                 "-o", "jsonpath={.status.numberOfSamples}")
    assert (rc, out) == (0, "3"), err
    model = dc.store.get(dc.store.registry.lookup(group="sedna.io", version="v1alpha1", resource="models"),
                         NS, "surface-defect-detection-model")
    assert {m["key"] for m in model["status"]["metrics"]} == {"accuracy", "loss"}


async def test_reports_survive_gm_outage_and_lc_sigkill(start_gm, api, sedna_cluster, tmp_path):
    dc = sedna_cluster
    gm_port = free_port()
    websocket = f"{{address: 127.0.0.1, port: {gm_port}}}"
    gm = await start_gm(websocket=websocket)
    await create_fl_example(api)
    lc_port = free_port()
    env = {**os.environ, **lc_env(tmp_path, "edge-node-1", gm_port, BIND_PORT=str(lc_port))}

    async def start_lc(gm):
        """Start `sedna-lc` and wait until its link to `gm` is up (its HTTP API comes first)."""
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "lc.cli", env=env,
                                                    stdout=asyncio.subprocess.DEVNULL,
                                                    stderr=asyncio.subprocess.DEVNULL)
        try:
            await eventually(lambda: "edge-node-1" in gm.hub.connected_nodes(), within=10, message="LC connected")
        except AssertionError:
            proc.kill()
            await proc.wait()
            raise
        return proc

    lc = await start_lc(gm)
    base = f"http://127.0.0.1:{lc_port}"
    try:
        # the LC has the job (snapshot), then the GM goes away
        await eventually(lambda: job_in_lc_db(tmp_path / "edge-node-1.db"), within=10,
                       message="the job stored by the LC")
        await gm.stop()
        latencies = []
        async with aiohttp.ClientSession() as session:
            for rnd in range(1, 6):
                start = time.perf_counter()
                status, _ = await post_report(session, base, round_report(rnd))
                latencies.append(time.perf_counter() - start)
                assert status == 200
        assert max(latencies) < 1.0, latencies  # the worker is never blocked by the GM being away
    finally:
        lc.send_signal(signal.SIGKILL)  # after the 200s: the reports must survive in the outbox
        await lc.wait()
    gm2 = await start_gm(websocket=websocket)
    lc = await start_lc(gm2)
    try:
        await eventually(lambda: (c := training_condition(dc)) and "Round 5" in c["message"], within=15,
                       message="all rounds applied after the outage")
        await eventually(lambda: gm2.hub.stats.status_applied >= 5, within=5)
        await asyncio.sleep(0.3)
        assert gm2.hub.stats.status_applied == 5  # each report applied once, none twice
    finally:
        lc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(lc.wait(), 10)


async def test_lc_cannot_change_a_job_on_another_node(start_gm, api, sedna_cluster, tmp_path):
    dc = sedna_cluster
    gm = await start_gm()
    await create_fl_example(api)
    ds_rt = dc.store.registry.lookup(group="sedna.io", version="v1alpha1", resource="datasets")
    async with local_controller(lc_env(tmp_path, "edge-node-2", gm.port)) as (lc, base):
        await eventually(lambda: "edge-node-2" in gm.hub.connected_nodes(), within=10)
        # edge-node-2 forges a sample count for edge-node-1's dataset
        await lc.store.append_report("Dataset", NS, "edge1-surface-defect-detection-dataset",
                                     {"numberOfSamples": 999})
        await eventually(lambda: gm.hub.stats.refused >= 1, within=10, message="report refused")
        # refused with an error ack: the LC drops it instead of resending forever
        await eventually(lambda: lc.store.outbox_size == 0, within=10, message="outbox drained")
    status = dc.store.get(ds_rt, NS, "edge1-surface-defect-detection-dataset").get("status") or {}
    assert status.get("numberOfSamples") != 999

