"""Benchmark: a GM replica SIGKILLed while every replica serves LCs behind the Service.

Two `sedna-gm` processes campaign for one Lease (the chart's timings by default: 15 s lease,
10 s renew deadline, 2 s retry) on a `sedna-devcluster`; both serve LCs. A TCP round-robin proxy
of this process (bench/service_proxy.py) stands for the Service: each new connection goes to the
next replica that accepts it, so the LCs' sessions spread over both. One `sedna-lc` process per node
(edge-node-1..N, `GM_ADDRESS` = the proxy) and one worker per LC posting JointInferenceService
reports continuously (each carrying the next `inferenceNumber`), while a watch of the JIs tells
what their status shows. Then one replica is SIGKILLed: the leader, or the follower.

What is measured, from outside (the proxy's connections, the processes' /metrics and /readyz,
a watch of the API server):

- reports lost: answered 200 by an LC and never visible in the CR status (must be 0);
- kill -> status current again: until every JI shows a report its worker posted after the kill
  (the LCs of the dead replica redial, through the proxy, to the other one and resend what it had
  not acked; a worker posts every 1/rate s, so this includes up to one period); target < 5 s.
  Also: until every JI shows the last report answered 200 before the kill;
- sessions dropped on the surviving replica: its LCs' connections that ended, LC link sessions
  started again, /readyz polls of its LCs that were not `connected` (must be 0);
- reconnects: kill -> each moved LC's new connection to the survivor;
- reconciling: kill -> the survivor leads (leader killed), and kill -> a JI created right after
  the kill has its Deployments and Service (by whichever replica leads then).

Not a test: tests/e2e/test_gm_failover.py runs the same scenario (`failover`) with 10 LCs and
asserts correctness only.

    .venv/bin/python bench/gm_failover.py [--lcs 100] [--kill leader,follower] [--rate 2] [--lease 15,10,2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.service_proxy import RoundRobinProxy  # noqa: E402
from bench.status_harness import (  # noqa: E402
    GROUP,
    JI_PLURAL,
    NS,
    Proc,
    Stack,
    ji_models,
    ji_object,
    ji_value,
)
from bench.status_watch import (  # noqa: E402
    Tracker,
    Watch,
    Worker,
    latencies_ms,
    quantiles,
)
from shared.ports import free_port  # noqa: E402

LEASE = "sedna-gm"
AFTER_KILL = "after-kill"
POLL = 0.5  # seconds between /readyz polls of an LC on the surviving replica


@dataclass(frozen=True)
class Election:
    """Lease timings (seconds): the chart's by default."""

    lease: float = 15.0
    renew: float = 10.0
    retry: float = 2.0

    def config(self) -> str:
        return (f"leaderElection: {{enabled: true, leaseName: {LEASE}, leaseNamespace: {NS}, "
                f"leaseDurationSeconds: {self.lease}, renewDeadlineSeconds: {self.renew}, "
                f"retryPeriodSeconds: {self.retry}}}\n")

    def __str__(self) -> str:
        return f"lease {self.lease:g} s / renew deadline {self.renew:g} s / retry {self.retry:g} s"


