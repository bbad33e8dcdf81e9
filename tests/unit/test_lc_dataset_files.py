"""Dataset and model files through a real LC: FIFOs, devices and oversized indexes are refused
and reported, reads end when their Dataset or the LC does, and stored Datasets wait for the GM.

Each case would hang or miscount on an LC that opens index files with a plain `open()`; the
FIFO helpers release any reader such an LC leaves blocked, so the test fails instead of
hanging.
"""

from __future__ import annotations

import asyncio
import os
import stat
import threading
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from lc import files
from lc.app import LocalController
from lc.config import load
from lc.errors import ConfigError, LearningError
from lc.link.apply import DownstreamApplier
from lc.managers.learning.models import copy_model
from lc.managers.learning.samples import read_samples
from lc.store.facade import Store
from tests.conftest import eventually
from tests.learningjobs import LINES, LL, NS, _bodies, _cond, _ll_job, _node_objects
from tests.unit.test_lc_files import CAN_MKNOD, HANG, fifo, finishes, reader_waiting
from tests.unit.test_lc_support import running_lc


def dataset(name: str, url: str, fmt: str = "txt") -> dict:
    return {"kind": "Dataset", "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
            "spec": {"url": url, "format": fmt, "nodeName": "edge-1"}}


async def bodies(lc: LocalController, name: str = "ds") -> list[Any]:
    return [e.body for e in await lc.store.pending() if e.name == name]


async def reported(lc: LocalController, name: str, count: int) -> list[Any] | None:
    found = await bodies(lc, name)
    return found if len(found) >= count else None


def problem(reason: str, message: str, samples: int = 0) -> dict:
    return {"numberOfSamples": samples, "error": {"reason": reason, "message": message}}


def rchar() -> int:
    """Bytes this process has read through read(2) and the like so far."""
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


# ---- configuration ----------------------------------------------------------------------


def test_file_caps_come_from_the_environment() -> None:
    assert load({}).file_limits == files.FileLimits(64 << 20, 1_000_000, 8 << 30)
    assert load({"LC_INDEX_MAX_BYTES": "100", "LC_INDEX_MAX_LINES": "3",
                 "LC_MODEL_MAX_BYTES": "1000"}).file_limits == files.FileLimits(100, 3, 1000)
    with pytest.raises(ConfigError, match="LC_INDEX_MAX_LINES must be at least 1, got '0'"):
        load({"LC_INDEX_MAX_LINES": "0"})
    with pytest.raises(ConfigError, match="LC_MODEL_MAX_BYTES must be a whole number, got '8G'"):
        load({"LC_MODEL_MAX_BYTES": "8G"})


# ---- refused indexes are reported ------------------------------------------------------


async def test_fifo_index_is_refused_and_reported(tmp_path: Path) -> None:
    data = tmp_path / "rootfs" / "data"
    data.mkdir(parents=True)
    with fifo(data / "pipe") as pipe:
        async with running_lc(tmp_path) as (lc, _):
            await lc.apply_upsert("Dataset", NS, "ds", dataset("ds", "/data/pipe"))
            [body] = await eventually(lambda: reported(lc, "ds", 1), message="problem report")
            assert body == problem("NotRegularFile", "index file /data/pipe is a FIFO, not a regular file")
            assert not reader_waiting(pipe)
            state = await lc.store.get_state("Dataset", NS, "ds")
            assert state == {"reported": 0, "uid": "uid-ds", "error": body["error"]}


async def test_seven_fifo_datasets_do_not_stop_other_counts(tmp_path: Path) -> None:
    data = tmp_path / "rootfs" / "data"
    data.mkdir(parents=True)
    (data / "ok.txt").write_text("a\nb\n")
    for i in range(7):
        os.mkfifo(data / f"pipe{i}")
    try:
        async with running_lc(tmp_path) as (lc, _):
            for i in range(7):
                await lc.apply_upsert("Dataset", NS, f"fifo{i}", dataset(f"fifo{i}", f"/data/pipe{i}"))
            await lc.apply_upsert("Dataset", NS, "ok", dataset("ok", "/data/ok.txt"))
            assert await eventually(lambda: reported(lc, "ok", 1), message="the regular count") == [
                {"numberOfSamples": 2}]
    finally:
        assert not any([reader_waiting(data / f"pipe{i}") for i in range(7)])


