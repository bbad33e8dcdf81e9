"""`make demo`: the seed scenarios of every kind with workers, scripted on the dev cluster.

It starts `make run` without its examples (examples/devrun.py as a process: the dev cluster, the
GM and an LC per node, the simulated workers of examples/workers/sim.py), then for each kind of
examples/demokinds.py, at once and each in a namespace of its own (`demo-<short name>`):

1. create: `kubectl apply` of upstream's example; every child carries a controller
   ownerReference to the CR and the workers run;
2. reports: a worker's report, POSTed to the LC of its node (`/sedna/workers/<pod>/info`) as a
   worker does, shows in the CR's status where the kind shows reports;
3. edit: `kubectl patch` of a worker template (an env var); the worker of that name shows it (a
   pod recreated under its name, a Deployment rolled);
4. self-heal: a worker pod deleted with `kubectl delete pod` comes back;
5. delete: `kubectl delete` of the CR; everything it owned is gone and nothing comes back
   within 5 s;

and, in `demo-il-cycle`, upstream's IncrementalLearningJob through a whole cycle (train, eval,
deploy, back to waiting), driven by the simulated workers' reports and files. It prints a line
per step as it goes, then a table of what held, and exits 0 only if everything held. The run's
files (kubeconfig, logs) are kept in the printed directory when something failed.

    .venv/bin/python examples/demo.py [--state DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples import demokinds  # noqa: E402
from examples.democluster import Api, DevRun, Endpoints, Failed, kubectl, poll, post_report, quiet  # noqa: E402
from examples.demokinds import KINDS, KindDemo, Worker, has_edit  # noqa: E402

SCENARIOS = ("create", "reports", "edit", "self-heal", "delete")
IL_CYCLE = "IL cycle"
COLUMNS = (*SCENARIOS, IL_CYCLE)
DEADLINE = 170.0  # the whole walk-through; what has not finished by then failed
WITHIN = 60.0  # one step's wait
NOTHING_BACK = 5.0  # how long a deleted CR's namespace is watched for anything coming back
REPORT_TRIES = 3  # a simulated worker's own report may replace the demo's before it is seen
CYCLE_WITHIN = 120.0
CHILD_RESOURCES = ("pods", "deployments", "replicasets", "services")


@dataclass
class Run:
    """What every step uses: the run's endpoints, an API reader, an HTTP session, the results."""

    endpoints: Endpoints
    api: Api
    http: aiohttp.ClientSession
    started: float = field(default_factory=time.monotonic)
    results: dict[tuple[str, str], tuple[bool, str]] = field(default_factory=dict)

    async def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return await kubectl(self.endpoints.kubeconfig, *args, stdin=stdin)

    def record(self, kind: str, scenario: str, held: bool, why: str) -> None:
        self.results[(kind, scenario)] = (held, why)
        print(f"[{time.monotonic() - self.started:6.1f}s] {kind:<25} {scenario:<9} "
              f"{'held' if held else 'FAILED'}: {why}", flush=True)


# -- reading the cluster ---------------------------------------------------------------


def controller_uid(obj: dict[str, Any]) -> str | None:
    refs = [r for r in obj["metadata"].get("ownerReferences") or () if r.get("controller")]
    return refs[0].get("uid") if refs else None


def live(obj: dict[str, Any]) -> bool:
    return not obj["metadata"].get("deletionTimestamp")


async def owned(run: Run, ns: str, uid: str) -> dict[str, list[dict[str, Any]]]:
    """The CR's children by resource, and under "workers" every pod of it (its own pods and those
    of its Deployments' ReplicaSets)."""
    found = {r: await run.api.items(ns, r) for r in CHILD_RESOURCES}
    children = {r: [o for o in found[r] if controller_uid(o) == uid] for r in ("pods", "deployments", "services")}
    deployments = {d["metadata"]["uid"] for d in children["deployments"]}
    sets = {s["metadata"]["uid"] for s in found["replicasets"] if controller_uid(s) in deployments}
    children["workers"] = [p for p in found["pods"] if controller_uid(p) in sets | {uid}]
    return children


def cr_path(kd: KindDemo, ns: str) -> str:
    return f"/apis/sedna.io/v1alpha1/namespaces/{ns}/{kd.plural}/{kd.name}"


