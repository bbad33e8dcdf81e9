"""Benchmark: the status path measured from outside, every service in its own process.

A worker POSTs `/sedna/workers/<name>/info` to the LC -> the LC commits it to its outbox and
answers 200 -> websocket -> GM -> CR status write on the API server. `sedna-devcluster`,
`sedna-gm` (its default config) and `sedna-lc` run as separate processes; this one plays the
workers and watches the CRs (list+watch, resumed after drops). Every report carries the next
`inferenceNumber` of its worker, so the status tells which report it shows; a report counts as
applied when a watch shows its value or a later one ("never seen": superseded before a watch
saw its own value). Not a test: prints tables (markdown) and asserts no timing.

Parts (`--only a,b,...`; default a,b,c,d, plus e when `--soak SECONDS` is given):
  a  one worker, one JI, at 100 and at 1,000 reports/s: POST -> status visible
  b  100 workers on 100 JIs at 10 reports/s each
  c  status writes per report and API calls per status write (GM /metrics before/after each
     run of a, b and d; the dev cluster keeps no request counts of its own)
  d  10% of JI status writes failing at 1,000 reports/s, and 50% failing for 20 ordered reports
  e  soak: 2 LCs, 40 workers at 10 reports/s in all, Datasets growing, 5% of all API requests
     failing, watches cut every 60 s, the LCs and the GM SIGKILLed and restarted in turn

    .venv/bin/python bench/status_path.py [--only a,b,c,d] [--soak 120]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.status_harness import (  # noqa: E402
    JI_PLURAL,
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
    soak,
)

NODE = "edge-node-1"


def say(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


# ---- one measured run ---------------------------------------------------------------------------


@dataclass
class Run:
    label: str
    reports: int
    ok: int
    send_seconds: float
    p50: float
    p99: float
    applied: int
    never_seen: int
    last_visible: float | None  # last POST -> every object shows its last value (s)
    wait: float
    regressions: int
    api: dict  # (verb, code) -> delta of sedna_gm_api_requests_total
    hub: dict  # result -> delta of sedna_gm_hub_status_reports_total
    apply: dict  # le -> delta of sedna_gm_status_pipeline_apply_seconds_bucket (cumulative)
    status_events: int  # watch events of the objects in the window (successful writes that changed them)
    event_writes: dict  # ADDED/MODIFIED watch events of Events about the JIs (the GM's Event creates/patches)
    shown: str = ""  # what the CR showed at the end, when it matters
    crashes: list = field(default_factory=list)  # services that exited on their own (restarted)

    @property
    def rate(self) -> float:
        return self.reports / self.send_seconds if self.send_seconds > 0 else float("nan")

    def writes(self, verb: str, codes: str = "any") -> int:
        return int(sum(v for (vb, code), v in self.api.items() if vb == verb and _code_class(code) in
                       ({"200", "409", "5xx", "other"} if codes == "any" else {codes})))


def _code_class(code: str) -> str:
    if code in ("200", "201"):
        return "200"
    if code == "409":
        return "409"
    if code.startswith("5"):
        return "5xx"
    return "other"


async def measured(label: str, stack: Stack, tracker: Tracker, keys: list[str], load, *,
                   wait: float) -> Run:
    """Run `load()` (which posts reports for `keys`); wait until each key shows its last value."""
    tracks = [tracker.track(k) for k in keys]
    marks = [len(t.reports) for t in tracks]
    events0 = sum(t.events for t in tracks)
    regress0 = tracker.regressions()
    ev0 = dict(tracker.event_writes)
    before = await stack.gm_requests()
    t0 = time.perf_counter()
    await load()
    new = [r for t, m in zip(tracks, marks, strict=True) for r in t.reports[m:]]
    last_post = max(r.t_post for r in new)
    ok = [r for r in new if r.ok]
    want = {k: t.reports[-1].value for k, t, m in zip(keys, tracks, marks, strict=True) if len(t.reports) > m}
    done = await tracker.wait_visible(want, wait)
    await _quiet(stack)
    after = await stack.gm_requests()
    p50, p99 = quantiles(latencies_ms(ok))
    seen = {id(r): r.value in t.seen for t, m in zip(tracks, marks, strict=True) for r in t.reports[m:]}
    return Run(label=label, reports=len(new), ok=len(ok), send_seconds=last_post - t0, p50=p50, p99=p99,
               applied=sum(1 for r in ok if r.t_visible is not None),
               never_seen=sum(1 for r in ok if not seen[id(r)]),
               last_visible=None if done is None else done - last_post, wait=wait,
               regressions=tracker.regressions() - regress0,
               api={k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)
                    if after.get(k, 0) != before.get(k, 0) and k[0] not in ("hub", "apply")},
               hub={k[1]: after.get(k, 0) - before.get(k, 0) for k in after if k[0] == "hub"},
               apply={k[1]: after.get(k, 0) - before.get(k, 0) for k in after if k[0] == "apply"},
               event_writes={k: v - ev0.get(k, 0) for k, v in tracker.event_writes.items()},
               status_events=sum(t.events for t in tracks) - events0,
               shown=f"#{max(0, (tracks[0].high or 0) - new[0].value + 1)} of {len(new)}" if len(keys) == 1 else "")


async def _quiet(stack: Stack, within: float = 5.0) -> None:
    """Let the GM finish what it was doing (outboxes empty, or `within` s) before counting."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        sizes = [await stack.outbox_size(n) for n in stack.lcs]
        if all(s == 0 for s in sizes):
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)