def samples(text: str) -> dict[str, float]:
    """`name{labels}` -> value of every sample of a Prometheus text page."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[key] = float(value)
    return out


@dataclass
class Replica:
    """One sedna-gm process of the pair: its own port (hub, /metrics, /readyz) and log."""

    index: int
    port: int
    proc: Proc

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class ReplicatedStack(Stack):
    """The harness's Stack with GM replicas on one Lease behind a RoundRobinProxy that listens on
    the port the LCs' GM_ADDRESS names. The first replica starts alone and leads."""

    def __init__(self, nodes: Iterable[str], *, replicas: int = 2, election: Election = Election(),
                 **kwargs) -> None:
        nodes = list(nodes)
        super().__init__(nodes, **kwargs)
        # the dev cluster has a Node for every LC, as a cluster would
        self.devcluster.cmd += ["--nodes", ",".join([*nodes, "cloud-node"])]
        self.replicas: list[Replica] = []
        for i in range(replicas):
            port, config = free_port(), self.dir / f"gm-{i}.yaml"
            config.write_text(f"kubeConfig: {self.kubeconfig}\nwebsocket: {{address: 127.0.0.1, port: {port}}}\n"
                              + election.config())
            self.replicas.append(Replica(i, port, Proc(f"gm-{i}", [*self.gm.cmd[:-2], "--config", str(config)], {},
                                                       self.dir / f"gm-{i}.log")))
        self.proxy = RoundRobinProxy([("127.0.0.1", r.port) for r in self.replicas], port=self.gm_port)

    async def start_gm(self, *, within: float = 60.0) -> None:
        """Every replica ready (the first one leading before the next starts), then the proxy."""
        for r in self.replicas:
            await r.proc.start()
            await self._wait_ok(f"{r.url}/readyz", within, r.proc, restart=False)
            if r.index == 0 and await self.wait_leading(r, within) is None:
                raise RuntimeError(f"gm-0 did not take the Lease within {within:g}s (logs in {self.dir})")
        await self.proxy.start()

    async def stop(self) -> None:
        # the Service, then the GMs, then the LCs: a hundred LCs stopping at once starve a GM of
        # CPU long enough to miss a lease renewal, and a GM that loses the Lease exits failing
        await self.proxy.stop()
        await asyncio.gather(*(r.proc.stop() for r in self.replicas))
        await asyncio.gather(*(lc.proc.stop() for lc in self.lcs.values()))
        await super().stop()  # the dev cluster, the session and the folder

    # -- observation

    async def metrics(self, url: str) -> dict[str, float]:
        """The samples of `url`/metrics; none when it does not answer (a process that died)."""
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            return samples(await self._text(f"{url}/metrics"))
        return {}

    async def leader(self) -> Replica:
        for r in self.replicas:
            if r.proc.running and (await self.metrics(r.url)).get("sedna_gm_leader") == 1:
                return r
        raise RuntimeError("no replica leads")

    async def wait_leading(self, replica: Replica, within: float) -> float | None:
        """Until `replica` says it leads: the time it did (perf_counter), or None."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline and replica.proc.running:
            if (await self.metrics(replica.url)).get("sedna_gm_leader") == 1:
                return time.perf_counter()
            await asyncio.sleep(0.1)
        return None

    async def lease_transitions(self) -> int:
        lease = await self.api("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE}")
        return int(lease["spec"].get("leaseTransitions") or 0)

    async def lc_link(self, node: str) -> str:
        """The LC's /readyz link state ("unreachable" when it does not answer)."""
        try:
            async with self.session.get(f"http://127.0.0.1:{self.lcs[node].port}/readyz",
                                        timeout=aiohttp.ClientTimeout(total=5)) as r:
                return (await r.json()).get("link", "")
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return "unreachable"

    async def lc_metric(self, node: str, name: str) -> float | None:
        return (await self.metrics(f"http://127.0.0.1:{self.lcs[node].port}")).get(name)

    async def wait_children(self, names: Iterable[str], within: float) -> float | None:
        """Until every JI of `names` owns two Deployments and a Service: the time (perf_counter),
        or None after `within` s."""
        deadline = time.monotonic() + within
        jis = (await self.api("GET", f"{GROUP}/namespaces/{NS}/{JI_PLURAL}"))["items"]
        uids = {ji["metadata"]["uid"] for ji in jis if ji["metadata"]["name"] in set(names)}
        while time.monotonic() < deadline:
            owned: dict[tuple[str, str], int] = {}
            for kind, path in (("Deployment", "/apis/apps/v1"), ("Service", "/api/v1")):
                for o in (await self.api("GET", f"{path}/namespaces/{NS}/{kind.lower()}s"))["items"]:
                    for ref in o["metadata"].get("ownerReferences") or []:
                        owned[(ref.get("uid"), kind)] = owned.get((ref.get("uid"), kind), 0) + 1
            if all(owned.get((u, "Deployment"), 0) >= 2 and owned.get((u, "Service"), 0) >= 1 for u in uids):
                return time.perf_counter()
            await asyncio.sleep(0.2)
        return None

    async def wait_idle(self, replica: Replica, within: float) -> bool:
        """Until the replica's work queues are empty (it reconciled what it had to)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            depth = [v for k, v in (await self.metrics(replica.url)).items() if k.startswith("sedna_gm_workqueue_depth")]
            if depth and not any(depth):
                return True
            await asyncio.sleep(0.5)
        return False


class LinkPoll:
    """Polls the /readyz link state of some LCs every POLL s; keeps what was not `connected`."""

    def __init__(self, stack: ReplicatedStack, nodes: Iterable[str]) -> None:
        self.stack, self.nodes = stack, sorted(nodes)
        self.polls = 0
        self.not_connected: list[tuple[str, str]] = []  # (node, state seen)
        self._task: asyncio.Task | None = None

    def start(self) -> LinkPoll:
        self._task = asyncio.create_task(self._run(), name="link-poll")
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            states = await asyncio.gather(*(self.stack.lc_link(n) for n in self.nodes))
            self.polls += len(states)
            self.not_connected += [(n, s) for n, s in zip(self.nodes, states, strict=True) if s != "connected"]
            await asyncio.sleep(POLL)


@dataclass
class FailoverResult:
    lcs: int
    killed: str  # "leader" or "follower"
    reports_ok: int
    lag_before_ms: tuple[float, float]  # POST -> status visible, p50 and p99, of reports posted before the kill
    failed_posts: int
    lost: int  # answered 200, never visible and never superseded
    regressions: int  # a watch showed an older value after a newer one
    moved: list[str]  # nodes whose session was on the killed replica
    stayed: list[str]  # nodes whose session was on the surviving one
    reconnect_s: list[float]  # kill -> each moved node's new connection to the survivor
    not_moved: list[str]  # moved nodes without an open connection to the survivor at the end
    current_s: float | None  # kill -> every JI shows a report posted after the kill
    caught_up_s: float | None  # kill -> every JI shows the last report answered 200 before the kill
    leads_s: float | None  # kill -> the survivor leads (None: it did not, or it led already)
    children_s: float | None  # kill -> the JI created after the kill has its children
    transitions: int  # Lease transitions over the kill
    survivor_leads: bool  # the surviving replica leads at the end
    drained_s: float | None  # load stop -> every outbox empty
    visible_s: float | None  # load stop -> every JI shows its last report answered 200
    dropped: dict[str, list[str]]  # the survivor's LCs whose session ended, by what showed it
    link_polls: int
    hub: dict[str, float]  # the survivor's sedna_gm_hub_sessions_total over the kill, by event
    survivor_sessions: float | None  # its sedna_gm_hub_sessions_active at the end
    exited: list[str]  # processes (other than the killed replica) that exited on their own
    log_dir: str

    @property
    def dropped_nodes(self) -> set[str]:
        return {n for nodes in self.dropped.values() for n in nodes}


HUB_EVENTS = ("opened", "replaced", "dead", "broken")


async def _hub_sessions(stack: ReplicatedStack, replica: Replica) -> dict[str, float]:
    """Its sedna_gm_hub_sessions_total by event (NaN when it does not answer)."""
    m = await stack.metrics(replica.url)
    return {e: m.get(f'sedna_gm_hub_sessions_total{{event="{e}"}}', math.nan) for e in HUB_EVENTS}


async def _load(team: list[Worker], rate: float, seconds: float, start: float) -> None:
    """Every worker reporting at `rate`/s from `start` for `seconds` s (a failed POST retried 30 s)."""
    await asyncio.gather(*(w.paced(rate, seconds, retry_for=30.0, start=start) for w in team))


async def _drained(stack: ReplicatedStack, since: float, within: float) -> float | None:
    while time.perf_counter() - since < within:
        sizes = await asyncio.gather(*(stack.outbox_size(n) for n in stack.lcs))
        if all(s == 0 for s in sizes):
            return time.perf_counter() - since
        await asyncio.sleep(0.5)
    return None


async def failover(lcs: int = 10, *, kill: str = "leader", seconds: float = 20.0, kill_at: float = 6.0,
                   rate: float = 5.0, wait: float = 60.0, election: Election = Election(),
                   workdir: Path | None = None, keep: bool = False,
                   say: Callable[[str], None] = lambda _: None) -> FailoverResult:
    """`lcs` LCs with one worker each at `rate` reports/s for `seconds` s; `kill_at` s into the
    load the leader or the follower (`kill`) is SIGKILLed; then up to `wait` s to settle."""
    if kill not in ("leader", "follower"):
        raise ValueError(f"kill: leader or follower, not {kill!r}")
    nodes = [f"edge-node-{i}" for i in range(1, lcs + 1)]
    stack = ReplicatedStack(nodes, election=election, workdir=workdir, keep=keep)
    jis = Tracker()
    watches: list[Watch] = []
    async with stack.running(watches):
        say(f"failover: {lcs} LCs up, logs in {stack.dir}")
        team = await _prepare(stack, nodes, jis, watches, wait)
        leader = await stack.leader()
        victim = leader if kill == "leader" else next(r for r in stack.replicas if r is not leader)
        run = _Run(stack, kill, victim, next(r for r in stack.replicas if r is not victim), team, jis)
        await run.before()
        say(f"failover: {len(run.moved)} LCs on the {kill} (gm-{victim.index}), {len(run.stayed)} on "
            f"gm-{run.survivor.index}; load {seconds:g} s, kill at {kill_at:g} s")
        await run.load_and_kill(rate, seconds, kill_at, wait)
        await run.settle(wait)
        return await run.result(lcs)


async def _prepare(stack: ReplicatedStack, nodes: list[str], jis: Tracker, watches: list[Watch],
                   wait: float) -> list[Worker]:
    """A JI per node, reconciled by an idle leader, and its worker's first report visible."""
    await stack.wait_linked()
    for m in ji_models():
        await stack.create(m)
    team = []
    for i, node in enumerate(nodes, 1):
        await stack.create(ji_object(f"fo-{i}", node))
        team.append(Worker(stack, node, f"fo-{i}-edge", f"fo-{i}", jis))
    watches.append(Watch(stack, JI_PLURAL, lambda o, t: jis.observe(o["metadata"]["name"], ji_value(o), t)).start())
    # every JI reconciled before the clock starts: a kill then measures the failover, not the
    # backlog of a hundred new CRs
    if await stack.wait_children([w.ji for w in team], wait) is None:
        raise RuntimeError(f"JIs not reconciled within {wait:g}s (logs in {stack.dir})")
    await stack.wait_idle(await stack.leader(), wait)
    await asyncio.gather(*(w.report(retry_for=30.0) for w in team))
    if await jis.wait_visible({w.ji: w.last_ok for w in team if w.last_ok}, wait) is None:
        raise RuntimeError(f"warm-up reports not visible within {wait:g}s (logs in {stack.dir})")
    return team


