"""The in-flight window of status reports sent to the GM and not yet acknowledged.

The GM acks each report by its outbox seq once applied, one at a time and in order per
session; a report it could not apply *for now* gets no ack at all, while later reports
may still be acked. So acks are per seq, never cumulative, and an entry can sit
unacknowledged while newer ones complete. The window bounds how many reports travel
unacked (a GM that stops acking stops the sender instead of receiving the whole outbox)
and tells the sender which reports waited longer than the ack timeout, so they are sent
again: the GM's handlers are idempotent, a duplicate is harmless, a lost report is not.

It also counts the reports in flight per object, so the sender can keep one object whose
writes the GM is slow to apply from filling the whole window (lc/link/backlog.py).

Pure bookkeeping: the caller supplies the clock readings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from lc.store.outbox import OutboxEntry


@dataclass(slots=True)
class _Flight:
    entry: OutboxEntry
    sent_at: float
    sends: int


class InFlight:
    """Reports sent in this session and not yet acked, keyed by seq.

    Invariants: `len(self) <= limit` after every `add` the caller made while `room() > 0`;
    `_per_object[key]` is the number of flights whose entry is object `key`.
    """

    __slots__ = ("limit", "ack_timeout", "_flights", "_per_object")

    def __init__(self, *, limit: int, ack_timeout: float) -> None:
        if limit < 1:
            raise ValueError(f"window limit must be >= 1, got {limit}")
        if ack_timeout <= 0:
            raise ValueError(f"ack timeout must be > 0, got {ack_timeout}")
        self.limit = limit
        self.ack_timeout = ack_timeout
        self._flights: dict[int, _Flight] = {}
        self._per_object: Counter[tuple[str, str, str]] = Counter()

    def __len__(self) -> int:
        return len(self._flights)

    def __contains__(self, seq: object) -> bool:
        return seq in self._flights

    def __iter__(self) -> Iterator[int]:
        """The seqs in flight, in the order they were first sent."""
        return iter(list(self._flights))

    def of_object(self, key: tuple[str, str, str]) -> int:
        """How many reports of object `key` (kind, namespace, name) are in flight."""
        return self._per_object[key]

    def room(self) -> int:
        """How many more reports may be sent before an ack frees a slot."""
        return max(self.limit - len(self._flights), 0)

    def add(self, entry: OutboxEntry, now: float) -> None:
        """Record that `entry` was just sent (first time or again)."""
        flight = self._flights.get(entry.seq)
        if flight is None:
            self._flights[entry.seq] = _Flight(entry, now, 1)
            self._per_object[entry.object_key] += 1
        else:
            flight.sent_at, flight.sends = now, flight.sends + 1

    def ack(self, seq: int) -> OutboxEntry | None:
        """Forget `seq`; the entry it held, or None for an ack of something not in flight."""
        flight = self._flights.pop(seq, None)
        if flight is None:
            return None
        key = flight.entry.object_key
        self._per_object[key] -= 1
        if not self._per_object[key]:
            del self._per_object[key]
        return flight.entry

    def overdue(self, now: float) -> list[OutboxEntry]:
        """Entries whose ack is later than the timeout, oldest seq first."""
        late = [f.entry for f in self._flights.values() if now - f.sent_at >= self.ack_timeout]
        return sorted(late, key=lambda e: e.seq)

    def next_deadline(self) -> float | None:
        """When the earliest outstanding ack times out; None with nothing in flight."""
        if not self._flights:
            return None
        return min(f.sent_at for f in self._flights.values()) + self.ack_timeout

    def sends(self, seq: int) -> int:
        """How many times `seq` was sent in this session (0 if not in flight)."""
        flight = self._flights.get(seq)
        return 0 if flight is None else flight.sends
