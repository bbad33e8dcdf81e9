"""Reports read from the outbox and not yet sent: queued per object, folded, bounded per object.

Sending the outbox in plain seq order into the window had two costs: one object whose writes
the GM is slow to apply could fill the whole window and stall every other object of the
node, and a worker reporting a thousand times a second cost a thousand frames (and GM
writes) for a status that keeps only the latest value. So the sender reads ahead into one
queue per object (kind, namespace, name):

- Folding: an entry with a fold key (lc/fold.py, latest-wins kinds) leaves its queue when a
  newer entry with the same key is read; the newer one covers it. The covered entry stays in
  the store until the covering entry is acked, and that ack deletes both in one transaction
  (Store.ack_one with the key); if the LC stops first, the next session reads and folds again.
- Per-object bound: at most `per_object` reports of one object are in flight; the object's
  later entries wait in its queue while other objects' entries are sent.

Within an object entries leave in seq order: the GM skips a report older than the one its
status records, so sending out of order would lose a report that does not fold. Pure
bookkeeping.
"""

from __future__ import annotations

from collections import deque
from itertools import islice

from lc.link.window import InFlight
from lc.store.outbox import OutboxEntry

ObjKey = tuple[str, str, str]


class Backlog:
    """Entries read and not yet sent, per object in seq order.

    Invariants: each queue is in seq order and not empty; `_newest[k]` is the one queued entry
    with fold key k (an older one with that key was dropped as covered when it arrived);
    `_size` is the number of queued entries.
    """

    __slots__ = ("per_object", "covered", "_queues", "_newest", "_size")

    def __init__(self, *, per_object: int) -> None:
        if per_object < 1:
            raise ValueError(f"per-object in-flight bound must be >= 1, got {per_object}")
        self.per_object = per_object
        self.covered = 0  # entries dropped because a newer one covers them
        self._queues: dict[ObjKey, deque[OutboxEntry]] = {}
        self._newest: dict[str, OutboxEntry] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, entry: OutboxEntry) -> None:
        """Queue `entry` (read in seq order), dropping the older entry it covers."""
        queue = self._queues.setdefault(entry.object_key, deque())
        if entry.fold is not None:
            older = self._newest.get(entry.fold)
            if older is not None:
                queue.remove(older)  # same fold key, same object
                self._size -= 1
                self.covered += 1
            self._newest[entry.fold] = entry
        queue.append(entry)
        self._size += 1

    def lowest(self) -> OutboxEntry | None:
        """The queued entry with the lowest seq."""
        heads = [queue[0] for queue in self._queues.values()]
        return min(heads, key=_seq) if heads else None

    def take(self, room: int, inflight: InFlight) -> list[OutboxEntry]:
        """Up to `room` entries, oldest first, none of an object that already has
        `per_object` reports in flight; they leave the backlog."""
        candidates: list[OutboxEntry] = []
        for key, queue in self._queues.items():
            allowed = self.per_object - inflight.of_object(key)
            if allowed > 0:
                candidates.extend(islice(queue, allowed))
        candidates.sort(key=_seq)
        chosen = candidates[:room]
        for entry in chosen:  # per object, a prefix of its queue in seq order
            self._pop(entry)
        return chosen

    def take_lowest(self, inflight: InFlight) -> OutboxEntry | None:
        """The lowest-seq entry, if its object may have one more report in flight."""
        entry = self.lowest()
        if entry is None or inflight.of_object(entry.object_key) >= self.per_object:
            return None
        self._pop(entry)
        return entry

    def _pop(self, entry: OutboxEntry) -> None:
        key = entry.object_key
        queue = self._queues[key]
        queue.popleft()
        if not queue:
            del self._queues[key]
        if entry.fold is not None and self._newest.get(entry.fold) is entry:
            del self._newest[entry.fold]
        self._size -= 1


def _seq(entry: OutboxEntry) -> int:
    return entry.seq
