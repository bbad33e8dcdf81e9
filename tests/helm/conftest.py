"""Fixtures for the chart on the dev cluster: the helm binary and a cluster whose process
runtime runs the chart's image as the real GM and LC (`python -m gm.cli` / `lc.cli`)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.conftest import served_cluster
from tests.helm.helmbin import ROOT, helm_env, helm_path

CHART = ROOT / "charts" / "sedna"
CHART_IMAGE = "sedna-py:0.1.0"  # values.yaml image.repository:image.tag
HELM_TIMEOUT = 180.0

Helm = Callable[..., Awaitable[tuple[int, str, str]]]


def chart_image_map() -> dict:
    """The chart's one image: its programs sedna-gm and sedna-lc run from this checkout."""
    return {CHART_IMAGE: {"command": [sys.executable, "-m", "gm.cli"], "cwd": str(ROOT),
                          "programs": {"sedna-gm": [sys.executable, "-m", "gm.cli"],
                                       "sedna-lc": [sys.executable, "-m", "lc.cli"]}}}


@pytest.fixture
async def chart_cluster(tmp_path: Path):
    """A served dev cluster (nodes edge-node-1, edge-node-2, cloud-node) running the chart's image."""
    async with served_cluster(tmp_path, image_map=chart_image_map(), restart_backoff=0.2,
                              pod_root=tmp_path / "pods") as dc:
        yield dc


@pytest.fixture
def helm(chart_cluster, tmp_path: Path) -> Helm:
    """Run the real helm against `chart_cluster`: `rc, out, err = await helm("list", "-A")`."""
    binary = helm_path()

    async def run(*args: str, within: float = HELM_TIMEOUT) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            str(binary), "--kubeconfig", str(tmp_path / "kubeconfig"), *args, env=helm_env(tmp_path / "helm"),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), within)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise AssertionError(f"helm {' '.join(args)} did not finish in {within}s") from None
        return proc.returncode or 0, out.decode(), err.decode()

    return run
