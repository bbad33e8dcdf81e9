"""Benchmark: the GM's websocket hub holding tens of thousands of LC sessions.

Every side is its own process. The GM is `sedna-gm` with its default configuration (only its
addresses set) on a `sedna-devcluster` (bench/status_harness.py's `Stack`); the LCs are lean
clients (bench/lean_lc.py), several processes of them, each running thousands of sessions that
do on the wire what lc/link does, as callbacks, so that the clients take as little as possible
of the 2 cores they share with the GM.

Scenarios (figures: the GM's CPU share and RSS from /proc, RSS per session; every dial phase
also says how busy the machine's CPUs were, and how much the VM's host took):

- `bare`: the reference, in the same run: the same clients against a bare aiohttp websocket
  server (hello and an empty snapshot, nothing else): dial at once, steady state, all cut.
- `hold`: N nodes (a Dataset on each), N sessions dialled at once on one GM; the capacity the GM
  logged, sessions beyond it answered 503 (not reset), then the steady state of heartbeats.
- `two`: N sessions over two GM processes on one cluster (every replica runs the hub), each dial
  to one of them at random, as a Service would spread them.
- `reconnect`: N sessions established, then every one cut at once (the client aborts its socket)
  and redialled after the LC's backoff: time until all have their snapshot again, dials timed out,
  503s, resets, and tracebacks in the GM's log.
- `storm`: N nodes that each need real objects (their Dataset, an IncrementalLearningJob on it
  and the job's two Models, which every node shares) connect at once for the first time, then
  once more after a cut: time until every snapshot is complete.
- `heap`: the hub alone (gm/edge/hub.py on an in-memory object source, served as the GM serves
  it) in a process of its own, N sessions, and what each session holds: RSS per session and, with
  --trace, the allocations tracemalloc attributes to the sessions by line.

    .venv/bin/python bench/hub_fleet.py [--only bare,hold,two,reconnect,storm,heap] [--bare 10000]
        [--hold 20000] [--two 30000] [--reconnect 10000] [--storm 5000] [--heap 5000] [--trace]
        [--reports] [--steady 60]

BENCH_PYSPY=gm (BENCH_PYSPY_SECONDS) samples the GM (or the hub alone) with py-spy through each
measured phase; BENCH_DIR keeps the logs and profiles there.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import re
import resource
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parents[1]
sys.path.insert(0, str(ROOT))

from bench.hub_servers import HubProc, dataset, print_bare, scenario_bare, seconds  # noqa: E402
from bench.lean_lc import Clients, node_name  # noqa: E402
from bench.procstat import (  # noqa: E402
    Usage,
    cpu_seconds,
    descriptors,
    listen_overflows,
    py_spy,
    rss_kib,
)
from bench.status_harness import GROUP, NS, Proc, Stack, example_docs  # noqa: E402
from shared.ports import free_port  # noqa: E402


def say(text: str) -> None:
    print(f"# {text}", flush=True)


# ---- the GM side ------------------------------------------------------------------------------


def _log_dir() -> Path:
    path = Path(os.environ.get("BENCH_DIR") or tempfile.mkdtemp(prefix="hub-fleet-"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def gm_log_counts(log: Path) -> dict[str, Any]:
    text = log.read_text(errors="replace") if log.exists() else ""
    capacity = re.findall(r"hub session capacity.*?capacity=(\d+).*?fd_limit=(\d+)", text)
    return {"tracebacks": text.count("Traceback"), "errors": len(re.findall(r"\bERROR\b", text)),
            "capacity": int(capacity[-1][0]) if capacity else None,
            "fd_limit": int(capacity[-1][1]) if capacity else None,
            "at_capacity_lines": text.count("hub at its session capacity")}


async def gm_metric(stack: Stack, url: str, name: str) -> dict[str, float]:
    text = await stack._text(f"{url}/metrics")
    return {m.group(1) or "": float(m.group(2))
            for m in re.finditer(rf'^{name}(?:\{{([^}}]*)\}})?\s+([0-9.e+]+)$', text, re.M)}


# ---- objects --------------------------------------------------------------------------------


def learning_job(node: str, template: dict) -> dict:
    """Upstream's incremental-learning example, renamed, on `node`, using its Dataset."""
    job = copy.deepcopy(template)
    job["metadata"] = {"name": f"il-{node}", "namespace": NS}
    job["spec"]["dataset"]["name"] = f"ds-{node}"
    for stage in ("trainSpec", "evalSpec", "deploySpec"):
        job["spec"][stage]["template"]["spec"]["nodeName"] = node
    # PyYAML reads the example's unquoted 02:00 as a number; Kubernetes' reader keeps a string
    job["spec"]["trainSpec"]["trigger"]["timer"] = {"start": "02:00", "end": "20:00"}
    return job


