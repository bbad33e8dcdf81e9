"""What `make run` starts: the dev cluster, the Sedna CRDs, the GM, a LocalController per
node and the example jobs, whose workers are simulated processes that report to their LC.

Everything runs in this one process until Ctrl-C (the dev cluster stands in for a real
API server; the GM talks to it over HTTPS and the LCs talk to the GM over the websocket,
exactly as they would across machines). The example images are mapped to
examples/workers/sim.py by the dev cluster's process runtime, so the workers really POST
to the LC of their node. The kubeconfig for kubectl is written to .devcluster/kubeconfig: the
API is served over HTTPS with a CA kept in .devcluster/pki (the kubeconfig carries it), so
tokens from `kubectl create token` work as on a real cluster.

With `--install helm` (`make run INSTALL=helm`) the GM and the LC are not started here:
`helm install sedna charts/sedna` installs them as on a real cluster (CRDs, RBAC, the GM
Deployment on the cloud node, the LC DaemonSet), and the dev cluster's process runtime runs
their pods as `python -m gm.cli` / `python -m lc.cli` under the chart's ServiceAccount. All
pods share this host's network, so one LC port exists per host: the chart's LC is placed on
edge-node-1 only, and the workers of other nodes (the cloud-side feature extraction and
re-identification workers, edge-node-2's trainer) find no LC to report to.

    .venv/bin/python examples/devrun.py [--no-examples] [--install direct|helm]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devcluster.cluster import DevCluster  # noqa: E402
from gm.app import GlobalManager  # noqa: E402
from gm.config import parse_config  # noqa: E402
from lc.app import LocalController  # noqa: E402
from lc.config import load as load_lc_config  # noqa: E402
from lc.link.dialer import link_factory  # noqa: E402
from shared import apis, logs  # noqa: E402

# What `make run` applies: one example per reconciled kind (the multi-edge file holds the
# FeatureExtractionService, ReidJob and VideoAnalyticsJob with their Model).
EXAMPLES = ("joint-inference-helmet-detection.yaml", "federated-learning-surface-defect.yaml",
            "multi-edge-inference-pedestrian-tracking.yaml", "object-search-pedestrian.yaml",
            "object-tracking-pedestrian.yaml", "incremental-learning-helmet-detection.yaml",
            "lifelong-learning-atcii.yaml")
KUBECONFIG = Path(".devcluster/kubeconfig")
FIRST_CLUSTER_PORT = 6443
PORT_TRIES = 20
GM_PORT = 9000
# One LC per node, as upstream's DaemonSet runs one on every node: the examples' cloud-side
# workers (feature extraction, re-identification) report to the LC of cloud-node.
LC_PORTS = {"edge-node-1": 9100, "edge-node-2": 9101, "cloud-node": 9102}
STATE = ROOT / ".devcluster"
HELM = ROOT / ".venv" / "bin" / "helm"
HELM_TIMEOUT = 180.0
CHART_IMAGE = "sedna-py:0.1.0"  # values.yaml image.repository:image.tag


async def start_cluster(**options) -> DevCluster:
    """Start a DevCluster (with `options`) on the first free port from 6443."""
    for port in range(FIRST_CLUSTER_PORT, FIRST_CLUSTER_PORT + PORT_TRIES):
        dc = DevCluster(**{"process_runtime": True, "pki_dir": STATE / "pki", **options})
        try:
            return await dc.start("127.0.0.1", port)
        except OSError as err:
            await dc.stop()
            if err.errno != errno.EADDRINUSE:
                raise
    raise OSError(errno.EADDRINUSE, f"no free port from {FIRST_CLUSTER_PORT} on")


def image_map() -> dict:
    """Every example image runs the simulated worker, which finds its LC by node name and
    its role by the env the GM gives it (examples/workers/sim.py)."""
    sim = {"command": [sys.executable, str(ROOT / "examples" / "workers" / "sim.py")], "args": "ignore",
           "env": {"SIM_LC_PORTS": ",".join(f"{n}={p}" for n, p in LC_PORTS.items()),
                   "SIM_PERIOD": "5", "SIM_ROUNDS": "6", "SIM_RETRY_WAIT": "1"}}
    images: set[str] = set()
    for name in EXAMPLES:
        with open(ROOT / "examples" / "upstream" / name, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                images.update(example_images(doc))
    return {image: sim for image in images}


def example_images(node: Any) -> set[str]:
    """The images of every container list anywhere in a manifest (each kind keeps its pod
    templates somewhere else in its spec; this needs no table of where)."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "containers" and isinstance(value, list):
                found.update(c["image"] for c in value if isinstance(c, dict) and c.get("image"))
            else:
                found |= example_images(value)
    elif isinstance(node, list):
        for item in node:
            found |= example_images(item)
    return found


# The learning examples' Datasets: enough samples that the train trigger (more than 500
# train samples, at trainProb 0.8) fires on the first look.
LEARNING_SAMPLES = 700
ATCII_HEADER = "Season,Sex,Age,Temperature,Humidity,Air velocity,Thermal comfort"


def write_datasets(rootfs: Path, node: str) -> None:
    """The example Datasets' index files, as the node would hold them (edge nodes only)."""
    if not node.startswith("edge-"):
        return
    first = node.endswith("1")
    files = {"data/1.txt" if first else "data/2.txt":
             "".join(f"images/{i}.jpg {i % 2}\n" for i in range(50 if first else 80))}
    if first:
        files["data/helmet_detection/train_data/train_data.txt"] = "".join(
            f"images/{i}.jpg labels/{i}.txt\n" for i in range(LEARNING_SAMPLES))
    else:
        files["data/trainData.csv"] = ATCII_HEADER + "\n" + "".join(
            f"{i % 4},{i % 2},{20 + i % 50},{18 + i % 12},{30 + i % 40},0.{i % 10},{i % 3}\n"
            for i in range(LEARNING_SAMPLES))
    for name, text in files.items():
        dataset = rootfs / name
        if not dataset.exists():
            dataset.parent.mkdir(parents=True, exist_ok=True)
            dataset.write_text(text)


