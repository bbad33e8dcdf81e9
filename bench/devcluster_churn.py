"""Benchmark of the dev cluster's controllers under churn: FL-sized jobs and Deployment bursts.

Two workloads, driven through the store in-process (the controllers are what is measured,
not HTTP):

- fl: a FederatedLearningJob owning one aggregation pod and N training pods (600 by
  default), created, run until every pod is Running, its trainers finished (Succeeded),
  then the job deleted and every pod gone by cascade; repeated.
- burst: a Deployment whose replicas are changed in quick succession (no waiting in
  between), then left to settle: exactly the last count of pods, all Running, none
  terminating, the Deployment status converged; repeated.

Every round also checks that no supervised task crashed. Not a test: prints a table;
record results in docs/benchmarks.md. tests/devcluster/test_churn.py runs a smaller
round of the same workloads.

    .venv/bin/python bench/devcluster_churn.py [--trainers 600] [--cycles 3] [--rounds 3] [--loop uvloop]
    .venv/bin/python bench/devcluster_churn.py --gm   # the FL job's pods built by the real GM
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devcluster.cluster import DevCluster  # noqa: E402
from devcluster.controllers.podstatus import PHASE_ANNOTATION  # noqa: E402

FL_CRD = Path(__file__).resolve().parents[1] / "charts" / "sedna" / "crds" / "sedna.io_federatedlearningjobs.yaml"
EDGE_NODES = ("edge-node-1", "edge-node-2")
BURSTS = ((40, 3, 90, 0, 60, 25), (120, 10, 0, 75), (5, 150, 30, 0, 45))


async def until(predicate: Callable[[], Any], *, within: float, what: str, interval: float = 0.01) -> None:
    """Poll `predicate` until it holds; TimeoutError naming `what` after `within` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not predicate():
        if loop.time() > deadline:
            raise TimeoutError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(interval)


def _rt(dc: DevCluster, resource: str, group: str = "", version: str = "v1") -> Any:
    return dc.store.registry.lookup(group=group, version=version, resource=resource)


def assert_no_crashes(dc: DevCluster) -> None:
    if dc.crashes:
        raise AssertionError(f"supervised tasks crashed: {[(c.task, c.error) for c in dc.crashes]}")


# -- FL-sized job ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FlCycle:
    pods: int
    running_s: float  # job created -> every pod Running
    finished_s: float  # trainers told to finish -> every trainer Succeeded
    deleted_s: float  # job deleted -> every pod gone


def install_fl_crd(dc: DevCluster) -> None:
    dc.apply_manifests(FL_CRD)


def _template(node: str, role: str) -> dict[str, Any]:
    return {"spec": {"nodeName": node, "containers": [{"name": role, "image": f"{role}:1"}]}}


def fl_job(name: str, trainers: int) -> dict[str, Any]:
    """A FederatedLearningJob with one training worker per (simulated) edge dataset."""
    workers = [{"dataset": {"name": f"dataset-{i}"}, "template": _template(EDGE_NODES[i % 2], "train")}
               for i in range(trainers)]
    return {"apiVersion": "sedna.io/v1alpha1", "kind": "FederatedLearningJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"aggregationWorker": {"model": {"name": "model"}, "template": _template("cloud-node", "agg")},
                     "trainingWorkers": workers}}


def fl_pod(job: dict[str, Any], role: str, index: int, node: str) -> dict[str, Any]:
    """A worker pod as the GM builds one: derived name, controller owner reference, pinned node."""
    meta = job["metadata"]
    name = f"{meta['name']}-{role}-{index}"
    ref = {"apiVersion": "sedna.io/v1alpha1", "kind": "FederatedLearningJob", "name": meta["name"],
           "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"fl-job": meta["name"], "role": role}, "ownerReferences": [ref]},
            "spec": {"nodeName": node, "restartPolicy": "OnFailure",
                     "containers": [{"name": role, "image": f"{role}:1",
                                     "env": [{"name": "WORKER_NAME", "value": name}]}]}}


def _phases(dc: DevCluster, job: str) -> list[str]:
    pods, _ = dc.store.list(_rt(dc, "pods"), "default", label_selector=f"fl-job={job}")
    return [p["status"].get("phase", "") for p in pods]


