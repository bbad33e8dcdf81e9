"""Benchmark: the GM at fleet scale, as shipped, every service its own process.

N CRs (half JointInferenceServices, half FederatedLearningJobs, upstream's examples renamed)
are POSTed at once to a `sedna-devcluster` process; a `sedna-gm` process with its default
configuration converges them. Printed per N: time from the first POST to every CR converged
(observedGeneration current, a JI's two workers active, an FL job Running), the GM's writes
(create/update/patch/delete answered 2xx, from its /metrics) per CR beside the children each
CR needs, the GM's peak RSS (VmHWM) and RSS per CR, and the GM's CPU seconds per CR.

`--heap` runs the GM in this process instead, under tracemalloc, and prints where the memory
that is still held after convergence was allocated (the profile behind docs/benchmarks.md).

`UPSTREAM_GM=<path of upstream's sedna-gm binary>` adds a run of that GM at each N, with the
same config file (upstream's keys only; it has no /metrics, so only time, RSS and CPU, and
a CR counts as converged on its status alone, since upstream sets no observedGeneration).

    .venv/bin/python -m bench.gm_fleet [--n 1000,5000] [--heap]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import re
import sys
import time
import tracemalloc
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.procstat import cpu_seconds, memory_kib  # noqa: E402
from bench.status_harness import GROUP, NS, Proc, Stack, example_docs  # noqa: E402

# children per converged CR: a JI has two Deployments and a Service (the cloud worker's); an
# FL job its aggregation Pod and Service and two training Pods
CHILDREN = {"JointInferenceService": 3, "FederatedLearningJob": 4}
PLURALS = {"JointInferenceService": "jointinferenceservices", "FederatedLearningJob": "federatedlearningjobs",
           "Model": "models", "Dataset": "datasets"}
WRITES = ("create", "update", "patch", "delete")


def say(text: str) -> None:
    print(f"# {text}", flush=True)


def workload(n: int) -> tuple[list[dict], list[dict]]:
    """(what the CRs need first: Models and Datasets; the N CRs)."""
    docs = example_docs("joint-inference-helmet-detection.yaml") + \
        example_docs("federated-learning-surface-defect.yaml")
    needs = [d for d in docs if d["kind"] in ("Model", "Dataset")]
    ji = next(d for d in docs if d["kind"] == "JointInferenceService")
    fl = next(d for d in docs if d["kind"] == "FederatedLearningJob")
    crs = []
    for i in range(n):
        cr = copy.deepcopy(ji if i % 2 == 0 else fl)
        cr["metadata"] = {"name": f"{'ji' if i % 2 == 0 else 'fl'}-{i}", "namespace": NS}
        crs.append(cr)
    return needs, crs


def is_converged(obj: dict, *, generation: bool = True) -> bool:
    status = obj.get("status") or {}
    if generation and status.get("observedGeneration") != obj["metadata"].get("generation"):
        return False
    if obj["kind"] == "JointInferenceService":
        return status.get("active") == 2
    return status.get("phase") == "Running"


async def converged(stack: Stack, n: int, *, generation: bool = True) -> int:
    done = 0
    for plural in ("jointinferenceservices", "federatedlearningjobs"):
        body = await stack.api("GET", f"{GROUP}/namespaces/{NS}/{plural}")
        done += sum(1 for o in body["items"]
                    if is_converged({**o, "kind": body["kind"][:-4]}, generation=generation))
    return done


async def post_all(stack: Stack, objs: list[dict], limit: int = 64) -> None:
    sem = asyncio.Semaphore(limit)

    async def one(obj: dict) -> None:
        async with sem:
            await stack.api("POST", f"{GROUP}/namespaces/{NS}/{PLURALS[obj['kind']]}", obj, ok=(201, 409))

    await asyncio.gather(*(one(o) for o in objs))


async def events_written(stack: Stack) -> float:
    """Events the GM created or counted up (`sedna_gm_events_total`), which are writes too."""
    text = await stack._text(f"{stack.gm_url}/metrics")
    return sum(float(m.group(2)) for m in re.finditer(
        r'^sedna_gm_events_total\{outcome="(created|patched)"\}\s+([0-9.e+]+)$', text, re.M))


async def one_run(n: int, *, within: float) -> dict[str, float]:
    needs, crs = workload(n)
    stack = Stack((), gm_config="")
    async with stack.running([]):
        for obj in needs:
            await stack.api("POST", f"{GROUP}/namespaces/{NS}/{PLURALS[obj['kind']]}", obj, ok=(201, 409))
        await asyncio.sleep(1.0)  # the GM has listed and settled
        pid = stack.gm.proc.pid
        before = await stack.gm_requests()
        events0 = await events_written(stack)
        rss0, cpu0 = memory_kib(pid)["VmRSS"], cpu_seconds(pid)
        say(f"N={n}: GM RSS before the CRs {rss0 / 1024:.0f} MiB; posting {n} CRs")
        start = time.perf_counter()
        await post_all(stack, crs)
        posted = time.perf_counter() - start
        done = 0
        while time.perf_counter() - start < within:
            done = await converged(stack, n)
            if done == n:
                break
            await asyncio.sleep(0.5)
        elapsed = time.perf_counter() - start
        after = await stack.gm_requests()
        events = await events_written(stack) - events0
        mem, cpu = memory_kib(pid), cpu_seconds(pid) - cpu0
    writes = sum(after.get((v, c), 0) - before.get((v, c), 0) for v in WRITES for c in ("200", "201")) - events
    all_calls = sum(v - before.get(k, 0) for k, v in after.items() if k[0] not in ("hub", "apply"))
    children = sum(CHILDREN[c["kind"]] for c in crs)
    return {"n": n, "converged": done, "posted_s": posted, "converge_s": elapsed, "writes": writes,
            "events": events,
            "calls": all_calls, "children": children, "hwm_mib": mem["VmHWM"] / 1024,
            "rss_mib": mem["VmRSS"] / 1024, "rss0_mib": rss0 / 1024, "cpu_s": cpu}


async def upstream_run(n: int, binary: str, *, within: float) -> dict[str, float]:
    """The same N through upstream's GM binary (its config: kubeConfig and the websocket)."""
    needs, crs = workload(n)
    stack = Stack((), with_gm=False)
    async with stack.running([]):
        config = stack.dir / "upstream-gm.yaml"
        config.write_text(f"kubeConfig: {stack.kubeconfig}\nwebsocket: {{address: 127.0.0.1, port: {stack.gm_port}}}\n")
        gm = Proc("upstream-gm", [binary, "--config", str(config)], {}, stack.dir / "upstream-gm.log")
        await gm.start()
        try:
            for obj in needs:
                await stack.api("POST", f"{GROUP}/namespaces/{NS}/{PLURALS[obj['kind']]}", obj, ok=(201, 409))
            await asyncio.sleep(3.0)  # it has listed and settled
            pid = gm.proc.pid
            rss0, cpu0 = memory_kib(pid)["VmRSS"], cpu_seconds(pid)
            start = time.perf_counter()
            await post_all(stack, crs)
            posted = time.perf_counter() - start
            done = 0
            while time.perf_counter() - start < within:
                done = await converged(stack, n, generation=False)
                if done == n:
                    break
                await asyncio.sleep(0.5)
            elapsed = time.perf_counter() - start
            mem, cpu = memory_kib(pid), cpu_seconds(pid) - cpu0
        finally:
            await gm.stop()
    return {"n": n, "converged": done, "posted_s": posted, "converge_s": elapsed, "hwm_mib": mem["VmHWM"] / 1024,
            "rss_mib": mem["VmRSS"] / 1024, "rss0_mib": rss0 / 1024, "cpu_s": cpu}