def chart_images() -> dict:
    """The chart's image: its programs sedna-gm and sedna-lc run from this checkout."""
    return {CHART_IMAGE: {"command": [sys.executable, "-m", "gm.cli"], "cwd": str(ROOT),
                          "programs": {"sedna-gm": [sys.executable, "-m", "gm.cli"],
                                       "sedna-lc": [sys.executable, "-m", "lc.cli"]}}}


def helm_install(kubeconfig: Path) -> None:
    """`helm install sedna charts/sedna` on the dev cluster (the LC on edge-node-1)."""
    if not os.access(HELM, os.X_OK):
        raise OSError(f"{HELM} is missing: run `make helm` (make run INSTALL=helm does)")
    home = STATE / "helm"
    env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_DATA_HOME": str(home / "data")}
    cmd = [str(HELM), "--kubeconfig", str(kubeconfig), "upgrade", "--install", "sedna", str(ROOT / "charts" / "sedna"),
           "--namespace", "sedna", "--create-namespace", "--set", f"gm.config.websocket.port={GM_PORT}",
           "--set", f"lc.bindPort={LC_PORTS['edge-node-1']}", "--set", "gm.config.log.format=text",
           "--set-json", 'lc.nodeSelector={"kubernetes.io/hostname":"edge-node-1"}']
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HELM_TIMEOUT, check=False)
    if done.returncode != 0:
        raise OSError(f"helm install failed: {done.stderr.strip() or done.stdout.strip()}")


async def start_lcs(dc: DevCluster) -> list[LocalController]:
    """An LC per node whose root filesystem is the node's (where the process runtime puts
    the node's hostPath volumes), so it reads the models its workers write, as on a node."""
    lcs = []
    for node, port in LC_PORTS.items():
        rootfs = Path(dc.runtime.node_root(node))
        write_datasets(rootfs, node)
        lc = LocalController(load_lc_config({
            "GM_ADDRESS": f"127.0.0.1:{GM_PORT}", "NODENAME": node, "BIND_ADDRESS": "127.0.0.1",
            "BIND_PORT": str(port), "ROOTFS_MOUNT_DIR": str(rootfs), "LC_DB_PATH": str(STATE / f"lc-{node}.db"),
            "LC_DATASET_PERIOD": "5"}), link_factory=link_factory)
        await lc.start()
        lcs.append(lc)
    return lcs

log = logging.getLogger("devrun")




async def run(with_examples: bool, install: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    images = image_map() | (chart_images() if install == "helm" else {})
    dc = await start_cluster(image_map=images, pod_root=STATE / "cluster")
    gm = None
    lcs: list[LocalController] = []
    try:
        kubeconfig = dc.write_kubeconfig(ROOT / KUBECONFIG).resolve()
        if install == "helm":
            for node in LC_PORTS:
                write_datasets(Path(dc.runtime.node_root(node)), node)
            await asyncio.to_thread(helm_install, kubeconfig)
        else:
            dc.apply_manifests(apis.CRD_DIR)
            gm = GlobalManager(parse_config(f"kubeConfig: {kubeconfig}\n"
                                            f"websocket: {{address: 127.0.0.1, port: {GM_PORT}}}\n"))
            await gm.start()
            lcs = await start_lcs(dc)
        applied = dc.apply_manifests(*(ROOT / "examples" / "upstream" / n for n in EXAMPLES)) \
            if with_examples else []
        print(banner(dc, kubeconfig, install, applied), flush=True)
        waiters = {asyncio.create_task(stop.wait(), name="devrun-stop")}
        if gm is not None:
            waiters.add(asyncio.create_task(gm.wait(), name="devrun-gm"))
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for task in waiters:
            task.cancel()
    finally:
        for lc in lcs:
            await lc.stop()
        if gm is not None:
            await gm.stop()
        await dc.stop()


def banner(dc: DevCluster, kubeconfig: Path, install: str, applied: list[str]) -> str:
    if install == "helm":
        parts = ("GM, LC       installed by helm (release sedna, namespace sedna; LC on edge-node-1)\n"
                 "  kubectl -n sedna get deploy,ds,pods   kubectl -n sedna logs deploy/gm\n")
    else:
        parts = (f"GM           http://127.0.0.1:{GM_PORT} (/metrics, /healthz, /readyz)\n"
                 f"LCs          {', '.join(f'{n} http://127.0.0.1:{p}' for n, p in LC_PORTS.items())}\n")
    return (f"dev cluster  {dc.url}\n{parts}"
            f"examples     {', '.join(applied) or 'none'}\n\n"
            f"  export KUBECONFIG={kubeconfig}\n"
            f"  kubectl get ji,fl,il,ll,fe,reid,va,objs,objt,datasets,pods\n"
            f"  kubectl logs surface-defect-detection-trainworker-0\n"
            f"  kubectl get fe feature-extraction -o jsonpath='{{.status.metrics}}'\n"
            f"  curl http://127.0.0.1:9100/sedna/workers\n\n"
            f"Ctrl-C to stop.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-examples", action="store_true", help="do not apply the example jobs")
    parser.add_argument("--install", choices=("direct", "helm"), default="direct",
                        help="start the GM and LCs here (direct) or install the chart with helm")
    args = parser.parse_args()
    logs.setup("info", "text")
    with contextlib.suppress(ImportError):
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        asyncio.run(run(not args.no_examples, args.install))
    except OSError as err:
        print(f"devrun: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