def wrong_refs(kd: KindDemo, cr: dict[str, Any], children: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Children whose controller ownerReference is not exactly the CR's."""
    want = {"apiVersion": "sedna.io/v1alpha1", "kind": kd.kind, "name": kd.name, "uid": cr["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}
    return [f"{r}/{o['metadata']['name']}" for r in ("pods", "deployments", "services") for o in children[r]
            if [x for x in o["metadata"]["ownerReferences"] if x.get("controller")] != [want]]


async def worker_pods(run: Run, kd: KindDemo, worker: Worker, uid: str) -> list[dict[str, Any]]:
    """The running, not deleted pods of `worker`."""
    pods = (await owned(run, kd.namespace, uid))["workers"]
    return [p for p in pods if worker.matches(p) and live(p) and (p.get("status") or {}).get("phase") == "Running"]


def summary(children: dict[str, list[dict[str, Any]]]) -> str:
    parts = [f"{r} {len(children[r])}" for r in ("deployments", "pods", "services") if children[r]]
    return f"owned: {', '.join(parts)}; worker pods running: {len(children['workers'])}"


# -- the scenarios ---------------------------------------------------------------------


async def apply(run: Run, ns: str, docs: list[dict[str, Any]]) -> None:
    await run.kubectl("create", "namespace", ns)
    await run.kubectl("apply", "-n", ns, "-f", "-", stdin=yaml.safe_dump_all(docs))


async def create(run: Run, kd: KindDemo, docs: list[dict[str, Any]]) -> tuple[str, str]:
    ns = kd.namespace
    await apply(run, ns, docs)

    async def up() -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]] | None:
        cr = await run.api.get(cr_path(kd, ns))
        children = await owned(run, ns, cr["metadata"]["uid"]) if cr else None
        running = children and all((p.get("status") or {}).get("phase") == "Running" for p in children["workers"])
        return (cr, children) if running and children["workers"] and cr.get("status") else None
    cr, children = await poll(up, "running workers and status", within=WITHIN)
    if bad := wrong_refs(kd, cr, children):
        raise Failed(f"no controller ownerReference to the CR on {', '.join(bad)}")
    return cr["metadata"]["uid"], summary(children)


async def report(run: Run, kd: KindDemo, uid: str) -> str:
    async def reporter() -> dict[str, Any] | None:
        return next(iter(await worker_pods(run, kd, kd.reporter, uid)), None)
    pod = await poll(reporter, f"running {kd.reporter.name} pod to report from", within=WITHIN)
    name = pod["metadata"]["name"]
    body = {"name": name, "namespace": kd.namespace, "ownerName": kd.name, **kd.report.body(pod)}
    lc = run.endpoints.lcs[pod["spec"]["nodeName"]]

    async def shown() -> bool:
        cr = await run.api.get(cr_path(kd, kd.namespace))
        return bool(cr) and kd.report.shows(cr.get("status") or {})
    why = ""
    for _ in range(REPORT_TRIES):  # as the worker library, again when the LC refuses or the status misses it
        try:
            await post_report(run.http, lc, body)
            await poll(shown, f"report in {kd.report.where}", within=10, every=0.2)
        except Failed as exc:
            why = str(exc)
            continue
        return f"{name}'s report to the LC of {pod['spec']['nodeName']} in {kd.report.where}"
    raise Failed(f"{name}'s report, {REPORT_TRIES} times: {why}")


async def edit(run: Run, kd: KindDemo, docs: list[dict[str, Any]], uid: str) -> str:
    before = await poll(lambda: worker_pods(run, kd, kd.edited, uid), f"running {kd.edited.name}", within=WITHIN)
    old = {p["metadata"]["uid"] for p in before}
    await run.kubectl("patch", kd.plural, kd.name, "-n", kd.namespace, "--type=json",
                      "-p", json.dumps(kd.edit_patch(docs)))

    async def edited() -> bool:
        pods = await worker_pods(run, kd, kd.edited, uid)
        return bool(pods) and all(has_edit(p["spec"]) and p["metadata"]["uid"] not in old for p in pods)
    await poll(edited, f"{kd.edited.name} running with the edit", within=WITHIN)
    if kd.edited.deployment:
        return f"Deployment {kd.edited.name} rolled out with the edit"
    return f"pod {kd.edited.name} recreated under its name with the edit"


async def self_heal(run: Run, kd: KindDemo, uid: str) -> str:
    pods = await poll(lambda: worker_pods(run, kd, kd.healed, uid), f"running {kd.healed.name}", within=WITHIN)
    victim = pods[0]["metadata"]
    await run.kubectl("delete", "pod", victim["name"], "-n", kd.namespace, "--wait=false")

    async def back() -> bool:
        now = await worker_pods(run, kd, kd.healed, uid)
        return len(now) >= len(pods) and victim["uid"] not in {p["metadata"]["uid"] for p in now}
    await poll(back, f"pod in place of {victim['name']}", within=WITHIN)
    now = await worker_pods(run, kd, kd.healed, uid)
    names = sorted(p["metadata"]["name"] for p in now)
    return f"deleted {victim['name']}; running again: {', '.join(names)}"


async def leftovers(run: Run, kd: KindDemo) -> list[str]:
    found = [f"{r}/{o['metadata']['name']}" for r in CHILD_RESOURCES for o in await run.api.items(kd.namespace, r)]
    if await run.api.get(cr_path(kd, kd.namespace)) is not None:
        found.append(f"{kd.short}/{kd.name}")
    return found


async def delete(run: Run, kd: KindDemo, uid: str) -> str:
    count = sum(len(v) for k, v in (await owned(run, kd.namespace, uid)).items() if k != "workers")
    await run.kubectl("delete", kd.plural, kd.name, "-n", kd.namespace)

    async def gone() -> bool:
        return not await leftovers(run, kd)
    try:
        await poll(gone, "", within=WITHIN)
    except Failed:
        raise Failed(f"still there: {', '.join(await leftovers(run, kd))[:150]}") from None
    if back := await quiet(lambda: leftovers(run, kd), lasting=NOTHING_BACK):
        raise Failed(f"came back: {', '.join(back)[:150]}")
    return f"its {count} children and their pods gone, nothing back within {NOTHING_BACK:.0f}s"


# -- one kind, the IL cycle ------------------------------------------------------------


async def step(run: Run, kind: str, scenario: str, action: Awaitable[Any]) -> Any:
    """Run one scenario and record what became of it; its value, or None when it failed."""
    try:
        value = await action
    except Failed as exc:
        run.record(kind, scenario, False, str(exc))
        return None
    except Exception as exc:  # the table says what broke; the other scenarios go on
        run.record(kind, scenario, False, " ".join(f"{type(exc).__name__}: {exc}".split())[:160])
        return None
    why, value = (value[1], value[0]) if isinstance(value, tuple) else (value, True)
    run.record(kind, scenario, True, why)
    return value


async def walk(run: Run, kd: KindDemo) -> None:
    docs = kd.docs()
    uid = await step(run, kd.kind, "create", create(run, kd, docs))
    if uid is None:
        for scenario in SCENARIOS[1:]:
            run.record(kd.kind, scenario, False, "not created")
        return
    await step(run, kd.kind, "reports", report(run, kd, uid))
    await step(run, kd.kind, "edit", edit(run, kd, docs, uid))
    await step(run, kd.kind, "self-heal", self_heal(run, kd, uid))
    await step(run, kd.kind, "delete", delete(run, kd, uid))


def stage_of(status: dict[str, Any]) -> tuple[str, str]:
    """(stage, type) of a learning job's current condition, the last one."""
    conditions = status.get("conditions") or [{}]
    return conditions[-1].get("stage", ""), conditions[-1].get("type", "")


def stages_seen(status: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c.get("stage", ""), c.get("type", "")) for c in status.get("conditions") or ()]