class _Run:
    """One kill: what is observed before it, during the load and after."""

    def __init__(self, stack: ReplicatedStack, kill: str, victim: Replica, survivor: Replica,
                 team: list[Worker], jis: Tracker) -> None:
        self.stack, self.kill, self.victim, self.survivor, self.team, self.jis = stack, kill, victim, survivor, team, jis
        self.moved = sorted(stack.proxy.nodes_on(victim.index))
        self.stayed = sorted(stack.proxy.nodes_on(survivor.index))
        self.poll = LinkPoll(stack, self.stayed)
        self.killed = self.stopped = 0.0
        self.at: dict[str, float | None] = {}  # perf_counter times of what was waited for
        self.sessions_before: dict[str, float | None] = {}  # the survivor's LCs' link sessions
        self.hub_before: dict[str, float] = {}
        self.transitions_before = 0
        self.drained: float | None = None
        self.visible: float | None = None

    async def _lc_sessions(self) -> dict[str, float | None]:
        return {n: await self.stack.lc_metric(n, "sedna_lc_link_sessions_total") for n in self.stayed}

    async def before(self) -> None:
        self.sessions_before = await self._lc_sessions()
        self.hub_before = await _hub_sessions(self.stack, self.survivor)
        self.transitions_before = await self.stack.lease_transitions()
        self.poll.start()

    async def load_and_kill(self, rate: float, seconds: float, kill_at: float, wait: float) -> None:
        start = time.perf_counter()
        load = asyncio.create_task(_load(self.team, rate, seconds, start), name="load")
        try:
            await asyncio.sleep(max(0.0, start + kill_at - time.perf_counter()))
            answered = {w.ji: w.last_ok for w in self.team if w.last_ok is not None}
            after = {w.ji: w.next for w in self.team}  # the value of each worker's next report
            self.killed = time.perf_counter()
            await self.victim.proc.kill()
            await self.stack.create(ji_object(AFTER_KILL, self.team[0].node))
            leading = self.stack.wait_leading(self.survivor, wait) if self.kill == "leader" else asyncio.sleep(0)
            times = await asyncio.gather(self.jis.wait_visible(answered, wait), self.jis.wait_visible(after, wait),
                                         leading, self.stack.wait_children([AFTER_KILL], wait))
            self.at = dict(zip(("caught_up", "current", "leads", "children"), times, strict=True))
            await load
        finally:
            load.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await load
        self.stopped = time.perf_counter()

    async def settle(self, wait: float) -> None:
        last = {w.ji: w.last_ok for w in self.team if w.last_ok is not None}
        self.drained, visible = await asyncio.gather(_drained(self.stack, self.stopped, wait),
                                                     self.jis.wait_visible(last, wait))
        self.visible = None if visible is None else visible - self.stopped
        await asyncio.sleep(1.0)  # a last look for late regressions and late drops
        await self.poll.stop()

    def _since_kill(self, what: str) -> float | None:
        t = self.at.get(what)
        return None if t is None else t - self.killed

    def _reconnects(self) -> tuple[list[float], list[str]]:
        """Kill -> each moved node's first connection to the survivor; the moved nodes without one open."""
        reconnect, not_moved = [], []
        for node in self.moved:
            again = [c for c in self.stack.proxy.connections(node)
                     if c.backend == self.survivor.index and c.opened > self.killed]
            if again:
                reconnect.append(again[0].opened - self.killed)
            if not any(c.open for c in again):
                not_moved.append(node)
        return sorted(reconnect), not_moved

    async def _dropped(self) -> dict[str, list[str]]:
        after = await self._lc_sessions()
        closed = [n for n in self.stayed if any(c.backend == self.survivor.index and not c.open
                                                for c in self.stack.proxy.connections(n))]
        return {"connection closed (proxy)": closed,
                "LC link sessions started again": [n for n in self.stayed if after[n] != self.sessions_before[n]],
                "LC /readyz not connected": sorted({n for n, _ in self.poll.not_connected})}

    async def result(self, lcs: int) -> FailoverResult:
        stack, survivor = self.stack, self.survivor
        hub_after, metrics = await _hub_sessions(stack, survivor), await stack.metrics(survivor.url)
        reconnect, not_moved = self._reconnects()
        ok = [r for r in self.jis.all_reports() if r.ok]
        exited = [f"{p.name} exited with {p.proc.returncode}" for p in
                  [survivor.proc, *(lc.proc for lc in stack.lcs.values())] if not p.running]
        return FailoverResult(
            lcs=lcs, killed=self.kill, reports_ok=len(ok), failed_posts=sum(w.failed_posts for w in self.team),
            lag_before_ms=quantiles(latencies_ms(r for r in ok if r.t_post < self.killed)),
            lost=sum(1 for r in ok if r.t_visible is None), regressions=self.jis.regressions(),
            moved=self.moved, stayed=self.stayed, reconnect_s=reconnect, not_moved=not_moved,
            current_s=self._since_kill("current"), caught_up_s=self._since_kill("caught_up"),
            leads_s=self._since_kill("leads"), children_s=self._since_kill("children"),
            transitions=await stack.lease_transitions() - self.transitions_before,
            survivor_leads=metrics.get("sedna_gm_leader") == 1, drained_s=self.drained, visible_s=self.visible,
            dropped=await self._dropped(), link_polls=self.poll.polls,
            hub={e: hub_after[e] - self.hub_before[e] for e in HUB_EVENTS},
            survivor_sessions=metrics.get("sedna_gm_hub_sessions_active"),
            exited=exited + list(stack.crashes), log_dir=str(stack.dir))


