"""Watching the status path from outside: the workers' reports, the watches that see them
land, what each tracked value did, and the soak (every service killed in turn under faults).

The processes are bench/status_harness.py's; what counts here is what a watch of the API
server shows, never the services' internals. Used by bench/status_path.py, bench/gm_failover.py
(figures) and tests/e2e/test_status_soak.py (correctness only).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson

from bench.status_harness import (
    DS_PLURAL,
    GROUP,
    HEADERS,
    JI_PLURAL,
    NS,
    Stack,
    count_lines,
    dataset_object,
    ds_value,
    ji_body,
    ji_models,
    ji_object,
    ji_value,
    write_text,
)

# ---- bookkeeping ------------------------------------------------------------------------------


@dataclass(slots=True)
class Report:
    value: int
    t_post: float
    ok: bool | None = None  # answered 200 (None while in flight)
    t_ok: float | None = None  # when the 200 came
    t_visible: float | None = None  # a watch showed this value or a later one


@dataclass
class Track:
    """One object's reports (values increasing in posting order) and what a watch showed."""

    reports: list[Report] = field(default_factory=list)
    pending: deque = field(default_factory=deque)
    seen: set = field(default_factory=set)
    last: int | None = None  # value in the last event seen
    high: int | None = None
    regressions: list[tuple[int, int]] = field(default_factory=list)  # (newer seen, older shown after)
    events: int = 0

    def posted(self, value: int, t: float) -> Report:
        r = Report(value, t)
        self.reports.append(r)
        self.pending.append(r)
        return r

    def observe(self, value: int, t: float) -> None:
        self.events += 1
        if self.last is not None and value < self.last:
            self.regressions.append((self.last, value))
        self.last = value
        self.seen.add(value)
        if self.high is None or value > self.high:
            self.high = value
        self._settle(t)

    def _settle(self, t: float) -> None:
        while self.pending and self.pending[0].value <= self.high:
            self.pending.popleft().t_visible = t

    def ok_reports(self) -> list[Report]:
        return [r for r in self.reports if r.ok]


class Tracker:
    """Tracks per object key; fed by a Watch."""

    def __init__(self) -> None:
        self.tracks: dict[str, Track] = {}
        self.changed = asyncio.Event()
        self.event_writes: dict[str, int] = {}  # watch events of Events about the objects, by type

    def track(self, key: str) -> Track:
        t = self.tracks.get(key)
        if t is None:
            t = self.tracks[key] = Track()
        return t

    def observe(self, key: str, value: int | None, t: float) -> None:
        if value is None:
            return
        self.track(key).observe(value, t)
        self.changed.set()
        self.changed = asyncio.Event()

    def visible(self, key: str, value: int) -> bool:
        high = self.track(key).high
        return high is not None and high >= value

    async def wait_visible(self, want: dict[str, int], within: float) -> float | None:
        """Until every key shows at least its value: the time it happened, or None after `within` s."""
        deadline = time.monotonic() + within
        while True:
            if all(self.visible(k, v) for k, v in want.items()):
                return time.perf_counter()
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 0.5))

    def all_reports(self) -> list[Report]:
        return [r for t in self.tracks.values() for r in t.reports]

    def regressions(self) -> int:
        return sum(len(t.regressions) for t in self.tracks.values())


