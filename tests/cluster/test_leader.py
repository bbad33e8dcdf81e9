"""Leader election of two sedna-gm processes, on both clusters of the tier.

Two GMs run as processes (`python -m gm.cli --config FILE`), each serving its own port, both
watching the test's namespace and campaigning for one Lease there, with short lease timings. The
first one leads: the Lease names its process, its /metrics say `sedna_gm_leader 1`, and it reconciles a
JointInferenceService; the other stays standby, reads the Lease every retry period and creates
nothing. SIGKILL of the leader leaves the Lease held and unrenewed: the standby takes it once it has
gone unrenewed for its duration, reconciles a JointInferenceService created after the kill, carries
an edit of the first one to its workers, and updates the first one's children in place instead of
creating them again.

On the real cluster the GMs authenticate with the tier's admin kubeconfig (the chart's RBAC, its
Lease rules included, is tested by test_chart.py).
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import aiohttp
import pytest
import yaml

from shared.ports import free_port
from tests.cluster.conftest import WITHIN, gm_config
from tests.cluster.plugin import ROOT, Cluster
from tests.cluster.test_seed import EXAMPLES, JI, _apply_example, _owned
from tests.conftest import eventually

LEASE = "sedna-gm"
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 6.0, 4.0, 0.5
# the standby's takeover after the kill: at most the lease duration after the leader's last renewal,
# plus its next poll; the slack covers two API calls per attempt on a busy 2-core machine
TAKEOVER_SLACK = 4.0
HTTP_TIMEOUT = aiohttp.ClientTimeout(total=5)
AFTER = f"{JI}-after-kill"


def election() -> str:
    return (f"{{enabled: true, leaseName: {LEASE}, leaseNamespace: NS, leaseDurationSeconds: {LEASE_DURATION}, "
            f"renewDeadlineSeconds: {RENEW_DEADLINE}, retryPeriodSeconds: {RETRY_PERIOD}}}")


def parse_metrics(text: str) -> dict[str, float]:
    """`name{labels}` -> value of every sample of a Prometheus text page."""
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            samples[key] = float(value)
    return samples


def creates(metrics: dict[str, float]) -> float:
    """API create calls of any outcome."""
    return sum(v for k, v in metrics.items() if re.fullmatch(r'sedna_gm_api_requests_total\{.*verb="create".*\}', k))


@dataclass
class GMProcess:
    """One `sedna-gm` process: its port (/metrics, /readyz) and its log."""

    name: str
    proc: asyncio.subprocess.Process
    port: int
    log: Path

    def holds(self, lease: dict) -> bool:
        """Whether `lease` names this process (the GM's identity is `host_pid_suffix`, gm/app.py)."""
        holder = (lease.get("spec") or {}).get("holderIdentity") or ""
        return holder.rsplit("_", 2)[1:2] == [str(self.proc.pid)]

    async def get(self, path: str) -> tuple[int, str]:
        async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as http:
            async with http.get(f"http://127.0.0.1:{self.port}{path}") as r:
                return r.status, await r.text()

    async def metrics(self) -> dict[str, float]:
        status, text = await self.get("/metrics")
        assert status == 200, f"{self.name} /metrics: {status} {text[:200]}"
        return parse_metrics(text)

    def tail(self) -> str:
        return f"{self.name} ({self.log}):\n" + self.log.read_text(errors="replace")[-3000:]

    async def ready(self) -> bool:
        if self.proc.returncode is not None:
            raise AssertionError(f"{self.name} exited {self.proc.returncode}; {self.tail()}")
        try:
            return (await self.get("/readyz"))[0] == 200
        except aiohttp.ClientError:
            return False

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


def open_log(path: Path) -> BinaryIO:
    return open(path, "wb")  # the process writes to it; this one only hands it over


@pytest.fixture
async def gm_processes(target: Cluster, ns: str, tmp_path: Path) -> AsyncIterator[Callable[[str], Awaitable[GMProcess]]]:
    """Start a `sedna-gm` on the target watching `ns`, in the election for the Lease `ns/sedna-gm`."""
    started: list[GMProcess] = []

    async def start(name: str) -> GMProcess:
        port = free_port()
        config = tmp_path / f"{name}.yaml"
        config.write_text(gm_config(target, ns, leaderElection=election().replace("NS", ns))
                          .replace("port: 0", f"port: {port}") + "\n")
        log = tmp_path / f"{name}.log"
        with open_log(log) as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gm.cli", "--config", str(config), cwd=ROOT,
                stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT)
        gm = GMProcess(name, proc, port, log)
        started.append(gm)
        await eventually(gm.ready, f"{name} ready", within=WITHIN, interval=0.1)
        return gm

    try:
        yield start
    finally:
        for gm in started:
            await gm.stop()


async def lease(target: Cluster, ns: str) -> dict:
    return await target.get_json("lease", LEASE, "-n", ns)


