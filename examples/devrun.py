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

With `--cluster real` (`make run CLUSTER=real`) the cluster is the real control plane of
scripts/kube_real.py instead (kube-apiserver, kube-controller-manager, kube-scheduler, etcd and
kwok; the one of `make kube-up`), reused when `kube_real.py status` says it is up and started
otherwise: the CRDs and the examples are applied to it server-side, and the GM and an LC per node
run here against it as they do on the dev cluster (examples/realcluster.py). kwok only simulates
the worker pods: no container runs, so the workers send no reports by themselves there. Ctrl-C
stops the GM and the LCs and leaves the cluster up (`make kube-down` stops it).

With `--s3` (`make run S3=1`) the S3 server the tests use runs too (SeaweedFS, built by
`make s3-server`), and the incremental learning example runs on it instead of on the nodes'
files: its Dataset, Models and outputDir in a bucket, with a Secret (examples/s3example.py).

`--gm-port` and `--lc-port` (the first of the LCs' ports) move the ports; 0 takes free ones.
`--state DIR` keeps the dev cluster's files (kubeconfig, CA, node roots, LC databases) in DIR
instead of .devcluster, e.g. for a second run next to `make run` (examples/demo.py does so).

    .venv/bin/python examples/devrun.py [--no-examples] [--install direct|helm] [--cluster dev|real]
                                        [--s3] [--gm-port 9000] [--lc-port 9100] [--state .devcluster]
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devcluster.cluster import DevCluster  # noqa: E402
from devcluster.runtime.process import parse_image_map  # noqa: E402
from examples import realcluster, s3example  # noqa: E402
from gm.app import GlobalManager  # noqa: E402
from gm.config import parse_config  # noqa: E402
from gm.kube.client import KubeClient  # noqa: E402
from gm.kube.kubeconfig import ClientSettings  # noqa: E402
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
PHASE_ANNOTATION = "devcluster.sedna.io/phase"  # ends a pod: the dev kubelet's and kwok's stages


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


def lc_ports(first: int) -> dict[str, int]:
    """Each node's LC port, counting from `first` in LC_PORTS' order; 0: free ports."""
    return {node: first + i if first else 0 for i, node in enumerate(LC_PORTS)}


def image_map(ports: dict[str, int] = LC_PORTS) -> dict:
    """Every example image runs the simulated worker, which finds its LC (at `ports`) by node
    name and its role by the env the GM gives it (examples/workers/sim.py)."""
    sim = {"command": [sys.executable, str(ROOT / "examples" / "workers" / "sim.py")], "args": "ignore",
           "env": {"SIM_LC_PORTS": ",".join(f"{n}={p}" for n, p in ports.items()),
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


def helm_install(kubeconfig: Path, *, gm_port: int, lc_port: int, state: Path = STATE) -> None:
    """`helm install sedna charts/sedna` on the dev cluster (the LC on edge-node-1)."""
    if not os.access(HELM, os.X_OK):
        raise OSError(f"{HELM} is missing: run `make helm` (make run INSTALL=helm does)")
    home = state / "helm"
    env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_DATA_HOME": str(home / "data")}
    cmd = [str(HELM), "--kubeconfig", str(kubeconfig), "upgrade", "--install", "sedna", str(ROOT / "charts" / "sedna"),
           "--namespace", "sedna", "--create-namespace", "--set", f"gm.config.websocket.port={gm_port}",
           "--set", f"lc.bindPort={lc_port}", "--set", "gm.config.log.format=text",
           "--set-json", 'lc.nodeSelector={"kubernetes.io/hostname":"edge-node-1"}']
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HELM_TIMEOUT, check=False)
    if done.returncode != 0:
        raise OSError(f"helm install failed: {done.stderr.strip() or done.stdout.strip()}")


async def start_gm(kubeconfig: Path, port: int) -> GlobalManager:
    gm = GlobalManager(parse_config(f"kubeConfig: {kubeconfig}\n"
                                    f"websocket: {{address: 127.0.0.1, port: {port}}}\n"))
    await gm.start()
    return gm


async def start_lcs(roots: dict[str, Path], *, gm_port: int, first_port: int,
                    db: Callable[[str], Path]) -> dict[str, LocalController]:
    """An LC per node of `roots`, whose root filesystem is the node's there: on the dev cluster
    where the process runtime puts the node's hostPath volumes, so it reads the models its
    workers write, as on a node. The example Datasets' index files are written there first."""
    lcs: dict[str, LocalController] = {}
    ports = lc_ports(first_port)
    for node, rootfs in roots.items():
        write_datasets(rootfs, node)
        lc = LocalController(load_lc_config({
            "GM_ADDRESS": f"127.0.0.1:{gm_port}", "NODENAME": node, "BIND_ADDRESS": "127.0.0.1",
            "BIND_PORT": str(ports[node]), "ROOTFS_MOUNT_DIR": str(rootfs), "LC_DB_PATH": str(db(node)),
            "LC_DATASET_PERIOD": "5"}), link_factory=link_factory)
        lcs[node] = lc  # the caller stops it even when its start fails half-way
        await lc.start()
    return lcs


async def stop_all(gm: GlobalManager | None, lcs: dict[str, LocalController]) -> None:
    for lc in lcs.values():
        await lc.stop()
    if gm is not None:
        await gm.stop()


async def until_stopped(stop: asyncio.Event, gm: GlobalManager | None) -> None:
    """Until Ctrl-C (SIGINT, SIGTERM) or the GM stops by itself."""
    waiters = {asyncio.create_task(stop.wait(), name="devrun-stop")}
    if gm is not None:
        waiters.add(asyncio.create_task(gm.wait(), name="devrun-gm"))
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waiters:
            task.cancel()


log = logging.getLogger("devrun")


async def run(with_examples: bool, install: str, cluster: str = "dev", *,
              gm_port: int = GM_PORT, lc_port: int = LC_PORTS["edge-node-1"], state: Path = STATE,
              s3: bool = False) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if cluster == "real":
        await run_real(stop, with_examples, gm_port=gm_port, lc_port=lc_port)
    else:
        await run_dev(stop, with_examples, install, gm_port=gm_port, lc_port=lc_port, state=state, s3=s3)


async def run_dev(stop: asyncio.Event, with_examples: bool, install: str, *, gm_port: int, lc_port: int,
                  state: Path = STATE, s3: bool = False) -> None:
    images = image_map(lc_ports(lc_port)) | (chart_images() if install == "helm" else {})
    dc = await start_cluster(image_map=images, pod_root=state / "cluster", pki_dir=state / "pki")
    gm = None
    lcs: dict[str, LocalController] = {}
    stack = contextlib.AsyncExitStack()
    try:
        examples = example_paths()
        if s3:
            endpoint = await stack.enter_async_context(s3example.s3_server())
            on_s3 = await s3example.manifest(endpoint, state)
            examples = [on_s3 if p == s3example.EXAMPLE else p for p in examples]
            print(f"S3           {endpoint.url} (bucket {s3example.BUCKET}, key {endpoint.access_key}, "
                  f"Secret {s3example.SECRET}: {on_s3})", flush=True)
        kubeconfig = dc.write_kubeconfig(state / "kubeconfig").resolve()
        if install == "helm":
            for node in LC_PORTS:
                write_datasets(Path(dc.runtime.node_root(node)), node)
            await asyncio.to_thread(helm_install, kubeconfig, gm_port=gm_port, lc_port=lc_port, state=state)
        else:
            dc.apply_manifests(apis.CRD_DIR)
            gm = await start_gm(kubeconfig, gm_port)
            lcs = await start_lcs({n: Path(dc.runtime.node_root(n)) for n in LC_PORTS}, gm_port=gm.port,
                                  first_port=lc_port, db=lambda node: state / f"lc-{node}.db")
            # the simulated workers find their LC at the ports bound (free ones with port 0)
            dc.runtime.image_map.update(parse_image_map(image_map({n: lc.port for n, lc in lcs.items()})))
        applied = dc.apply_manifests(*examples) if with_examples else []
        print(banner(dc, kubeconfig, applied, gm=gm, lcs=lcs), flush=True)
        await until_stopped(stop, gm)
    finally:
        await stop_all(gm, lcs)
        await dc.stop()
        await stack.aclose()


async def run_real(stop: asyncio.Event, with_examples: bool, *, gm_port: int, lc_port: int) -> None:
    """The GM and the LCs against the real control plane, which is left running at the end."""
    cluster = await asyncio.to_thread(realcluster.start_or_reuse)
    gm = None
    lcs: dict[str, LocalController] = {}
    try:
        async with await KubeClient.connect(ClientSettings(kubeconfig=str(cluster.kubeconfig), qps=0,
                                                           timeout=30)) as client:
            await realcluster.apply_crds(client)
            gm = await start_gm(cluster.kubeconfig, gm_port)
            lcs = await start_lcs({n: cluster.node_root(n) for n in LC_PORTS}, gm_port=gm.port,
                                  first_port=lc_port, db=cluster.lc_db)
            applied = await realcluster.apply(client, realcluster.manifests(*example_paths())) \
                if with_examples else []
        print(real_banner(cluster, applied, gm=gm, lcs=lcs), flush=True)
        await until_stopped(stop, gm)
    finally:
        await stop_all(gm, lcs)


def example_paths() -> list[Path]:
    return [ROOT / "examples" / "upstream" / n for n in EXAMPLES]


def _serving(gm: GlobalManager, lcs: dict[str, LocalController]) -> str:
    return (f"GM           http://127.0.0.1:{gm.port} (/metrics, /sessions, /healthz, /readyz)\n"
            f"status page  http://127.0.0.1:{gm.port}/ui\n"
            f"LCs          {', '.join(f'{n} http://127.0.0.1:{lc.port}' for n, lc in lcs.items())}\n")


def banner(dc: DevCluster, kubeconfig: Path, applied: list[str], *,
           gm: GlobalManager | None, lcs: dict[str, LocalController]) -> str:
    if gm is None:
        parts = ("GM, LC       installed by helm (release sedna, namespace sedna; LC on edge-node-1)\n"
                 "  kubectl -n sedna get deploy,ds,pods   kubectl -n sedna logs deploy/gm\n")
    else:
        parts = _serving(gm, lcs)
    first_lc = next((lc.port for lc in lcs.values()), LC_PORTS["edge-node-1"])
    return (f"dev cluster  {dc.url}\n{parts}"
            f"examples     {', '.join(applied) or 'none'}\n\n"
            f"  export KUBECONFIG={kubeconfig}\n"
            f"  kubectl get ji,fl,il,ll,fe,reid,va,objs,objt,datasets,pods\n"
            f"  kubectl logs surface-defect-detection-trainworker-0\n"
            f"  kubectl get fe feature-extraction -o jsonpath='{{.status.metrics}}'\n"
            f"  curl http://127.0.0.1:{first_lc}/sedna/workers\n\n"
            f"Ctrl-C to stop.")


def real_banner(cluster: realcluster.RealCluster, applied: list[str], *, gm: GlobalManager,
                lcs: dict[str, LocalController]) -> str:
    how = "already up, reused" if cluster.reused else "started by scripts/kube_real.py"
    return (f"real cluster {cluster.server} ({how}; kwok nodes {', '.join(LC_PORTS)})\n"
            f"{_serving(gm, lcs)}"
            f"examples     {', '.join(applied) or 'none'}\n\n"
            f"  export KUBECONFIG={cluster.kubeconfig}\n"
            f"  kubectl get ji,fl,il,ll,fe,reid,va,objs,objt,datasets,pods -o wide\n"
            f"  kubectl annotate pod surface-defect-detection-trainworker-0 {PHASE_ANNOTATION}=Succeeded\n\n"
            f"kwok only simulates the worker pods on this cluster: no container runs. Pods go Running by\n"
            f"kwok's stages and end when annotated {PHASE_ANNOTATION}=Succeeded (or Failed). So the\n"
            f"workers send no reports by themselves here: statuses show children and phases, and the\n"
            f"Datasets' sample counts (from the LCs), not the workers' metrics or training rounds.\n\n"
            f"Ctrl-C stops the GM and the LCs; the cluster stays up (`make kube-down` stops it).")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-examples", action="store_true", help="do not apply the example jobs")
    parser.add_argument("--install", choices=("direct", "helm"), default="direct",
                        help="start the GM and LCs here (direct) or install the chart with helm")
    parser.add_argument("--cluster", choices=("dev", "real"), default="dev",
                        help="the dev cluster in this process, or the real control plane of scripts/kube_real.py")
    parser.add_argument("--s3", action="store_true",
                        help="run the S3 server too, and the incremental learning example on it")
    parser.add_argument("--gm-port", type=int, default=GM_PORT, help="the GM's port (0: a free one)")
    parser.add_argument("--lc-port", type=int, default=LC_PORTS["edge-node-1"],
                        help="the first LC's port, the others follow (0: free ones)")
    parser.add_argument("--state", type=Path, default=STATE,
                        help="where the dev cluster's files go (kubeconfig, CA, node roots, LC databases)")
    args = parser.parse_args()
    if args.install == "helm" and args.cluster == "real":
        parser.error("--install helm runs on the dev cluster only: kwok runs no container, so the "
                     "chart's GM and LC pods would not run")
    if args.s3 and args.cluster == "real":
        parser.error("--s3 runs on the dev cluster only: kwok runs no worker to read or write the bucket")
    if args.install == "helm" and 0 in (args.gm_port, args.lc_port):
        parser.error("--install helm needs fixed ports: the chart's pods bind them")
    logs.setup("info", "text")
    with contextlib.suppress(ImportError):
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        asyncio.run(run(not args.no_examples, args.install, args.cluster, gm_port=args.gm_port,
                        lc_port=args.lc_port, state=args.state.resolve(), s3=args.s3))
    except OSError as err:
        print(f"devrun: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
