"""Leader election on a Lease in the dev cluster: one of two candidates leads; the other
takes over at once after a release, after the lease expires without one, or after the
leader's path to the API server is blackholed, and never while the old leader still leads.

"Nothing happened" is checked against observed events rather than elapsed time: the
standby stays standby across several renew cycles it saw as lease changes."""

from __future__ import annotations

import asyncio
import logging
import time
from urllib.parse import urlsplit

import pytest
import yaml

from gm.kube.client import KubeClient
from gm.kube.kubeconfig import ClientSettings
from gm.kube.leader import LeaderElector, LeaderSettings
from gm.kube.resources import LEASES, NAMESPACES
from tests.conftest import eventually
from tests.e2e.test_kube_client import NS
from tests.tcpproxy import TcpProxy

FAST = dict(namespace=NS, name="sedna-gm", lease_duration=2.0, renew_deadline=1.5,
            retry_period=0.1)


class Timeline:
    """Leadership events of every candidate, in the order they happened (monotonic time)."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str, str]] = []  # (time, "start" | "stop", identity)

    def callbacks(self, identity: str) -> dict:
        return {"on_started_leading": lambda: self._add("start", identity),
                "on_stopped_leading": lambda: self._add("stop", identity)}

    def _add(self, what: str, identity: str) -> None:
        self.events.append((time.monotonic(), what, identity))

    def log(self) -> list[str]:
        return [f"{what} {identity}" for _, what, identity in self.events]

    def intervals(self, identity: str) -> list[tuple[float, float]]:
        """Closed leading intervals of one candidate (an open one ends now)."""
        out, began = [], None
        for at, what, who in self.events:
            if who == identity and what == "start":
                began = at
            elif who == identity and what == "stop":
                out.append((began, at))
                began = None
        if began is not None:
            out.append((began, time.monotonic()))
        return out

    def assert_one_leader_at_a_time(self) -> None:
        leaders: set[str] = set()
        for _, what, identity in self.events:
            if what == "start":
                assert not leaders, f"{identity} started leading while {leaders} still led: {self.log()}"
                leaders.add(identity)
            else:
                leaders.discard(identity)


def candidate(kube, identity: str, timeline: Timeline, **overrides) -> LeaderElector:
    settings = LeaderSettings(identity=identity, **{**FAST, **overrides})
    return LeaderElector(kube, settings, **timeline.callbacks(identity))


async def first_leader(*electors: LeaderElector) -> LeaderElector:
    waits = {asyncio.create_task(e.leading.wait()): e for e in electors}
    done, pending = await asyncio.wait(waits, timeout=5, return_when=asyncio.FIRST_COMPLETED)
    for t in pending:
        t.cancel()
    assert done, "nobody became leader"
    return waits[done.pop()]


async def stop_all(*tasks: asyncio.Task) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_one_leads_other_takes_over_after_release(kube):
    timeline = Timeline()
    a, b = candidate(kube, "gm-a", timeline), candidate(kube, "gm-b", timeline)
    tasks = {a: asyncio.create_task(a.run()), b: asyncio.create_task(b.run())}
    try:
        leader = await first_leader(a, b)
        other = b if leader is a else a
        lease = await kube.get(LEASES, "sedna-gm", namespace=NS)
        assert lease["spec"]["holderIdentity"] == leader.settings.identity
        # the standby saw three more records of the leader's (at least two of them renewals:
        # the first may be the one that acquired) and stayed standby through them
        seen = other.observed_changes
        await eventually(lambda: other.observed_changes >= seen + 3, message="standby sees renewals")
        assert leader.renewals >= 2 and not other.is_leader

        renewals_before = leader.renewals
        tasks[leader].cancel()
        await asyncio.gather(tasks[leader], return_exceptions=True)
        async with asyncio.timeout(5):
            await other.leading.wait()
        # taken over from the release, not after expiry: the old leader renewed no more,
        # and the standby saw exactly two changes since (the release, then its own write)
        assert leader.renewals == renewals_before
        lease = await kube.get(LEASES, "sedna-gm", namespace=NS)
        assert lease["spec"]["holderIdentity"] == other.settings.identity
        assert lease["spec"]["leaseTransitions"] == 1
        assert timeline.log() == [f"start {leader.settings.identity}", f"stop {leader.settings.identity}",
                                  f"start {other.settings.identity}"]
        timeline.assert_one_leader_at_a_time()
    finally:
        await stop_all(*tasks.values())


async def test_takeover_after_expiry_without_release(kube):
    timeline = Timeline()
    a = candidate(kube, "gm-a", timeline, release_on_cancel=False)
    task_a = asyncio.create_task(a.run())
    async with asyncio.timeout(5):
        await a.leading.wait()
    await stop_all(task_a)
    held = await kube.get(LEASES, "sedna-gm", namespace=NS)

    b = candidate(kube, "gm-b", timeline)
    task_b = asyncio.create_task(b.run())
    try:
        async with asyncio.timeout(6):
            await b.leading.wait()
        # b waited out the lease on its own clock: it read a's unchanged record on several
        # attempts (one per retry period) before writing its own
        assert b.attempts >= 3
        assert b.observed_changes == 2  # a's record, then b's own
    finally:
        await stop_all(task_b)
    lease = await kube.get(LEASES, "sedna-gm", namespace=NS)
    assert lease["spec"]["holderIdentity"] == ""  # b released on cancel
    assert int(lease["metadata"]["resourceVersion"]) > int(held["metadata"]["resourceVersion"])
    timeline.assert_one_leader_at_a_time()


async def test_leader_steps_down_when_lease_is_taken(kube):
    timeline = Timeline()
    a = candidate(kube, "gm-a", timeline)
    task_a = asyncio.create_task(a.run())
    async with asyncio.timeout(5):
        await a.leading.wait()
    lease = await kube.get(LEASES, "sedna-gm", namespace=NS)
    lease["spec"]["holderIdentity"] = "intruder"
    await kube.replace(LEASES, "sedna-gm", lease, namespace=NS)
    async with asyncio.timeout(5):
        await task_a  # run() returns once leadership is lost
    assert not a.is_leader
    assert a.lost_reason == "the lease is held by intruder"
    assert timeline.log() == ["start gm-a", "stop gm-a"]


async def client_through(proxy: TcpProxy, cluster, tmp_path) -> KubeClient:
    """A client whose every request goes through `proxy`; its request timeout (30 s) is far
    longer than the lease, as a default client's is."""
    config = cluster.kubeconfig()
    config["clusters"][0]["cluster"]["server"] = proxy.url
    path = tmp_path / "kubeconfig-via-proxy"
    path.write_text(yaml.safe_dump(config))
    return await KubeClient.connect(ClientSettings(kubeconfig=str(path), qps=0, timeout=30))