async def fl_cycle(dc: DevCluster, name: str, *, trainers: int, within: float = 60.0) -> FlCycle:
    """Create the job and its pods, wait all Running, finish the trainers, delete the job."""
    store, pod_rt, job_rt = dc.store, _rt(dc, "pods"), _rt(dc, "federatedlearningjobs", "sedna.io", "v1alpha1")
    total = trainers + 1
    t0 = time.perf_counter()
    job = store.create(job_rt, "default", fl_job(name, trainers))
    store.create(pod_rt, "default", fl_pod(job, "aggregation", 0, "cloud-node"))
    for i in range(trainers):
        store.create(pod_rt, "default", fl_pod(job, "train", i, EDGE_NODES[i % 2]))
    await until(lambda: _phases(dc, name).count("Running") == total, within=within, what=f"{total} pods Running")
    t1 = time.perf_counter()
    for i in range(trainers):
        store.mutate(pod_rt, "default", f"{name}-train-{i}",
                     lambda p: p["metadata"].setdefault("annotations", {}).__setitem__(PHASE_ANNOTATION, "Succeeded"))
    await until(lambda: _phases(dc, name).count("Succeeded") == trainers, within=within,
                what=f"{trainers} trainers Succeeded")
    t2 = time.perf_counter()
    store.delete(job_rt, "default", name)
    await until(lambda: not _phases(dc, name), within=within, what="every pod of the job gone")
    t3 = time.perf_counter()
    assert_no_crashes(dc)
    return FlCycle(total, t1 - t0, t2 - t1, t3 - t2)


# -- Deployment bursts ------------------------------------------------------------------


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}}


def deployment_settled(dc: DevCluster, name: str, replicas: int) -> bool:
    """Exactly `replicas` pods, all Running and bound, none terminating; status converged."""
    pods, _ = dc.store.list(_rt(dc, "pods"), "default", label_selector=f"app={name}")
    if len(pods) != replicas:
        return False
    if any(p["metadata"].get("deletionTimestamp") or p["status"].get("phase") != "Running" for p in pods):
        return False
    d = dc.store.get(_rt(dc, "deployments", "apps"), "default", name)
    st = d.get("status") or {}
    return (st.get("observedGeneration") == d["metadata"]["generation"]
            and all(st.get(f, 0) == replicas for f in ("replicas", "updatedReplicas", "availableReplicas")))


async def scale_burst(dc: DevCluster, name: str, counts: tuple[int, ...], *, pause: float = 0.002,
                      within: float = 60.0) -> float:
    """Set replicas to each of `counts` with only `pause` between; seconds until settled."""
    d_rt = _rt(dc, "deployments", "apps")
    t0 = time.perf_counter()
    for n in counts:
        dc.store.mutate(d_rt, "default", name, lambda d, n=n: d["spec"].__setitem__("replicas", n))
        await asyncio.sleep(pause)
    await until(lambda: deployment_settled(dc, name, counts[-1]), within=within,
                what=f"deployment {name} settled at {counts[-1]}")
    assert_no_crashes(dc)
    return time.perf_counter() - t0


# -- the same FL job through the real GM (--gm) -------------------------------------------


def _owned_phases(dc: DevCluster, uid: str) -> list[str]:
    pods, _ = dc.store.list(_rt(dc, "pods"), "default")
    return [p["status"].get("phase", "") for p in pods
            if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])]


def install_fl_inputs(dc: DevCluster, trainers: int) -> None:
    """The Model and one Dataset per trainer (on alternating edge nodes) the job names."""
    model_rt, ds_rt = _rt(dc, "models", "sedna.io", "v1alpha1"), _rt(dc, "datasets", "sedna.io", "v1alpha1")
    dc.store.create(model_rt, "default", {"apiVersion": "sedna.io/v1alpha1", "kind": "Model",
                                          "metadata": {"name": "model"}, "spec": {"url": "/model", "format": "pb"}})
    for i in range(trainers):
        dc.store.create(ds_rt, "default", {"apiVersion": "sedna.io/v1alpha1", "kind": "Dataset",
                                           "metadata": {"name": f"dataset-{i}"},
                                           "spec": {"url": f"/data/{i}.txt", "format": "txt",
                                                    "nodeName": EDGE_NODES[i % 2]}})


