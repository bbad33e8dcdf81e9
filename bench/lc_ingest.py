"""Benchmark: how fast one LC, linked to a GM, ingests worker reports, against a bare handler.

Three processes besides wrk: a bare aiohttp server whose handler reads the body and answers
upstream's 200 (the ceiling: what aiohttp on this machine does with nothing behind it), the
dev cluster with a GM (the JointInferenceService example applied, so the LC's reports are
written to its status), and `sedna-lc` with GM_ADDRESS pointing at it (durable commit with
synchronous=FULL, the default). wrk (`make wrk`) POSTs the edge worker's stats body to each
at every concurrency, the two targets interleaved run by run so drift hits both alike, and
the table shows req/s, p50/p99 and the LC/bare ratio of req/s (median over the rounds).
Not a test: figures depend on the machine; record them in docs/benchmarks.md.

    .venv/bin/python bench/lc_ingest.py [--duration 10] [--rounds 3] [--concurrency 1 16 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.ports import free_port  # noqa: E402

WRK = ROOT / ".tools" / "wrk" / "wrk"
NS = "default"
SVC = "helmet-detection-inference-example"
NODE = "edge-node-1"
WORKER = "helmet-detection-inference-example-edge-7xkq2"
BODY = {"name": WORKER, "namespace": NS, "ownerName": SVC, "ownerKind": "jointinferenceservice",
        "kind": "inference", "status": "", "results": [],
        "ownerInfo": {"startTime": "2025-03-01 10:00:00", "updateTime": "2025-03-01 10:00:30",
                      "inferenceNumber": 240, "hardExampleNumber": 31,
                      "uploadCloudRatio": 0.12916666666666668}}
PATH = f"/sedna/workers/{WORKER}/info"

BARE_SERVER = """
import asyncio, uvloop
from aiohttp import web
OK = b'{\\n "Status": 200,\\n "Message": "OK"\\n}'
async def report(request):
    await request.read()
    return web.Response(body=OK, content_type="application/json")
async def main():
    app = web.Application()
    app.router.add_post("/sedna/workers/{name}/info", report)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    print("port", runner.addresses[0][1], flush=True)
    await asyncio.Event().wait()
uvloop.run(main())
"""

GM_SERVER = """
import asyncio, sys, uvloop
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from devcluster.cluster import DevCluster
from gm.app import GlobalManager
from gm.config import parse_config
from shared import apis
async def main():
    root, tmp = Path(sys.argv[1]), Path(sys.argv[2])
    dc = DevCluster(start_delay=0.05, termination_delay=0)
    await dc.start("127.0.0.1", 0)
    dc.write_kubeconfig(tmp / "kubeconfig")
    dc.apply_manifests(apis.CRD_DIR, root / "examples/upstream/joint-inference-helmet-detection.yaml")
    gm = GlobalManager(parse_config(f"kubeConfig: {tmp / 'kubeconfig'}\\n"
                                    "websocket: {address: 127.0.0.1, port: 0}\\n"))
    await gm.start()
    print("port", gm.port, flush=True)
    await asyncio.Event().wait()