class Watch:
    """list+watch of one plural in NS on the dev cluster, resumed after drops, errors and 410."""

    def __init__(self, stack: Stack, plural: str, on_object: Callable[[dict, float], None], *,
                 on_event: Callable[[str, dict], None] | None = None, api: str = GROUP):
        """`api`: the group path (`/api/v1` for core kinds); `on_event(type, obj)` sees every
        watch event (not the relists)."""
        self.stack, self.plural, self.on_object, self.on_event = stack, plural, on_object, on_event
        self.api = api
        self.task: asyncio.Task | None = None
        self.relists = self.rewatches = 0
        self.synced = asyncio.Event()

    def start(self) -> Watch:
        self.task = asyncio.create_task(self._run(), name=f"watch-{self.plural}")
        return self

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _run(self) -> None:
        base = f"{self.stack.cluster_url}{self.api}/namespaces/{NS}/{self.plural}"
        session = self.stack.session
        rv: str | None = None
        no_timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        while True:
            try:
                if rv is None:
                    async with session.get(base, headers=self.stack.cluster_headers) as r:
                        if r.status != 200:
                            await asyncio.sleep(0.05)
                            continue
                        body = orjson.loads(await r.read())
                    now = time.perf_counter()
                    for obj in body.get("items") or []:
                        self.on_object(obj, now)
                    rv = body["metadata"]["resourceVersion"]
                    self.relists += 1
                    self.synced.set()
                url = f"{base}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}"
                async with session.get(url, timeout=no_timeout, headers=self.stack.cluster_headers) as r:
                    if r.status == 410:
                        rv = None
                        continue
                    if r.status != 200:
                        await asyncio.sleep(0.05)
                        continue
                    self.rewatches += 1
                    async for line in r.content:
                        if not line.strip():
                            continue
                        ev = orjson.loads(line)
                        obj = ev.get("object") or {}
                        if ev.get("type") == "ERROR":
                            if obj.get("code") == 410:
                                rv = None
                            break
                        rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                        if ev.get("type") in ("ADDED", "MODIFIED"):
                            self.on_object(obj, time.perf_counter())
                        if self.on_event is not None:
                            self.on_event(ev.get("type", ""), obj)
            except (aiohttp.ClientError, TimeoutError, ValueError):
                await asyncio.sleep(0.05)


# ---- workers ----------------------------------------------------------------------------------


class Worker:
    """A worker reporting one JI to its LC; every report carries the next inferenceNumber."""

    def __init__(self, stack: Stack, node: str, name: str, ji: str, tracker: Tracker, *, first: int = 1):
        self.stack, self.node, self.name, self.ji, self.tracker = stack, node, name, ji, tracker
        self.url = f"http://127.0.0.1:{stack.lcs[node].port}/sedna/workers/{name}/info"
        self.next = first
        self.failed_posts = 0
        self.last_ok: int | None = None

    async def report(self, *, retry_for: float = 0.0) -> Report:
        """POST the next report (retrying the same value on failure for up to `retry_for` s)."""
        value = self.next
        self.next += 1
        rec = self.tracker.track(self.ji).posted(value, time.perf_counter())
        deadline = time.monotonic() + retry_for
        body = orjson.dumps(ji_body(self.name, self.ji, value))
        while True:
            try:
                async with self.stack.session.post(self.url, data=body, headers=HEADERS,
                                                   timeout=aiohttp.ClientTimeout(total=10)) as r:
                    await r.read()
                    if r.status == 200:
                        rec.ok, rec.t_ok = True, time.perf_counter()
                        self.last_ok = value
                        return rec
            except (aiohttp.ClientError, TimeoutError):
                pass
            self.failed_posts += 1
            if time.monotonic() >= deadline:
                rec.ok = False
                return rec
            await asyncio.sleep(0.2)

    async def paced(self, rate: float, duration: float, *, retry_for: float = 0.0,
                    start: float | None = None) -> int:
        """Report sequentially at `rate`/s for `duration` s (a late report goes at once); count sent."""
        t0 = time.perf_counter() if start is None else start
        n = 0
        while True:
            due = t0 + n / rate
            if due - t0 >= duration:
                return n
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await self.report(retry_for=retry_for)
            n += 1


# ---- figures ----------------------------------------------------------------------------------


def quantiles(values: list[float]) -> tuple[float, float]:
    """(p50, p99); NaN for no values."""
    if not values:
        return float("nan"), float("nan")
    if len(values) == 1:
        return values[0], values[0]
    q = statistics.quantiles(values, n=100, method="inclusive")
    return q[49], q[98]


