"""A real `sedna-lc` process under input meant to exhaust it: its memory stays within the
Helm chart's limit (big reports one after the other, and hundreds at once), its database
within its byte caps (for reports of owners that do not exist, and for reports kept for a
GM that is not there), and a refused gzip bomb costs it next to no CPU after the refusal.

Memory and CPU are read from /proc/<pid> of the LC process (peak RSS is VmHWM); the
bounds asserted are the chart's limit and a fraction of what inflating the whole bomb
costs, not timings.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests.scrape import value

ROOT = Path(__file__).resolve().parents[2]
TICK = os.sysconf("SC_CLK_TCK")


def chart_lc_memory_limit() -> int:
    """The LC container's memory limit in charts/sedna/values.yaml, in bytes."""
    values = yaml.safe_load((ROOT / "charts" / "sedna" / "values.yaml").read_text())
    limit = values["lc"]["resources"]["limits"]["memory"]
    assert limit.endswith("Mi"), limit
    return int(limit[:-2]) << 20


@pytest.fixture
async def lc_process(tmp_path: Path) -> AsyncIterator[tuple[int, int]]:
    """A `sedna-lc` subprocess without a GM: (pid, port)."""
    env = {**os.environ, "ROOTFS_MOUNT_DIR": "", "LC_DB_PATH": str(tmp_path / "lc.db"),
           "BIND_PORT": "0", "BIND_ADDRESS": "127.0.0.1", "LOG_FORMAT": "json",
           "GM_ADDRESS": "", "LC_DB_SYNCHRONOUS": "NORMAL"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lc.cli", cwd=ROOT, env=env, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    drain = None
    try:
        async with asyncio.timeout(30):
            while line := await proc.stderr.readline():
                record = json.loads(line)
                if record["msg"] == "serving":
                    port = int(record["port"])
                    break
            else:
                raise AssertionError(f"sedna-lc exited with {await proc.wait()} before serving")
        drain = asyncio.create_task(_drain(proc.stderr))
        yield proc.pid, port
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        assert await proc.wait() in (0, -signal.SIGTERM)
        if drain is not None:
            await drain


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) << 10
    raise AssertionError("no VmHWM")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))


async def _list_all(http: aiohttp.ClientSession, url: str, key: str) -> tuple[int, int]:
    """(items, bytes of the largest page) of a listing read to its end."""
    items = largest = 0
    token = ""
    while True:
        async with http.get(url, params={"limit": "1000", **({"continue": token} if token
                                                              else {})}) as resp:
            assert resp.status == 200
            raw = await resp.read()
        doc = json.loads(raw)
        items, largest = items + len(doc[key]), max(largest, len(raw))
        token = doc["metadata"].get("continue", "")
        if not token:
            return items, largest


async def test_big_reports_for_unknown_owners_stay_within_the_chart_memory_limit(
        lc_process: tuple[int, int], tmp_path: Path) -> None:
    pid, port = lc_process
    base = f"http://127.0.0.1:{port}"
    async with session() as http:
        for i in range(64):  # 64 MB from new workers of owners that do not exist
            body = {"name": f"w-{i}", "namespace": "default", "ownerName": f"nobody-{i}",
                    "ownerKind": "default", "kind": "train", "ownerInfo": {"pad": "x" * 1_000_000}}
            async with http.post(f"{base}/sedna/workers/w-{i}/info", json=body) as resp:
                assert resp.status == 200
        listed, largest = await _list_all(http, base + "/sedna/workers", "workers")
        await _list_all(http, base + "/sedna/deadletters", "deadLetters")
        async with http.get(base + "/metrics") as resp:
            metrics = await resp.text()
    # 16 MiB of unknown owners' reports by default: 16 of them, the others dropped
    assert listed == 16
    assert value(metrics, "sedna_lc_store_dropped_total", record="unknown_owner") == 64 - listed
    assert largest < 5 << 20  # a page is bounded whatever its limit
    assert peak_rss(pid) < chart_lc_memory_limit()
    assert size_on_disk(tmp_path) < 32 << 20  # 16 MiB of reports, the WAL and free pages


def size_on_disk(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("lc.db*"))


