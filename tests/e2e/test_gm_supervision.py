"""The GM's long-lived tasks are supervised fail-fast: killing any of them once stops the
GM with `failure` naming it and a failing /readyz, rather than leaving it reconciling
from a dead cache or dropping every event. (The exit code of `sedna-gm` for the same
path is checked in test_gm_process.py.)"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from gm.app import GlobalManager
from gm.kube.resources import PODS
from tests.conftest import eventually
from tests.e2e.test_kube_client import cm

FATAL = (r"task ended, failing the process", r"gm: gm failed")


async def readyz(gm: GlobalManager) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{gm.port}/readyz") as r:
        return r.status, await r.text()


async def synced(gm: GlobalManager) -> None:
    assert gm.informers is not None
    await eventually(gm.informers.has_synced, within=10, message="caches synced")
    assert await readyz(gm) == (200, "ok")


@pytest.mark.expect_log_errors(*FATAL)
async def test_an_informer_killed_after_sync_stops_the_gm(start_gm):
    gm = await start_gm()
    await synced(gm)
    pods = next(inf for inf in gm.informers.all() if inf.gvr == PODS)
    gm.informers.supervised(pods).current.cancel()
    async with asyncio.timeout(5):
        await gm.wait()
    assert gm.failure == f"informer {PODS} cancelled"
    status, text = await readyz(gm)
    assert (status, text) == (503, f"failed: informer {PODS} cancelled")


@pytest.mark.expect_log_errors(*FATAL)
async def test_an_event_writer_that_raises_stops_the_gm(start_gm, monkeypatch):
    gm = await start_gm()
    await synced(gm)
    recorder = gm.recorders[0]

    async def broken(pending):
        raise RuntimeError("writer bug")

    monkeypatch.setattr(recorder, "_write_with_retries", broken)
    recorder.normal(cm("subject"), "Tested", "an event the writer chokes on")
    async with asyncio.timeout(5):
        await gm.wait()
    assert gm.failure == f"events {recorder.component} raised RuntimeError('writer bug')"
    assert (await readyz(gm))[0] == 503


async def test_a_clean_stop_reports_no_failure(start_gm):
    gm = await start_gm()
    await synced(gm)
    await gm.stop()
    assert gm.failure is None


@pytest.mark.expect_log_errors(r"leader election blocked")
async def test_a_missing_lease_namespace_fails_readiness_with_the_reason(start_gm):
    gm = await start_gm(leaderElection="{enabled: true, leaseNamespace: sedna-missing, leaseDurationSeconds: 2,"
                                       " renewDeadlineSeconds: 1, retryPeriodSeconds: 0.1}")
    await eventually(lambda: gm.leader is not None and gm.leader.attempts >= 3, within=10,
                     message="several lease attempts")
    status, text = await readyz(gm)
    assert status == 503
    assert text.startswith("leader election blocked: lease namespace 'sedna-missing' does not exist")
    assert not gm.leader.is_leader and gm.failure is None  # waits for the namespace, does not exit
