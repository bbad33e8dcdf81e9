"""The real-cluster tier: collected only through `make test-cluster` (tests/cluster/__main__.py),
which sets SEDNA_CLUSTER_TIER=1 and needs KUBECONFIG; the default run collects nothing here.

Fixtures: `kube` runs the real kubectl against KUBECONFIG; `seed_ns` is a fresh namespace
deleted at the end; `crds` applies the chart's CRDs once per run (and deletes only those this
run created); `gm` runs the GlobalManager in this process, watching `seed_ns` only.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.conftest import KUBECTL

if os.environ.get("SEDNA_CLUSTER_TIER") != "1":
    collect_ignore_glob = ["test_*.py"]

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "charts" / "sedna" / "crds"
KUBECTL_TIMEOUT = 120.0

Kube = Callable[..., Awaitable[str]]


async def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> str:
    """The real kubectl against KUBECONFIG; stdout, or AssertionError with stderr when `check`."""
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, *args, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), KUBECTL_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"kubectl {' '.join(args)} did not finish in {KUBECTL_TIMEOUT}s") from None
    if check and proc.returncode:
        raise AssertionError(f"kubectl {' '.join(args)}: {err.decode().strip()}")
    return out.decode()


@pytest.fixture
def kube() -> Kube:
    return kubectl


async def get_json(*args: str) -> dict:
    return json.loads(await kubectl("get", *args, "-o", "json"))


async def _apply_crds() -> tuple[list[str], list[str]]:
    """Apply the chart's CRDs and wait until they are Established: (all names, names this run created)."""
    names = [json.loads(await kubectl("create", "--dry-run=client", "-o", "json", "-f", str(f)))["metadata"]["name"]
             for f in sorted(CRD_DIR.glob("*.yaml"))]
    # A deleted CRD lingers (Terminating) until the server has deleted its objects, and refuses new
    # ones meanwhile ("create not allowed while custom resource definition is terminating"): wait
    # for the ones an earlier run deleted to be gone; they do not count as existing.
    present = {c["metadata"]["name"]: c for c in (await get_json("crd"))["items"] if c["metadata"]["name"] in names}
    terminating = [n for n, c in present.items() if c["metadata"].get("deletionTimestamp")]
    if terminating:
        await kubectl("wait", "--for=delete", f"--timeout={int(KUBECTL_TIMEOUT) - 10}s",
                      *(f"crd/{n}" for n in terminating))
    existing = set(present) - set(terminating)
    await kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=sedna-test-cluster",
                  "-f", str(CRD_DIR))
    await kubectl("wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in names))
    return names, [n for n in names if n not in existing]


@pytest.fixture(scope="session")
def crds():
    """The chart's CRDs, established, once per run; the ones this run created are deleted at the end.

    Once per run, not per test: on a real server a CRD's delete waits for the server to delete its
    objects, which a just-created CRD's storage may refuse for a while ("storage is
    (re)initializing"), so create-delete churn per test makes later tests wait or fail. The fixture
    is synchronous (asyncio.run) so that no event loop outlives a test.
    """
    names, created = asyncio.run(_apply_crds())
    yield names
    if created:  # waits for the server to delete their objects, so the next run starts clean
        asyncio.run(kubectl("delete", "crd", "--wait=true", f"--timeout={int(KUBECTL_TIMEOUT) - 10}s",
                            *created, check=False))


@pytest.fixture
async def seed_ns(crds):
    name = f"sedna-seed-{uuid.uuid4().hex[:6]}"
    await kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        await kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
async def gm(seed_ns):
    """The GlobalManager in this process, on the cluster of KUBECONFIG, watching `seed_ns`."""
    from gm.app import GlobalManager
    from gm.config import parse_config

    kubeconfig = os.environ["KUBECONFIG"].split(os.pathsep)[0]
    manager = GlobalManager(parse_config(f"kubeConfig: {kubeconfig}\nnamespace: {seed_ns}\n"
                                         "websocket: {address: 127.0.0.1, port: 0}\n"))
    await manager.start()
    try:
        yield manager
    finally:
        await manager.stop()