async def il_cycle(run: Run) -> str:
    """Upstream's IL example from creation through train, eval and deploy (the deploy trigger
    fired: the trained model deployed, not only the stage passed), back to Train/Waiting."""
    kd = next(k for k in KINDS if k.kind == "IncrementalLearningJob")
    ns = "demo-il-cycle"
    await apply(run, ns, demokinds.il_cycle_docs())
    seen: list[tuple[str, str]] = []

    async def cycled() -> dict[str, Any] | None:
        status = ((await run.api.get(cr_path(kd, ns))) or {}).get("status") or {}
        seen.extend(s for s in stages_seen(status) if s not in seen)
        return status if status.get("cycle", 0) >= 1 and stage_of(status) == ("Train", "Waiting") else None
    try:
        await poll(cycled, "", within=CYCLE_WITHIN, every=0.3)
    except Failed:
        raise Failed(f"not through a cycle within {CYCLE_WITHIN:.0f}s; seen {seen}") from None
    trail = " -> ".join(f"{stage}/{type_}" for stage, type_ in seen)
    if not {("Deploy", "Ready"), ("Deploy", "Running")} & set(seen):
        raise Failed(f"the deploy trigger (precision_delta, a list named without an index) did not fire: "
                     f"deploy passed without deploying ({trail})")
    return trail