async def start_proxy(cluster) -> TcpProxy:
    url = urlsplit(cluster.url)
    proxy = TcpProxy((url.hostname, url.port))
    await proxy.start()
    return proxy


async def test_blackholed_leader_stops_leading_before_the_standby_takes_over(cluster, kube, tmp_path):
    proxy = await start_proxy(cluster)
    slow = await client_through(proxy, cluster, tmp_path)
    timeline = Timeline()
    timing = dict(lease_duration=2.0, renew_deadline=1.0, retry_period=0.2)
    a = candidate(slow, "gm-a", timeline, **timing)
    b = candidate(kube, "gm-b", timeline, **timing)
    task_a = asyncio.create_task(a.run())
    tasks = [task_a]
    try:
        async with asyncio.timeout(5):
            await a.leading.wait()
        tasks.append(asyncio.create_task(b.run()))
        await eventually(lambda: b.observed_changes >= 3, message="standby sees the leader renew")
        assert not b.is_leader

        proxy.freeze()  # a's requests now hang until its client's 30 s timeout
        async with asyncio.timeout(10):
            await b.leading.wait()
        assert task_a.done() and not a.is_leader  # a had stepped down and returned
        assert a.lost_reason == "not renewed within the renew deadline (1s)"
        assert timeline.log() == ["start gm-a", "stop gm-a", "start gm-b"]
        timeline.assert_one_leader_at_a_time()
        (a_began, a_ended), = timeline.intervals("gm-a")
        (b_began, _), = timeline.intervals("gm-b")
        assert a_began < a_ended < b_began
        lease = await kube.get(LEASES, "sedna-gm", namespace=NS)
        assert lease["spec"]["holderIdentity"] == "gm-b"
    finally:
        await stop_all(*tasks)
        await proxy.stop()
        await slow.close()


@pytest.mark.expect_log_errors(r"leader election blocked")
async def test_missing_lease_namespace_is_one_clear_error_until_it_exists(kube, caplog):
    timeline = Timeline()
    a = candidate(kube, "gm-a", timeline, namespace="sedna-system")
    task = asyncio.create_task(a.run())
    try:
        with caplog.at_level(logging.INFO, logger="gm.kube.leader"):
            await eventually(lambda: a.attempts >= 5, message="several attempts")
            assert a.blocked is not None and "lease namespace 'sedna-system' does not exist" in a.blocked
            blocked = [r for r in caplog.records if r.getMessage() == "leader election blocked"]
            assert len(blocked) == 1 and "sedna-system" in blocked[0].error
            assert not a.is_leader

            await kube.create(NAMESPACES, {"metadata": {"name": "sedna-system"}})
            async with asyncio.timeout(5):
                await a.leading.wait()
            assert a.blocked is None
            assert [r.getMessage() for r in caplog.records].count("leader election unblocked") == 1
    finally:
        await stop_all(task)


@pytest.mark.parametrize("kw", [
    pytest.param(dict(lease_duration=1, renew_deadline=2, retry_period=0.1), id="deadline>lease"),
    pytest.param(dict(identity=""), id="no-identity"),
])
def test_bad_settings_are_rejected(kw):
    with pytest.raises(ValueError):
        LeaderSettings(**{**FAST, "identity": "x", **kw})
