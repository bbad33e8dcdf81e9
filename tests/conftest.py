"""Shared fixtures: an in-process dev cluster on a free port, and the real kubectl against it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

KUBECTL = os.environ.get("KUBECTL", "/usr/bin/kubectl")


async def wait_for(predicate: Callable[[], Any], *, within: float = 5.0, interval: float = 0.01,
                   message: str = "condition") -> Any:
    """Poll `predicate` until it returns a truthy value; fail the test after `within` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = predicate()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {message}")
        await asyncio.sleep(interval)


@pytest.fixture
async def cluster(tmp_path: Path):
    """A served DevCluster (start delay 0, fast resync); kubeconfig at tmp_path/kubeconfig."""
    from devcluster.cluster import DevCluster

    dc = DevCluster(start_delay=0, termination_delay=0, resync=0.5, lease_interval=1.0,
                    process_runtime=True, image_map={}, restart_backoff=0.05)
    await dc.start("127.0.0.1", 0)
    dc.write_kubeconfig(tmp_path / "kubeconfig")
    try:
        yield dc
    finally:
        await dc.stop()


Kubectl = Callable[..., Awaitable[tuple[int, str, str]]]


async def run_kubectl(kubeconfig: Path, cache: Path, *args: str, stdin: str | None = None,
                      within: float = 30.0) -> tuple[int, str, str]:
    """Run the real kubectl as a subprocess (the event loop keeps serving meanwhile)."""
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, f"--kubeconfig={kubeconfig}", f"--cache-dir={cache}", *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "HOME": str(cache.parent), "KUBECONFIG": str(kubeconfig)},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), within)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"kubectl {' '.join(args)} did not finish in {within}s") from None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
def kubectl(cluster, tmp_path: Path) -> Kubectl:
    """Run the real kubectl against `cluster`: `rc, out, err = await kubectl("get", "pods")`."""

    async def run(*args: str, stdin: str | None = None, within: float = 30.0) -> tuple[int, str, str]:
        return await run_kubectl(tmp_path / "kubeconfig", tmp_path / "kube-cache", *args, stdin=stdin,
                                 within=within)

    return run


@pytest.fixture
async def live():
    """A DevCluster whose controllers run but which does not serve HTTP (store-level tests)."""
    from devcluster.cluster import DevCluster

    dc = DevCluster(start_delay=0, termination_delay=0, resync=0.5, lease_interval=1.0,
                    process_runtime=True, image_map={}, restart_backoff=0.05)
    dc.start_controllers()
    try:
        yield dc
    finally:
        await dc.stop()