def latencies_ms(reports: Iterable[Report]) -> list[float]:
    return [(r.t_visible - r.t_post) * 1000 for r in reports if r.ok and r.t_visible is not None]


# ---- soak ---------------------------------------------------------------------------------------


SOAK_NODES = ("edge-node-1", "edge-node-2")


@dataclass
class SoakResult:
    seconds: float
    workers: int
    reports_ok: int
    reports_failed_posts: int
    lag_p50_ms: float
    lag_p99_ms: float
    lost: int  # answered 200, never visible and never superseded
    never_seen: int  # answered 200, superseded before a watch saw its own value
    regressions: int  # a watch showed an older value after a newer one (same object)
    drain_seconds: float | None  # load stop -> every outbox empty (None: not within the wait)
    outboxes_left: dict[str, int | None]
    visible_seconds: float | None  # load stop -> every JI shows its last report
    datasets_exact_seconds: float | None  # load stop -> every Dataset count exact
    datasets_wrong: dict[str, tuple[int | None, int]]  # name -> (shown, lines in the file)
    kills: list[str]
    crashes: list[str]  # services that exited on their own and were restarted
    dataset_changes: int
    watch_resumes: int
    log_dir: str

    @property
    def correct(self) -> bool:
        return (self.lost == 0 and self.regressions == 0 and self.drain_seconds is not None
                and self.datasets_exact_seconds is not None)


