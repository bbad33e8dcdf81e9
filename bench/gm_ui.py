"""Benchmark of the GM's status page (`GET /ui`, gm/ui) with 1,000 jobs.

The page is served by aiohttp on a local port from a `StatusPage` wired to in-memory caches:
1,000 CRs spread over the nine reconciled kinds with the statuses their workers' reports make
(counters, rounds, stages, conditions), each job's history filled to its bound through the
informer handlers (120 status changes 5 s apart), 100 connected nodes and a full warning log.
Requests alternate between `/ui` and `/healthz` (the GM's, a fixed "ok": the cost of a request
with nothing in it) on one keep-alive connection, so both see the same machine at the same
moment; the table gives the time per request of each, and the page's size. The in-process build
and render times are printed apart. Not a test: prints a table.

    .venv/bin/python bench/gm_ui.py [--jobs 1000] [--requests 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gm.edge.session import SessionView  # noqa: E402
from gm.ui import StatusPage  # noqa: E402
from gm.ui.history import MAX_POINTS, MIN_INTERVAL  # noqa: E402
from gm.ui.page import REUSE_SECONDS  # noqa: E402
from gm.ui.render import render  # noqa: E402

KINDS = ("JointInferenceService", "FederatedLearningJob", "IncrementalLearningJob", "LifelongLearningJob",
         "FeatureExtractionService", "ObjectSearchService", "ObjectTrackingService", "ReidJob", "VideoAnalyticsJob")
COUNTERS = {"JointInferenceService": ("inferenceNumber", "hardExampleNumber"),
            "FeatureExtractionService": ("frameNumber", "featureNumber"),
            "ReidJob": ("queryNumber", "matchNumber"), "VideoAnalyticsJob": ("frameNumber", "detectionNumber")}
STAGES = ("Train", "Eval", "Deploy")


def status(kind: str, step: int) -> dict:
    """A status like the one a job of `kind` has after `step` reports."""
    running = {"type": "Running", "status": "True", "reason": "WorkersAvailable",
               "message": "all workers are available", "lastTransitionTime": "2026-12-02T07:54:31Z"}
    out: dict = {"active": 2, "failed": 0, "startTime": "2026-12-02T07:54:31Z", "conditions": [running],
                 "observedGeneration": 1}
    if kind in COUNTERS:
        out["metrics"] = [{"key": key, "value": str(step * (10 - 7 * i))} for i, key in enumerate(COUNTERS[kind])]
    elif kind == "FederatedLearningJob":
        out |= {"phase": "Running", "succeeded": 0, "conditions": [
            {"type": "Training", "status": "True", "reason": "DoTraining",
             "message": f"Round {step} reaches at 2026-12-02T07:55:00Z", "lastTransitionTime": "2026-12-02T07:55:00Z"}]}
    elif kind in ("IncrementalLearningJob", "LifelongLearningJob"):
        out = {"cycle": step // 3, "deploys": step // 3, "startTime": "2026-12-02T07:54:31Z", "conditions": [
            {"type": "Running", "status": "True", "stage": STAGES[step % 3], "reason": "WorkerRunning",
             "message": "the worker is running", "lastTransitionTime": "2026-12-02T07:55:00Z"}]}
    return out


class Cache:
    """A kind's informer as the page uses it: its objects and its handlers."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.handlers: list[dict] = []
        self.store = SimpleNamespace(list=lambda: list(self.objects.values()))

    def add_event_handler(self, **handlers) -> None:
        self.handlers.append(handlers)

    def put(self, obj: dict) -> None:
        name = obj["metadata"]["name"]
        old = self.objects.get(name)
        self.objects[name] = obj
        for h in self.handlers:
            if old is None:
                h["on_add"](obj)
            else:
                h["on_update"](old, obj)


class Hub:
    def __init__(self, nodes: int, now: float):
        self.views = [SessionView(node=f"edge-node-{i}", mode="native", since=now - 3600, last_frame=now - i % 30,
                                  pending=i % 3, acked_seq=1000 + i) for i in range(nodes)]

    def sessions(self) -> list[SessionView]:
        return self.views

    def departed(self) -> dict[str, float]:
        return {}