async def gm_fl_cycle(dc: DevCluster, name: str, *, trainers: int, within: float = 120.0) -> FlCycle:
    """The GM builds the job's pods; the cycle is create -> all Running -> delete -> all gone."""
    job_rt = _rt(dc, "federatedlearningjobs", "sedna.io", "v1alpha1")
    total = trainers + 1
    t0 = time.perf_counter()
    uid = dc.store.create(job_rt, "default", fl_job(name, trainers))["metadata"]["uid"]
    await until(lambda: _owned_phases(dc, uid).count("Running") == total, within=within,
                what=f"{total} GM-built pods Running")
    t1 = time.perf_counter()
    dc.store.delete(job_rt, "default", name)
    await until(lambda: not _owned_phases(dc, uid), within=within, what="every pod of the job gone")
    t2 = time.perf_counter()
    assert_no_crashes(dc)
    return FlCycle(total, t1 - t0, 0.0, t2 - t1)


async def main_gm(args: argparse.Namespace) -> None:
    import tempfile

    from gm.app import GlobalManager
    from gm.config import parse_config

    dc = DevCluster(start_delay=args.start_delay, termination_delay=args.termination_delay, resync=5.0)
    await dc.start("127.0.0.1", 0)
    try:
        dc.apply_manifests(FL_CRD.parent)
        install_fl_inputs(dc, args.trainers)
        with tempfile.TemporaryDirectory(prefix="churn-gm-") as tmp:
            kubeconfig = dc.write_kubeconfig(Path(tmp) / "kubeconfig")
            gm = GlobalManager(parse_config(f"kubeConfig: {kubeconfig}\nwebsocket: {{address: 127.0.0.1, port: 0}}\n"
                                            "workers: 4\nkubeClient: {qps: 5000, burst: 5000}\n"))
            await gm.start()
            try:
                cycles = [await gm_fl_cycle(dc, f"fl-{i}", trainers=args.trainers) for i in range(args.cycles)]
            finally:
                await gm.stop()
    finally:
        await dc.stop()
    assert_no_crashes(dc)
    print(f"GM + dev cluster, loop={args.loop} trainers={args.trainers} start_delay={args.start_delay}s "
          f"termination_delay={args.termination_delay}s")
    print(f"{'measure':<52} {'value':>10}")
    for i, c in enumerate(cycles):
        print(f"{f'gm fl cycle {i}: job created -> {c.pods} pods Running':<52} {c.running_s * 1000:>7.0f} ms")
        print(f"{f'gm fl cycle {i}: job deleted -> {c.pods} pods gone':<52} {c.deleted_s * 1000:>7.0f} ms")


# -- the benchmark ----------------------------------------------------------------------


async def main(args: argparse.Namespace) -> None:
    dc = DevCluster(start_delay=args.start_delay, termination_delay=args.termination_delay, resync=5.0)
    dc.start_controllers()
    try:
        install_fl_crd(dc)
        cycles = [await fl_cycle(dc, f"fl-{i}", trainers=args.trainers) for i in range(args.cycles)]
        dc.store.create(_rt(dc, "deployments", "apps"), "default", deployment("burst", 0))
        bursts = [await scale_burst(dc, "burst", BURSTS[i % len(BURSTS)]) for i in range(args.rounds)]
    finally:
        await dc.stop()
    assert_no_crashes(dc)
    print(f"loop={args.loop} trainers={args.trainers} start_delay={args.start_delay}s "
          f"termination_delay={args.termination_delay}s")
    print(f"{'measure':<52} {'value':>10}")
    for i, c in enumerate(cycles):
        print(f"{f'fl cycle {i}: {c.pods} pods created -> all Running':<52} {c.running_s * 1000:>7.0f} ms")
        print(f"{f'fl cycle {i}: {c.pods - 1} trainers -> Succeeded':<52} {c.finished_s * 1000:>7.0f} ms")
        print(f"{f'fl cycle {i}: job deleted -> {c.pods} pods gone':<52} {c.deleted_s * 1000:>7.0f} ms")
    for i, s in enumerate(bursts):
        counts = BURSTS[i % len(BURSTS)]
        label = f"burst {i}: replicas {'>'.join(map(str, counts))} settled"
        print(f"{label:<52} {s * 1000:>7.0f} ms")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trainers", type=int, default=600)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    ap.add_argument("--gm", action="store_true", help="the FL job's pods are built by the real GM")
    # the `make run` defaults: the kubelet requeues pods with the time left, often < 1 ms
    ap.add_argument("--start-delay", type=float, default=0.2)
    ap.add_argument("--termination-delay", type=float, default=0.1)
    return ap.parse_args()


if __name__ == "__main__":
    opts = parse_args()
    factory = asyncio.new_event_loop
    if opts.loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main_gm(opts) if opts.gm else main(opts))
