"""Benchmark: worker reports per second one LC accepts with a durable commit.

Starts `sedna-lc` as a subprocess (temporary DB, ephemeral port) and, for comparison, a
bare aiohttp server whose handler answers the same 200 without doing anything. A client
process posts upstream's joint-inference stats body from N concurrent connections for a
fixed number of reports and prints reports/s with p50/p99 latency. Not a test: figures
depend on the machine's disk (fsync) and cores; record them in docs, never assert them.

    .venv/bin/python bench/lc_reports.py [--reports 3000] [--concurrency 1 16 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
BODY = {"name": "edgeworker-4kq7z", "namespace": "default", "ownerName": "sedna",
        "ownerKind": "jointinferenceservice", "kind": "inference", "results": [],
        "ownerInfo": {"startTime": "2025-03-01 10:00:00", "updateTime": "2025-03-01 10:00:30",
                      "inferenceNumber": 240, "hardExampleNumber": 31,
                      "uploadCloudRatio": 0.12916666666666668}}
HEADERS = {"Content-Type": "application/json", "Accept": "*/*"}

BARE_SERVER = """
import sys
from aiohttp import web
async def h(request):
    await request.read()
    return web.Response(body=b'{\\n "Status": 200,\\n "Message": "OK"\\n}', content_type="application/json")
app = web.Application()
app.router.add_post("/sedna/workers/{name}/info", h)
async def main():
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print("port", runner.addresses[0][1], flush=True)
    import asyncio
    await asyncio.Event().wait()
import uvloop
uvloop.run(main())
"""


async def start_lc(db: str, sync: str) -> tuple[asyncio.subprocess.Process, int]:
    env = {**os.environ, "ROOTFS_MOUNT_DIR": "", "LC_DB_PATH": db, "BIND_PORT": "0",
           "BIND_ADDRESS": "127.0.0.1", "LOG_FORMAT": "json", "LOG_LEVEL": "info",
           "LC_DB_SYNCHRONOUS": sync, "GM_ADDRESS": ""}  # info: the "serving" line has the port
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "lc.cli", cwd=ROOT, env=env,
                                                stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(30):
        while line := await proc.stderr.readline():
            record = json.loads(line)
            if record["msg"] == "serving":
                asyncio.get_running_loop().create_task(_drain(proc.stderr))
                return proc, int(record["port"])
    raise RuntimeError("sedna-lc did not start")


async def start_bare() -> tuple[asyncio.subprocess.Process, int]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", BARE_SERVER,
                                                stdout=asyncio.subprocess.PIPE)
    async with asyncio.timeout(30):
        line = await proc.stdout.readline()
    return proc, int(line.split()[1])


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def load(port: int, concurrency: int, reports: int) -> tuple[float, list[float]]:
    """Post `reports` bodies over `concurrency` connections; (seconds, latencies)."""
    latencies: list[float] = []
    counter = iter(range(reports))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=30)) as http:
        async def worker(w: int) -> None:
            url = f"http://127.0.0.1:{port}/sedna/workers/edge-{w}/info"
            data = json.dumps({**BODY, "name": f"edge-{w}"})
            for _ in counter:
                t0 = time.perf_counter()
                async with http.post(url, data=data, headers=HEADERS) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"status {resp.status}")
                latencies.append(time.perf_counter() - t0)
        started = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        return time.perf_counter() - started, latencies


def _row(target: str, concurrency: int, seconds: float, latencies: list[float]) -> str:
    q = statistics.quantiles(latencies, n=100)
    return (f"| {target:<22} | {concurrency:>4} | {len(latencies) / seconds:>9.0f} "
            f"| {q[49] * 1000:>8.2f} | {q[98] * 1000:>8.2f} |")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reports", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    args = parser.parse_args()
    print("| target                 | conc | reports/s |  p50 ms  |  p99 ms  |")
    print("|------------------------|------|-----------|----------|----------|")
    with tempfile.TemporaryDirectory() as tmp:
        targets = [("sedna-lc FULL", lambda: start_lc(f"{tmp}/full.db", "FULL")),
                   ("sedna-lc NORMAL", lambda: start_lc(f"{tmp}/normal.db", "NORMAL")),
                   ("bare aiohttp handler", start_bare)]
        for name, start in targets:
            proc, port = await start()
            try:
                await load(port, 4, 200)  # warm-up
                for c in args.concurrency:
                    seconds, latencies = await load(port, c, args.reports)
                    print(_row(name, c, seconds, latencies), flush=True)
            finally:
                proc.send_signal(signal.SIGTERM)
                await proc.wait()


if __name__ == "__main__":
    import uvloop
    uvloop.run(main())
