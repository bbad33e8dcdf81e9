"""Quarantine of poison reports: finding the one frame the GM refuses without losing the rest.

A report whose frame the GM cannot decode makes the GM close the session with a protocol
error, and would do so again on every replay, holding back every report behind it. The LC
cannot tell which of the reports in flight was at fault, so it records them as suspects
(the highest suspect seq, persisted in the store under SUSPECTS_KEY so a restart keeps
probing), and the following sessions send suspects one at a time: a session closed with a
protocol error while one suspect is alone in flight convicts it (dead letter, reason
"protocol"), and a suspect acked, or not closed on within the ack timeout, is cleared. Past
the last suspect the window opens again.

The worker API refuses such reports at the door (lc/dispatch.py), so this guards against
reports stored before that check existed or a GM whose limits differ. One Quarantine lives
for one session; the session asks it how many reports it may send and tells it what it sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from lc.errors import StoreError
from lc.store.facade import Store
from proto import CLOSE_PROTOCOL_ERROR, CLOSE_UNSUPPORTED_DATA
from proto.errors import CLOSE_INVALID_PAYLOAD, CLOSE_MESSAGE_TOO_BIG
from shared.logs import event

log = logging.getLogger(__name__)

SUSPECTS_KEY = "link.suspect_upto"
FRAME_REFUSED_CODES = frozenset({CLOSE_PROTOCOL_ERROR, CLOSE_UNSUPPORTED_DATA,
                                 CLOSE_INVALID_PAYLOAD, CLOSE_MESSAGE_TOO_BIG})
"""Close codes with which a GM says a frame it received was unacceptable."""

Shielded = Callable[[Awaitable[Any]], Awaitable[Any]]
"""Awaits a store write that must complete even if the session is cancelled meanwhile."""


class Quarantine:
    """The suspect horizon of one session and the suspect currently probed.

    Invariant: while a report with seq <= `upto` is next to send, at most one suspect is in
    flight that has neither been acked nor outlived the ack timeout (`_probe`).
    """

    __slots__ = ("_store", "_ack_timeout", "_clock", "_shielded", "upto", "_probe")

    def __init__(self, store: Store, *, ack_timeout: float, clock: Callable[[], float],
                 shielded: Shielded) -> None:
        self._store = store
        self._ack_timeout = ack_timeout
        self._clock = clock
        self._shielded = shielded
        self.upto = 0  # reports with seq <= this go one at a time
        self._probe: tuple[int, float] | None = None  # (seq, sent at) of the suspect in flight

    async def load(self, *, within: float) -> None:
        """Read the suspect horizon a previous session (or run) left; 0 if unreadable."""
        try:
            async with asyncio.timeout(within):
                self.upto = int(await self._store.get_meta(SUSPECTS_KEY) or 0)
        except (StoreError, ValueError, TimeoutError) as exc:
            event(log, "suspect reports unknown, sending normally", level=logging.WARNING,
                  error=str(exc) or "timeout")
            self.upto = 0

    def is_suspect(self, seq: int) -> bool:
        """Whether report `seq` must be sent alone."""
        return seq <= self.upto

    def room(self, next_seq: int, inflight: Collection[int], window_room: int) -> int:
        """How many reports may be sent now, the next one being `next_seq`."""
        if not self.is_suspect(next_seq):
            return window_room
        return 0 if self.probe_busy(inflight) else 1

    def probing(self, seq: int) -> None:
        """Suspect `seq` was just sent alone."""
        self._probe = (seq, self._clock())

    def probe_busy(self, inflight: Collection[int]) -> bool:
        """A suspect is alone in flight and has neither been acked nor outlived the timeout."""
        if self._probe is None:
            return False
        seq, sent_at = self._probe
        if seq not in inflight or self._clock() - sent_at >= self._ack_timeout:
            self._probe = None
            return False
        return True

    def can_clear(self, next_seq: int, inflight: Collection[int]) -> bool:
        """Every suspect was sent and the last probe is settled: the window may open."""
        return bool(self.upto) and not self.is_suspect(next_seq) and not self.probe_busy(inflight)

    async def clear(self) -> None:
        """Forget the suspects (persisted); StoreError if the store cannot record it."""
        self.upto = 0
        await self._shielded(self._store.put_meta(SUSPECTS_KEY, None))

    async def isolate(self, reason: str, inflight: Collection[int], *,
                      within: float) -> int | None:
        """The GM refused a frame: convict the lone suspect (returns its seq), or make every
        report in flight a suspect (returns None)."""
        probe, self._probe = self._probe, None
        try:
            async with asyncio.timeout(within):
                if probe is not None and probe[0] in inflight:
                    await self._shielded(self._store.dead_letter(
                        probe[0], reason="protocol", error=reason))
                    return probe[0]
                if inflight:
                    upto = max(self.upto, *inflight)
                    await self._shielded(self._store.put_meta(SUSPECTS_KEY, str(upto)))
                    event(log, "GM refused a frame; reports in flight are sent one at a time "
                          "next", level=logging.WARNING, suspects=len(inflight), upto=upto,
                          error=reason)
        except (StoreError, TimeoutError) as exc:
            event(log, "suspect reports not recorded", level=logging.WARNING,
                  error=str(exc) or "timeout")
        return None
