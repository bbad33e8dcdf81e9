"""Downstream objects from the GM, applied in order, one at a time, without blocking the reader.

Upstream's LC handles every received message in its own goroutine, so an insert and a
delete of the same object can be applied in either order (upstream-lc.md B-15). Here the
websocket reader only queues what arrived and one applier task applies it, so the reader
keeps answering pings and reading acks while a manager is slow.

The queue holds at most one pending operation per object: a newer upsert or delete
replaces the pending one and moves to the back, so the latest state of each object is
applied last and a delete can never be overtaken by an earlier upsert of the same object.
Memory is bounded by the number of objects, not by how fast the GM talks.

Snapshots: the reader collects the keys upserted between `snapshot begin` and `end` and
queues a sweep marker carrying them. When the applier reaches the marker every earlier
operation has been applied, so the store holds exactly what was applied; the sweep
deletes each stored object that the snapshot did not name and that has no newer
operation still queued behind the marker. Then a sink that listens (`SnapshotListener`, the
LocalController) learns that every object it still holds exists at the GM: work on objects
it replayed from its store at start may begin.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from lc.errors import ResourceError, StoreError
from proto import ObjKey
from shared.apis import canonical_kind
from shared.logs import event

log = logging.getLogger(__name__)


class ObjectSink(Protocol):
    """Where downstream objects go (the LocalController's seam)."""

    async def apply_upsert(self, kind: str, namespace: str, name: str, obj: dict[str, Any]) -> None: ...

    async def apply_delete(self, kind: str, namespace: str, name: str) -> None: ...


@runtime_checkable
class SnapshotListener(Protocol):
    """A sink that wants to know when a whole snapshot has been applied."""

    def snapshot_applied(self) -> None: ...


StoredKeys = Callable[[], Awaitable[Iterable[ObjKey]]]
"""Reads the keys of every object the LC holds (from its store)."""


@dataclass(frozen=True, slots=True)
class Upsert:
    obj: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Delete:
    pass


@dataclass(frozen=True, slots=True, eq=False)
class Sweep:
    """End of a snapshot: `keep` are the keys it named. Compared by identity (a queue key)."""

    keep: frozenset[ObjKey]


ObjectOp = Upsert | Delete
DELETE = Delete()


def object_key(kind: str, namespace: str, name: str) -> ObjKey:
    """The queue key of an object: kinds in any case name the same object."""
    return (canonical_kind(kind), namespace, name)


class DownstreamQueue:
    """Pending downstream work: one operation per object key, plus sweep markers, FIFO.

    Invariant: each object key is in `_items` at most once, and holds the newest
    operation received for it; a replaced key moves to the back.
    """

    __slots__ = ("_items", "_ready")

    def __init__(self) -> None:
        self._items: OrderedDict[ObjKey | Sweep, ObjectOp | Sweep] = OrderedDict()
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, key: ObjKey, op: ObjectOp) -> None:
        self._items.pop(key, None)
        self._items[key] = op
        self._ready.set()

    def put_sweep(self, keep: Iterable[ObjKey]) -> None:
        marker = Sweep(frozenset(keep))
        self._items[marker] = marker
        self._ready.set()

    def pop(self) -> tuple[ObjKey | Sweep, ObjectOp | Sweep] | None:
        if not self._items:
            return None
        return self._items.popitem(last=False)

    def pending_keys(self) -> set[ObjKey]:
        """Object keys with an operation still queued."""
        return {k for k in self._items if not isinstance(k, Sweep)}

    async def get(self) -> tuple[ObjKey | Sweep, ObjectOp | Sweep]:
        while True:
            item = self.pop()
            if item is not None:
                return item
            self._ready.clear()
            await self._ready.wait()


@dataclass(slots=True)
class ApplyStats:
    upserts: int = 0
    deletes: int = 0
    swept: int = 0
    errors: int = 0


class DownstreamApplier:
    """Applies queued downstream work to the sink, one operation at a time, until cancelled."""

    def __init__(self, sink: ObjectSink, stored_keys: StoredKeys) -> None:
        self.queue = DownstreamQueue()
        self.stats = ApplyStats()
        self._sink = sink
        self._stored_keys = stored_keys
        self._idle = asyncio.Event()
        self._idle.set()

    def upsert(self, kind: str, namespace: str, name: str, obj: dict[str, Any]) -> None:
        self._queued()
        self.queue.put(object_key(kind, namespace, name), Upsert(obj))

    def delete(self, kind: str, namespace: str, name: str) -> None:
        self._queued()
        self.queue.put(object_key(kind, namespace, name), DELETE)

    def sweep(self, keep: Iterable[ObjKey]) -> None:
        self._queued()
        self.queue.put_sweep(keep)

    async def drained(self) -> None:
        """Wait until everything queued so far has been applied (tests, orderly stops)."""
        await self._idle.wait()

    def _queued(self) -> None:
        self._idle.clear()

    async def run(self) -> None:
        while True:
            key, op = await self.queue.get()
            if isinstance(op, Sweep):
                await self._sweep(op.keep)
            else:
                assert not isinstance(key, Sweep)
                await self._apply(key, op)
            if not len(self.queue):
                self._idle.set()

    async def _apply(self, key: ObjKey, op: ObjectOp) -> None:
        kind, namespace, name = key
        try:
            if isinstance(op, Upsert):
                await self._sink.apply_upsert(kind, namespace, name, op.obj)
                self.stats.upserts += 1
            else:
                await self._sink.apply_delete(kind, namespace, name)
                self.stats.deletes += 1
        except ResourceError as exc:
            self._failed(key, op, str(exc), logging.WARNING)
        except StoreError as exc:
            self._failed(key, op, f"store: {exc}", logging.ERROR)
        except Exception as exc:  # a manager's bug must not stop the link
            log.exception("downstream apply crashed key=%s/%s/%s", *key)
            self._failed(key, op, repr(exc), logging.ERROR)

    def _failed(self, key: ObjKey, op: ObjectOp, error: str, level: int) -> None:
        self.stats.errors += 1
        verb = "upsert" if isinstance(op, Upsert) else "delete"
        event(log, "downstream object not applied", level=level, op=verb, kind=key[0],
              key=f"{key[1]}/{key[2]}", error=error)

    async def _sweep(self, keep: frozenset[ObjKey]) -> None:
        """Delete what the LC holds that the snapshot left out (unless newer work is queued)."""
        try:
            stored = {object_key(*k) for k in await self._stored_keys()}
        except StoreError as exc:
            self.stats.errors += 1
            event(log, "snapshot sweep skipped", level=logging.ERROR, error=str(exc))
            return
        gone = sorted(stored - keep - self.queue.pending_keys())
        for key in gone:
            await self._apply(key, DELETE)
        self.stats.swept += len(gone)
        if gone:
            event(log, "snapshot removed objects", count=len(gone))
        if isinstance(self._sink, SnapshotListener):
            self._sink.snapshot_applied()
