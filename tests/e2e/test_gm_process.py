"""sedna-gm as a real process, and two GMs with leader election (one of them blackholed)."""

from __future__ import annotations

import asyncio
import signal
import sys
import time

import aiohttp
import pytest

from gm.app import GlobalManager
from gm.config import parse_config
from tests.conftest import eventually
from tests.e2e.conftest import gm_config
from tests.e2e.test_kube_leader import client_through, start_proxy


async def test_sedna_gm_serves_and_stops_on_sigterm(sedna_cluster, tmp_path):
    port_file = tmp_path / "gm.yaml"
    # a fixed port is needed for a subprocess; take a free one first
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    port_file.write_text(gm_config(tmp_path / "kubeconfig").replace("port: 0", f"port: {port}"))
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "gm.cli", "--config", str(port_file),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        async with aiohttp.ClientSession() as session:
            async def ready():
                try:
                    async with session.get(f"http://127.0.0.1:{port}/readyz") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False

            deadline = asyncio.get_running_loop().time() + 15
            while not await ready():
                assert asyncio.get_running_loop().time() < deadline, "GM never became ready"
                await asyncio.sleep(0.05)
            async with session.get(f"http://127.0.0.1:{port}/metrics") as r:
                text = await r.text()
            assert 'sedna_gm_reconcile_total{controller="federatedlearningjob",result="success"}' in text
            assert "sedna_gm_workqueue_depth" in text and "sedna_gm_api_requests_total" in text
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(proc.wait(), 15)
        _, err = await proc.communicate()
        assert rc == 0, err.decode()[-2000:]
        assert "gm stopped" in err.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_bad_config_exits_2_with_the_key(tmp_path):
    cfg = tmp_path / "gm.yaml"
    cfg.write_text("websocket: {port: nine}\n")
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "gm.cli", "--config", str(cfg),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 15)
    assert proc.returncode == 2
    assert "websocket.port: expected int, got 'nine'" in err.decode()


async def test_caches_that_do_not_sync_make_sedna_gm_exit_1_naming_them(cluster, tmp_path):
    # the Sedna CRDs are not installed: every list of a Sedna kind gets 404, so those caches
    # never sync and the GM must say so and exit rather than wait forever
    cfg = tmp_path / "gm.yaml"
    cfg.write_text(gm_config(tmp_path / "kubeconfig", cacheSyncTimeoutSeconds=1))
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "gm.cli", "--config", str(cfg),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = err.decode()
    assert proc.returncode == 1, text[-2000:]
    [line] = [ln for ln in text.splitlines() if "msg=\"exiting after a failure\"" in ln]
    assert "caches not synced within 1s:" in line
    for plural in ("jointinferenceservices", "federatedlearningjobs", "models", "datasets"):
        assert f"{plural}.sedna.io/v1alpha1" in line
    assert "pods/v1" not in line  # the core types did sync


ELECTION = ("{enabled: true, leaseNamespace: default, leaseDurationSeconds: 2,"
            " renewDeadlineSeconds: 1, retryPeriodSeconds: 0.2}")


async def test_one_gm_leads_and_the_other_takes_over_on_release(start_gm, sedna_cluster):
    first = await start_gm(leaderElection=ELECTION)
    await eventually(lambda: first.leader is not None and first.leader.is_leader, within=10, message="first leads")
    second = await start_gm(leaderElection=ELECTION)
    await eventually(lambda: second.leader is not None and second.leader.observed_changes >= 4,
                     within=10, message="the second sees the first renew")
    assert not second.leader.is_leader and first.leader.renewals >= 3
    await first.stop()  # releases the lease
    await eventually(lambda: second.leader.is_leader, within=10, message="second takes over")
    assert first.failure is None


def record_leading(gm: GlobalManager, timeline: list[tuple[float, str]], name: str) -> None:
    """Note when `gm`'s reconcilers start and when they have stopped (monotonic time)."""
    start, stop = gm._start_reconcilers, gm._stop_reconcilers

    def started() -> None:
        start()
        timeline.append((time.monotonic(), f"start {name}"))

    async def stopped() -> None:
        await stop()
        timeline.append((time.monotonic(), f"stop {name}"))

    gm._start_reconcilers, gm._stop_reconcilers = started, stopped


@pytest.mark.expect_log_errors(r"task ended, failing the process", r"gm: gm failed")
async def test_a_blackholed_gm_stops_its_controllers_before_the_other_leads(sedna_cluster, tmp_path):
    proxy = await start_proxy(sedna_cluster)
    probe = await client_through(proxy, sedna_cluster, tmp_path)  # writes the proxied kubeconfig
    await probe.close()
    timeline: list[tuple[float, str]] = []
    first = GlobalManager(parse_config(gm_config(tmp_path / "kubeconfig-via-proxy", leaderElection=ELECTION)),
                          identity="gm-behind-proxy")
    second = GlobalManager(parse_config(gm_config(tmp_path / "kubeconfig", leaderElection=ELECTION)),
                           identity="gm-direct")
    record_leading(first, timeline, "first")
    record_leading(second, timeline, "second")
    await first.start()
    try:
        await eventually(lambda: first.leader is not None and first.leader.is_leader, within=10,
                       message="first leads")
        await second.start()
        await eventually(lambda: second.leader is not None and second.leader.observed_changes >= 3,
                         within=10, message="the second sees the first renew")
        proxy.freeze()
        await eventually(lambda: second.leader.is_leader, within=10, message="second takes over")
        assert [what for _, what in timeline] == ["start first", "stop first", "start second"]
        assert timeline[1][0] < timeline[2][0]  # the first had stopped its reconcilers first
        assert first._reconcilers is not None and not first._reconcilers.running
        async with asyncio.timeout(5):
            await first.wait()  # and it stops itself: sedna-gm exits 1 and is restarted
        assert first.failure.startswith("controllers raised LeadershipLost('not renewed within")
    finally:
        proxy.thaw()
        await first.stop()
        await second.stop()
        await proxy.stop()