def table(runs: list[dict[str, float]]) -> None:
    print("\nGM at fleet scale: sedna-devcluster and sedna-gm (default config) as processes; "
          "N = half JointInferenceServices, half FederatedLearningJobs\n")
    print("| measure | " + " | ".join(f"N = {int(r['n']):,}" for r in runs) + " |")
    print("|---|" + "---|" * len(runs))
    rows = [
        ("converged", lambda r: f"{int(r['converged']):,} of {int(r['n']):,}"),
        ("POST of all CRs (s)", lambda r: f"{r['posted_s']:.1f}"),
        ("first POST -> all converged (s)", lambda r: f"{r['converge_s']:.1f}"),
        ("GM writes per CR, Events apart (children per CR)",
         lambda r: f"{r['writes'] / r['n']:.2f} ({r['children'] / r['n']:.1f})"),
        ("GM Event writes per CR (created or counted)", lambda r: f"{r['events'] / r['n']:.2f}"),
        ("GM API calls per CR", lambda r: f"{r['calls'] / r['n']:.2f}"),
        ("GM peak RSS (MiB)", lambda r: f"{r['hwm_mib']:.0f}"),
        ("GM RSS after, per CR above the idle GM (KiB)",
         lambda r: f"{(r['rss_mib'] - r['rss0_mib']) * 1024 / r['n']:.1f}"),
        ("GM CPU per CR (ms)", lambda r: f"{r['cpu_s'] * 1000 / r['n']:.2f}"),
    ]
    for label, cell in rows:
        print(f"| {label} | " + " | ".join(cell(r) for r in runs) + " |")


