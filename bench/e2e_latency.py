"""Benchmark: end-to-end latency from a worker's POST to the CR status change.

One process runs the dev cluster, the GM and the LC of edge-node-1 (each talking to the
next over real HTTP / websocket, as across machines; they share the event loop and the 2
cores). A worker reports joint-inference stats to the LC one report at a time; the clock
stops when the dev cluster commits the JointInferenceService status carrying that
report's `inferenceNumber` (seen by a store listener, so no polling error is added).
The path measured: LC HTTP + durable SQLite commit -> websocket -> GM hub + handler ->
status PUT -> dev cluster commit. Not a test: prints p50/p90/p99.

    .venv/bin/python bench/e2e_latency.py [--reports 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devcluster.cluster import DevCluster  # noqa: E402
from gm.app import GlobalManager  # noqa: E402
from gm.config import parse_config  # noqa: E402
from lc.app import LocalController  # noqa: E402
from lc.config import load  # noqa: E402
from lc.link.dialer import link_factory  # noqa: E402
from shared import apis  # noqa: E402

NS = "default"
SVC = "helmet-detection-inference-example"


async def main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="e2e-bench-"))
    dc = DevCluster(start_delay=0.05, termination_delay=0)
    await dc.start("127.0.0.1", 0)
    dc.write_kubeconfig(tmp / "kubeconfig")
    dc.apply_manifests(apis.CRD_DIR, ROOT / "examples" / "upstream" / "joint-inference-helmet-detection.yaml")
    gm = GlobalManager(parse_config(f"kubeConfig: {tmp / 'kubeconfig'}\nwebsocket: {{address: 127.0.0.1, port: 0}}\n"
                                    f"kubeClient: {{qps: {args.qps}, burst: {args.burst}}}\n"))
    await gm.start()
    lc = LocalController(load({"GM_ADDRESS": f"127.0.0.1:{gm.port}", "NODENAME": "edge-node-1",
                               "BIND_ADDRESS": "127.0.0.1", "BIND_PORT": "0", "ROOTFS_MOUNT_DIR": str(tmp),
                               "LC_DB_PATH": str(tmp / "lc.db")}), link_factory=link_factory)
    await lc.start()
    ji_rt = dc.store.registry.lookup(group="sedna.io", version="v1alpha1", resource="jointinferenceservices")
    seen: dict[str, asyncio.Future] = {}

    def on_change(ev) -> None:
        if ev.rt.key != ji_rt.key or ev.type != "MODIFIED":
            return
        for m in (ev.obj.get("status") or {}).get("metrics") or []:
            if m["key"] == "inferenceNumber" and m["value"] in seen and not seen[m["value"]].done():
                seen[m["value"]].set_result(time.perf_counter())

    dc.store.add_listener(on_change)
    while not (await lc.store.get_resource("JointInferenceService", NS, SVC)):  # noqa: ASYNC110
        await asyncio.sleep(0.05)  # waiting for the snapshot to reach the LC
    url = f"http://127.0.0.1:{lc.port}/sedna/workers/edgeworker-bench/info"
    latencies, post_ms = [], []
    async with aiohttp.ClientSession() as session:
        for i in range(1, args.reports + 1):
            n = str(1000 + i)
            seen[n] = asyncio.get_running_loop().create_future()
            body = {"name": "edgeworker-bench", "namespace": NS, "ownerName": SVC,
                    "ownerKind": "jointinferenceservice", "kind": "inference", "results": [],
                    "ownerInfo": {"startTime": "2026-01-01 10:00:00", "updateTime": "2026-01-01 10:00:30",
                                  "inferenceNumber": int(n), "hardExampleNumber": i, "uploadCloudRatio": 0.1}}
            start = time.perf_counter()
            async with session.post(url, json=body) as r:
                assert r.status == 200, await r.text()
            post_ms.append((time.perf_counter() - start) * 1000)
            done = await asyncio.wait_for(seen[n], 10)
            latencies.append((done - start) * 1000)
    await lc.stop()
    await gm.stop()
    await dc.stop()
    q = statistics.quantiles(latencies, n=100)
    pq = statistics.quantiles(post_ms, n=100)
    print(f"{'measure':<46} {'p50':>8} {'p90':>8} {'p99':>8}")
    print(f"{'worker POST answered (ms)':<46} {pq[49]:>8.2f} {pq[89]:>8.2f} {pq[98]:>8.2f}")
    print(f"{'worker POST -> CR status committed (ms)':<46} {q[49]:>8.2f} {q[89]:>8.2f} {q[98]:>8.2f}")
    print(f"reports: {args.reports}, sequential; GM client qps {args.qps:g}, burst {args.burst}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--reports", type=int, default=300)
    p.add_argument("--qps", type=float, default=5000, help="GM client QPS (the GM default is 50)")
    p.add_argument("--burst", type=int, default=5000, help="GM client burst (the GM default is 100)")
    import uvloop
    uvloop.run(main(p.parse_args()))
