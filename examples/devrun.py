"""What `make run` starts: the dev cluster, the Sedna CRDs, the GM, two LocalControllers
and the example jobs, whose workers are simulated processes that report to their LC.

Everything runs in this one process until Ctrl-C (the dev cluster stands in for a real
API server; the GM talks to it over HTTP and the LCs talk to the GM over the websocket,
exactly as they would across machines). The example images are mapped to
examples/workers/sim.py by the dev cluster's process runtime, so the workers really POST
to the LC of their node. The kubeconfig for kubectl is written to .devcluster/kubeconfig.

    .venv/bin/python examples/devrun.py [--no-examples]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import signal
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devcluster.cluster import DevCluster  # noqa: E402
from gm.app import GlobalManager  # noqa: E402
from gm.config import parse_config  # noqa: E402
from lc.app import LocalController  # noqa: E402
from lc.config import load as load_lc_config  # noqa: E402
from lc.link import link_factory  # noqa: E402
from shared import apis, logs  # noqa: E402

EXAMPLES = ("joint-inference-helmet-detection.yaml", "federated-learning-surface-defect.yaml")
KUBECONFIG = Path(".devcluster/kubeconfig")
FIRST_CLUSTER_PORT = 6443
PORT_TRIES = 20
GM_PORT = 9000
LC_PORTS = {"edge-node-1": 9100, "edge-node-2": 9101}
STATE = ROOT / ".devcluster"


async def start_cluster(**options) -> DevCluster:
    """Start a DevCluster (with `options`) on the first free port from 6443."""
    for port in range(FIRST_CLUSTER_PORT, FIRST_CLUSTER_PORT + PORT_TRIES):
        dc = DevCluster(**{"process_runtime": True, **options})
        try:
            return await dc.start("127.0.0.1", port)
        except OSError as err:
            await dc.stop()
            if err.errno != errno.EADDRINUSE:
                raise
    raise OSError(errno.EADDRINUSE, f"no free port from {FIRST_CLUSTER_PORT} on")


def image_map() -> dict:
    """Every example image runs the simulated worker, which finds its LC by node name."""
    sim = {"command": [sys.executable, str(ROOT / "examples" / "workers" / "sim.py")], "args": "ignore",
           "env": {"SIM_LC_PORTS": ",".join(f"{n}={p}" for n, p in LC_PORTS.items()),
                   "SIM_PERIOD": "5", "SIM_ROUNDS": "6", "SIM_RETRY_WAIT": "1"}}
    images = set()
    for name in EXAMPLES:
        with open(ROOT / "examples" / "upstream" / name, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                for path in (("spec", "edgeWorker"), ("spec", "cloudWorker"), ("spec", "aggregationWorker")):
                    worker = (doc or {}).get(path[0], {}).get(path[1]) or {}
                    images.update(c["image"] for c in worker.get("template", {}).get("spec", {}).get("containers", []))
                for worker in ((doc or {}).get("spec") or {}).get("trainingWorkers") or []:
                    images.update(c["image"] for c in worker["template"]["spec"]["containers"])
    return {image: sim for image in images}


async def start_lcs() -> list[LocalController]:
    lcs = []
    for node, port in LC_PORTS.items():
        rootfs = STATE / f"rootfs-{node}"
        (rootfs / "data").mkdir(parents=True, exist_ok=True)
        dataset = rootfs / "data" / ("1.txt" if node.endswith("1") else "2.txt")
        if not dataset.exists():  # the example Datasets' index files, as a node would hold them
            dataset.write_text("".join(f"images/{i}.jpg {i % 2}\n" for i in range(50 if node.endswith("1") else 80)))
        lc = LocalController(load_lc_config({
            "GM_ADDRESS": f"127.0.0.1:{GM_PORT}", "NODENAME": node, "BIND_ADDRESS": "127.0.0.1",
            "BIND_PORT": str(port), "ROOTFS_MOUNT_DIR": str(rootfs), "LC_DB_PATH": str(STATE / f"lc-{node}.db"),
            "LC_DATASET_PERIOD": "5"}), link_factory=link_factory)
        await lc.start()
        lcs.append(lc)
    return lcs

log = logging.getLogger("devrun")




async def run(with_examples: bool) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    dc = await start_cluster(image_map=image_map())
    gm = None
    lcs: list[LocalController] = []
    try:
        kubeconfig = dc.write_kubeconfig(ROOT / KUBECONFIG).resolve()
        dc.apply_manifests(apis.CRD_DIR)
        gm = GlobalManager(parse_config(f"kubeConfig: {kubeconfig}\n"
                                        f"websocket: {{address: 127.0.0.1, port: {GM_PORT}}}\n"))
        await gm.start()
        lcs = await start_lcs()
        applied = dc.apply_manifests(*(ROOT / "examples" / "upstream" / n for n in EXAMPLES)) \
            if with_examples else []
        print(f"dev cluster  {dc.url}\n"
              f"GM           http://127.0.0.1:{gm.port} (/metrics, /healthz, /readyz)\n"
              f"LCs          {', '.join(f'{n} http://127.0.0.1:{p}' for n, p in LC_PORTS.items())}\n"
              f"examples     {', '.join(applied) or 'none'}\n\n"
              f"  export KUBECONFIG={kubeconfig}\n"
              f"  kubectl get ji,fl,datasets,pods\n"
              f"  kubectl logs surface-defect-detection-trainworker-0\n"
              f"  curl http://127.0.0.1:9100/sedna/workers\n\n"
              f"Ctrl-C to stop.", flush=True)
        waiter = asyncio.create_task(gm.wait())
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        stopper.cancel()
    finally:
        for lc in lcs:
            await lc.stop()
        if gm is not None:
            await gm.stop()
        await dc.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-examples", action="store_true", help="do not apply the example jobs")
    args = parser.parse_args()
    logs.setup("info", "text")
    with contextlib.suppress(ImportError):
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        asyncio.run(run(not args.no_examples))
    except OSError as err:
        print(f"devrun: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
