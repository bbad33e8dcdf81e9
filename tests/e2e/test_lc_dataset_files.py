"""Dataset index files end to end: a FIFO index shows on the Dataset (condition and Event)
through a real LC, GM and dev cluster; `sedna-lc` stops on SIGTERM whatever its threads do.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from pathlib import Path

import orjson

from gm.kube.resources import EVENTS, sedna_gvr
from lc.store.facade import Store
from shared import apis
from tests.conftest import eventually
from tests.e2e.test_system import NS, lc_env, local_controller
from tests.unit.test_lc_files import fifo, reader_waiting

ROOT = Path(__file__).resolve().parents[2]
NODE = "edge-node-1"
DATASETS = sedna_gvr(apis.DATASET)
EXIT_WITHIN = 60.0  # generous: STOP_TIMEOUT + EXIT_GRACE; a hung LC never exits at all


def dataset(name: str, url: str) -> dict:
    return {"apiVersion": "sedna.io/v1alpha1", "kind": "Dataset",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"url": url, "format": "txt", "nodeName": NODE}}


def index_condition(dc, name: str) -> dict | None:
    rt = dc.store.registry.lookup(group="sedna.io", version="v1alpha1", resource="datasets")
    status = dc.store.get(rt, NS, name).get("status") or {}
    return next((c for c in status.get("conditions", []) if c["type"] == "IndexReadable"), None)


async def test_a_fifo_index_becomes_a_condition_and_a_warning_event(start_gm, api, sedna_cluster, tmp_path):
    dc = sedna_cluster
    gm = await start_gm()
    data = tmp_path / f"rootfs-{NODE}" / "data"
    data.mkdir(parents=True)
    with fifo(data / "index"):
        await api.create(DATASETS, dataset("pipe", "/data/index"), namespace=NS)
        async with local_controller(lc_env(tmp_path, NODE, gm.port)):
            cond = await eventually(lambda: index_condition(dc, "pipe"), within=15, message="condition")
            assert {k: cond[k] for k in ("status", "reason", "message")} == {
                "status": "False", "reason": "NotRegularFile",
                "message": "index file /data/index is a FIFO, not a regular file"}
            [warning] = await eventually(lambda: _events(api, "pipe"), within=10, message="event")
            assert (warning["type"], warning["reason"], warning["involvedObject"]["kind"]) == (
                "Warning", "NotRegularFile", "Dataset")
            assert warning["message"] == cond["message"]
            assert not reader_waiting(data / "index")
            (data / "index").unlink()
            (data / "index").write_text("a\nb\n")  # fixed: counted at the next period (0.2 s)
            await eventually(lambda: (c := index_condition(dc, "pipe")) and c["status"] == "True",
                             within=15, message="condition cleared")
    rt = dc.store.registry.lookup(group="sedna.io", version="v1alpha1", resource="datasets")
    assert dc.store.get(rt, NS, "pipe")["status"]["numberOfSamples"] == 2


async def _events(api, name: str) -> list[dict]:
    items, _ = await api.list_all(EVENTS, namespace=NS, field_selector=f"involvedObject.name={name}")
    return items


# ---- sedna-lc stops on SIGTERM ---------------------------------------------------------


async def start_lc(tmp_path: Path, *, script: str | None = None) -> asyncio.subprocess.Process:
    """`sedna-lc` (or `script`, which ends by running it) without a GM, once it serves."""
    env = {**os.environ, "ROOTFS_MOUNT_DIR": str(tmp_path / "rootfs"), "LC_DB_PATH": str(tmp_path / "lc.db"),
           "BIND_PORT": "0", "BIND_ADDRESS": "127.0.0.1", "LOG_FORMAT": "json", "GM_ADDRESS": ""}
    args = ["-c", script] if script else ["-m", "lc.cli"]
    proc = await asyncio.create_subprocess_exec(sys.executable, *args, cwd=ROOT, env=env,
                                                stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    async with asyncio.timeout(30):
        while line := await proc.stderr.readline():
            if orjson.loads(line)["msg"] == "serving":
                return proc
    raise AssertionError(f"sedna-lc exited with {await proc.wait()} before serving")


async def stop_lc(proc: asyncio.subprocess.Process) -> tuple[int | None, list[str]]:
    """SIGTERM, then the exit code within EXIT_WITHIN (None: still running, then killed) and
    the messages it logged meanwhile."""
    proc.send_signal(signal.SIGTERM)
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(EXIT_WITHIN):
            rest = await proc.stderr.read()
            code: int | None = await proc.wait()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None, []
    return code, [orjson.loads(line)["msg"] for line in rest.splitlines() if line.startswith(b"{")]


async def test_sigterm_stops_an_lc_that_resumed_fifo_datasets(tmp_path: Path) -> None:
    data = tmp_path / "rootfs" / "data"
    data.mkdir(parents=True)
    store = await Store.open(str(tmp_path / "lc.db"))
    try:
        for i in range(7):  # what the issue saw: every thread of the default pool in open()
            os.mkfifo(data / f"pipe{i}")
            await store.put_resource("Dataset", NS, f"d{i}", dataset(f"d{i}", f"/data/pipe{i}"))
    finally:
        await store.close()
    proc = await start_lc(tmp_path)
    code, messages = await stop_lc(proc)
    assert not any([reader_waiting(data / f"pipe{i}") for i in range(7)])
    assert code == 0
    assert messages[-1] == "stopped"


STUCK_THREAD = textwrap.dedent("""
    import sys, threading
    from lc import cli
    # a thread stuck in the kernel (a read from a hung network mount) is not joinable
    threading.Thread(target=threading.Event().wait, name="stuck-read").start()
    cli.EXIT_GRACE = 0.5  # waited out for it (5 s by default)
    sys.exit(cli.main([]))
""")


async def test_sigterm_exits_even_with_a_thread_stuck_in_a_system_call(tmp_path: Path) -> None:
    (tmp_path / "rootfs").mkdir()
    proc = await start_lc(tmp_path, script=STUCK_THREAD)
    code, messages = await stop_lc(proc)
    assert code == 0
    assert messages[-2:] == ["stopped", "threads still busy at exit, exiting without them"]