async def post_all(stack: Stack, objs: Iterable[dict], limit: int = 64) -> None:
    plurals = {"Dataset": "datasets", "Model": "models", "IncrementalLearningJob": "incrementallearningjobs"}
    sem = asyncio.Semaphore(limit)

    async def one(obj: dict) -> None:
        async with sem:
            await stack.api("POST", f"{GROUP}/namespaces/{NS}/{plurals[obj['kind']]}", obj, ok=(201, 409))

    await asyncio.gather(*(one(o) for o in objs))


async def settle(pid: int, *, below: float = 0.05, within: float = 300.0) -> float:
    """Wait until the process uses less than `below` of a core over 2 s; seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        if (await Usage.over(pid, 2.0)).cpu_share < below:
            break
    return time.monotonic() - t0


# ---- the hub alone (heap scenario) ----------------------------------------------------------


async def scenario_heap(n: int, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    """The hub alone: RSS per session, tasks per session, CPU of the heartbeats."""
    hub = await HubProc(n, trace=args.trace, log_dir=log_dir).start()
    clients: Clients | None = None
    try:
        await hub.ask("base")
        before = await hub.ask("mem")
        clients = await Clients(n, [f"ws://127.0.0.1:{hub.port}/"], report=True, log_dir=log_dir).start()
        took, _ = await clients.run_until("dial", lambda t: t.sessions >= n and t.acks >= n)
        await asyncio.sleep(2.0)
        after = await hub.ask("mem")
        assert hub.proc is not None
        probe = py_spy(hub.proc.pid, "hub-steady", log_dir, args.steady)
        usage = await Usage.over(hub.proc.pid, args.steady)
        if probe is not None:
            probe.wait()
        sessions = after["sessions"]
        out = {"sessions": sessions, "connect_s": took, "rss_before_mb": before["rss_kb"] / 1024,
               "rss_after_mb": after["rss_kb"] / 1024,
               "kb_per_session": (after["rss_kb"] - before["rss_kb"]) / max(sessions, 1),
               "tasks_per_session": (after["tasks"] - before["tasks"]) / max(sessions, 1),
               "steady_cpu_share": usage.cpu_share, "clients_cpu_s": clients.total().cpu}
        if "top" in after:
            out["traced_kb_per_session"] = after["traced"] / 1024 / max(sessions, 1)
            out["top"] = [(where, round(size / max(sessions, 1)), count) for where, size, count in after["top"]]
        return out
    finally:
        if clients is not None:
            await clients.stop()
        await hub.stop()


# ---- scenarios on real GM processes ------------------------------------------------------------


def ws_url(port: int) -> str:
    return f"ws://127.0.0.1:{port}/"


async def second_gm(stack: Stack) -> Proc:
    """Another sedna-gm on the same cluster, its own port (every replica serves the hub)."""
    port = free_port()
    config = stack.dir / "gm-2.yaml"
    config.write_text(f"kubeConfig: {stack.kubeconfig}\nwebsocket: {{address: 127.0.0.1, port: {port}}}\n")
    gm = Proc("gm-2", [*gm_program(), "--config", str(config)], {}, stack.dir / "gm-2.log")
    gm.port = port  # type: ignore[attr-defined]
    await gm.start()
    await stack._wait_ok(f"http://127.0.0.1:{port}/readyz", 60.0, gm)
    return gm


def gm_program() -> list[str]:
    script = Path(sys.executable).parent / "sedna-gm"
    return [str(script)] if os.access(script, os.X_OK) else [sys.executable, "-m", "gm.cli"]


async def with_datasets(stack: Stack, n: int) -> float:
    """N Datasets, one per node; seconds the GM took to settle after them."""
    t0 = time.monotonic()
    await post_all(stack, (dataset(node_name(i)) for i in range(n)))
    say(f"{n} Datasets created in {time.monotonic() - t0:.1f} s")
    return await settle(stack.gm.proc.pid)


async def scenario_hold(n: int, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    """N sessions at once on one GM: its capacity, the 503s beyond it, the steady state."""
    stack = Stack((), workdir=log_dir / f"hold-{n}")
    async with stack.running([]):
        await with_datasets(stack, n)
        pid = stack.gm.proc.pid
        capacity = gm_log_counts(stack.gm.log)["capacity"] or n
        want = min(n, capacity)
        rss0, fds0 = rss_kib(pid), descriptors(pid)
        clients = await Clients(n, [ws_url(stack.gm_port)], report=args.reports, log_dir=stack.dir).start()
        try:
            probe = py_spy(pid, f"hold-{n}-dial", stack.dir, 60)
            c0, lo = cpu_seconds(pid), listen_overflows()
            took, acked = await clients.run_until("dial",
                                          lambda t: t.sessions >= want and (not args.reports or t.acks >= want))
            overflows = listen_overflows() - lo
            dial_cpu, dial_clients_cpu = cpu_seconds(pid) - c0, clients.total().cpu
            if probe is not None:
                probe.wait()
            await asyncio.sleep(5.0)  # the sessions beyond the capacity keep redialling meanwhile
            probe = py_spy(pid, f"hold-{n}-steady", stack.dir, args.steady)
            usage = await Usage.over(pid, args.steady)
            total = clients.total()
            fds = descriptors(pid)
        finally:
            await clients.stop()
        logs = gm_log_counts(stack.gm.log)
    return {"n": n, "capacity": capacity, "fd_limit": logs["fd_limit"], "sessions": total.sessions,
            "connect_s": took, "acked_s": acked, "refused_503": total.refused_503, "resets": total.resets,
            "timeouts": total.timeouts, "acks": total.acks, "cpu_share": usage.cpu_share, "rss_mb": usage.rss_kb / 1024,
            "rss0_mb": rss0 / 1024, "kb_per_session": (usage.rss_kb - rss0) / max(total.sessions, 1),
            "fds": fds - fds0, "tracebacks": logs["tracebacks"], "at_capacity_lines": logs["at_capacity_lines"],
            "dial_cpu_s": dial_cpu, "dial_clients_cpu_s": dial_clients_cpu, "overflows": overflows}


async def scenario_two(n: int, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    """N sessions over two GM processes, each dial to either at random."""
    stack = Stack((), workdir=log_dir / f"two-{n}")
    async with stack.running([]):
        await with_datasets(stack, n)
        other = await second_gm(stack)
        try:
            await settle(other.proc.pid)
            pids = [stack.gm.proc.pid, other.proc.pid]
            rss0 = [rss_kib(p) for p in pids]
            clients = await Clients(n, [ws_url(stack.gm_port), ws_url(other.port)], report=args.reports,
                                    log_dir=stack.dir).start()
            try:
                lo = listen_overflows()
                took, acked = await clients.run_until("dial",
                                              lambda t: t.sessions >= n and (not args.reports or t.acks >= n))
                overflows = listen_overflows() - lo
                usages = await asyncio.gather(*(Usage.over(p, args.steady) for p in pids))
                fds = [descriptors(p) for p in pids]
                total = clients.total()
                per_gm = [await gm_metric(stack, url, "sedna_gm_hub_sessions_active")
                          for url in (stack.gm_url, f"http://127.0.0.1:{other.port}")]
            finally:
                await clients.stop()
            logs = [gm_log_counts(stack.gm.log), gm_log_counts(other.log)]
        finally:
            await other.stop()
    return {"n": n, "sessions": total.sessions, "connect_s": took, "acked_s": acked, "refused_503": total.refused_503,
            "resets": total.resets, "timeouts": total.timeouts, "acks": total.acks, "overflows": overflows,
            "gms": [{"sessions": sum(m.values()), "cpu_share": u.cpu_share, "rss_mb": u.rss_kb / 1024,
                     "rss0_mb": r0 / 1024, "fds": f, "tracebacks": lg["tracebacks"], "capacity": lg["capacity"]}
                    for m, u, r0, f, lg in zip(per_gm, usages, rss0, fds, logs, strict=True)]}


async def scenario_reconnect(n: int, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    """N sessions up; every one cut at once and redialled after the LC's backoff."""
    stack = Stack((), workdir=log_dir / f"reconnect-{n}")
    async with stack.running([]):
        await with_datasets(stack, n)
        pid = stack.gm.proc.pid
        clients = await Clients(n, [ws_url(stack.gm_port)], report=False, log_dir=stack.dir).start()
        try:
            first, _ = await clients.run_until("dial", lambda t: t.sessions >= n)
            await settle(pid)
            before = clients.total()
            tracebacks = gm_log_counts(stack.gm.log)["tracebacks"]
            probe = py_spy(pid, f"reconnect-{n}", stack.dir, 60)
            c0, lo = cpu_seconds(pid), listen_overflows()
            took, _ = await clients.run_until("cut", lambda t: t.synced >= before.synced + n and t.sessions >= n)
            cpu, overflows, rss = cpu_seconds(pid) - c0, listen_overflows() - lo, rss_kib(pid)
            if probe is not None:
                probe.wait()
            after = clients.total()
        finally:
            await clients.stop()
        logs = gm_log_counts(stack.gm.log)
    return {"n": n, "first_connect_s": first, "reconnect_s": took, "gm_cpu_s": cpu, "overflows": overflows,
            "rss_mb": rss / 1024,
            "timeouts": after.timeouts - before.timeouts, "refused_503": after.refused_503 - before.refused_503,
            "resets": after.resets - before.resets, "dials": after.dials - before.dials,
            "tracebacks": logs["tracebacks"] - tracebacks, "errors": logs["errors"]}