async def soak(seconds: float, *, workers: int = 40, rate: float = 10.0, datasets_per_node: int = 2,
               error_rate: float = 0.05, watch_drop_seconds: float = 60.0, kill_every: float = 20.0,
               kill_order: tuple[str, ...] = ("lc:edge-node-1", "gm", "lc:edge-node-2"),
               restart_delay: float = 1.0, wait: float = 120.0, workdir: Path | None = None,
               keep: bool = False, say: Callable[[str], None] = lambda _: None) -> SoakResult:
    """Two LCs, `workers` JI workers reporting `rate`/s in all (one JI each, half per node),
    Datasets whose index files grow, `error_rate` of every API request failing, watches cut every
    `watch_drop_seconds`, and every `kill_every` s the next of `kill_order` SIGKILLed and
    restarted; then up to `wait` s for the outboxes, JIs and Datasets to settle."""
    faults = [f"*:*={error_rate}"] if error_rate else []
    stack = Stack(SOAK_NODES, faults=faults, watch_drop_seconds=watch_drop_seconds, workdir=workdir, keep=keep)
    jis, dss = Tracker(), Tracker()
    watches: list[Watch] = []
    kills: list[str] = []
    async with stack.running(watches):
        await stack.wait_linked()
        for m in ji_models():
            await stack.create(m)
        files: dict[str, Path] = {}
        for node in SOAK_NODES:
            for i in range(datasets_per_node):
                name = f"ds-{node}-{i}"
                path = stack.lcs[node].rootfs / "data" / f"{name}.txt"
                write_text(path, "".join(f"images/{k}.jpg {k % 2}\n" for k in range(100)))
                files[name] = path
                await stack.create(dataset_object(name, node, f"/data/{name}.txt"))
        team: list[Worker] = []
        for i in range(workers):
            node = SOAK_NODES[i % len(SOAK_NODES)]
            ji = f"soak-{i}"
            await stack.create(ji_object(ji, node))
            team.append(Worker(stack, node, f"{ji}-edge", ji, jis))
        watches = [Watch(stack, JI_PLURAL, lambda o, t: jis.observe(o["metadata"]["name"], ji_value(o), t)).start(),
                   Watch(stack, DS_PLURAL, lambda o, t: dss.observe(o["metadata"]["name"], ds_value(o), t)).start()]
        say(f"soak: {workers} workers, {len(files)} Datasets, {seconds:g} s, logs in {stack.dir}")

        start = time.perf_counter()
        each = rate / workers

        async def work(i: int, w: Worker) -> None:
            await asyncio.sleep(i / rate)  # spread the workers' phases
            await w.paced(each, seconds - i / rate, retry_for=30.0)

        async def grow() -> int:
            changes, k = 0, 0
            while time.perf_counter() - start < seconds - 1:
                await asyncio.sleep(1.0)
                name = sorted(files)[k % len(files)]
                k += 1
                write_text(files[name], "".join(f"images/x{k}-{j}.jpg 0\n" for j in range(1 + k % 5)), "a")
                changes += 1
            return changes

        async def chaos() -> None:
            n = 0
            while True:  # the n-th kill at (n+1) * kill_every s, or as soon as the previous one is back
                await asyncio.sleep(max(0.0, (n + 1) * kill_every - (time.perf_counter() - start)))
                if time.perf_counter() - start >= seconds - 2:
                    return
                target = kill_order[n % len(kill_order)]
                n += 1
                at = time.perf_counter() - start
                await stack.kill_and_restart(target, restart_delay)
                kills.append(f"{target} at {at:.0f}s (back after {time.perf_counter() - start - at:.1f}s)")
                say(f"soak: killed and restarted {kills[-1]}")

        chaos_task = asyncio.create_task(chaos()) if kill_every else None
        results = await asyncio.gather(grow(), *(work(i, w) for i, w in enumerate(team)))
        if chaos_task is not None:
            chaos_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await chaos_task
            for proc in (stack.gm, *(lc.proc for lc in stack.lcs.values())):
                proc.held = False  # the supervisor starts what the cancelled restart left down
        stopped = time.perf_counter()
        say(f"soak: load stopped after {stopped - start:.0f} s; waiting up to {wait:g} s for it to settle")

        async def drained() -> float | None:
            while time.perf_counter() - stopped < wait:
                sizes = [await stack.outbox_size(n) for n in SOAK_NODES]
                if all(s == 0 for s in sizes):
                    return time.perf_counter() - stopped
                await asyncio.sleep(0.2)
            return None

        async def datasets_exact() -> float | None:
            while time.perf_counter() - stopped < wait:
                if all(dss.track(n).last == count_lines(p) for n, p in files.items()):
                    return time.perf_counter() - stopped
                await asyncio.sleep(0.2)
            return None

        async def all_visible() -> float | None:
            want = {w.ji: w.last_ok for w in team if w.last_ok is not None}
            done = await jis.wait_visible(want, wait)
            return None if done is None else done - stopped

        drain_s, ds_s, vis_s = await asyncio.gather(drained(), datasets_exact(), all_visible())
        await asyncio.sleep(1.0)  # a last look for late regressions
        ok = [r for r in jis.all_reports() if r.ok]
        seen = {k: t.seen for k, t in jis.tracks.items()}
        by_report = {id(r): k for k, t in jis.tracks.items() for r in t.reports}
        p50, p99 = quantiles(latencies_ms(ok))
        return SoakResult(
            seconds=seconds, workers=workers, reports_ok=len(ok),
            reports_failed_posts=sum(w.failed_posts for w in team), lag_p50_ms=p50, lag_p99_ms=p99,
            lost=sum(1 for r in ok if r.t_visible is None),
            never_seen=sum(1 for r in ok if r.value not in seen[by_report[id(r)]]),
            regressions=jis.regressions() + dss.regressions(), drain_seconds=drain_s,
            outboxes_left={n: await stack.outbox_size(n) for n in SOAK_NODES}, visible_seconds=vis_s,
            datasets_exact_seconds=ds_s,
            datasets_wrong={n: (dss.track(n).last, count_lines(p)) for n, p in files.items()
                            if dss.track(n).last != count_lines(p)},
            kills=kills, crashes=list(stack.crashes), dataset_changes=results[0],
            watch_resumes=sum(w.rewatches + w.relists for w in watches) - len(watches), log_dir=str(stack.dir))