class Recorders:
    def __init__(self) -> None:
        self.listeners: list = []

    def listen(self, fn) -> None:
        self.listeners.append(fn)


def filled_page(jobs: int, nodes: int, *, reuse_seconds: float) -> StatusPage:
    """A page whose caches hold `jobs` CRs, each with a full history, and a full warning log."""
    clock: list[float | None] = [time.time() - MAX_POINTS * MIN_INTERVAL]  # None: the real one
    page = StatusPage(clock=lambda: clock[0] or time.time(), reuse_seconds=reuse_seconds)
    caches = {kind: Cache() for kind in KINDS}
    recorders = Recorders()
    page.watch(hub=Hub(nodes, time.time()), jobs=caches, recorders=[recorders])
    names = [(KINDS[i % len(KINDS)], f"job-{i:05d}") for i in range(jobs)]
    for step in range(1, MAX_POINTS + 1):
        clock[0] = (clock[0] or 0) + MIN_INTERVAL
        for kind, name in names:
            caches[kind].put({"kind": kind, "metadata": {"namespace": "default", "name": name},
                              "status": status(kind, step)})
    for i in range(60):
        recorders.listeners[0]({"kind": "JointInferenceService", "namespace": "default", "name": f"job-{i:05d}"},
                               "Warning", "ModelNotFound", f"Model default/model-{i} does not exist")
    clock[0] = None
    return page


async def timed(http: aiohttp.ClientSession, url: str) -> tuple[float, int]:
    start = time.perf_counter()
    async with http.get(url) as resp:
        body = await resp.read()
        assert resp.status == 200, resp.status
    return time.perf_counter() - start, len(body)


async def serve_and_measure(page: StatusPage, requests: int) -> dict[str, tuple[list[float], int]]:
    app = web.Application()
    app.router.add_get("/ui", page.handle)
    app.router.add_get("/healthz", lambda _request: _ok())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    out: dict[str, tuple[list[float], int]] = {"/ui": ([], 0), "/healthz": ([], 0)}
    try:
        async with aiohttp.ClientSession() as http:
            for path in out:  # warm-up
                await timed(http, f"http://127.0.0.1:{port}{path}")
            for _ in range(requests):
                for path, (times, _size) in out.items():
                    seconds, size = await timed(http, f"http://127.0.0.1:{port}{path}")
                    times.append(seconds)
                    out[path] = (times, size)
    finally:
        await runner.cleanup()
    return out


async def _ok() -> web.Response:
    return web.Response(text="ok")  # as gm/app.py's /healthz


def in_process(page: StatusPage, rounds: int) -> tuple[float, float]:
    """Median ms to build the page model and to render it."""
    builds, renders = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        model = page.page()
        middle = time.perf_counter()
        render(model)
        builds.append(middle - start)
        renders.append(time.perf_counter() - middle)
    return statistics.median(builds) * 1e3, statistics.median(renders) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()
    start = time.perf_counter()
    fresh = filled_page(args.jobs, args.nodes, reuse_seconds=0)
    shared = filled_page(args.jobs, args.nodes, reuse_seconds=REUSE_SECONDS)
    print(f"gm ui: {args.jobs} jobs x {MAX_POINTS} points, {args.nodes} nodes, "
          f"{len(fresh.warnings)} warnings (filled in {time.perf_counter() - start:.1f} s)")
    print(f"{'page':30} {'request':9} {'median ms':>10} {'p90 ms':>8} {'bytes':>10}")
    for label, page in (("rendered per request", fresh), (f"reused for {REUSE_SECONDS:g} s (as served)", shared)):
        results = asyncio.run(serve_and_measure(page, args.requests))
        for path, (times, size) in results.items():
            ordered = sorted(times)
            print(f"{label:30} {path:9} {statistics.median(ordered) * 1e3:10.2f} "
                  f"{ordered[int(0.9 * (len(ordered) - 1))] * 1e3:8.2f} {size:10}")
        ui, healthz = (statistics.median(results[p][0]) for p in ("/ui", "/healthz"))
        print(f"{'':30} /ui = {ui / healthz:.0f} x /healthz")
    build, draw = in_process(fresh, 10)
    print(f"in process, median of 10: page model {build:.1f} ms, HTML {draw:.1f} ms")


if __name__ == "__main__":
    main()