# -- the run ---------------------------------------------------------------------------


def table(results: dict[tuple[str, str], tuple[bool, str]]) -> str:
    """Kinds down, scenarios across: held / FAILED (reasons listed below), - where none applies."""
    width = max(len(k.kind) for k in KINDS)
    lines = ["  ".join([f"{'kind':<{width}}", *(f"{c:<9}" for c in COLUMNS)]).rstrip()]
    for kd in KINDS:
        cells = []
        for c in COLUMNS:
            result = results.get((kd.kind, c))
            cells.append(f"{'-' if result is None else 'held' if result[0] else 'FAILED':<9}")
        lines.append("  ".join([f"{kd.kind:<{width}}", *cells]).rstrip())
    failed = [f"  {kind} / {scenario}: {why}" for (kind, scenario), (held, why) in results.items() if not held]
    return "\n".join(lines + (["", "failed:", *failed] if failed else []))


def missing(run: Run) -> None:
    """Whatever did not finish in time failed."""
    for kd in KINDS:
        for scenario in SCENARIOS:
            run.results.setdefault((kd.kind, scenario), (False, f"not done within {DEADLINE:.0f}s"))
    run.results.setdefault(("IncrementalLearningJob", IL_CYCLE), (False, f"not done within {DEADLINE:.0f}s"))


async def walk_all(run: Run) -> None:
    tasks = [asyncio.create_task(walk(run, kd), name=f"demo-{kd.short}") for kd in KINDS]
    tasks.append(asyncio.create_task(step(run, "IncrementalLearningJob", IL_CYCLE, il_cycle(run)),
                                     name="demo-il-cycle"))
    done, pending = await asyncio.wait(tasks, timeout=DEADLINE - (time.monotonic() - run.started))
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        task.result()  # a crash of the demo itself is not a scenario's failure: let it surface
    missing(run)


async def demo(state: Path) -> bool:
    devrun = DevRun(state)
    started = time.monotonic()
    try:
        endpoints = await devrun.start()
        print(f"make run is up (its log: {devrun.log}); to look on:\n  export KUBECONFIG={endpoints.kubeconfig}\n"
              f"  kubectl get ji,fl,il,ll,fe,objs,objt,reid,va,pods -A\n", flush=True)
        api = Api(endpoints.kubeconfig)
        try:
            async with aiohttp.ClientSession() as http:
                run = Run(endpoints, api, http, started=started)
                await walk_all(run)
        finally:
            await api.close()
    finally:
        code = await devrun.stop()
    print(f"\n{table(run.results)}\n\n{len(run.results)} checks in {time.monotonic() - started:.0f}s; "
          f"make run stopped ({code})", flush=True)
    return all(held for held, _ in run.results.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", type=Path, help="where the run's files go (default: a temporary directory, "
                                                   "removed when everything held)")
    args = parser.parse_args()
    state = (args.state or Path(tempfile.mkdtemp(prefix="sedna-demo-"))).resolve()
    try:
        held = asyncio.run(demo(state))
    except OSError as err:
        print(f"demo: error: {err}", file=sys.stderr)
        return 2
    if held and args.state is None:
        shutil.rmtree(state, ignore_errors=True)
    elif not held:
        print(f"the run's files and logs: {state}")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())