# ---- figures -------------------------------------------------------------------------------


def secs(value: float | None, within: float | None = None) -> str:
    if value is None:
        return f"not within {within:g} s" if within else "-"
    return f"{value:.2f} s"


def rows(r: FailoverResult, wait: float) -> list[tuple[str, str]]:
    p50 = statistics.median(r.reconnect_s) if r.reconnect_s else None
    return [
        ("LCs on the killed replica / on the survivor", f"{len(r.moved)} / {len(r.stayed)}"),
        ("reports answered 200 (POSTs retried)", f"{r.reports_ok:,} ({r.failed_posts})"),
        ("before the kill: POST -> status visible, p50 / p99", f"{r.lag_before_ms[0]:,.0f} / {r.lag_before_ms[1]:,.0f} ms"),
        ("**reports lost** (answered 200, never in the status)", f"**{r.lost}**"),
        ("regressions (older value after a newer)", str(r.regressions)),
        ("**kill -> every CR's status current again** (shows a report posted after the kill)",
         f"**{secs(r.current_s, wait)}**"),
        ("kill -> every CR shows the last report answered before the kill", secs(r.caught_up_s, wait)),
        ("kill -> moved LCs reconnected (p50 / max)",
         f"{secs(p50)} / {secs(max(r.reconnect_s) if r.reconnect_s else None)}"),
        ("moved LCs not on the survivor at the end", str(len(r.not_moved))),
        ("**sessions dropped on the survivor**", f"**{len(r.dropped_nodes)}** ({r.link_polls:,} /readyz polls)"),
        ("survivor's hub sessions over the kill: opened / replaced / dead / broken",
         " / ".join(f"{r.hub[e]:.0f}" for e in HUB_EVENTS)),
        ("survivor's sessions at the end", f"{r.survivor_sessions:.0f}" if r.survivor_sessions is not None else "-"),
        ("kill -> the survivor leads", secs(r.leads_s, wait) if r.killed == "leader" else "(led already)"),
        ("Lease transitions / the survivor leads at the end", f"{r.transitions} / {'yes' if r.survivor_leads else 'no'}"),
        ("kill -> a JI created after the kill has its children", secs(r.children_s, wait)),
        ("load stop -> every outbox empty", secs(r.drained_s, wait)),
        ("load stop -> every JI shows its last report", secs(r.visible_s, wait)),
        ("processes that exited on their own", ", ".join(r.exited) or "none"),
    ]