async def setup(stack: Stack, jis: list[str], tracker: Tracker) -> tuple[list[Worker], list[Watch]]:
    await stack.wait_linked()
    for m in ji_models():
        await stack.create(m)
    for name in jis:
        await stack.create(ji_object(name, NODE))
    def on_event(kind: str, obj: dict) -> None:
        if (obj.get("involvedObject") or {}).get("kind") == "JointInferenceService":
            tracker.event_writes[kind] = tracker.event_writes.get(kind, 0) + 1

    watches = [Watch(stack, JI_PLURAL, lambda o, t: tracker.observe(o["metadata"]["name"], ji_value(o), t)).start(),
               Watch(stack, "events", lambda o, t: None, on_event=on_event, api="/api/v1").start()]
    workers = [Worker(stack, NODE, f"{name}-edge", name, tracker) for name in jis]
    await warm(workers, tracker)
    return workers, watches


async def warm(workers: list[Worker], tracker: Tracker, within: float = 120.0) -> None:
    """One report per worker, visible, before anything is timed (the path is up)."""
    recs = await asyncio.gather(*(w.report(retry_for=30) for w in workers))
    if await tracker.wait_visible({w.ji: r.value for w, r in zip(workers, recs, strict=True)}, within) is None:
        raise RuntimeError("warm-up reports not visible")


# ---- the parts ----------------------------------------------------------------------------------


async def on_fresh_stack(args, label: str, jis: list[str], load, *, faults: float = 0.0,
                         wait: float, settle: float = 0.0) -> Run:
    """One measured run on its own dev cluster, GM and LC, so no backlog of an earlier run
    is in its figures. `load(workers)` posts the reports; `faults`: share of JI status writes
    failing, set after the warm-up."""
    tracker = Tracker()
    stack = Stack([NODE], keep=args.keep_logs)
    watches: list[Watch] = []
    say(f"{label}: dev cluster, GM, LC {NODE}, {len(jis)} JI(s) (state in {stack.dir})")
    async with stack.running(watches):
        workers, started = await setup(stack, jis, tracker)
        watches += started
        if faults:
            await stack.set_faults(_faults(faults))  # only now: setup and warm-up ran fault-free
        run = await measured(label, stack, tracker, jis, lambda: load(workers), wait=wait)
        say(f"{label}: GM API calls in the window {sorted(run.api.items())}")
        if settle:
            await asyncio.sleep(settle)  # keep watching for an older value
            run.regressions = tracker.regressions()
        if stack.crashes:
            say(f"{label}: restarted after exiting on their own: {stack.crashes}")
        run.crashes = list(stack.crashes)
        return run


