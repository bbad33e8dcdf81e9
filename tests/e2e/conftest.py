"""Fixtures for the GM end to end: the dev cluster with the Sedna CRDs, and a running GM."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import pytest
import yaml

from devcluster.cluster import KubeYamlLoader
from gm.app import GlobalManager
from gm.config import parse_config
from gm.kube.client import KubeClient
from gm.kube.kubeconfig import ClientSettings
from shared import apis

REPO = Path(__file__).resolve().parents[2]


@functools.cache
def _crds() -> tuple[dict, ...]:
    """The chart's CRDs as DevCluster.apply_manifests reads them, read once: parsing their YAML
    was most of what a test's cluster cost to set up (0.15 s of its 0.2 s)."""
    docs: list[dict] = []
    for file in sorted(apis.CRD_DIR.glob("*.yaml")):
        with file.open(encoding="utf-8") as f:
            docs.extend(d for d in yaml.load_all(f, Loader=KubeYamlLoader) if d)
    return tuple(docs)


def install_crds(dc) -> None:
    """Register every Sedna CRD the way `kubectl create -f charts/sedna/crds` would (what
    DevCluster.apply_manifests does with them, from YAML read once)."""
    for doc in _crds():
        rt = dc.store.registry.for_kind(doc["apiVersion"], doc["kind"])
        assert rt is not None and not rt.namespaced, doc["kind"]
        dc.store.create(rt, None, copy.deepcopy(doc))


def load_example(name: str) -> list[dict]:
    with open(REPO / "examples" / "upstream" / name, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


@pytest.fixture
async def sedna_cluster(cluster):
    install_crds(cluster)
    return cluster


def gm_config(kubeconfig: Path, **extra) -> str:
    lines = [f"kubeConfig: {kubeconfig}", "websocket: {address: 127.0.0.1, port: 0}",
             "minResyncPeriodSeconds: 30", "workers: 2", "kubeClient: {qps: 500, burst: 1000}"]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    return "\n".join(lines)


@pytest.fixture
async def start_gm(sedna_cluster, tmp_path):
    """Start a GM against the dev cluster (call again after stopping to restart it)."""
    started: list[GlobalManager] = []

    async def start(**extra) -> GlobalManager:
        gm = GlobalManager(parse_config(gm_config(tmp_path / "kubeconfig", **extra)))
        await gm.start()
        started.append(gm)
        return gm

    yield start
    for gm in started:
        await gm.stop()


@pytest.fixture
async def gm(start_gm):
    return await start_gm()


@pytest.fixture
async def api(sedna_cluster, tmp_path):
    """A plain API client for the test's own reads and writes (what a user's tooling does)."""
    client = await connect(sedna_cluster, tmp_path)
    yield client
    await client.close()


async def connect(cluster, tmp_path, **settings) -> KubeClient:
    """A client configured the way the GM is: from a kubeconfig file the cluster wrote."""
    path = tmp_path / "kubeconfig"
    cluster.write_kubeconfig(str(path))
    kw = {"qps": 0, "timeout": 10, **settings}
    return await KubeClient.connect(ClientSettings(kubeconfig=str(path), **kw))


@pytest.fixture
async def kube(cluster, tmp_path):
    """A plain client against a dev cluster without the Sedna CRDs (the gm/kube tests)."""
    client = await connect(cluster, tmp_path)
    yield client
    await client.close()


def renamed(obj: dict, name: str) -> dict:
    out = copy.deepcopy(obj)
    out["metadata"]["name"] = name
    return out