uvloop.run(main())
"""

LUA = """
wrk.method = "POST"
wrk.body = {body}
wrk.headers["Content-Type"] = "application/json"
"""


@dataclass(frozen=True)
class Run:
    rps: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    errors: int


def wrk_env() -> dict[str, str]:
    if not WRK.exists():
        sys.exit(f"{WRK} is missing: run `make wrk`")
    return dict(os.environ)


def run_wrk(port: int, connections: int, duration: float, script: Path) -> Run:
    threads = min(connections, 2)
    out = subprocess.run(
        [str(WRK), f"-t{threads}", f"-c{connections}", f"-d{duration:g}s", "--latency",
         "-s", str(script), f"http://127.0.0.1:{port}{PATH}"],
        check=True, capture_output=True, text=True, env=wrk_env()).stdout
    return Run(rps=float(_find(r"Requests/sec:\s+([\d.]+)", out)),
               p50_ms=_ms(_find(r"\n\s+50%\s+(\S+)", out)),
               p99_ms=_ms(_find(r"\n\s+99%\s+(\S+)", out)),
               non_2xx=int(_find(r"Non-2xx or 3xx responses: (\d+)", out, "0")),
               errors=sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", out)))


def _find(pattern: str, text: str, default: str | None = None) -> str:
    match = re.search(pattern, text)
    if match is None:
        if default is not None:
            return default
        raise RuntimeError(f"wrk output lacks {pattern!r}:\n{text}")
    return match.group(1)


def _ms(value: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", value).groups()
    return float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


async def start_process(args: list[str], *, env: dict[str, str] | None = None,
                        ready: str = "port") -> tuple[asyncio.subprocess.Process, int]:
    """Start a helper that prints `port N` on stdout (or the LC's json `serving` line on stderr)."""
    proc = await asyncio.create_subprocess_exec(
        *args, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stream = proc.stdout if ready == "port" else proc.stderr
    async with asyncio.timeout(60):
        while line := await stream.readline():
            if ready == "port" and line.startswith(b"port "):
                port = int(line.split()[1])
                break
            if ready == "serving" and line.startswith(b"{"):
                record = json.loads(line)
                if record.get("msg") == "serving":
                    port = int(record["port"])
                    break
        else:
            raise RuntimeError(f"{args[:3]} did not start: {(await proc.stderr.read())[-2000:]!r}")
    for pipe in (proc.stdout, proc.stderr):
        asyncio.get_running_loop().create_task(_drain(pipe))
    return proc, port


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


async def start_lc(tmp: Path, gm_port: int, *, db: str = "lc.db") -> tuple[asyncio.subprocess.Process, int]:
    env = {**os.environ, "ROOTFS_MOUNT_DIR": "", "LC_DB_PATH": str(tmp / db),
           "BIND_PORT": "0", "BIND_ADDRESS": "127.0.0.1", "LOG_FORMAT": "json",
           "LOG_LEVEL": "info", "GM_ADDRESS": f"127.0.0.1:{gm_port}", "NODENAME": NODE}
    return await start_process([sys.executable, "-m", "lc.cli"], env=env, ready="serving")


async def wait_linked(lc_port: int) -> None:
    """Until the LC's link is connected and it holds the JI service from the snapshot."""
    import aiohttp
    async with aiohttp.ClientSession() as http, asyncio.timeout(60):
        while True:
            async with http.get(f"http://127.0.0.1:{lc_port}/readyz") as resp:
                linked = (await resp.json())["link"] == "connected"
            async with http.post(f"http://127.0.0.1:{lc_port}{PATH}", json=BODY) as resp:
                ok = resp.status == 200
            if linked and ok:
                return
            await asyncio.sleep(0.2)


async def outbox(lc_port: int) -> str:
    import aiohttp
    async with aiohttp.ClientSession() as http, \
            http.get(f"http://127.0.0.1:{lc_port}/metrics") as resp:
        text = await resp.text()
    wanted = {"sedna_lc_outbox_size": "outbox",
              'sedna_lc_link_reports_total{outcome="sent"}': "sent",
              'sedna_lc_link_reports_total{outcome="covered"}': "covered",
              'sedna_lc_link_reports_total{outcome="acked"}': "acked"}
    values = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    return ", ".join(f"{label} {values.get(metric, '?')}" for metric, label in wanted.items())


async def profile(pid: int, port: int, script: Path, args: argparse.Namespace) -> None:
    """py-spy (pip install py-spy) samples the LC through one more run at c=16."""
    out = Path(args.profile)
    spy = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid), "--rate", "200",
        "--format", "raw", "--output", str(out), "--duration", str(int(args.duration)),
        "--nonblocking", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    await asyncio.to_thread(run_wrk, port, 16, args.duration, script)
    await spy.wait()
    print(f"profile of the LC at c=16 (py-spy raw): {out}")


def row(conc: int, bare: list[Run], lc: list[Run], alone: list[Run]) -> str:
    def med(runs: list[Run], attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in runs)

    def ratio(runs: list[Run]) -> float:
        return statistics.median(r.rps / br.rps for br, r in zip(bare, runs, strict=True))
    bad = sum(r.non_2xx + r.errors for r in lc)
    return (f"| {conc:>4} | {med(bare, 'rps'):>9.0f} | {med(bare, 'p50_ms'):>6.2f} | "
            f"{med(bare, 'p99_ms'):>6.2f} | {med(lc, 'rps'):>9.0f} | {med(lc, 'p50_ms'):>6.2f} | "
            f"{med(lc, 'p99_ms'):>6.2f} | {ratio(lc):>5.2f}x | {bad:>5} | {med(alone, 'rps'):>9.0f} | "
            f"{med(alone, 'p99_ms'):>6.2f} | {ratio(alone):>5.2f}x |")


async def main(args: argparse.Namespace) -> None:
    wrk_env()
    tmp = Path(tempfile.mkdtemp(prefix="lc-ingest-"))
    script = tmp / "post.lua"
    script.write_text(LUA.format(body=json.dumps(json.dumps(BODY))))
    procs = []
    try:
        bare, bare_port = await start_process([sys.executable, "-c", BARE_SERVER])
        procs.append(bare)
        gm, gm_port = await start_process([sys.executable, "-c", GM_SERVER, str(ROOT), str(tmp)])
        procs.append(gm)
        lc, lc_port = await start_lc(tmp, gm_port)
        procs.append(lc)
        await wait_linked(lc_port)
        # the same LC with no GM to link to: what the link costs the worker API
        alone, alone_port = await start_lc(tmp, free_port(), db="alone.db")
        procs.append(alone)
        for port in (bare_port, lc_port, alone_port):  # warm-up
            await asyncio.to_thread(run_wrk, port, 16, 2, script)
        print(f"wrk {args.duration:g}s per run, {args.rounds} interleaved rounds, medians; "
              "ratio = LC req/s / bare req/s; bad = non-2xx + socket errors (LC); "
              "alone = the same LC with no GM to link to (its outbox only grows)")
        print("| conc | bare rq/s |  p50  |  p99  |  LC rq/s  |  p50  |  p99  | ratio |  bad  | alone rq/s |  p99  | ratio |")
        print("|------|-----------|-------|-------|-----------|-------|-------|-------|-------|------------|-------|-------|")
        for conc in args.concurrency:
            bare_runs, lc_runs, alone_runs = [], [], []
            for _ in range(args.rounds):
                bare_runs.append(await asyncio.to_thread(run_wrk, bare_port, conc, args.duration, script))
                lc_runs.append(await asyncio.to_thread(run_wrk, lc_port, conc, args.duration, script))
                alone_runs.append(await asyncio.to_thread(run_wrk, alone_port, conc, args.duration, script))
            print(row(conc, bare_runs, lc_runs, alone_runs), flush=True)
        print(f"LC link after the runs: {await outbox(lc_port)}")
        if args.profile:
            await profile(lc.pid, lc_port, script, args)
    finally:
        for proc in reversed(procs):
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    async with asyncio.timeout(15):
                        await proc.wait()
                except TimeoutError:
                    proc.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved runs per target")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--profile", metavar="FILE", help="py-spy the LC during one more run")
    import uvloop
    uvloop.run(main(parser.parse_args()))
