"""Benchmark: 200 JointInferenceServices and 200 FederatedLearningJobs applied at once;
time until the GM has converged all of them on the dev cluster.

The dev cluster runs as its own process (as a real API server would), the GM in this one
(uvloop). Before the GM starts, the dev cluster's own write ceiling is measured from a
client in this process (configmap creates at concurrency 64), so the GM's write rate can
be stated as a fraction of what the server can take. Not a test: prints a table; record
results in docs/benchmarks.md.

    .venv/bin/python bench/gm_converge.py [--ji 200] [--fl 200] [--workers 4]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.procstat import cpu_seconds  # noqa: E402
from gm.app import GlobalManager  # noqa: E402
from gm.config import parse_config  # noqa: E402
from shared import apis  # noqa: E402
from shared.ports import free_port  # noqa: E402

NS = "default"
HEADERS = {"Content-Type": "application/json"}


def examples(name: str) -> list[dict]:
    with open(ROOT / "examples" / "upstream" / name, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


async def wait_ready(session: aiohttp.ClientSession) -> None:
    for _ in range(200):
        try:
            async with session.get("/readyz") as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.05)
    raise RuntimeError("dev cluster did not become ready")


async def post(session, path: str, obj: dict) -> None:
    async with session.post(path, data=orjson.dumps(obj), headers=HEADERS) as r:
        if r.status not in (200, 201):
            raise RuntimeError(f"POST {path}: {r.status} {await r.text()}")
        await r.read()


async def bounded(coros, limit: int = 64) -> None:
    sem = asyncio.Semaphore(limit)

    async def one(c):
        async with sem:
            await c

    await asyncio.gather(*(one(c) for c in coros))


async def write_ceiling(session, n: int = 3000) -> float:
    objs = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}"}, "data": {"k": "v" * 64}}
            for i in range(n)]
    start = time.perf_counter()
    await bounded(post(session, f"/api/v1/namespaces/{NS}/configmaps", o) for o in objs)
    return n / (time.perf_counter() - start)


def named(obj: dict, name: str) -> dict:
    out = copy.deepcopy(obj)
    out["metadata"]["name"] = name
    return out


async def converged(session, n_ji: int, n_fl: int) -> bool:
    async with session.get(f"/apis/sedna.io/v1alpha1/namespaces/{NS}/jointinferenceservices") as r:
        jis = orjson.loads(await r.read())["items"]
    async with session.get(f"/apis/sedna.io/v1alpha1/namespaces/{NS}/federatedlearningjobs") as r:
        fls = orjson.loads(await r.read())["items"]
    if len(jis) != n_ji or len(fls) != n_fl:
        return False
    for obj in jis + fls:
        st = obj.get("status") or {}
        if st.get("observedGeneration") != obj["metadata"]["generation"]:
            return False
    ok_ji = all((o.get("status") or {}).get("active") == 2 for o in jis)
    ok_fl = all((o.get("status") or {}).get("phase") == "Running" for o in fls)
    return ok_ji and ok_fl


async def main(args: argparse.Namespace) -> None:
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="gm-bench-"))
    kubeconfig = tmp / "kubeconfig"
    server = subprocess.Popen(  # noqa: ASYNC220 - started once, before any timing
        [sys.executable, *(["-m", "cProfile", "-o", os.environ["PROFILE_DEVCLUSTER"]]
                           if os.environ.get("PROFILE_DEVCLUSTER") else []), "-m", "devcluster.cli", "--port", str(port), "--kubeconfig",
                               str(kubeconfig), "--insecure-http", "--start-delay", "0.05", "--termination-delay", "0", "--apply", str(apis.CRD_DIR),
                               "--log-level", "WARNING"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}",
                                         connector=aiohttp.TCPConnector(limit=128)) as session:
            await wait_ready(session)
            ceiling = await write_ceiling(session)
            fl_docs = examples("federated-learning-surface-defect.yaml")
            ji_docs = examples("joint-inference-helmet-detection.yaml")
            for doc in fl_docs + ji_docs:
                if doc["kind"] in ("Model", "Dataset"):
                    await post(session, f"/apis/sedna.io/v1alpha1/namespaces/{NS}/{doc['kind'].lower()}s", doc)
            fl = next(d for d in fl_docs if d["kind"] == "FederatedLearningJob")
            ji = next(d for d in ji_docs if d["kind"] == "JointInferenceService")
            cfg = parse_config(f"kubeConfig: {kubeconfig}\nwebsocket: {{address: 127.0.0.1, port: 0}}\n"
                               f"workers: {args.workers}\nkubeClient: {{qps: 5000, burst: 5000}}\n")
            gm = GlobalManager(cfg)
            await gm.start()
            await gm.informers.wait_synced()
            start = time.perf_counter()
            cpu0, server_cpu0 = _cpu_self(), cpu_seconds(server.pid)
            creates = [post(session, f"/apis/sedna.io/v1alpha1/namespaces/{NS}/jointinferenceservices",
                            named(ji, f"ji-{i}")) for i in range(args.ji)]
            creates += [post(session, f"/apis/sedna.io/v1alpha1/namespaces/{NS}/federatedlearningjobs",
                             named(fl, f"fl-{i}")) for i in range(args.fl)]
            await bounded(creates)
            applied = time.perf_counter() - start
            while not await converged(session, args.ji, args.fl):  # noqa: ASYNC110 - polling the API
                await asyncio.sleep(0.1)
            elapsed = time.perf_counter() - start
            gm_cpu, server_cpu = _cpu_self() - cpu0, cpu_seconds(server.pid) - server_cpu0
            registry = gm.kube_metrics.registry
            writes = sum(registry.get_sample_value("sedna_gm_api_requests_total",
                                                   {"verb": verb, "code": code}) or 0.0
                         for verb in ("create", "update", "patch", "delete")
                         for code in ("200", "201"))
            await gm.stop()
    finally:
        server.terminate()
        server.wait(timeout=10)
    rate = writes / elapsed
    print(f"{'measure':<48} {'value':>12}")
    print(f"{'dev cluster write ceiling (configmaps/s, c=64)':<48} {ceiling:>12.0f}")
    print(f"{'CRs applied (JI + FL)':<48} {args.ji + args.fl:>12}")
    print(f"{'time to apply all CRs (s)':<48} {applied:>12.2f}")
    print(f"{'time to converge all CRs (s)':<48} {elapsed:>12.2f}")
    print(f"{'GM writes (create/update/patch/delete)':<48} {writes:>12.0f}")
    print(f"{'GM write rate (writes/s)':<48} {rate:>12.0f}")
    print(f"{'GM write rate / dev cluster ceiling':<48} {rate / ceiling:>12.2f}")
    print(f"{'CPU while converging: GM process (s)':<48} {gm_cpu:>12.2f}")
    print(f"{'CPU while converging: dev cluster process (s)':<48} {server_cpu:>12.2f}")


def _cpu_self() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--ji", type=int, default=200)
    p.add_argument("--fl", type=int, default=200)
    p.add_argument("--workers", type=int, default=4)
    args = p.parse_args()
    import uvloop
    uvloop.run(main(args))