async def all_runs(args) -> dict[str, Run]:
    runs: dict[str, Run] = {}
    parts = set(args.only)
    if parts & {"a", "c", "d"}:
        runs["a100"] = await on_fresh_stack(args, "a: 1 worker, 100/s", ["ji-a"],
                                            lambda ws: ws[0].paced(100, args.a_seconds_100), wait=args.wait)
        runs["a1000"] = await on_fresh_stack(args, "a: 1 worker, 1000/s", ["ji-a"],
                                             lambda ws: ws[0].paced(1000, args.a_seconds_1000), wait=args.wait)
    if parts & {"b", "c"}:
        runs["b"] = await on_fresh_stack(args, f"b: {args.b_workers} workers x {args.b_rate:g}/s",
                                         [f"ji-b-{i}" for i in range(args.b_workers)],
                                         lambda ws: _team(ws, args.b_rate, args.b_seconds), wait=args.wait)
    if "d" in parts:
        runs["burst0"] = await on_fresh_stack(args, "d: 20 ordered reports, no faults", ["ji-d"],
                                              lambda ws: _burst(ws[0], 20), wait=args.d_wait, settle=args.settle)
        runs["d10"] = await on_fresh_stack(args, "d: 10% failing, 1 worker, 1000/s", ["ji-d"],
                                           lambda ws: ws[0].paced(1000, args.a_seconds_1000), faults=0.1,
                                           wait=args.d_wait)
        runs["d50"] = await on_fresh_stack(args, "d: 50% failing, 20 ordered reports", ["ji-d"],
                                           lambda ws: _burst(ws[0], 20), faults=0.5, wait=args.d_wait,
                                           settle=args.settle)
    return runs


async def _burst(w: Worker, n: int) -> None:
    for _ in range(n):
        await w.report()


async def _team(team: list[Worker], rate: float, seconds: float) -> None:
    async def one(i: int, w: Worker) -> None:
        phase = i / (rate * len(team))
        await asyncio.sleep(phase)
        await w.paced(rate, seconds - phase)

    await asyncio.gather(*(one(i, w) for i, w in enumerate(team)))


def _faults(rate: float) -> dict:
    """`update:jointinferenceservices=R` and `patch:jointinferenceservices=R`, as the CLI's
    --fault-error-rate builds them (the GM PUTs the status today; PATCH is coming)."""
    return {"errors": [{"rate": rate, "verb": "update", "resource": JI_PLURAL},
                       {"rate": rate, "verb": "patch", "resource": JI_PLURAL}]}


# ---- tables -------------------------------------------------------------------------------------


