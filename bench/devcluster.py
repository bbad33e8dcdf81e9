"""Benchmark of the devcluster API server: pod create rate, watch delivery rate and latency.

Starts the server in-process (uvloop) on a free port, then drives it over real HTTP with
aiohttp + orjson from the same event loop (so figures include client cost). Not a test:
prints a table; record results in docs/benchmarks.md.

    .venv/bin/python bench/devcluster.py [--pods 10000] [--concurrency 64] [--watch-pods 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devcluster.server.app import make_app  # noqa: E402
from devcluster.storage.store import Store  # noqa: E402

HEADERS = {"Content-Type": "application/json"}


def pod_body(name: str) -> bytes:
    return orjson.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"bench": "1"}},
                         "spec": {"containers": [{"name": "c", "image": "nginx:1.27",
                                                  "env": [{"name": "WORKER_NAME", "value": name}]}]}})


async def create_pods(session: aiohttp.ClientSession, ns: str, names: list[str], concurrency: int,
                      sent: dict[str, float] | None = None) -> float:
    """POST every pod with at most `concurrency` in flight; returns the elapsed seconds."""
    queue = iter(names)

    async def worker() -> None:
        for name in queue:
            if sent is not None:
                sent[name] = time.perf_counter()
            async with session.post(f"/api/v1/namespaces/{ns}/pods", data=pod_body(name), headers=HEADERS) as r:
                if r.status != 201:
                    raise RuntimeError(f"create {name}: HTTP {r.status} {await r.text()}")
                await r.read()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - start


async def watcher(session: aiohttp.ClientSession, ns: str, rv: str, expect: int, sent: dict[str, float],
                  latencies: list[float], ready: asyncio.Event) -> None:
    url = f"/api/v1/namespaces/{ns}/pods?watch=true&resourceVersion={rv}"
    got = 0
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=None, sock_read=60)) as resp:
        ready.set()
        while got < expect:
            line = await resp.content.readline()
            if not line:
                raise RuntimeError("watch stream ended early")
            ev = orjson.loads(line)
            if ev["type"] == "ADDED":
                latencies.append(time.perf_counter() - sent[ev["object"]["metadata"]["name"]])
                got += 1


async def watch_round(session: aiohttp.ClientSession, store: Store, n_watchers: int, n_pods: int,
                      concurrency: int) -> dict[str, float]:
    ns = f"watch-{n_watchers}"
    await session.post("/api/v1/namespaces", data=orjson.dumps({"metadata": {"name": ns}}), headers=HEADERS)
    rv = str(store.rv)
    sent: dict[str, float] = {}
    latencies: list[float] = []
    readies = [asyncio.Event() for _ in range(n_watchers)]
    tasks = [asyncio.create_task(watcher(session, ns, rv, n_pods, sent, latencies, r), name=f"watcher-{i}")
             for i, r in enumerate(readies)]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 10)
    start = time.perf_counter()
    await create_pods(session, ns, [f"w{i}" for i in range(n_pods)], concurrency, sent)
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    elapsed = time.perf_counter() - start
    lat = sorted(latencies)
    return {"watchers": n_watchers, "events": len(lat), "rate": len(lat) / elapsed,
            "p50": lat[len(lat) // 2] * 1000, "p99": lat[int(len(lat) * 0.99)] * 1000,
            "mean": statistics.fmean(lat) * 1000}


async def main(args: argparse.Namespace) -> None:
    store = Store()
    runner = web.AppRunner(make_app(store), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    conn = aiohttp.TCPConnector(limit=args.concurrency + 16)
    try:
        async with aiohttp.ClientSession(url, connector=conn) as session:
            elapsed = await create_pods(session, "default", [f"p{i}" for i in range(args.pods)], args.concurrency)
            t0 = time.perf_counter()
            async with session.get("/api/v1/pods") as r:
                body = await r.read()
            list_s = time.perf_counter() - t0
            n_listed = len(orjson.loads(body)["items"])
            rounds = [await watch_round(session, store, n, args.watch_pods, args.concurrency) for n in (1, 10)]
    finally:
        await runner.cleanup()
    print(f"{'measure':<40} {'value':>14}")
    print(f"{'create pods (' + str(args.pods) + ', c=' + str(args.concurrency) + ')':<40} "
          f"{args.pods / elapsed:>10.0f} /s")
    print(f"{'list ' + str(n_listed) + ' pods (' + str(len(body) // 1024) + ' KiB)':<40} {list_s * 1000:>11.1f} ms")
    for r in rounds:
        label = f"watch x{r['watchers']}: {r['events']} events"
        print(f"{label + ' delivery':<40} {r['rate']:>10.0f} /s")
        print(f"{label + ' latency p50 / p99':<40} {r['p50']:>6.1f} / {r['p99']:.1f} ms")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--watch-pods", type=int, default=2_000)
    return ap.parse_args()


if __name__ == "__main__":
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main(parse_args()))