async def scenario_storm(n: int, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    """N nodes each needing its Dataset, an IncrementalLearningJob and that job's two Models
    (shared by all): every one connects at once for the first time, then once more after a cut."""
    docs = example_docs("incremental-learning-helmet-detection.yaml")
    models = [d for d in docs if d["kind"] == "Model"]
    [template] = [d for d in docs if d["kind"] == "IncrementalLearningJob"]
    # the controllers' periodic resync of N jobs is kept out of the measured windows
    stack = Stack((), workdir=log_dir / f"storm-{n}", gm_config="minResyncPeriodSeconds: 3600\n")
    async with stack.running([]):
        await post_all(stack, models)
        await with_datasets(stack, n)
        t0 = time.monotonic()
        await post_all(stack, (learning_job(node_name(i), template) for i in range(n)))
        say(f"{n} IncrementalLearningJobs created in {time.monotonic() - t0:.1f} s")
        pid = stack.gm.proc.pid
        waited = await settle(pid, within=600.0)
        await settle(stack.devcluster.proc.pid, below=0.1, within=300.0)
        say(f"the GM settled after {waited:.0f} s")
        clients = await Clients(n, [ws_url(stack.gm_port)], report=False, log_dir=stack.dir).start()
        try:
            runs = {}
            for label, command in (("first", "dial"), ("again", "cut")):
                before = clients.total()
                probe = py_spy(pid, f"storm-{n}-{label}", stack.dir, 60)
                c0, lo = cpu_seconds(pid), listen_overflows()
                took, _ = await clients.run_until(command,
                                          lambda t, b=before: t.synced >= b.synced + n and t.sessions >= n)
                after = clients.total()
                runs[label] = {"seconds": took, "overflows": listen_overflows() - lo, "rss_mb": rss_kib(pid) / 1024,
                               "gm_cpu_s": cpu_seconds(pid) - c0, "objects": after.objects - before.objects,
                               "timeouts": after.timeouts - before.timeouts,
                               "refused_503": after.refused_503 - before.refused_503,
                               "resets": after.resets - before.resets}
                if probe is not None:
                    probe.wait()
                await settle(pid)
        finally:
            await clients.stop()
        logs = gm_log_counts(stack.gm.log)
    return {"n": n, "runs": runs, "tracebacks": logs["tracebacks"]}


def _share(cpu: float, seconds: float | None) -> str:
    return f" ({cpu / seconds * 100:.0f}% of a core)" if seconds else ""


def print_hold(r: dict[str, Any]) -> None:
    print(f"hold: {r['n']} sessions dialled at once on one GM (capacity {r['capacity']} logged, "
          f"descriptor limit {r['fd_limit']})")
    acked = f", every report acked in {seconds(r['acked_s'])}" if r["acks"] else ""
    print(f"  {r['sessions']} sessions up in {seconds(r['connect_s'])}{acked}; "
          f"beyond the capacity: {r['refused_503']} answers 503, {r['resets']} resets, {r['timeouts']} dial timeouts; "
          f"{r['at_capacity_lines']} capacity log line(s), {r['tracebacks']} tracebacks")
    print(f"  CPU while dialling: GM {r['dial_cpu_s']:.1f} s, clients {r['dial_clients_cpu_s']:.1f} s "
          f"({r['dial_cpu_s'] * 1000 / max(r['sessions'], 1):.2f} ms of GM per session); "
          f"{r['overflows']} listen-queue overflows")
    print(f"  steady state: {r['cpu_share'] * 100:.1f}% of a core, RSS {r['rss0_mb']:.0f} -> {r['rss_mb']:.0f} MB "
          f"({r['kb_per_session']:.1f} KB per session), +{r['fds']} descriptors")


def print_two(r: dict[str, Any]) -> None:
    acked = f" ({r['acks']} reports acked in {seconds(r['acked_s'])})" if r["acks"] else ""
    print(f"two: {r['n']} sessions over two GM processes, each dial to either: {r['sessions']} up in "
          f"{seconds(r['connect_s'])}{acked}; {r['refused_503']} 503s, {r['resets']} resets, {r['timeouts']} dial timeouts, "
          f"{r['overflows']} listen-queue overflows")
    for k, g in enumerate(r["gms"], 1):
        print(f"  GM {k}: {g['sessions']:.0f} sessions, {g['cpu_share'] * 100:.1f}% of a core, RSS {g['rss0_mb']:.0f} -> "
              f"{g['rss_mb']:.0f} MB ({(g['rss_mb'] - g['rss0_mb']) * 1024 / max(g['sessions'], 1):.1f} KB per "
              f"session), {g['tracebacks']} tracebacks")


def print_reconnect(r: dict[str, Any]) -> None:
    print(f"reconnect: {r['n']} sessions (first connected in {seconds(r['first_connect_s'])}), all cut at once: "
          f"all back with their snapshot in {seconds(r['reconnect_s'])}, GM CPU {r['gm_cpu_s']:.1f} s"
          f"{_share(r['gm_cpu_s'], r['reconnect_s'])}, GM RSS {r['rss_mb']:.0f} MB")
    print(f"  {r['dials']} dials: {r['timeouts']} timed out, {r['refused_503']} answered 503, {r['resets']} resets; "
          f"{r['overflows']} listen-queue overflows; {r['tracebacks']} tracebacks in the GM log")


def print_storm(r: dict[str, Any]) -> None:
    for label, run in r["runs"].items():
        what = "connect for the first time" if label == "first" else "are cut and reconnect"
        print(f"storm: {r['n']} nodes (Dataset, IncrementalLearningJob, 2 shared Models each) {what}: "
              f"every snapshot complete in {seconds(run['seconds'])}, {run['objects']} objects, GM CPU "
              f"{run['gm_cpu_s']:.1f} s{_share(run['gm_cpu_s'], run['seconds'])}, GM RSS {run['rss_mb']:.0f} MB; "
              f"{run['timeouts']} dial timeouts, {run['refused_503']} 503s, {run['resets']} resets, "
              f"{run['overflows']} listen-queue overflows")
    print(f"  {r['tracebacks']} tracebacks in the GM log")


def print_heap(r: dict[str, Any]) -> None:
    print(f"heap: {r['sessions']} sessions on the hub alone, connected in {r['connect_s']:.1f} s")
    print(f"  RSS {r['rss_before_mb']:.0f} -> {r['rss_after_mb']:.0f} MB: {r['kb_per_session']:.1f} KB per session, "
          f"{r['tasks_per_session']:.2f} tasks per session; heartbeats: {r['steady_cpu_share'] * 100:.1f}% of a core")
    if "top" in r:
        print(f"  traced: {r['traced_kb_per_session']:.1f} KB per session; bytes per session by line:")
        for where, size, count in r["top"]:
            print(f"    {size:>7} B  {count:>8}  {where}")


async def bench_main(args: argparse.Namespace) -> None:
    only = set(args.only.split(","))
    log_dir = _log_dir()
    say(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
        f"descriptor limit {resource.getrlimit(resource.RLIMIT_NOFILE)}; logs in {log_dir}")
    for name, scenario, show in (("bare", scenario_bare, print_bare),
                                 ("hold", scenario_hold, print_hold), ("two", scenario_two, print_two),
                                 ("reconnect", scenario_reconnect, print_reconnect),
                                 ("storm", scenario_storm, print_storm), ("heap", scenario_heap, print_heap)):
        if name in only:
            show(await scenario(getattr(args, name), args, log_dir))
            sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="bare,hold,two,reconnect,storm,heap")
    parser.add_argument("--bare", type=int, default=10000, help="sessions on the reference server")
    parser.add_argument("--hold", type=int, default=20000)
    parser.add_argument("--two", type=int, default=30000)
    parser.add_argument("--reconnect", type=int, default=10000)
    parser.add_argument("--storm", type=int, default=5000)
    parser.add_argument("--heap", type=int, default=5000)
    parser.add_argument("--trace", action="store_true", help="heap: tracemalloc by line")
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of steady state measured")
    parser.add_argument("--reports", action="store_true",
                        help="hold, two: every session sends one status report and waits for its ack "
                             "(the GM's RSS then also holds the statuses written)")
    args = parser.parse_args()
    import uvloop
    uvloop.run(bench_main(args))


if __name__ == "__main__":
    main()