@pytest.mark.parametrize("device", [
    pytest.param("symlink", id="symlink-to-dev-zero-without-rootfs"),
    pytest.param("mknod", id="char-device-under-rootfs",
                 marks=pytest.mark.skipif(not CAN_MKNOD, reason="mknod needs root")),
])
async def test_character_device_index_is_refused_and_reported(tmp_path: Path, device: str) -> None:
    if device == "symlink":  # the LC on the host (no mount prefix): the user names a link to /dev/zero
        os.symlink("/dev/zero", tmp_path / "zero")
        env, url = {"ROOTFS_MOUNT_DIR": ""}, str(tmp_path / "zero")
    else:
        (tmp_path / "rootfs" / "data").mkdir(parents=True)
        os.mknod(tmp_path / "rootfs" / "data" / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
        env, url = {}, "/data/zero"
    async with running_lc(tmp_path, **env) as (lc, _):
        await lc.apply_upsert("Dataset", NS, "ds", dataset("ds", url))
        [body] = await eventually(lambda: reported(lc, "ds", 1), message="problem report")
    assert body == problem("NotRegularFile", f"index file {url} is a character device, not a regular file")


async def test_index_over_the_byte_cap_is_refused_not_partly_counted(tmp_path: Path) -> None:
    index = tmp_path / "rootfs" / "index.txt"
    index.parent.mkdir(parents=True)
    index.write_bytes(b"a\n" * 8 + b"b")  # 17 bytes
    async with running_lc(tmp_path, LC_INDEX_MAX_BYTES="16") as (lc, _):
        await lc.apply_upsert("Dataset", NS, "ds", dataset("ds", "/index.txt"))
        await eventually(lambda: reported(lc, "ds", 1), message="problem report")
        index.write_bytes(b"a\n" * 8)  # exactly at the cap
        await lc.dispatcher.manager("Dataset").monitor(NS, "ds").scan_once()
        assert await bodies(lc) == [
            problem("TooLarge", "index file /index.txt is 17 bytes, over the limit of 16 bytes"),
            {"numberOfSamples": 8}]


async def test_index_over_the_line_cap_is_refused_not_partly_counted(tmp_path: Path) -> None:
    index = tmp_path / "rootfs" / "index.csv"
    index.parent.mkdir(parents=True)
    index.write_text("path,label\na,1\nb,0\nc,1")  # 4 lines, the last unterminated
    async with running_lc(tmp_path, LC_INDEX_MAX_LINES="3") as (lc, _):
        await lc.apply_upsert("Dataset", NS, "ds", dataset("ds", "/index.csv", "csv"))
        await eventually(lambda: reported(lc, "ds", 1), message="problem report")
        index.write_text("path,label\na,1\nb,0\n")
        await lc.dispatcher.manager("Dataset").monitor(NS, "ds").scan_once()
        assert await bodies(lc) == [
            problem("TooManyLines", "index file /index.csv has more than 3 lines"),
            {"numberOfSamples": 2}]


async def test_sparse_gigabyte_index_is_refused_by_its_size_without_reading_it(tmp_path: Path) -> None:
    index = tmp_path / "rootfs" / "sparse"
    index.parent.mkdir(parents=True)
    index.touch()
    os.truncate(index, 1 << 30)
    async with running_lc(tmp_path) as (lc, _):
        before = rchar()
        await lc.apply_upsert("Dataset", NS, "ds", dataset("ds", "/sparse"))
        [body] = await eventually(lambda: reported(lc, "ds", 1), message="problem report")
        assert rchar() - before < 16 << 20  # the LC's own reads (SQLite, HTTP), not the file
    assert body == problem("TooLarge", f"index file /sparse is {1 << 30} bytes, over the limit of {64 << 20} bytes")


async def test_a_count_after_a_problem_is_reported_even_if_unchanged(tmp_path: Path) -> None:
    data = tmp_path / "rootfs" / "data"
    data.mkdir(parents=True)
    index = data / "index"
    index.write_text("a\n")
    async with running_lc(tmp_path) as (lc, _):
        await lc.apply_upsert("Dataset", NS, "ds", dataset("ds", "/data/index"))
        await eventually(lambda: reported(lc, "ds", 1), message="first count")
        monitor = lc.dispatcher.manager("Dataset").monitor(NS, "ds")
        index.unlink()
        await monitor.scan_once()  # missing, as before its data arrives: logged only
        os.mkfifo(index)
        await monitor.scan_once()
        await monitor.scan_once()  # the same problem is reported once
        index.unlink()
        await monitor.scan_once()  # now missing in place of the FIFO: that is reported
        index.write_text("a\n")
        await monitor.scan_once()  # same count as before, but it clears the problem
        await monitor.scan_once()
        assert await bodies(lc) == [
            {"numberOfSamples": 1},
            problem("NotRegularFile", "index file /data/index is a FIFO, not a regular file", samples=1),
            problem("NotFound", "index file /data/index does not exist", samples=1),
            {"numberOfSamples": 1}]
        assert await lc.store.get_state("Dataset", NS, "ds") == {"reported": 1, "uid": "uid-ds"}


# ---- reads end with their Dataset and with the LC --------------------------------------


class HeldRead:
    """Makes every chunk read wait until released: a read in progress, for as long as needed."""

    def __init__(self) -> None:
        self.reading = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, fd: int, n: int) -> bytes:
        self.calls += 1
        self.reading.set()
        self.release.wait(HANG)
        return os.read(fd, n)


