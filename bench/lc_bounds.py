"""Benchmark: what hostile input costs one LC in memory, disk and CPU.

Starts `sedna-lc` as a subprocess (temporary DB, ephemeral port, no GM) and:

1. posts N reports of about 1 MB, each from a new worker of an owner that does not exist
   (ownerKind "default", as the federated-learning library sends, or another with
   --owner-kind), and counts the answers;
2. lists `GET /sedna/workers` to the end, page by page (following `metadata.continue`
   where the LC pages; one response where it does not), and `GET /sedna/deadletters`;
3. sends a gzip body of 1 MB that inflates to --bomb-gib GiB over a raw socket and measures
   the LC's CPU time from the refusal until the LC closes the connection, and how long
   `GET /healthz` takes meanwhile.

Then, each against a fresh `sedna-lc`:

4. for each level of --concurrent, that many reports of --size bytes posted at once, each on
   its own connection (of owners that do not exist, ownerKind --owner-kind as in step 1):
   the answers and the LC's peak RSS;
5. --outbox reports of --size bytes with `ownerKind: jointinferenceservice` (routed to a job
   kind, so kept in the outbox for the GM, and no GM to take them), one after the other:
   the answers and the database's size on disk.

It prints the LC's peak RSS (VmHWM) after each step and the database's size on disk.
Not a test: figures depend on the machine; record them in docs, never assert them.

    .venv/bin/python bench/lc_bounds.py [--reports 64] [--size 1000000] [--bomb-gib 1]
        [--owner-kind default] [--concurrent 64,256] [--outbox 128] [--env NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
HEADERS = {"Content-Type": "application/json"}
TICK = os.sysconf("SC_CLK_TCK")


async def start_lc(db: Path, extra: dict[str, str]) -> tuple[asyncio.subprocess.Process, int]:
    env = {**os.environ, "ROOTFS_MOUNT_DIR": "", "LC_DB_PATH": str(db), "BIND_PORT": "0",
           "BIND_ADDRESS": "127.0.0.1", "LOG_FORMAT": "json", "LOG_LEVEL": "info",
           "GM_ADDRESS": "", **extra}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lc.cli", cwd=ROOT, env=env, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    async with asyncio.timeout(60):
        while line := await proc.stderr.readline():
            if line.startswith(b"{") and json.loads(line).get("msg") == "serving":
                port = int(json.loads(line)["port"])
                break
        else:
            raise RuntimeError("sedna-lc did not start")
    asyncio.get_running_loop().create_task(_drain(proc.stderr))
    return proc, port


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def disk_mib(db: Path) -> str:
    sizes = {suffix: (db.parent / (db.name + suffix)).stat().st_size
             for suffix in ("", "-wal") if (db.parent / (db.name + suffix)).exists()}
    return ", ".join(f"{db.name}{s}: {n / 2**20:.1f} MiB" for s, n in sizes.items())


def report_body(i: int, size: int, owner_kind: str) -> bytes:
    """A report of about `size` bytes from worker w-<i> of owner nobody-<i>."""
    return json.dumps({"name": f"w-{i}", "namespace": "default", "ownerName": f"nobody-{i}",
                       "ownerKind": owner_kind, "kind": "train",
                       "ownerInfo": {"pad": "x" * size}}).encode()


async def post_reports(base: str, count: int, size: int, owner_kind: str) -> dict[int, int]:
    """Post `count` reports one after the other; how many got each status."""
    statuses: dict[int, int] = {}
    async with aiohttp.ClientSession() as http:
        for i in range(count):
            async with http.post(f"{base}/sedna/workers/w-{i}/info",
                                 data=report_body(i, size, owner_kind), headers=HEADERS) as resp:
                await resp.read()
                statuses[resp.status] = statuses.get(resp.status, 0) + 1
    return statuses


async def post_at_once(base: str, count: int, size: int, owner_kind: str) -> dict[int | str, int]:
    """Post `count` reports at once, each on a connection of its own; how many got each
    status (or which error)."""
    bodies = [report_body(i, size, owner_kind) for i in range(count)]
    start = asyncio.Event()

    async def one(http: aiohttp.ClientSession, i: int) -> int | str:
        await start.wait()
        try:
            async with http.post(f"{base}/sedna/workers/w-{i}/info", data=bodies[i],
                                 headers=HEADERS) as resp:
                await resp.read()
                return resp.status
        except aiohttp.ClientError as exc:  # a refusal may close before the body is sent
            return type(exc).__name__

    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=120)) as http:
        posts = [asyncio.create_task(one(http, i)) for i in range(count)]
        await asyncio.sleep(0)
        start.set()
        results = await asyncio.gather(*posts)
    statuses: dict[int | str, int] = {}
    for result in results:
        statuses[result] = statuses.get(result, 0) + 1
    return statuses


async def list_all(base: str, path: str, key: str) -> tuple[int, int, int, int]:
    """(items, pages, bytes of the largest page, bytes in all) of a paged listing."""
    items = pages = largest = total = 0
    token = ""
    async with aiohttp.ClientSession() as http:
        while True:
            query = {"continue": token} if token else {}
            async with http.get(base + path, params=query) as resp:
                raw = await resp.read()
            doc = json.loads(raw)
            pages += 1
            items += len(doc[key])
            largest, total = max(largest, len(raw)), total + len(raw)
            token = (doc.get("metadata") or {}).get("continue") or ""
            if not token:
                return items, pages, largest, total


def gzip_bomb(gib: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    parts = [packer.compress(zeros) for _ in range(gib << 10)]
    return b"".join(parts) + packer.flush()


async def bomb(port: int, pid: int, gib: int) -> None:
    body = gzip_bomb(gib)
    head = (f"POST /sedna/workers/w/info HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            f"\r\nContent-Encoding: gzip\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head + body)
    status = await reader.readline()
    refused_at, cpu_at_refusal = time.perf_counter(), cpu_seconds(pid)
    stop = asyncio.Event()
    health = asyncio.create_task(_healthz_worst(port, stop))
    try:
        async with asyncio.timeout(30):
            while await reader.read(65536):
                pass
        closed = f"{time.perf_counter() - refused_at:.2f} s after the reply"
    except (ConnectionResetError, TimeoutError) as exc:
        closed = f"{type(exc).__name__} after {time.perf_counter() - refused_at:.2f} s"
    finally:
        writer.close()
    await asyncio.sleep(1.0)  # whatever the LC still does after the close shows here
    cpu_after = cpu_seconds(pid) - cpu_at_refusal
    stop.set()
    worst = await health
    print(f"gzip bomb: {len(body)} bytes inflating to {gib} GiB: {status.decode().strip()!r}; "
          f"connection closed {closed}; LC CPU from the reply to 1 s after the close: "
          f"{cpu_after:.2f} s; slowest /healthz meanwhile {worst * 1000:.0f} ms")


async def _healthz_worst(port: int, stop: asyncio.Event) -> float:
    worst = 0.0
    async with aiohttp.ClientSession() as http:
        while not stop.is_set():
            started = time.perf_counter()
            async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                await resp.read()
            worst = max(worst, time.perf_counter() - started)
            await asyncio.sleep(0.02)
    return worst


@contextlib.asynccontextmanager
async def running_lc(extra: dict[str, str]) -> AsyncIterator[tuple[int, str, Path]]:
    """A fresh `sedna-lc` on a temporary database: (pid, base URL, database path)."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "lc.db"
        proc, port = await start_lc(db, extra)
        try:
            yield proc.pid, f"http://127.0.0.1:{port}", db
        finally:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()