async def children(target: Cluster, ns: str, owner: dict) -> dict[str, str]:
    """`kind/name` -> uid of the owner's Deployments and Services."""
    found = {}
    for resource in ("deployments", "services"):
        for child in await _owned(target, resource, ns, owner):
            found[f"{child['kind']}/{child['metadata']['name']}"] = child["metadata"]["uid"]
    return found


async def reconciled(target: Cluster, ns: str, name: str) -> tuple[dict, dict[str, str]]:
    """The JointInferenceService `name` once it has its two Deployments, its Service and a status."""
    async def done():
        ji = await target.get_json("jointinferenceservice", name, "-n", ns)
        found = await children(target, ns, ji)
        ok = len(found) == 3 and (ji.get("status") or {}).get("conditions")
        return ok and (ji, found)
    return await eventually(done, f"{name}: two Deployments, a Service and its status", within=WITHIN, interval=0.3)


async def create_second(target: Cluster, ns: str) -> None:
    """The example's JointInferenceService again, under another name (its Models are in `ns`)."""
    [doc] = [d for d in yaml.safe_load_all((EXAMPLES / "joint-inference-helmet-detection.yaml").read_text())
             if d and d["kind"] == "JointInferenceService"]
    doc["metadata"] = {"name": AFTER, "namespace": ns}
    await target.kubectl("create", "-f", "-", stdin=yaml.safe_dump(doc))


async def test_one_gm_leads_the_other_takes_over_after_sigkill(target: Cluster, ns: str, gm_processes):
    first = await gm_processes("gm-first")
    held = await eventually(lambda: _held_by(target, ns, first), "the first GM holding the Lease",
                            within=WITHIN, interval=0.2)
    second = await gm_processes("gm-second")
    # the standby has read the Lease on several retry periods and stays standby
    await eventually(lambda: _lease_reads(second, at_least=3), "the standby reading the Lease", within=WITHIN,
                     interval=0.2)

    await _apply_example(target, "joint-inference-helmet-detection.yaml", ns)
    ji, before = await reconciled(target, ns, JI)
    assert first.holds(await lease(target, ns))
    leader, standby = await first.metrics(), await second.metrics()
    assert (leader["sedna_gm_leader"], standby["sedna_gm_leader"]) == (1, 0)
    assert creates(leader) >= 3  # the children, at least
    assert creates(standby) == 0, {k: v for k, v in standby.items() if "api_requests" in k}

    # SIGKILL: no release, the Lease stays held until it expires
    first.proc.send_signal(signal.SIGKILL)
    killed = asyncio.get_running_loop().time()
    await first.proc.wait()
    await create_second(target, ns)

    async def second_leads() -> bool:
        return (await second.metrics())["sedna_gm_leader"] == 1
    await eventually(second_leads, "the standby leading", within=LEASE_DURATION + TAKEOVER_SLACK + 5, interval=0.1)
    took = asyncio.get_running_loop().time() - killed
    assert LEASE_DURATION - RENEW_DEADLINE <= took <= LEASE_DURATION + RETRY_PERIOD + TAKEOVER_SLACK, took
    now = await lease(target, ns)
    assert second.holds(now), now["spec"]
    assert now["spec"]["leaseTransitions"] == held["spec"].get("leaseTransitions", 0) + 1

    # the new leader reconciles the CR created after the kill ...
    _, after = await reconciled(target, ns, AFTER)
    assert not set(after) & set(before)
    # ... and carries an edit of the first one to its edge worker
    patch = [{"op": "add", "path": "/spec/edgeWorker/template/spec/containers/0/env/-",
              "value": {"name": "AFTER_TAKEOVER", "value": "1"}}]
    await target.kubectl("patch", "jointinferenceservice", JI, "-n", ns, "--type=json", "-p", json.dumps(patch))

    async def edited() -> bool:
        for d in await _owned(target, "deployments", ns, ji):
            env = d["spec"]["template"]["spec"]["containers"][0].get("env") or []
            if {"name": "AFTER_TAKEOVER", "value": "1"} in env:
                return True
        return False
    await eventually(edited, "the edit in the first JI's edge Deployment", within=WITHIN, interval=0.3)
    # nothing duplicated: the first JI's children are the same objects, updated in place
    assert await children(target, ns, ji) == before
    assert len(await children(target, ns, await target.get_json("jointinferenceservice", AFTER, "-n", ns))) == 3
    assert creates(await second.metrics()) >= 3
    assert second.proc.returncode is None


async def _held_by(target: Cluster, ns: str, gm: GMProcess) -> dict | None:
    out = await target.kubectl("get", "lease", LEASE, "-n", ns, "-o", "json", check=False)
    if not out:  # not created yet
        return None
    found = json.loads(out)
    return found if gm.holds(found) else None


async def _lease_reads(gm: GMProcess, *, at_least: int) -> bool:
    """The standby's gets: its informers list and watch, so every get is a read of the Lease."""
    metrics = await gm.metrics()
    gets = sum(v for k, v in metrics.items() if re.fullmatch(r'sedna_gm_api_requests_total\{.*verb="get".*\}', k))
    return gets >= at_least and metrics["sedna_gm_leader"] == 0