def scan_thread(key: str) -> threading.Thread:
    [thread] = [t for t in threading.enumerate() if t.name == f"dataset-scan:{key}"]
    return thread


@pytest.fixture
def held_read(monkeypatch) -> Iterable[HeldRead]:
    held = HeldRead()
    monkeypatch.setattr(files, "_read", held)
    try:
        yield held
    finally:
        held.release.set()


async def test_deleting_a_dataset_ends_its_read_after_the_chunk_in_progress(tmp_path: Path, held_read) -> None:
    index = tmp_path / "rootfs" / "index.txt"
    index.parent.mkdir(parents=True)
    index.write_bytes(b"sample\n" * (files.CHUNK // 2))  # several chunks
    async with running_lc(tmp_path) as (lc, _):
        await lc.apply_upsert("Dataset", NS, "ds", dataset("ds", "/index.txt"))
        assert await asyncio.to_thread(held_read.reading.wait, HANG)
        thread = scan_thread(f"{NS}/ds")
        async with asyncio.timeout(HANG):
            await lc.apply_delete("Dataset", NS, "ds")  # returns while the chunk is still read
        assert thread.is_alive()
        held_read.release.set()
        await asyncio.to_thread(thread.join, HANG)
        assert not thread.is_alive()
        assert held_read.calls == 1  # no chunk after the one in progress
        assert await bodies(lc) == []


async def test_lc_stop_is_bounded_while_a_read_is_in_progress(tmp_path: Path, held_read) -> None:
    index = tmp_path / "rootfs" / "index.txt"
    index.parent.mkdir(parents=True)
    index.write_bytes(b"sample\n" * 3)
    async with running_lc(tmp_path) as (lc, _):
        await lc.apply_upsert("Dataset", NS, "ds", dataset("ds", "/index.txt"))
        assert await asyncio.to_thread(held_read.reading.wait, HANG)
        thread = scan_thread(f"{NS}/ds")
        async with asyncio.timeout(HANG):
            await lc.stop()  # the read never returns until released: stop must not wait for it
        assert thread.is_alive() and thread.daemon


# ---- stored Datasets wait for the GM ---------------------------------------------------


class IdleLink:
    """A GM link that never connects: nothing confirms the stored objects."""

    state = "connecting"

    async def run(self) -> None:
        await asyncio.Event().wait()


@asynccontextmanager
async def lc_with_link(tmp_path: Path) -> AsyncIterator[LocalController]:
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir(exist_ok=True)
    config = load({"ROOTFS_MOUNT_DIR": str(rootfs), "LC_DB_PATH": str(tmp_path / "lc.db"),
                   "BIND_PORT": "0", "BIND_ADDRESS": "127.0.0.1"})
    lc = LocalController(config, link_factory=lambda _: IdleLink())
    await lc.start()
    try:
        yield lc
    finally:
        await lc.stop()


async def store_datasets(tmp_path: Path, *objects: dict) -> None:
    """What an earlier run of the LC left in its store."""
    store = await Store.open(str(tmp_path / "lc.db"))
    try:
        for obj in objects:
            await store.put_resource("Dataset", NS, obj["metadata"]["name"], obj)
    finally:
        await store.close()


async def test_stored_fifo_dataset_is_not_opened_before_the_snapshot(tmp_path: Path) -> None:
    data = tmp_path / "rootfs" / "data"
    data.mkdir(parents=True)
    (data / "ok.txt").write_text("a\n")
    with fifo(data / "pipe") as pipe:
        await store_datasets(tmp_path, dataset("gone", "/data/pipe"))
        async with lc_with_link(tmp_path) as lc:
            await lc.apply_upsert("Dataset", NS, "ok", dataset("ok", "/data/ok.txt"))  # confirmed
            await eventually(lambda: reported(lc, "ok", 1), message="the confirmed dataset's count")
            held = lc.dispatcher.manager("Dataset").monitor(NS, "gone")
            assert held is not None and held.scans == 0  # kept, not scanned
            assert not reader_waiting(pipe)
            await lc.apply_snapshot([("Dataset", NS, "ok", dataset("ok", "/data/ok.txt"))])
            assert lc.dispatcher.manager("Dataset").monitor(NS, "gone") is None
            assert [r[2] for r in await lc.store.list_resources()] == ["ok"]
            assert held.scans == 0 and await bodies(lc, "gone") == []


async def test_stored_dataset_is_counted_once_a_swept_snapshot_keeps_it(tmp_path: Path) -> None:
    (tmp_path / "rootfs" / "data").mkdir(parents=True)
    (tmp_path / "rootfs" / "data" / "kept.txt").write_text("a\nb\n")
    await store_datasets(tmp_path, dataset("kept", "/data/kept.txt"))
    async with lc_with_link(tmp_path) as lc:
        monitor = lc.dispatcher.manager("Dataset").monitor(NS, "kept")
        assert monitor is not None and monitor.scans == 0

        async def stored_keys() -> list[tuple[str, str, str]]:
            return [(k, ns, n) for k, ns, n, _ in await lc.store.list_resources()]

        applier = DownstreamApplier(lc, stored_keys)  # the link's applier, as after a reconnect
        task = asyncio.create_task(applier.run(), name="test-applier")
        try:
            applier.sweep([("Dataset", NS, "kept")])  # a snapshot that names it, and nothing new
            assert await eventually(lambda: reported(lc, "kept", 1), message="count after the snapshot") == [
                {"numberOfSamples": 2}]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


# ---- learning jobs -----------------------------------------------------------------------


def test_learning_reads_and_copies_only_regular_files_within_caps(tmp_path: Path) -> None:
    zero, big, out = tmp_path / "zero", tmp_path / "big.pkl", tmp_path / "out" / "m"
    os.symlink("/dev/zero", zero)  # no mount prefix (""): paths are the host's
    big.write_bytes(b"m" * 11)
    with fifo(tmp_path / "pipe") as pipe:
        with pytest.raises(LearningError, match=f"index file {pipe} is a FIFO, not a regular file"):
            finishes(lambda: read_samples(dataset("ds", str(pipe)), ""))
        assert not reader_waiting(pipe)
        with pytest.raises(LearningError, match=f"cannot copy model {zero} to {out}: model {zero} is a "
                                                "character device, not a regular file"):
            finishes(lambda: copy_model(str(zero), str(out), ""))
        with pytest.raises(LearningError, match=f"model {big} is 11 bytes, over the limit of 10 bytes"):
            copy_model(str(big), str(out), "", caps=files.Caps(10))
    assert not out.exists()


@pytest.mark.parametrize("model", [
    pytest.param("oversized", id="over-the-model-cap"),
    pytest.param("char-device", id="char-device",
                 marks=pytest.mark.skipif(not CAN_MKNOD, reason="mknod needs root")),
])
async def test_ll_deploy_of_a_model_it_must_not_copy_fails_the_stage(tmp_path: Path, model: str) -> None:
    rootfs = tmp_path / "rootfs"
    path = rootfs / "ll-out/eval/1/index.pkl"
    path.parent.mkdir(parents=True)
    if model == "oversized":
        path.write_bytes(b"12345")
    else:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    history = [_cond("Train", "Completed", 1, [{"format": "pkl", "url": "/t"}]),
               _cond("Eval", "Completed", 3, [{"format": "pkl", "url": "/ll-out/eval/1/index.pkl"}]),
               _cond("Deploy", "Waiting", 4)]
    async with running_lc(tmp_path, LC_MODEL_MAX_BYTES="4") as (lc, _):
        await _node_objects(lc, rootfs, lines=LINES)
        await lc.apply_upsert(LL, NS, "ll", _ll_job(history))
        [body] = await _bodies(lc, 1)
    refused = "is 5 bytes, over the limit of 4 bytes" if model == "oversized" else "not a regular file"
    assert {k: body[k] for k in ("phase", "status", "output", "reason")} == {
        "phase": "Deploy", "status": "Failed", "output": None, "reason": "StageFailed"}
    assert refused in body["message"], body["message"]
    assert not (rootfs / "ll-out/deploy/index.pkl").exists()
