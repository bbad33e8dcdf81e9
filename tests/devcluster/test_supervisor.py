"""The Supervisor: crashes are logged, recorded and restarted; repeated ones fail /healthz."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from devcluster.cluster import DevCluster
from devcluster.supervisor import Supervisor
from tests.conftest import eventually

CRASH_LOG = r"devcluster\.supervisor: task=\S+ component=\S+ crashed"


class Flaky:
    """A long-lived loop that raises on its first `fail` runs, then runs until cancelled."""

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.runs = 0
        self.running = asyncio.Event()

    async def __call__(self) -> None:
        self.runs += 1
        if self.runs <= self.fail:
            raise RuntimeError(f"boom {self.runs}")
        self.running.set()
        await asyncio.Event().wait()


@pytest.mark.expect_log_errors(CRASH_LOG)
async def test_crash_is_recorded_and_restarted_with_growing_backoff():
    sup = Supervisor(backoff_base=0.01, backoff_max=0.04, failure_threshold=10)
    flaky = Flaky(fail=3)
    handle = sup.spawn("loop", flaky, component="looper")
    await asyncio.wait_for(flaky.running.wait(), 5)
    assert flaky.runs == 4 and handle.restarts == 3 and handle.failures == 3
    assert [c.error for c in sup.crashes] == ["RuntimeError: boom 1", "RuntimeError: boom 2", "RuntimeError: boom 3"]
    assert {c.task for c in sup.crashes} == {"loop"} and {c.component for c in sup.crashes} == {"looper"}
    assert "Traceback" in sup.crashes[0].traceback and "boom 1" in sup.crashes[0].traceback
    assert [sup.backoff(n) for n in (1, 2, 3, 4)] == [0.01, 0.02, 0.04, 0.04]
    assert handle.task.get_name() == "loop"
    await sup.stop()
    assert handle.task.done() and sup.names() == [] and len(sup.crashes) == 3


async def test_requested_stop_is_not_a_crash():
    sup = Supervisor()
    flaky = Flaky(fail=0)
    handle = sup.spawn("calm", flaky)
    await asyncio.wait_for(flaky.running.wait(), 5)
    await handle.stop()
    assert handle.task.cancelled() and sup.crashes == [] and sup.names() == []


@pytest.mark.expect_log_errors(CRASH_LOG)
async def test_cancel_from_outside_and_return_of_a_long_lived_task_are_crashes():
    sup = Supervisor(backoff_base=0.01)
    flaky = Flaky(fail=0)
    handle = sup.spawn("victim", flaky)
    await asyncio.wait_for(flaky.running.wait(), 5)
    first = handle.task
    first.cancel()
    await eventually(lambda: handle.task is not first and flaky.runs == 2, message="restarted")
    assert sup.crashes[0].error.startswith("TaskEndedError: task victim was cancelled from outside")

    async def returns() -> None:
        return None

    quitter = sup.spawn("quitter", returns)
    await eventually(lambda: quitter.restarts >= 1, message="a returning loop restarted")
    assert any(c.task == "quitter" and "returned" in c.error for c in sup.crashes)
    await sup.stop()


@pytest.mark.expect_log_errors(CRASH_LOG)
async def test_one_shot_task_reports_its_end_once_and_is_not_restarted():
    sup = Supervisor()
    ends: list = []

    async def ok() -> None:
        await asyncio.sleep(0)

    async def bad() -> None:
        raise ValueError("broken")

    sup.spawn("ok", ok, restart=False, on_exit=lambda err: ends.append(("ok", err)))
    sup.spawn("bad", bad, component="worker", restart=False, on_exit=lambda err: ends.append(("bad", err)))
    await eventually(lambda: len(ends) == 2, message="both ended")
    by_name = dict(ends)
    assert by_name["ok"] is None and isinstance(by_name["bad"], ValueError)
    assert [c.task for c in sup.crashes] == ["bad"] and sup.names() == []


@pytest.mark.expect_log_errors(CRASH_LOG)
async def test_health_names_a_component_after_repeated_crashes_until_it_runs_stably():
    sup = Supervisor(backoff_base=0.01, backoff_max=0.02, failure_threshold=3, stable_after=0.3)
    flaky = Flaky(fail=3)
    sup.spawn("controller:kubelet", flaky, component="kubelet")
    sup.spawn("controller:other", Flaky(fail=0), component="other")
    await asyncio.wait_for(flaky.running.wait(), 5)
    health = sup.health()
    assert health["other"] is None
    assert health["kubelet"] == "crashed 3 times in a row, last: RuntimeError: boom 3"
    assert sup.unhealthy() == {"kubelet": health["kubelet"]}
    await eventually(lambda: sup.unhealthy() == {}, within=5, message="healthy after a stable run")
    await sup.stop()


async def _get(session: aiohttp.ClientSession, path: str) -> tuple[int, str]:
    async with session.get(path) as resp:
        return resp.status, await resp.text()


@pytest.mark.expect_log_errors(CRASH_LOG)
async def test_healthz_and_readyz_fail_naming_a_crash_looping_controller():
    sup = Supervisor(backoff_base=0.01, backoff_max=0.02, failure_threshold=3, stable_after=60)
    dc = DevCluster(start_delay=0, termination_delay=0, resync=0.5, supervisor=sup)
    await dc.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession(dc.url, timeout=aiohttp.ClientTimeout(total=10)) as session:
            assert await _get(session, "/healthz") == (200, "ok")
            code, body = await _get(session, "/readyz?verbose")
            assert code == 200 and "[+]kubelet ok" in body and body.endswith("readyz check passed\n")
            kubelet = dc.controller("kubelet")
            broken = kubelet.queue.get

            async def failing_get():
                raise RuntimeError("queue broken")

            kubelet.queue.get = failing_get
            kubelet.queue.add(("default", "wake"))  # the workers leave the get they wait in
            await eventually(lambda: sup.unhealthy(), message="kubelet unhealthy")
            for path in ("/healthz", "/readyz"):
                code, body = await _get(session, path)
                assert code == 500
                assert "[+]ping ok\n" in body and "[+]garbage-collector ok\n" in body
                assert "[-]kubelet failed: crashed " in body and "RuntimeError: queue broken" in body
                assert body.endswith(f"{path[1:]} check failed\n")
            assert await _get(session, "/livez") == (200, "ok")
            kubelet.queue.get = broken
    finally:
        await dc.stop()
    assert {c.task for c in dc.crashes} == {"controller:kubelet"}