async def heap(n: int, *, within: float, top: int) -> None:
    """The GM in this process under tracemalloc: what it holds once N CRs have converged."""
    from gm.app import GlobalManager
    from gm.config import parse_config

    needs, crs = workload(n)
    stack = Stack((), with_gm=False)
    async with stack.running([]):
        cfg = parse_config(f"kubeConfig: {stack.kubeconfig}\nwebsocket: {{address: 127.0.0.1, port: 0}}\n")
        tracemalloc.start(25)
        gm = GlobalManager(cfg)
        await gm.start()
        await gm.informers.wait_synced()
        for obj in needs:
            await stack.api("POST", f"{GROUP}/namespaces/{NS}/{PLURALS[obj['kind']]}", obj, ok=(201, 409))
        base = tracemalloc.take_snapshot()
        await post_all(stack, crs)
        start = time.perf_counter()
        while time.perf_counter() - start < within and await converged(stack, n) < n:  # noqa: ASYNC110 - polling the API
            await asyncio.sleep(0.5)
        await asyncio.sleep(2.0)
        snap = tracemalloc.take_snapshot()
        caches = [(str(inf.gvr), len(inf.store), sum(len(orjson.dumps(o)) for o in inf.store.list()))
                  for inf in gm.informers._informers.values()]
        await gm.stop()
    stats = snap.compare_to(base, "traceback")
    total = sum(s.size_diff for s in stats)
    print(f"\nheld after N={n} converged: {total / 2**20:.1f} MiB above the synced idle GM "
          f"({total / n / 1024:.1f} KiB per CR); top allocation sites:\n")
    by_site: dict[str, int] = {}
    for st in stats:
        ours = [f for f in st.traceback if "/gm/" in f.filename or "/shared/" in f.filename]
        where = f"{ours[-1].filename.replace(str(ROOT) + '/', '')}:{ours[-1].lineno}" if ours else "(outside gm)"
        by_site[where] = by_site.get(where, 0) + st.size_diff
    print("innermost GM frame | MiB")
    for where, size in sorted(by_site.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{where} | {size / 2**20:.2f}")
    print()
    print("cache | objects | JSON bytes | per object")
    for name, count, size in sorted(caches, key=lambda c: -c[2]):
        print(f"{name} | {count:,} | {size:,} | {size // max(count, 1):,}")
    print()
    for s in stats[:top]:
        frames = [f"{f.filename.replace(str(ROOT) + '/', '')}:{f.lineno}" for f in s.traceback[-4:]]
        print(f"{s.size_diff / 2**20:8.1f} MiB {s.count_diff:>9,} blocks  {' <- '.join(reversed(frames))}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", default="1000,5000", help="CR counts, comma-separated")
    p.add_argument("--within", type=float, default=600.0, help="seconds to wait for convergence")
    p.add_argument("--heap", action="store_true", help="the GM in-process under tracemalloc")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    counts = [int(x) for x in args.n.split(",") if x]
    if args.heap:
        for n in counts:
            asyncio.run(heap(n, within=args.within, top=args.top))
        return
    runs = []
    for n in counts:
        runs.append(asyncio.run(one_run(n, within=args.within)))
        say(orjson.dumps(runs[-1]).decode())
    table(runs)
    upstream = os.environ.get("UPSTREAM_GM")
    if upstream:
        print("\nUpstream's GM (UPSTREAM_GM), the same CRs:\n")
        print("| N | converged | first POST -> all converged (s) | peak RSS (MiB) | CPU per CR (ms) |")
        print("|---|---|---|---|---|")
        for n in counts:
            r = asyncio.run(upstream_run(n, upstream, within=args.within))
            print(f"| {n:,} | {int(r['converged']):,} | {r['converge_s']:.1f} | {r['hwm_mib']:.0f} | "
                  f"{r['cpu_s'] * 1000 / n:.2f} |")


if __name__ == "__main__":
    main()
