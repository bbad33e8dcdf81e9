"""`make run CLUSTER=real`: the control plane of scripts/kube_real.py, started or reused, and
manifests applied to it through the API, as `kubectl apply --server-side` would.

The cluster outlives the run: scripts/kube_real.py starts its processes in sessions of their own,
so a Ctrl-C of `make run` reaches only the GM and the LCs, and `make kube-down` stops the cluster.
What the run keeps for that cluster (the LCs' databases, the nodes' root filesystems with the
example Datasets' index files) lives in the cluster's state directory, so a fresh `make kube-up`
starts them afresh too.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devcluster.cluster import KubeYamlLoader
from gm.kube.apierrors import ApiError
from gm.kube.client import KubeClient
from gm.kube.resources import GVR, sedna_gvr
from shared import apis

ROOT = Path(__file__).resolve().parents[1]
KUBE_REAL = ROOT / "scripts" / "kube_real.py"
CRDS = GVR("apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False)
FIELD_MANAGER = "sedna-devrun"
STATUS_TIMEOUT = 60.0
UP_TIMEOUT = 600.0  # kube_real.py bounds each of its own waits; this only stops a hung script
ESTABLISHED_TIMEOUT = 60.0


@dataclass(frozen=True, slots=True)
class RealCluster:
    kubeconfig: Path
    server: str
    reused: bool  # it was up already: this run did not start it
    state: Path  # scripts/kube_real.py's directory for it (pids, logs, kubeconfig)

    def node_root(self, node: str) -> Path:
        """What stands for `node`'s root filesystem in this run (kwok nodes have none)."""
        return self.state / "devrun" / "nodes" / node

    def lc_db(self, node: str) -> Path:
        return self.state / "devrun" / f"lc-{node}.db"


def state_dir() -> Path:
    """Where scripts/kube_real.py keeps the cluster; KUBE_REAL_STATE moves it, as it does there."""
    return Path(os.environ.get("KUBE_REAL_STATE") or ROOT / ".kube-real").resolve()


def start_or_reuse() -> RealCluster:
    """The cluster `kube_real.py status` says is up, or one `kube_real.py up` starts (its progress
    goes to this process's output). Blocking: run it in a thread."""
    status = subprocess.run([sys.executable, str(KUBE_REAL), "status"], capture_output=True, text=True,
                            timeout=STATUS_TIMEOUT, cwd=ROOT, check=False)
    reused = status.returncode == 0
    if not reused:
        up = subprocess.run([sys.executable, str(KUBE_REAL), "up"], timeout=UP_TIMEOUT, cwd=ROOT, check=False)
        if up.returncode:
            raise OSError(f"scripts/kube_real.py up failed (exit {up.returncode}): see above")
    state = state_dir()
    kubeconfig = state / "kubeconfig"
    config = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    return RealCluster(kubeconfig, config["clusters"][0]["cluster"]["server"], reused, state)


def manifests(*paths: Path) -> list[dict[str, Any]]:
    """The documents of YAML files, or of every *.yaml in directories, in order, read as
    Kubernetes reads them (the examples' unquoted `20:00` stays a string)."""
    docs = []
    for path in paths:
        for file in sorted(path.glob("*.yaml")) if path.is_dir() else [path]:
            docs.extend(d for d in yaml.load_all(file.read_text(encoding="utf-8"), Loader=KubeYamlLoader) if d)
    return docs


def resource_of(doc: dict[str, Any]) -> GVR:
    """The resource of a CRD or of a Sedna object (what `make run` applies); others are refused."""
    if doc.get("kind") == "CustomResourceDefinition":
        return CRDS
    return sedna_gvr(apis.require(doc.get("kind", "")))


async def apply(client: KubeClient, docs: Iterable[dict[str, Any]]) -> list[str]:
    """Server-side apply of each document (forcing ownership of conflicting fields, so a rerun
    applies the same manifests again); returns `Kind/name` for each."""
    applied = []
    for doc in docs:
        gvr, meta = resource_of(doc), doc["metadata"]
        namespace = (meta.get("namespace") or "default") if gvr.namespaced else None
        try:
            await client.patch(gvr, meta["name"], doc, namespace=namespace, patch_type="apply",
                               field_manager=FIELD_MANAGER, force=True)
        except ApiError as exc:
            raise OSError(f"applying {doc['kind']}/{meta['name']}: {exc}") from exc
        applied.append(f"{doc['kind']}/{meta['name']}")
    return applied


def _established(crd: dict[str, Any]) -> bool:
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or ())


async def apply_crds(client: KubeClient) -> list[str]:
    """The chart's CRDs, applied and Established (served)."""
    docs = manifests(apis.CRD_DIR)
    await apply(client, docs)
    waiting = [d["metadata"]["name"] for d in docs]
    try:
        async with asyncio.timeout(ESTABLISHED_TIMEOUT):
            while waiting:
                waiting = [n for n in waiting if not _established(await client.get(CRDS, n))]
                if waiting:
                    await asyncio.sleep(0.2)
    except TimeoutError:
        raise OSError(f"CRDs not Established within {ESTABLISHED_TIMEOUT:.0f}s: {', '.join(waiting)}") from None
    return [d["metadata"]["name"] for d in docs]
