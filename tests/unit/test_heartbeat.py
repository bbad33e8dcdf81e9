"""The hub's heartbeat wheel on its own: who is pinged, who is ended, and when."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator

import pytest

from gm.edge.heartbeat import HeartbeatWheel

PING, DEAD, TICK = 0.1, 0.35, 0.01


class Peer:
    """A session as the wheel sees it, with what the wheel did to it."""

    def __init__(self, name: str, *, answers: bool = True) -> None:
        self.name = name
        self.answers = answers  # pongs at once when pinged
        self.heard = 0.0
        self.peer_pinged = -math.inf
        self.pinged = 0.0
        self.beat_slot = -1
        self.pings: list[float] = []
        self.expired_at: float | None = None


class Rig:
    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.wheel: HeartbeatWheel[Peer] = HeartbeatWheel(
            ping_interval=PING, dead_after=DEAD, ping=self.ping, expire=self.expire, tick=TICK)

    async def ping(self, peer: Peer) -> None:
        now = self.loop.time()
        peer.pings.append(now)
        if peer.answers:
            peer.heard = now

    def expire(self, peer: Peer) -> None:
        peer.expired_at = self.loop.time()

    def add(self, *peers: Peer) -> float:
        now = self.loop.time()
        for peer in peers:
            self.wheel.add(peer, now)
        return now


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    rig = Rig()
    task = asyncio.create_task(rig.wheel.run(), name="test-wheel")
    yield rig
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_peer_that_answers_is_pinged_every_interval_and_never_ended(rig: Rig) -> None:
    peer = Peer("answers")
    start = rig.add(peer)
    await asyncio.sleep(10 * PING + TICK)
    assert peer.expired_at is None and peer.beat_slot >= 0
    assert 8 <= len(peer.pings) <= 10
    gaps = [b - a for a, b in zip([start, *peer.pings], peer.pings, strict=False)]
    assert min(gaps) >= PING - 1e-6  # never early


async def test_a_silent_peer_is_ended_once_dead_after_has_passed(rig: Rig) -> None:
    peer = Peer("silent", answers=False)
    start = rig.add(peer)
    await asyncio.sleep(DEAD + 0.2)
    assert peer.expired_at is not None
    assert DEAD - 1e-6 <= peer.expired_at - start <= DEAD + 0.15  # within a loaded loop's lag of a tick
    assert 2 <= len(peer.pings) <= 3  # pinged at about 0.1, 0.2, 0.3: none answered
    assert peer.beat_slot == -1 and len(rig.wheel) == 0  # not filed again


async def test_a_peer_that_pings_on_its_own_is_not_pinged(rig: Rig) -> None:
    peer = Peer("pinger", answers=False)
    rig.add(peer)
    for _ in range(12):  # the peer pings every 0.05 s, as our LC does every 10 s
        await asyncio.sleep(PING / 2)
        peer.heard = peer.peer_pinged = rig.loop.time()
    assert peer.pings == [] and peer.expired_at is None


async def test_a_removed_session_is_neither_pinged_nor_ended(rig: Rig) -> None:
    gone, stays = Peer("gone", answers=False), Peer("stays", answers=False)
    rig.add(gone, stays)
    rig.wheel.remove(gone)
    await asyncio.sleep(DEAD + 0.2)
    assert gone.pings == [] and gone.expired_at is None
    assert stays.expired_at is not None


async def test_many_sessions_are_each_visited_once_per_interval(rig: Rig) -> None:
    peers = [Peer(f"p{i}") for i in range(2000)]
    rig.add(*peers)
    await asyncio.sleep(3 * PING + TICK / 2)
    assert {len(p.pings) for p in peers} <= {2, 3}
    assert all(p.expired_at is None for p in peers)
    assert len(rig.wheel) == len(peers)


def test_ping_interval_must_be_below_dead_after() -> None:
    with pytest.raises(ValueError, match="need 0 < ping_interval"):
        HeartbeatWheel(ping_interval=1.0, dead_after=1.0, ping=Rig.ping, expire=Rig.expire)  # type: ignore[arg-type]