def _gzip_zeros(mib: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    return b"".join(packer.compress(zeros) for _ in range(mib)) + packer.flush()


async def test_a_refused_gzip_bomb_is_not_inflated_further(lc_process: tuple[int, int]) -> None:
    pid, port = lc_process
    bomb = await asyncio.to_thread(_gzip_zeros, 1024)  # 1 MB that inflates to 1 GiB
    assert len(bomb) < 1 << 20
    inflate = zlib.decompressobj(31)
    cpu = os.times()
    rest = bomb
    while rest:  # what inflating all of it costs on this machine, for scale
        inflate.decompress(rest, 1 << 20)
        rest = inflate.unconsumed_tail
    whole = os.times().user - cpu.user + os.times().system - cpu.system

    head = (f"POST /sedna/workers/w/info HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            f"\r\nContent-Encoding: gzip\r\nContent-Length: {len(bomb)}\r\n\r\n").encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + bomb)
        async with asyncio.timeout(30):
            status = await reader.readline()
            at_refusal = cpu_seconds(pid)
            try:
                while await reader.read(65536):
                    pass
            except ConnectionResetError:
                pass  # closed with the rest of the bomb unread
    finally:
        writer.close()
    async with session() as http, http.get(f"http://127.0.0.1:{port}/healthz") as resp:
        assert resp.status == 200
    after = cpu_seconds(pid) - at_refusal
    assert status.startswith(b"HTTP/1.1 413")
    assert after < whole / 4, (after, whole)


def _report(i: int, owner_kind: str) -> bytes:
    return json.dumps({"name": f"w-{i}", "namespace": "default", "ownerName": f"nobody-{i}",
                       "ownerKind": owner_kind, "kind": "inference",
                       "ownerInfo": {"pad": "x" * 1_000_000}}).encode()


async def _post_at_once(base: str, count: int, owner_kind: str) -> list[int | str]:
    """Post `count` reports of 1 MB at once, each on a connection of its own: the status of
    each, or the error of a connection the LC closed before the body was all sent."""
    bodies = [_report(i, owner_kind) for i in range(count)]
    go = asyncio.Event()

    async def one(http: aiohttp.ClientSession, i: int) -> int | str:
        await go.wait()
        try:
            async with http.post(f"{base}/sedna/workers/w-{i}/info", data=bodies[i],
                                 headers={"Content-Type": "application/json"}) as resp:
                await resp.read()
                assert resp.status == 200 or resp.headers["Retry-After"] == "1"
                return resp.status
        except aiohttp.ClientError as exc:
            return type(exc).__name__

    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=120)) as http:
        posts = [asyncio.create_task(one(http, i)) for i in range(count)]
        go.set()
        return await asyncio.gather(*posts)


@pytest.mark.parametrize("owner_kind", [
    pytest.param("default", id="unknown-owners"),
    pytest.param("jointinferenceservice", id="relayed-to-the-gm"),
])
async def test_hundreds_of_big_reports_at_once_stay_within_the_chart_memory_limit(
        lc_process: tuple[int, int], owner_kind: str) -> None:
    pid, port = lc_process
    answers = await _post_at_once(f"http://127.0.0.1:{port}", 256, owner_kind)
    # 256 MB of bodies at once: what fits the body budget is served, the rest told to retry
    assert set(answers) <= {200, 503, "ClientOSError", "ServerDisconnectedError"}, answers
    assert 200 in answers
    assert peak_rss(pid) < chart_lc_memory_limit()


async def test_reports_for_a_gm_that_is_not_there_stay_within_the_outbox_cap(
        lc_process: tuple[int, int], tmp_path: Path) -> None:
    pid, port = lc_process
    base = f"http://127.0.0.1:{port}"
    answers: dict[int, int] = {}
    async with session() as http:
        for i in range(128):  # 128 MB for jobs this node does not hold, and no GM
            async with http.post(f"{base}/sedna/workers/w-{i}/info",
                                 data=_report(i, "jointinferenceservice"),
                                 headers={"Content-Type": "application/json"}) as resp:
                await resp.read()
                answers[resp.status] = answers.get(resp.status, 0) + 1
                if resp.status == 503:
                    assert resp.headers["Retry-After"] == "3"
        async with http.get(base + "/metrics") as resp:
            metrics = await resp.text()
    assert set(answers) == {200, 503}
    assert value(metrics, "sedna_lc_reports_rejected_total", reason="outbox_full") == answers[503]
    held = value(metrics, "sedna_lc_outbox_bytes")
    assert held is not None and answers[200] * 1_000_000 < held <= 64 << 20
    # 64 MiB of reports for the GM and 16 MiB of worker records by default, the WAL, pages
    assert size_on_disk(tmp_path) < 96 << 20
    assert peak_rss(pid) < chart_lc_memory_limit()
