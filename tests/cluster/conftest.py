"""The cluster tier: the same test bodies on the dev cluster and on the real control plane.

`target` (tests/cluster/plugin.py, registered for the whole suite) is the cluster under test,
"dev" or "real"; every test here runs once on each. `ns` is a fresh namespace per test; `api`
a client of the test's own on the target (what a user's tooling does); `gm` the GlobalManager in
this process on the target, watching `ns` only.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator

import pytest

from gm.app import GlobalManager
from gm.config import parse_config
from gm.kube.client import KubeClient
from gm.kube.kubeconfig import ClientSettings
from tests.cluster.plugin import Cluster

# generous, bounded: the real cluster runs on a busy 2-core machine next to the rest of the suite
WITHIN = 60.0


def gm_config(target: Cluster, ns: str, **extra: str) -> str:
    lines = [f"kubeConfig: {target.kubeconfig}", f"namespace: {ns}", "websocket: {address: 127.0.0.1, port: 0}",
             "minResyncPeriodSeconds: 30", "workers: 2", "kubeClient: {qps: 500, burst: 1000}"]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    return "\n".join(lines)


@pytest.fixture
async def api(target: Cluster) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(ClientSettings(kubeconfig=str(target.kubeconfig), qps=0, timeout=30))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def start_gm(target: Cluster, ns: str):
    """Start a GM on the target watching `ns` (extra config keys as keyword arguments)."""
    started: list[GlobalManager] = []

    async def start(**extra: str) -> GlobalManager:
        manager = GlobalManager(parse_config(gm_config(target, ns, **extra)))
        await manager.start()
        started.append(manager)
        return manager

    try:
        yield start
    finally:
        for manager in started:
            await manager.stop()


@pytest.fixture
async def gm(start_gm) -> GlobalManager:
    return await start_gm()


def in_namespace(obj: dict, ns: str) -> dict:
    """A copy of a manifest moved into `ns`."""
    out = copy.deepcopy(obj)
    out["metadata"]["namespace"] = ns
    return out
