"""sedna-gm as a real process, and two GMs with leader election."""

from __future__ import annotations

import asyncio
import signal
import sys

import aiohttp

from tests.conftest import wait_for
from tests.e2e.conftest import gm_config


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
            assert 'gm_reconcile_total{controller="federatedlearningjob",result="success"}' in text
            assert "gm_workqueue_depth" in text and "gm_api_requests_total" in text
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


async def test_one_gm_leads_and_the_other_takes_over_on_release(start_gm, sedna_cluster):
    election = ("leaderElection: {enabled: true, leaseNamespace: default, leaseDurationSeconds: 2,"
                " renewDeadlineSeconds: 1.5, retryPeriodSeconds: 0.2}")
    first = await start_gm(**{"leaderElection": election.split(": ", 1)[1]})
    await wait_for(lambda: first.leader is not None and first.leader.is_leader, within=10, message="first leads")
    second = await start_gm(**{"leaderElection": election.split(": ", 1)[1]})
    await asyncio.sleep(0.5)  # several retry periods: the second must not have taken the lease
    assert second.leader is not None and not second.leader.is_leader
    await first.stop()  # releases the lease
    await wait_for(lambda: second.leader.is_leader, within=10, message="second takes over")
