"""Leader election on a Lease in the dev cluster: one of two candidates leads; the other
takes over at once after a release, or after the lease expires without one."""

from __future__ import annotations

import asyncio

import pytest

from gm.kube.leader import LeaderElector, LeaderSettings
from gm.kube.resources import LEASES
from tests.e2e.test_kube_client import NS

FAST = dict(namespace=NS, name="sedna-gm", lease_duration=2.0, renew_deadline=1.5,
            retry_period=0.1)


def candidate(kube, identity: str, log: list[str], **overrides) -> LeaderElector:
    settings = LeaderSettings(identity=identity, **{**FAST, **overrides})
    return LeaderElector(kube, settings,
                         on_started_leading=lambda: log.append(f"start {identity}"),
                         on_stopped_leading=lambda: log.append(f"stop {identity}"))


async def first_leader(*electors: LeaderElector) -> LeaderElector:
    waits = {asyncio.create_task(e.leading.wait()): e for e in electors}
    done, pending = await asyncio.wait(waits, timeout=5, return_when=asyncio.FIRST_COMPLETED)
    for t in pending:
        t.cancel()
    assert done, "nobody became leader"
    return waits[done.pop()]


async def test_one_leads_other_takes_over_after_release(kube):
    log: list[str] = []
    a, b = candidate(kube, "gm-a", log), candidate(kube, "gm-b", log)
    tasks = {a: asyncio.create_task(a.run()), b: asyncio.create_task(b.run())}
    try:
        leader = await first_leader(a, b)
        other = b if leader is a else a
        lease = await kube.get(LEASES, "sedna-gm", namespace=NS)
        assert lease["spec"]["holderIdentity"] == leader.settings.identity
        await asyncio.sleep(0.5)  # several retry periods: the standby must stay standby
        assert not other.is_leader

        loop = asyncio.get_running_loop()
        released_at = loop.time()
        tasks[leader].cancel()
        await asyncio.gather(tasks[leader], return_exceptions=True)
        async with asyncio.timeout(5):
            await other.leading.wait()
        assert loop.time() - released_at < 1.5  # did not wait out the 2 s lease
        lease = await kube.get(LEASES, "sedna-gm", namespace=NS)
        assert lease["spec"]["holderIdentity"] == other.settings.identity
        assert lease["spec"]["leaseTransitions"] == 1
        assert log == [f"start {leader.settings.identity}", f"stop {leader.settings.identity}",
                       f"start {other.settings.identity}"]
    finally:
        for t in tasks.values():
            t.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


async def test_takeover_after_expiry_without_release(kube):
    log: list[str] = []
    a = candidate(kube, "gm-a", log, release_on_cancel=False)
    task_a = asyncio.create_task(a.run())
    async with asyncio.timeout(5):
        await a.leading.wait()
    task_a.cancel()
    await asyncio.gather(task_a, return_exceptions=True)

    b = candidate(kube, "gm-b", log)
    loop = asyncio.get_running_loop()
    start = loop.time()
    task_b = asyncio.create_task(b.run())
    try:
        async with asyncio.timeout(6):
            await b.leading.wait()
        assert loop.time() - start >= 1.9  # waited for the lease to expire
    finally:
        task_b.cancel()
        await asyncio.gather(task_b, return_exceptions=True)
    lease = await kube.get(LEASES, "sedna-gm", namespace=NS)
    assert lease["spec"]["holderIdentity"] == ""  # b released on cancel


async def test_leader_steps_down_when_lease_is_taken(kube):
    log: list[str] = []
    a = candidate(kube, "gm-a", log)
    task_a = asyncio.create_task(a.run())
    async with asyncio.timeout(5):
        await a.leading.wait()
    lease = await kube.get(LEASES, "sedna-gm", namespace=NS)
    lease["spec"]["holderIdentity"] = "intruder"
    await kube.replace(LEASES, "sedna-gm", lease, namespace=NS)
    async with asyncio.timeout(5):
        await task_a  # run() returns once leadership is lost
    assert not a.is_leader
    assert log == ["start gm-a", "stop gm-a"]


@pytest.mark.parametrize("kw", [
    pytest.param(dict(lease_duration=1, renew_deadline=2, retry_period=0.1), id="deadline>lease"),
    pytest.param(dict(identity=""), id="no-identity"),
])
def test_bad_settings_are_rejected(kw):
    with pytest.raises(ValueError):
        LeaderSettings(**{**FAST, "identity": "x", **kw})