def ms(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{v:,.1f} ms"


def secs(v: float | None, wait: float) -> str:
    return f"not within {wait:g} s" if v is None else f"{v:.2f} s"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return "-"
    return f"{a / b:.2f}x"


def table(head: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()


def run_rows(runs: list[Run], ref: Run | None = None) -> list[list[str]]:
    """Rows of the latency figures, one column per run (+ ratio of the last to `ref`)."""
    def rows_of(name, f, num=None):
        cells = [name] + [f(r) for r in runs]
        if ref is not None:
            cells.append(ratio(num(runs[-1]), num(ref)) if num else "")
        return cells

    return [
        rows_of("reports sent (achieved rate)", lambda r: f"{r.reports:,} ({r.rate:,.0f}/s)"),
        rows_of("POST -> status visible, p50 (of the applied)", lambda r: ms(r.p50), lambda r: r.p50),
        rows_of("POST -> status visible, p99 (of the applied)", lambda r: ms(r.p99), lambda r: r.p99),
        rows_of("applied (visible or superseded)", lambda r: f"{100 * r.applied / max(r.ok, 1):.1f}%"),
        rows_of("never seen (superseded first)", lambda r: f"{r.never_seen:,}"),
        rows_of("last POST -> last value visible", lambda r: secs(r.last_visible, r.wait), lambda r: r.last_visible),
        rows_of("regressions seen", lambda r: str(r.regressions)),
    ]


def print_c(runs: list[Run]) -> None:
    head = ["run", "reports", "status update 200/409/5xx", "status patch 200/409/5xx", "get",
            "Event create/patch", "all GM calls", "JI watch events", "hub applied/deferred/held",
            "status writes / applied report", "API calls / status write", "in the GM p50/p99"]
    rows = []
    for r in runs:
        ev_create, ev_patch = r.event_writes.get("ADDED", 0), r.event_writes.get("MODIFIED", 0)
        patch_ok = r.writes("patch", "200") - ev_patch  # Event count patches are verb patch too
        ok_writes = r.writes("update", "200") + patch_ok
        writes = r.writes("update") + r.writes("patch") - ev_patch
        calls = int(sum(r.api.values())) - ev_create - ev_patch
        rows.append([r.label, f"{r.ok:,}",
                     "/".join(str(r.writes("update", c)) for c in ("200", "409", "5xx")),
                     "/".join(str(v) for v in (patch_ok, r.writes("patch", "409"), r.writes("patch", "5xx"))),
                     str(int(sum(v for (vb, _), v in r.api.items() if vb == "get"))), f"{ev_create}/{ev_patch}",
                     f"{int(sum(r.api.values())):,}", f"{r.status_events:,}",
                     "/".join(str(int(r.hub.get(k, 0))) for k in ("applied", "deferred", "held")),
                     f"{writes / r.applied:.2f}" if r.applied else "-",
                     f"{calls / ok_writes:.2f}" if ok_writes else "-",
                     " / ".join(ms(bucket_quantile(q, r.apply)) for q in (0.5, 0.99))])
    table(head, rows)


def bucket_quantile(q: float, buckets: dict[str, float]) -> float:
    """The q-quantile of a histogram's cumulative bucket counts (le -> count), interpolated
    within its bucket as Prometheus' histogram_quantile does; NaN for no observations."""
    bounds = sorted((math.inf if le == "+Inf" else float(le), n) for le, n in buckets.items())
    if not bounds or bounds[-1][1] <= 0:
        return math.nan
    rank = q * bounds[-1][1]
    low, below = 0.0, 0.0
    for bound, count in bounds:
        if count >= rank:
            if math.isinf(bound):
                return low * 1000
            return (low + (bound - low) * (rank - below) / max(count - below, 1e-9)) * 1000
        low, below = bound, count
    return math.nan


async def main(args: argparse.Namespace) -> None:
    runs = await all_runs(args)
    for run in runs.values():
        for crash in run.crashes:
            print(f"- {run.label}: exited on its own and restarted: {crash}")
    print(f"\nstatus path: sedna-devcluster, sedna-gm (default config), sedna-lc as processes; "
          f"checkout {ROOT}\n")
    if "a" in args.only and "a100" in runs:
        print("a. one worker, one JointInferenceService (ratio: 1,000/s over 100/s)\n")
        table(["measure", "100/s", "1,000/s", "ratio"], run_rows([runs["a100"], runs["a1000"]], runs["a100"]))
    if "b" in runs:
        print(f"b. {args.b_workers} workers on {args.b_workers} JIs, {args.b_rate:g} reports/s each "
              f"(ratio: over a at 1,000/s on one JI)\n")
        ref = runs.get("a1000")
        table(["measure", "b", "ratio"] if ref else ["measure", "b"], run_rows([runs["b"]], ref))
    if "c" in args.only:
        print("c. GM API requests during each run: sedna_gm_api_requests_total{verb,code} from the GM's /metrics "
              "before and after (the dev cluster keeps no request counts). In these windows the GM writes only "
              "JI status and Events; Event creates/patches are counted on a watch of the Events about the JIs "
              "and taken out of the patch column and of the calls per write. JI watch events = status writes "
              "that changed the JI. Status writes count the failed ones and are per report applied (visible or "
              "superseded) in the window; calls per write are per successful status write\n")
        print_c([runs[k] for k in ("a100", "a1000", "b", "burst0", "d10", "d50") if k in runs])
    if "d" in args.only:
        print("d. JI status writes failing (update and patch of jointinferenceservices), injected after "
              "warm-up (ratio: over the fault-free run)\n")
        ref, d10 = runs.get("a1000"), runs["d10"]
        table(["measure (1 worker, 1,000/s)", "no faults", "10% failing", "ratio"],
              run_rows([ref, d10], ref) if ref else [[row[0], "-", row[1], "-"] for row in run_rows([d10])])
        b0, d50 = runs.get("burst0"), runs["d50"]
        table(["measure (20 ordered reports)", "no faults", "50% failing", "ratio"], [
            ["last POST -> CR shows the last", secs(b0.last_visible, b0.wait) if b0 else "-",
             secs(d50.last_visible, d50.wait), ratio(d50.last_visible, b0.last_visible if b0 else None)],
            ["CR showed at the end", b0.shown if b0 else "-", d50.shown, ""],
            ["older value shown after a newer one", str(b0.regressions) if b0 else "-", str(d50.regressions), ""],
        ])
    if args.soak:
        say(f"e: soak for {args.soak:g} s")
        r = await soak(args.soak, workers=args.soak_workers, kill_every=args.kill_every, wait=args.soak_wait,
                       keep=args.keep_logs, say=say)
        print(f"e. soak: {r.seconds:g} s, 2 LCs, {r.workers} workers at 10 reports/s in all, 5% of all API "
              f"requests failing, watches cut every 60 s, kills: {'; '.join(r.kills) or 'none'}\n")
        table(["measure", "value", "target"], [
            ["reports answered 200", f"{r.reports_ok:,}", ""],
            ["status lag p50 / p99", f"{ms(r.lag_p50_ms)} / {ms(r.lag_p99_ms)}", ""],
            ["load stop -> every outbox empty", secs(r.drain_seconds, args.soak_wait), "within 10 s"],
            ["load stop -> every JI shows its last report", secs(r.visible_seconds, args.soak_wait), ""],
            ["load stop -> every Dataset count exact", secs(r.datasets_exact_seconds, args.soak_wait),
             f"exact ({r.dataset_changes} file changes)"],
            ["reports answered 200 and neither visible nor superseded at the end", str(r.lost),
             "0 (lost, if no outbox holds them)"],
            ["never seen (superseded first)", str(r.never_seen), ""],
            ["regressions (older value after newer, same object)", str(r.regressions), "0"],
            ["outboxes left at the end", str(r.outboxes_left), "0"],
            ["Datasets wrong at the end (shown, lines)", str(r.datasets_wrong or "none"), "none"],
            ["services that exited on their own (restarted)", str(len(r.crashes)), "0"],
        ])
        for crash in r.crashes:
            print(f"- exited on its own: {crash}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="a,b,c,d", help="parts to run, comma-separated (a,b,c,d,e)")
    p.add_argument("--soak", type=float, default=0.0, metavar="SECONDS", help="run the soak (part e) this long")
    p.add_argument("--a-seconds-100", type=float, default=5.0)
    p.add_argument("--a-seconds-1000", type=float, default=3.0)
    p.add_argument("--b-workers", type=int, default=100)
    p.add_argument("--b-rate", type=float, default=10.0)
    p.add_argument("--b-seconds", type=float, default=5.0)
    p.add_argument("--wait", type=float, default=90.0, help="longest wait for the last value (a, b)")
    p.add_argument("--d-wait", type=float, default=90.0, help="longest wait for the last value under faults")
    p.add_argument("--settle", type=float, default=5.0, help="seconds watched after the last value (d 50%%)")
    p.add_argument("--soak-workers", type=int, default=40)
    p.add_argument("--kill-every", type=float, default=20.0, help="soak: seconds between kills (0: none)")
    p.add_argument("--soak-wait", type=float, default=90.0, help="soak: longest wait for things to settle")
    p.add_argument("--keep-logs", action="store_true", help="keep each stack's state and service logs")
    a = p.parse_args()
    a.only = [x.strip() for x in a.only.split(",") if x.strip()]
    if "e" in a.only and not a.soak:
        a.soak = 120.0
    import uvloop
    uvloop.run(main(a))