def table(results: list[FailoverResult], wait: float) -> None:
    print("| measure | " + " | ".join(f"{r.killed} killed" for r in results) + " |")
    print("|---|" + "---|" * len(results))
    columns = [rows(r, wait) for r in results]
    for i, (label, _) in enumerate(columns[0]):
        print(f"| {label} | " + " | ".join(c[i][1] for c in columns) + " |")
    print()


def say(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


async def main(args: argparse.Namespace) -> int:
    results = []
    for kill in args.kill.split(","):
        say(f"{kill}: {args.lcs} LCs, one worker each at {args.rate:g} reports/s")
        results.append(await failover(args.lcs, kill=kill, seconds=args.seconds, kill_at=args.kill_at,
                                      rate=args.rate, wait=args.wait, election=args.election,
                                      keep=args.keep_logs, say=say))
    print(f"\nGM failover: 2 sedna-gm replicas behind a round-robin proxy, {args.lcs} sedna-lc, "
          f"{args.rate:g} reports/s per LC for {args.seconds:g} s, one replica SIGKILLed at {args.kill_at:g} s; "
          f"{args.election}; checkout {ROOT}\n")
    table(results, args.wait)
    bad = [r for r in results if r.lost or r.regressions or r.dropped_nodes or r.not_moved or r.exited
           or r.current_s is None]
    for r in bad:
        print(f"- {r.killed}: lost {r.lost}, regressions {r.regressions}, dropped {r.dropped}, "
              f"not moved {r.not_moved}, exited {r.exited} (logs in {r.log_dir})")
    return 1 if bad else 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lcs", type=int, default=100, help="LC processes (one node each)")
    p.add_argument("--kill", default="leader,follower", help="which replica to kill, one run each")
    p.add_argument("--seconds", type=float, default=40.0, help="load duration")
    p.add_argument("--kill-at", type=float, default=10.0, help="seconds into the load")
    p.add_argument("--rate", type=float, default=1.0, help="reports/s of each LC's worker")
    p.add_argument("--wait", type=float, default=90.0, help="longest wait for anything to settle")
    p.add_argument("--lease", default="15,10,2", help="lease duration, renew deadline, retry period (s)")
    p.add_argument("--keep-logs", action="store_true")
    parsed = p.parse_args()
    parsed.election = Election(*(float(x) for x in parsed.lease.split(",")))
    sys.exit(asyncio.run(main(parsed)))