def peak_mib(pid: int) -> str:
    return f"{status_kib(pid, 'VmHWM') / 1024:.0f} MiB"


async def storage(args: argparse.Namespace, extra: dict[str, str]) -> None:
    """Steps 1 to 3: reports of owners that do not exist, the listings, the gzip bomb."""
    async with running_lc(extra) as (pid, base, db):
        print(f"LC started: RSS {status_kib(pid, 'VmRSS') / 1024:.0f} MiB")
        started = time.perf_counter()
        statuses = await post_reports(base, args.reports, args.size, args.owner_kind)
        print(f"{args.reports} reports of {args.size} bytes for owners that do not exist "
              f"(ownerKind {args.owner_kind!r}) in {time.perf_counter() - started:.1f} s: "
              f"{statuses}; peak RSS {peak_mib(pid)}; {disk_mib(db)}")
        for path, key in (("/sedna/workers", "workers"), ("/sedna/deadletters", "deadLetters")):
            started = time.perf_counter()
            items, pages, largest, total = await list_all(base, path, key)
            print(f"GET {path} to the end: {items} items in {pages} pages, largest page "
                  f"{largest / 2**20:.2f} MiB, {total / 2**20:.2f} MiB in all, "
                  f"{time.perf_counter() - started:.2f} s; peak RSS {peak_mib(pid)}")
        await bomb(int(base.rsplit(":", 1)[1]), pid, args.bomb_gib)
        print(f"end: peak RSS {peak_mib(pid)}, RSS now "
              f"{status_kib(pid, 'VmRSS') / 1024:.0f} MiB; {disk_mib(db)}")


async def concurrency(args: argparse.Namespace, extra: dict[str, str]) -> None:
    """Step 4: bodies posted at once, one fresh LC per level."""
    for level in args.concurrent:
        async with running_lc(extra) as (pid, base, db):
            started = time.perf_counter()
            statuses = await post_at_once(base, level, args.size, args.owner_kind)
            print(f"{level} reports of {args.size} bytes at once: {statuses} in "
                  f"{time.perf_counter() - started:.1f} s; peak RSS {peak_mib(pid)}")


async def outbox(args: argparse.Namespace, extra: dict[str, str]) -> None:
    """Step 5: reports kept for a GM that is not there."""
    async with running_lc(extra) as (pid, base, db):
        started = time.perf_counter()
        statuses = await post_reports(base, args.outbox, args.size, "jointinferenceservice")
        print(f"{args.outbox} reports of {args.size} bytes for the GM (ownerKind "
              f"'jointinferenceservice'), no GM, in {time.perf_counter() - started:.1f} s: "
              f"{statuses}; peak RSS {peak_mib(pid)}; {disk_mib(db)}")


async def main(args: argparse.Namespace) -> None:
    extra = dict(item.split("=", 1) for item in args.env)
    if extra:
        print(f"LC environment: {extra}")
    if args.reports:
        await storage(args, extra)
    await concurrency(args, extra)
    if args.outbox:
        await outbox(args, extra)


def _levels(text: str) -> list[int]:
    return [int(level) for level in text.split(",") if level]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reports", type=int, default=64, help="steps 1-3 (0: skip them)")
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--owner-kind", default="default")
    parser.add_argument("--bomb-gib", type=int, default=1)
    parser.add_argument("--concurrent", type=_levels, default=[64, 256],
                        help="comma-separated numbers of reports posted at once")
    parser.add_argument("--outbox", type=int, default=128,
                        help="reports for the GM to post with no GM (0: skip)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="extra environment for sedna-lc (repeatable)")
    asyncio.run(main(parser.parse_args()))
