"""Liveness of every hub session from one task: a timing wheel, not a sleeping task per session.

Why: a GM holds tens of thousands of LC sessions. A pinger task per session costs each session
a task (about 1.5 KB) and the loop a wake-up per session and interval; a read timeout per
session costs a timer that is rescheduled on every frame. Here a session only records when it
last heard its peer (any frame, pongs included) and when the peer last pinged; one task wakes
every `tick`, visits the sessions filed under that tick, ends those silent for `dead_after`,
pings those due, and files each again under its next due time. A visit is O(1), so the work is
proportional to the sessions due, never to all of them.

A peer that pings on its own at least every `ping_interval` (our LC does) is not pinged: the
pongs the hub answers with prove the path both ways, and the GM is spared one frame out and one
in per session and interval. A peer that does not ping (upstream's LC) is pinged every
`ping_interval`. A ping is skipped while the session's socket still has unsent data: the peer
is not reading, so the ping would only queue behind that data, and awaiting the socket there
would hold every other session's beat; silence ends such a session.

Timing: a session is ended within one tick after `dead_after` of silence, and pinged within
one tick after it is due.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

TICKS_PER_INTERVAL = 10  # tick = ping_interval / 10


class Beating(Protocol):
    """What the wheel reads and writes on a session (loop times, seconds)."""

    heard: float  # the last frame from the peer
    peer_pinged: float  # the last ping from the peer (-inf: never)
    pinged: float  # the last ping the wheel sent or skipped
    beat_slot: int  # where the wheel filed it (-1: not filed)


S = TypeVar("S", bound=Beating)


class HeartbeatWheel(Generic[S]):
    """Pings the sessions due and ends the silent ones, from one task (`run`).

    Invariant: a filed session is in exactly one slot, `slots[s.beat_slot]`, and that slot's
    tick is the first tick at or after the session's due time, which is at most
    `len(slots) - 1` ticks ahead: every session found in the slot being visited is due.
    """

    def __init__(self, *, ping_interval: float, dead_after: float,
                 ping: Callable[[S], Awaitable[None]], expire: Callable[[S], None],
                 tick: float | None = None) -> None:
        """`ping(s)`: send a ping (or skip it); `expire(s)`: end the session. Neither may raise."""
        if not 0 < ping_interval < dead_after:
            raise ValueError(f"need 0 < ping_interval ({ping_interval}) < dead_after ({dead_after})")
        self.ping_interval = ping_interval
        self.dead_after = dead_after
        self.tick = tick if tick is not None else ping_interval / TICKS_PER_INTERVAL
        horizon = max(ping_interval, dead_after) + self.tick
        self.slots: list[set[S]] = [set() for _ in range(math.ceil(horizon / self.tick) + 2)]
        self._ping, self._expire = ping, expire
        self._next_tick: int | None = None  # the next tick to visit

    def __len__(self) -> int:
        return sum(len(slot) for slot in self.slots)

    def add(self, session: S, now: float) -> None:
        """File a session that just opened (its peer just spoke: `heard` = now)."""
        session.heard = now
        session.pinged = now
        self._file(session, now)

    def remove(self, session: S) -> None:
        if session.beat_slot >= 0:
            self.slots[session.beat_slot].discard(session)
            session.beat_slot = -1

    def due(self, session: S) -> float:
        """When the session next needs a visit: its ping, or the end of its allowed silence."""
        next_ping = max(session.pinged, session.peer_pinged) + self.ping_interval
        return min(next_ping, session.heard + self.dead_after)

    async def run(self) -> None:
        """Visit the slots tick by tick until cancelled; ticks a busy loop missed are visited
        late, each slot at most once per catch-up."""
        loop = asyncio.get_running_loop()
        while True:
            current = math.floor(loop.time() / self.tick)
            start = current if self._next_tick is None else max(self._next_tick, current - len(self.slots) + 1)
            for tick in range(start, current + 1):
                await self._visit(tick % len(self.slots), loop.time())
            self._next_tick = current + 1
            await asyncio.sleep(max(self._next_tick * self.tick - loop.time(), 0.0))

    async def _visit(self, slot: int, now: float) -> None:
        sessions, self.slots[slot] = self.slots[slot], set()
        for session in sessions:
            if session.beat_slot != slot:
                continue  # removed while an earlier one's ping was awaited
            if now - session.heard >= self.dead_after:
                session.beat_slot = -1
                self._expire(session)
                continue
            if now >= max(session.pinged, session.peer_pinged) + self.ping_interval:
                session.pinged = now
                await self._ping(session)
            if session.beat_slot == slot:  # not removed by the ping's failure meanwhile
                self._file(session, now)

    def _file(self, session: S, now: float) -> None:
        ticks = len(self.slots)
        due_tick = math.ceil(self.due(session) / self.tick)
        first = math.floor(now / self.tick) + 1
        slot = min(max(due_tick, first), first + ticks - 2) % ticks
        session.beat_slot = slot
        self.slots[slot].add(session)

