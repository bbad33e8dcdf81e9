"""The LC's durable state in SQLite: resources from the GM, the outbox, job state, workers.

Why SQLite and how it is used:
- Resources the GM sent are kept so a restarted LC resumes its dataset monitors and job
  routing before (or without) reaching the GM.
- The outbox holds every report meant for the GM under a monotonic sequence number
  (AUTOINCREMENT, so a number is never reused after acked rows are deleted); the link
  sends `pending(...)` and deletes with `ack(...)` once the GM applied them. A row of a
  latest-wins kind carries its fold key (lc/fold.py): the ack of the newest row of a key
  also deletes the older rows of that key, which the link did not send (they changed
  nothing the newest one does not overwrite), in the same transaction.
- journal_mode=WAL with synchronous=FULL by default: a worker is answered 200 only after
  its report is committed, and FULL makes a commit survive power loss, not just a process
  crash (NORMAL in WAL mode may lose the last commits on power failure). Edge nodes lose
  power; group commit (lc/groupcommit.py) shares one fsync among all reports that
  arrive together, so FULL costs little throughput. LC_DB_SYNCHRONOUS=NORMAL trades that
  guarantee for latency.
- The outbox is bounded in bytes (`StoreBounds.outbox_bytes`): its rows are accepted
  reports that must not be lost, so a worker report that would take it over the cap is
  refused (the API answers 503) and nothing old is dropped for it, except reports that a
  newer row of their fold key supersedes (`covered`, kept by a trigger): they count as
  free room, and are deleted once the outbox is over its cap. So a steady stream of
  latest-wins reports of one object never fills it, while below the cap they stay for the
  link to fold and settle with the covering ack as before. Reports that waited for their
  job (at most the unknown owners' cap) and the LC's own small reports are never refused.
- A report the GM can never apply (refused with a reason, or one that cannot be sent) is
  moved from the outbox to `lc_deadletters` with the reason, in one transaction, so it
  neither blocks the reports behind it nor disappears without a trace. Its body is cut to
  `StoreBounds.dead_letter_body` bytes (a marker keeps the start and the length), and the
  table keeps the newest rows within a count and a byte cap.
- Worker records (GET /sedna/workers) are keyed by namespace/name; they go with their
  job (`forget_workers`) and expire after the worker TTL. A record whose owner this node
  does not hold (no such job here, or no job kind matched yet) expires sooner and counts
  against its own byte cap: any client on the network can send reports for owners that do
  not exist. Both caps drop the oldest records first, never the one just written.
- Every byte cap is enforced from `lc_usage` (records and bytes per table or class of
  records), which triggers keep in step with every insert, update and delete in the same
  transaction, and which is recounted at every open; so a cap costs one lookup per write,
  not a scan. Listings are read a page at a time (`worker_page`, `dead_letter_page`) with
  each item's JSON bounded, never a whole table.
- Every SQLite call runs on one dedicated thread with its own connection, never on the
  event loop. Tables are prefixed `lc_` so the file can coexist with the `resources`
  table an upstream LC may have left at the same default path.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any, Generic, TypeVar

import orjson

from lc.errors import (
    StoreBusyError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreOpenError,
)
from lc.fold import fold_key
from lc.groupcommit import BatchObserver, GroupCommitter, Op
from shared.text import clip

SCHEMA_VERSION = 5
MAX_DEAD_LETTERS = 10_000
DEAD_LETTER_BODY = 64 << 10
DEFAULT_WORKER_TTL = 7 * 24 * 3600.0
DEAD_LETTER_REASONS = ("refused", "unsendable", "protocol")
"""refused: the GM acked it with an error; unsendable: this LC cannot encode it within the
protocol's limits; protocol: the GM closed the session over this report's frame."""
DROPPED = ("unknown_owner", "worker", "dead_letter", "outbox_covered")
"""Which cap dropped a record: the unknown owners' bytes, the workers table's bytes, the
dead letters' bytes or count, or the outbox's bytes (only reports a newer one covers)."""
MAX_ERROR_TEXT = 2048  # characters of a dead letter's error kept


class OutboxFullError(StoreBusyError):
    """The outbox holds as many bytes of reports as it may; retry once the GM took some."""


@dataclass(frozen=True, slots=True)
class StoreBounds:
    """How long and how much the store keeps of what others sent (lc/config.py sets them)."""

    worker_ttl: float = DEFAULT_WORKER_TTL
    unknown_owner_ttl: float = 600.0  # a report whose owner this node does not hold
    unknown_owner_bytes: int = 16 << 20  # all such reports together
    workers_bytes: int = 64 << 20  # every worker record together
    dead_letters_bytes: int = 16 << 20
    dead_letters: int = MAX_DEAD_LETTERS
    dead_letter_body: int = DEAD_LETTER_BODY  # a longer body is kept as a marker
    outbox_bytes: int = 64 << 20  # reports for the GM; a worker report beyond it is refused

    def __post_init__(self) -> None:
        for field in fields(self):
            if not getattr(self, field.name) > 0:
                raise ValueError(f"{field.name} must be > 0")

    @property
    def unknown_ttl(self) -> float:
        """How long a record of an unknown owner lives: never longer than a known one's."""
        return min(self.unknown_owner_ttl, self.worker_ttl)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS lc_resources (
    kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    object TEXT NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (kind, namespace, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lc_outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    body TEXT NOT NULL, created_at REAL NOT NULL,
    fold TEXT, bytes INTEGER NOT NULL DEFAULT 0, covered INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS lc_outbox_fold ON lc_outbox (fold, seq) WHERE fold IS NOT NULL;
CREATE INDEX IF NOT EXISTS lc_outbox_newest ON lc_outbox (fold)
    WHERE covered = 0 AND fold IS NOT NULL;
CREATE INDEX IF NOT EXISTS lc_outbox_covered ON lc_outbox (seq) WHERE covered = 1;
CREATE TABLE IF NOT EXISTS lc_job_state (
    kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    state TEXT NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (kind, namespace, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lc_workers (
    namespace TEXT NOT NULL, name TEXT NOT NULL,
    owner_kind TEXT NOT NULL, owner_name TEXT NOT NULL,
    report TEXT NOT NULL, received_at REAL NOT NULL, routed_kind TEXT,
    bytes INTEGER NOT NULL DEFAULT 0, owner_known INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (namespace, name)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lc_workers_owner ON lc_workers (namespace, owner_name);
CREATE INDEX IF NOT EXISTS lc_workers_received ON lc_workers (received_at);
CREATE INDEX IF NOT EXISTS lc_workers_unknown ON lc_workers (received_at) WHERE owner_known = 0;
CREATE TABLE IF NOT EXISTS lc_deadletters (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    body TEXT NOT NULL, created_at REAL NOT NULL,
    reason TEXT NOT NULL, error TEXT NOT NULL, dead_at REAL NOT NULL,
    bytes INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS lc_meta (
    key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lc_usage (
    what TEXT PRIMARY KEY, records INTEGER NOT NULL, bytes INTEGER NOT NULL) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS lc_workers_added AFTER INSERT ON lc_workers BEGIN
    UPDATE lc_usage SET records = records + 1, bytes = bytes + NEW.bytes
     WHERE what = 'workers' OR (what = 'unknown_owner' AND NEW.owner_known = 0);
END;
CREATE TRIGGER IF NOT EXISTS lc_workers_removed AFTER DELETE ON lc_workers BEGIN
    UPDATE lc_usage SET records = records - 1, bytes = bytes - OLD.bytes
     WHERE what = 'workers' OR (what = 'unknown_owner' AND OLD.owner_known = 0);
END;
CREATE TRIGGER IF NOT EXISTS lc_workers_changed AFTER UPDATE OF bytes, owner_known
ON lc_workers BEGIN
    UPDATE lc_usage SET records = records - 1, bytes = bytes - OLD.bytes
     WHERE what = 'workers' OR (what = 'unknown_owner' AND OLD.owner_known = 0);
    UPDATE lc_usage SET records = records + 1, bytes = bytes + NEW.bytes
     WHERE what = 'workers' OR (what = 'unknown_owner' AND NEW.owner_known = 0);
END;
CREATE TRIGGER IF NOT EXISTS lc_outbox_added AFTER INSERT ON lc_outbox BEGIN
    UPDATE lc_usage SET records = records + 1, bytes = bytes + NEW.bytes WHERE what = 'outbox';
END;
CREATE TRIGGER IF NOT EXISTS lc_outbox_covers AFTER INSERT ON lc_outbox
WHEN NEW.fold IS NOT NULL BEGIN
    UPDATE lc_outbox SET covered = 1 WHERE fold = NEW.fold AND covered = 0 AND seq < NEW.seq;
END;
CREATE TRIGGER IF NOT EXISTS lc_outbox_removed AFTER DELETE ON lc_outbox BEGIN
    UPDATE lc_usage SET records = records - 1, bytes = bytes - OLD.bytes WHERE what = 'outbox';
END;
CREATE TRIGGER IF NOT EXISTS lc_outbox_covered_removed AFTER DELETE ON lc_outbox
WHEN OLD.covered = 1 BEGIN
    UPDATE lc_usage SET records = records - 1, bytes = bytes - OLD.bytes
     WHERE what = 'outbox_covered';
END;
CREATE TRIGGER IF NOT EXISTS lc_outbox_covered AFTER UPDATE OF covered ON lc_outbox
WHEN NEW.covered <> OLD.covered BEGIN
    UPDATE lc_usage SET records = records + NEW.covered - OLD.covered,
           bytes = bytes + (NEW.covered - OLD.covered) * NEW.bytes
     WHERE what = 'outbox_covered';
END;
CREATE TRIGGER IF NOT EXISTS lc_deadletters_added AFTER INSERT ON lc_deadletters BEGIN
    UPDATE lc_usage SET records = records + 1, bytes = bytes + NEW.bytes
     WHERE what = 'deadletters';
END;
CREATE TRIGGER IF NOT EXISTS lc_deadletters_removed AFTER DELETE ON lc_deadletters BEGIN
    UPDATE lc_usage SET records = records - 1, bytes = bytes - OLD.bytes
     WHERE what = 'deadletters';
END;
CREATE TRIGGER IF NOT EXISTS lc_deadletters_changed AFTER UPDATE OF bytes
ON lc_deadletters BEGIN
    UPDATE lc_usage SET bytes = bytes - OLD.bytes + NEW.bytes WHERE what = 'deadletters';
END;
"""
"""Invariants: lc_usage holds, for 'workers', 'unknown_owner' (workers with owner_known = 0),
'deadletters', 'outbox' and 'outbox_covered' (outbox rows with covered = 1), the number of
rows and the sum of their `bytes` (the stored JSON's length in UTF-8, plus the error's for a
dead letter). Rows are only ever replaced by UPSERT, whose UPDATE fires the triggers (INSERT
OR REPLACE would delete without them). An outbox row has covered = 1 exactly when a row with
a higher seq has its fold key; it is inserted with covered = 0 and its `bytes`, and only its
`covered` ever changes, from 0 to 1 (so the outbox triggers stay single-row lookups: they
run for every report). A migration that fills `bytes` recounts lc_usage afterwards."""


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One report waiting for the GM's ack."""

    seq: int
    kind: str
    namespace: str
    name: str
    body: Any
    created_at: float
    fold: str | None = None  # lc/fold.py: a newer entry with this key covers this one

    @property
    def object_key(self) -> tuple[str, str, str]:
        return (self.kind, self.namespace, self.name)

    def to_dict(self) -> dict[str, Any]:
        """The entry as the plain dict the link encodes."""
        return {"seq": self.seq, "kind": self.kind, "namespace": self.namespace,
                "name": self.name, "body": self.body}


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A report taken out of the outbox for good, and why."""

    seq: int
    kind: str
    namespace: str
    name: str
    body: Any
    created_at: float
    reason: str
    error: str
    dead_at: float

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "kind": self.kind, "namespace": self.namespace,
                "name": self.name, "body": self.body, "createdAt": self.created_at,
                "reason": self.reason, "error": self.error, "deadAt": self.dead_at}


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """The last report of one worker and where it was routed (None: not yet)."""

    namespace: str
    name: str
    owner_kind: str
    owner_name: str
    report: dict[str, Any]
    received_at: float
    routed_kind: str | None
    owner_known: bool = True  # its owner is a job this node holds


@dataclass(frozen=True, slots=True)
class ListedWorker:
    """A worker record as listed: its report as JSON text of bounded length."""

    namespace: str
    name: str
    owner_kind: str
    owner_name: str
    routed_kind: str | None
    received_at: float
    owner_known: bool
    report_json: str  # the report, or a truncation marker (`truncated_json`)


@dataclass(frozen=True, slots=True)
class ListedDeadLetter:
    """A dead letter as listed: its (already bounded) body as JSON text."""

    seq: int
    kind: str
    namespace: str
    name: str
    body_json: str
    created_at: float
    reason: str
    error: str
    dead_at: float


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing; `next_key` is where the next page starts after (None: last)."""

    items: list[T]
    next_key: tuple[Any, ...] | None


def encode(value: Any) -> str:
    """JSON text for a stored value (orjson; non-string keys and big ints via json)."""
    return encode_sized(value)[0]


def encode_sized(value: Any) -> tuple[str, int]:
    """JSON text for a stored value and its length in bytes."""
    try:
        raw = orjson.dumps(value)
    except TypeError as exc:
        raise StoreError(f"value cannot be stored as JSON: {exc}") from None
    return raw.decode(), len(raw)


def head_chars(limit: int) -> int:
    """How much of a long JSON text its marker keeps (bytes; characters are at least as
    many): quoting at most doubles it, and the rest of the marker fits in 128 bytes."""
    return max(0, (limit - 128) // 2)


def truncated_json(head: str, size: int, limit: int) -> str:
    """The marker that stands for JSON text of `size` bytes longer than `limit`: its start
    (from `head`, the text or its first `head_chars(limit)` characters) and its length, in
    at most `limit` bytes."""
    start = head.encode()[:head_chars(limit)].decode("utf-8", "ignore")
    return orjson.dumps({"truncated": True, "bytes": size, "head": start}).decode()


def bounded_json(text: str, limit: int) -> str:
    """`text` when it fits in `limit` bytes, else its truncation marker."""
    size = len(text.encode())
    return text if size <= limit else truncated_json(text, size, limit)


class Store:
    """Async facade over the SQLite file; open with `await Store.open(path)`."""

    def __init__(self, path: str, executor: ThreadPoolExecutor, conn: sqlite3.Connection,
                 *, observe: BatchObserver | None, bounds: StoreBounds = StoreBounds(),
                 clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.bounds = bounds
        self.clock = clock  # wall-clock seconds: what received_at and the TTLs count in
        self._executor = executor
        self._conn = conn
        self._committer = GroupCommitter(self._run_batch, executor, observe=observe)
        self._outbox_grew = asyncio.Event()  # replaced by a fresh one after every set
        self._outbox_size = 0
        self._last_seq = 0
        self.outbox_epoch = ""  # set at open, see _outbox_epoch
        self._dead_counts: dict[str, int] = {}
        self._dropped: Counter[str] = Counter()  # records dropped by a cap, since open
        self._open = True

    # ---- lifecycle -------------------------------------------------------------------

    @classmethod
    async def open(cls, path: str, *, synchronous: str = "FULL",
                   observe: BatchObserver | None = None, bounds: StoreBounds = StoreBounds(),
                   clock: Callable[[], float] = time.time) -> Store:
        """Open (creating if needed) and check the database, and bring it within `bounds`;
        raise a StoreError if unusable."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lc-store")
        loop = asyncio.get_running_loop()
        try:
            conn = await loop.run_in_executor(executor, _connect, path, synchronous)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        store = cls(path, executor, conn, observe=observe, bounds=bounds, clock=clock)
        store._outbox_size, store._last_seq = await store._read(_outbox_counts)
        store.outbox_epoch = await store._read(_outbox_epoch)
        store._committer.start()
        try:
            await store._trim()  # a database written under other bounds, or long idle
        except BaseException:
            await store.close()
            raise
        return store

    @property
    def is_open(self) -> bool:
        return self._open

    async def close(self) -> None:
        """Commit what was already submitted, then close the connection and its thread."""
        if not self._open:
            return
        self._open = False
        await self._committer.close()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._conn.close)
        self._executor.shutdown(wait=True)

    async def ping(self) -> None:
        """Round-trip a trivial query through the DB thread (readiness)."""
        await self._read(lambda c: c.execute("SELECT 1").fetchone())

    @property
    def transactions(self) -> int:
        """How many group-commit transactions have committed (for tests and metrics)."""
        return self._committer.batches

    # ---- outbox ----------------------------------------------------------------------

    @property
    def outbox_size(self) -> int:
        return self._outbox_size

    @property
    def last_seq(self) -> int:
        """The highest sequence number ever committed to the outbox."""
        return self._last_seq

    async def append_report(self, kind: str, namespace: str, name: str, body: Any, *,
                            source: str = "") -> int:
        """Durably append one report for the GM (from `source`, a worker or "" for the LC
        itself, never refused for the outbox's size); returns its sequence number."""
        rows = [_row(kind, namespace, name, body, source)]
        cap = self.bounds.outbox_bytes
        appended = await self.write(lambda c: _append(c, rows, cap=cap),
                                    on_commit=self._published)
        return appended.seqs[0]

    async def outbox_bytes(self) -> int:
        """Bytes of the reports in the outbox (their JSON bodies)."""
        return (await self._read(lambda c: _usage(c, "outbox")))[1]

    async def write(self, op: Op, *, on_commit: Callable[[Any], None] | None = None) -> Any:
        """Run `op(conn)` in the next group-commit transaction; return its result.
        `on_commit(result)` runs once it committed, even if this caller is cancelled."""
        if not self._open:
            raise StoreClosedError("store is closed")
        return await self._committer.submit(op, on_commit=on_commit)

    def _published(self, appended: Appended) -> None:
        """Account for committed outbox rows and wake whoever waits for them."""
        self._outbox_size -= appended.compacted
        self._dropped.update(outbox_covered=appended.compacted)
        seqs = appended.seqs
        if not seqs:
            return
        self._outbox_size += len(seqs)
        self._last_seq = max(self._last_seq, seqs[-1])
        grew, self._outbox_grew = self._outbox_grew, asyncio.Event()
        grew.set()

    def _acked(self, deleted: int) -> None:
        self._outbox_size -= deleted

    async def pending(self, after_seq: int = 0, limit: int = 100) -> list[OutboxEntry]:
        """Unacked entries with seq > after_seq, oldest first."""
        rows = await self._read(lambda c: c.execute(
            "SELECT seq, kind, namespace, name, body, created_at, fold FROM lc_outbox "
            "WHERE seq > ? ORDER BY seq LIMIT ?", (after_seq, limit)).fetchall())
        return [OutboxEntry(r[0], r[1], r[2], r[3], orjson.loads(r[4]), r[5], r[6]) for r in rows]

    async def ack(self, upto: int) -> int:
        """Drop every entry with seq <= upto (cumulative ack); returns how many went."""
        return await self.write(
            lambda c: c.execute("DELETE FROM lc_outbox WHERE seq <= ?", (upto,)).rowcount,
            on_commit=self._acked)

    async def ack_one(self, seq: int, *, fold: str | None = None) -> bool:
        """Drop the entry `seq` and, with its `fold` key, every older entry of that key (it
        covered them); True if `seq` was there."""

        def op(conn: sqlite3.Connection) -> tuple[int, int]:
            mine = conn.execute("DELETE FROM lc_outbox WHERE seq = ?", (seq,)).rowcount
            return mine, _delete_covered(conn, seq, fold)

        mine, _ = await self.write(op, on_commit=lambda r: self._acked(r[0] + r[1]))
        return mine == 1

    async def wait_outbox(self, after_seq: int, within: float | None = None) -> bool:
        """Wait up to `within` seconds for an entry with seq > after_seq; False if none came."""
        try:
            async with asyncio.timeout(within):
                while self._last_seq <= after_seq:
                    await self._outbox_grew.wait()
        except TimeoutError:
            return False
        return True

    # ---- dead letters ----------------------------------------------------------------

    @property
    def dead_letter_counts(self) -> dict[str, int]:
        """Dead letters held, by reason."""
        return dict(self._dead_counts)

    @property
    def dropped(self) -> dict[str, int]:
        """Records dropped by a cap since open, by which cap (DROPPED)."""
        return {what: n for what, n in self._dropped.items() if n}

    async def dead_letter(self, seq: int, *, reason: str, error: str,
                          fold: str | None = None) -> bool:
        """Move outbox entry `seq` to the dead letters; False if it was no longer there.

        With its `fold` key, the older entries of that key it covered are dropped with it:
        the newest value of a latest-wins status could not be applied, and an older one
        would only show a stale value as current. The dead letter's error counts them."""
        if reason not in DEAD_LETTER_REASONS:
            raise ValueError(f"unknown dead-letter reason {reason!r}")
        bounds, now = self.bounds, self.clock()

        def op(conn: sqlite3.Connection) -> tuple[int, int, Counter[str], dict[str, int]]:
            covered = _delete_covered(conn, seq, fold)
            why = error if not covered else (f"{error} ({covered} older reports of the same "
                                             f"object it superseded were dropped with it)")
            moved = _move_to_dead_letters(conn, seq, reason=reason, error=why, now=now,
                                          body_limit=bounds.dead_letter_body)
            dropped = Counter(dead_letter=_trim_dead_letters(conn, bounds, keep=seq))
            return moved, covered, dropped, _dead_counts(conn)

        def committed(result: tuple[int, int, Counter[str], dict[str, int]]) -> None:
            self._acked(result[0] + result[1])
            self._dropped.update(result[2])
            self._dead_counts = result[3]

        moved, _, _, _ = await self.write(op, on_commit=committed)
        return moved == 1

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The newest dead letters, newest first."""
        rows = await self._read(lambda c: c.execute(
            "SELECT seq, kind, namespace, name, body, created_at, reason, error, dead_at "
            "FROM lc_deadletters ORDER BY seq DESC LIMIT ?", (limit,)).fetchall())
        return [DeadLetter(r[0], r[1], r[2], r[3], orjson.loads(r[4]), *r[5:]) for r in rows]

    async def dead_letter_page(self, *, limit: int, after: tuple[Any, ...] | None,
                               page_bytes: int) -> Page[ListedDeadLetter]:
        """Up to `limit` dead letters older than `after` (a page's next_key), newest first,
        ending early once the page holds `page_bytes` of bodies and errors."""
        before = after[0] if after else None

        def read(conn: sqlite3.Connection) -> Page[ListedDeadLetter]:
            cursor = conn.execute(
                "SELECT seq, kind, namespace, name, body, created_at, reason, error, dead_at, "
                "bytes FROM lc_deadletters WHERE seq < ? ORDER BY seq DESC",
                (before if before is not None else 2**63 - 1,))
            rows = ((ListedDeadLetter(*r[:9]), r[9]) for r in cursor)
            return _page(rows, limit, page_bytes, key=lambda d: (d.seq,))

        return await self._read(read)

    async def get_meta(self, key: str) -> str | None:
        """A small persistent setting of the LC's own (e.g. the link's suspect horizon)."""
        row = await self._read(lambda c: c.execute(
            "SELECT value FROM lc_meta WHERE key = ?", (key,)).fetchone())
        return None if row is None else row[0]

    async def put_meta(self, key: str, value: str | None) -> None:
        """Set (or with None, delete) a persistent setting."""
        if value is None:
            await self.write(lambda c: c.execute("DELETE FROM lc_meta WHERE key = ?", (key,)))
        else:
            await self.write(lambda c: c.execute(
                "INSERT OR REPLACE INTO lc_meta VALUES (?, ?)", (key, value)))

    # ---- workers ---------------------------------------------------------------------

    async def record_report(self, report: dict[str, Any], *, routed_kind: str | None,
                            entries: list[tuple[str, str, str, Any]]) -> list[int]:
        """Store a worker's last report and its outbox entries in one transaction. The
        record counts as of an unknown owner unless `routed_kind` names a job this node
        holds; records beyond the TTLs and caps go in the same transaction. Nothing is
        stored (OutboxFullError) when the entries would take the outbox over its cap."""
        rows = [_row(k, ns, n, body, report["name"]) for k, ns, n, body in entries]
        text, size = encode_sized(report)
        bounds, now = self.bounds, self.clock()
        key = (report["namespace"], report["name"])
        worker = (*key, report["ownerKind"], report["ownerName"], text, now, routed_kind, size)

        def op(conn: sqlite3.Connection) -> tuple[Appended, Counter[str]]:
            _check_room(conn, rows, bounds.outbox_bytes)
            _expire_workers(conn, bounds, now)
            known = routed_kind is not None and _holds(conn, routed_kind, key[0],
                                                       report["ownerName"])
            conn.execute(_UPSERT_WORKER, (*worker, int(known)))
            appended = _append(conn, rows, cap=bounds.outbox_bytes)
            return appended, _trim_workers(conn, bounds, keep=key)

        appended, _ = await self.write(op, on_commit=self._recorded)
        return appended.seqs

    def _recorded(self, result: tuple[Appended, Counter[str]]) -> None:
        self._published(result[0])
        self._dropped.update(result[1])

    async def route_worker(self, namespace: str, name: str, received_at: float, *,
                           routed_kind: str, entries: list[tuple[str, str, str, Any]]) -> bool:
        """Mark a stored report routed to its (now known) job and append its entries, unless
        a newer one replaced it. Never refused for the outbox's size: the report was
        accepted, and what waits is bounded by the unknown owners' cap."""
        rows = [_row(k, ns, n, body, name) for k, ns, n, body in entries]
        cap = self.bounds.outbox_bytes

        def op(conn: sqlite3.Connection) -> Appended:
            cur = conn.execute(
                "UPDATE lc_workers SET routed_kind = ?, owner_known = 1 WHERE namespace = ? "
                "AND name = ? AND received_at = ? AND routed_kind IS NULL",
                (routed_kind, namespace, name, received_at))
            return _append(conn, rows, cap=cap) if cur.rowcount == 1 else Appended([])

        appended = await self.write(op, on_commit=self._published)
        return bool(appended.seqs) or not rows

    async def workers(self) -> list[WorkerRecord]:
        """The last report of every worker within its TTL, by namespace and name (whole
        reports, every row: for tests and tools; the API lists with `worker_page`)."""
        rows = await self._read(lambda c: c.execute(
            f"SELECT {_WORKER_COLUMNS} FROM lc_workers WHERE {_LIVE} ORDER BY namespace, name",
            self._cutoffs()).fetchall())
        return [_worker(r) for r in rows]

    async def worker_page(self, *, limit: int, after: tuple[Any, ...] | None, item_bytes: int,
                          page_bytes: int) -> Page[ListedWorker]:
        """Up to `limit` worker records after `after` (a page's next_key) by namespace and
        name, each report cut to `item_bytes` (`truncated_json`), ending early once the
        page holds `page_bytes` of reports; a long report is never read whole."""
        start = tuple(after) if after else ("", "")
        args = (item_bytes, head_chars(item_bytes), *start, *self._cutoffs())

        def read(conn: sqlite3.Connection) -> Page[ListedWorker]:
            cursor = conn.execute(
                "SELECT namespace, name, owner_kind, owner_name, routed_kind, received_at, "
                "owner_known, bytes, CASE WHEN bytes <= ? THEN report ELSE substr(report, 1, ?) "
                f"END FROM lc_workers WHERE (namespace, name) > (?, ?) AND {_LIVE} "
                "ORDER BY namespace, name", args)
            rows = ((_listed_worker(r, item_bytes), min(r[7], item_bytes)) for r in cursor)
            return _page(rows, limit, page_bytes, key=lambda w: (w.namespace, w.name))

        return await self._read(read)

    def _cutoffs(self) -> tuple[float, float]:
        """The oldest received_at still live for known and for unknown owners."""
        now = self.clock()
        return now - self.bounds.worker_ttl, now - self.bounds.unknown_ttl

    async def forget_workers(self, namespace: str, owner_name: str, *, routed_kind: str,
                             unrouted: bool) -> int:
        """Drop the worker records of one job (routed to `routed_kind`, and with `unrouted`
        those no job took yet); returns how many went."""
        sql = ("DELETE FROM lc_workers WHERE namespace = ? AND owner_name = ? AND "
               "(routed_kind = ?" + (" OR routed_kind IS NULL)" if unrouted else ")"))
        return await self.write(lambda c: c.execute(
            sql, (namespace, owner_name, routed_kind)).rowcount)

    async def unrouted(self, namespace: str, owner_name: str) -> list[WorkerRecord]:
        """Stored reports for this owner, within their TTL, that no manager has taken yet."""
        rows = await self._read(lambda c: c.execute(
            f"SELECT {_WORKER_COLUMNS} FROM lc_workers WHERE namespace = ? AND owner_name = ? "
            f"AND routed_kind IS NULL AND {_LIVE} ORDER BY received_at",
            (namespace, owner_name, *self._cutoffs())).fetchall())
        return [_worker(r) for r in rows]

    async def _trim(self) -> None:
        """Apply the TTLs and caps now (at open: the file may predate them)."""
        bounds, now = self.bounds, self.clock()

        def op(conn: sqlite3.Connection) -> tuple[Counter[str], dict[str, int]]:
            _expire_workers(conn, bounds, now)
            dropped = _trim_workers(conn, bounds, keep=None)
            dropped.update(dead_letter=_trim_dead_letters(conn, bounds, keep=None),
                           outbox_covered=_compact_outbox(conn, bounds.outbox_bytes))
            return +dropped, _dead_counts(conn)

        dropped, self._dead_counts = await self.write(op)
        self._dropped.update(dropped)
        self._outbox_size -= dropped["outbox_covered"]

    # ---- resources -------------------------------------------------------------------

    async def put_resource(self, kind: str, namespace: str, name: str, obj: Any) -> None:
        """Insert or replace the object the GM sent for (kind, namespace, name); the worker
        records routed to it are now of a known owner."""
        row = (kind, namespace, name, encode(obj), time.time())

        def op(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO lc_resources VALUES (?,?,?,?,?)", row)
            conn.execute("UPDATE lc_workers SET owner_known = 1 WHERE namespace = ? AND "
                         "owner_name = ? AND routed_kind = ? AND owner_known = 0",
                         (namespace, name, kind))

        await self.write(op)

    async def delete_resource(self, kind: str, namespace: str, name: str) -> bool:
        """Forget a resource and its job state; True if it was known."""
        key = (kind, namespace, name)

        def op(conn: sqlite3.Connection) -> bool:
            conn.execute("DELETE FROM lc_job_state WHERE kind=? AND namespace=? AND name=?", key)
            return conn.execute("DELETE FROM lc_resources WHERE kind=? AND namespace=? "
                                "AND name=?", key).rowcount == 1

        return await self.write(op)

    async def get_resource(self, kind: str, namespace: str, name: str) -> Any | None:
        row = await self._read(lambda c: c.execute(
            "SELECT object FROM lc_resources WHERE kind=? AND namespace=? AND name=?",
            (kind, namespace, name)).fetchone())
        return None if row is None else orjson.loads(row[0])

    async def list_resources(self, kind: str | None = None) -> list[tuple[str, str, str, Any]]:
        """(kind, namespace, name, object) of every stored resource, optionally one kind."""
        sql = "SELECT kind, namespace, name, object FROM lc_resources"
        args: tuple[str, ...] = ()
        if kind is not None:
            sql, args = sql + " WHERE kind = ?", (kind,)
        rows = await self._read(lambda c: c.execute(sql + " ORDER BY 1, 2, 3", args).fetchall())
        return [(r[0], r[1], r[2], orjson.loads(r[3])) for r in rows]

    # ---- job state -------------------------------------------------------------------

    async def put_state(self, kind: str, namespace: str, name: str, state: Any) -> None:
        """Persist a manager's small per-job state (e.g. the last reported sample count)."""
        row = (kind, namespace, name, encode(state), time.time())
        await self.write(lambda c: c.execute(
            "INSERT OR REPLACE INTO lc_job_state VALUES (?,?,?,?,?)", row))

    async def append_report_with_state(self, kind: str, namespace: str, name: str, body: Any,
                                       state: Any) -> int:
        """Append one report and replace the job state of (kind, namespace, name) in one
        transaction, so a manager whose state records what it reported neither sends a
        report twice nor loses one across a crash; returns the report's sequence number."""
        rows = [_row(kind, namespace, name, body, "")]
        row = (kind, namespace, name, encode(state), time.time())
        cap = self.bounds.outbox_bytes

        def op(conn: sqlite3.Connection) -> Appended:
            appended = _append(conn, rows, cap=cap)
            conn.execute("INSERT OR REPLACE INTO lc_job_state VALUES (?,?,?,?,?)", row)
            return appended

        appended = await self.write(op, on_commit=self._published)
        return appended.seqs[0]

    async def get_state(self, kind: str, namespace: str, name: str) -> Any | None:
        row = await self._read(lambda c: c.execute(
            "SELECT state FROM lc_job_state WHERE kind=? AND namespace=? AND name=?",
            (kind, namespace, name)).fetchone())
        return None if row is None else orjson.loads(row[0])

    # ---- thread side -----------------------------------------------------------------

    async def _read(self, fn: Op) -> Any:
        if not self._open:
            raise StoreClosedError("store is closed")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, self._conn)
        except sqlite3.Error as exc:
            raise StoreError(f"read failed: {exc}") from None

    def _run_batch(self, ops: list[Op]) -> list[Any]:
        """One transaction; each op in a savepoint so one failing op spares the others."""
        conn = self._conn
        results: list[Any] = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            for op in ops:
                results.append(_run_in_savepoint(conn, op))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return results


def _run_in_savepoint(conn: sqlite3.Connection, op: Op) -> Any:
    conn.execute("SAVEPOINT op")
    try:
        result = op(conn)
    except (sqlite3.Error, StoreError, ValueError, TypeError, KeyError) as exc:
        conn.execute("ROLLBACK TO op")
        conn.execute("RELEASE op")
        # without its traceback: it would keep the op's frame, and what it wrote, alive
        return (exc if isinstance(exc, StoreError)
                else StoreError(f"write failed: {exc}")).with_traceback(None)
    conn.execute("RELEASE op")
    return result


Row = tuple[str, str, str, str, str | None, int]
"""An outbox row to insert: kind, namespace, name, body JSON, fold key, the body's bytes."""


@dataclass(frozen=True, slots=True)
class Appended:
    """What an append committed: the new rows' seqs, and how many covered rows went."""

    seqs: list[int]
    compacted: int = 0


def _row(kind: str, namespace: str, name: str, body: Any, source: str) -> Row:
    text, size = encode_sized(body)
    return (kind, namespace, name, text, fold_key(kind, namespace, name, body, source=source),
            size)


def _append(conn: sqlite3.Connection, rows: list[Row], *, cap: int) -> Appended:
    """Insert `rows`; once the outbox is over `cap`, delete the rows newer ones cover."""
    now = time.time()
    seqs = []
    for kind, namespace, name, body, fold, size in rows:
        cur = conn.execute("INSERT INTO lc_outbox (kind, namespace, name, body, created_at, "
                           "fold, bytes) VALUES (?,?,?,?,?,?,?)",
                           (kind, namespace, name, body, now, fold, size))
        seqs.append(cur.lastrowid)
    return Appended(seqs, _compact_outbox(conn, cap))


def _check_room(conn: sqlite3.Connection, rows: list[Row], cap: int) -> None:
    """Refuse (OutboxFullError) rows that would take the outbox over `cap`, counting as
    room what covered rows take and what the rows themselves would cover. An empty outbox
    takes anything, so no report waits for room that cannot come."""
    records, used = _usage(conn, "outbox")
    adding = sum(row[5] for row in rows)
    if records == 0 or used + adding <= cap:
        return
    covered = _usage(conn, "outbox_covered")[1]
    superseded = sum(_newest_bytes(conn, fold) for fold in {row[4] for row in rows} - {None})
    live = used - covered - superseded
    if live + adding > cap:
        raise OutboxFullError(f"the outbox is full: {live} bytes of reports wait for the GM, "
                              f"and {adding} more would pass its cap of {cap}")


def _newest_bytes(conn: sqlite3.Connection, fold: str) -> int:
    """Bytes of the one uncovered row with fold key `fold` (0 if there is none)."""
    row = conn.execute("SELECT bytes FROM lc_outbox WHERE fold = ? AND covered = 0",
                       (fold,)).fetchone()
    return row[0] if row else 0


def _compact_outbox(conn: sqlite3.Connection, cap: int) -> int:
    """Delete the covered rows when the outbox is over `cap`; how many went."""
    if _usage(conn, "outbox")[1] <= cap or _usage(conn, "outbox_covered")[0] == 0:
        return 0
    return conn.execute("DELETE FROM lc_outbox WHERE covered = 1").rowcount


def _delete_covered(conn: sqlite3.Connection, seq: int, fold: str | None) -> int:
    """Delete the entries older than `seq` that share its fold key; how many went."""
    if fold is None:
        return 0
    return conn.execute("DELETE FROM lc_outbox WHERE fold = ? AND seq < ?", (fold, seq)).rowcount


# ---- bounds: TTLs, byte caps, pages (on the DB thread) ------------------------------------

_WORKER_COLUMNS = ("namespace, name, owner_kind, owner_name, report, received_at, routed_kind, "
                   "owner_known")
_LIVE = "received_at >= iif(owner_known, ?, ?)"
"""A worker record within its TTL; the arguments are `Store._cutoffs()`."""
_UPSERT_WORKER = (
    "INSERT INTO lc_workers (namespace, name, owner_kind, owner_name, report, received_at, "
    "routed_kind, bytes, owner_known) VALUES (?,?,?,?,?,?,?,?,?) "
    "ON CONFLICT (namespace, name) DO UPDATE SET owner_kind = excluded.owner_kind, "
    "owner_name = excluded.owner_name, report = excluded.report, "
    "received_at = excluded.received_at, routed_kind = excluded.routed_kind, "
    "bytes = excluded.bytes, owner_known = excluded.owner_known")
_UPSERT_DEAD_LETTER = (
    "INSERT INTO lc_deadletters (seq, kind, namespace, name, body, created_at, reason, error, "
    "dead_at, bytes) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT (seq) DO UPDATE SET "
    "kind = excluded.kind, namespace = excluded.namespace, name = excluded.name, "
    "body = excluded.body, created_at = excluded.created_at, reason = excluded.reason, "
    "error = excluded.error, dead_at = excluded.dead_at, bytes = excluded.bytes")


def _holds(conn: sqlite3.Connection, kind: str, namespace: str, name: str) -> bool:
    """Whether this node holds the object (kind, namespace, name)."""
    return conn.execute("SELECT 1 FROM lc_resources WHERE kind = ? AND namespace = ? AND "
                        "name = ?", (kind, namespace, name)).fetchone() is not None


def _usage(conn: sqlite3.Connection, what: str) -> tuple[int, int]:
    """(records, bytes) of one lc_usage entry."""
    row = conn.execute("SELECT records, bytes FROM lc_usage WHERE what = ?", (what,)).fetchone()
    return (row[0], row[1]) if row else (0, 0)


def _expire_workers(conn: sqlite3.Connection, bounds: StoreBounds, now: float) -> None:
    conn.execute("DELETE FROM lc_workers WHERE received_at < ?", (now - bounds.worker_ttl,))
    conn.execute("DELETE FROM lc_workers WHERE owner_known = 0 AND received_at < ?",
                 (now - bounds.unknown_ttl,))


def _trim_workers(conn: sqlite3.Connection, bounds: StoreBounds, *,
                  keep: tuple[str, str] | None) -> Counter[str]:
    """Drop the oldest records over each byte cap, never `keep` (the one just written)."""
    dropped = Counter(
        unknown_owner=_drop_oldest_workers(conn, "unknown_owner", bounds.unknown_owner_bytes,
                                           keep),
        worker=_drop_oldest_workers(conn, "workers", bounds.workers_bytes, keep))
    return +dropped


def _drop_oldest_workers(conn: sqlite3.Connection, what: str, cap: int,
                         keep: tuple[str, str] | None) -> int:
    excess = _usage(conn, what)[1] - cap
    if excess <= 0:
        return 0
    where = "WHERE owner_known = 0 " if what == "unknown_owner" else ""
    victims: list[tuple[str, str]] = []
    cursor = conn.execute(f"SELECT namespace, name, bytes FROM lc_workers {where}"
                          "ORDER BY received_at")
    for namespace, name, size in cursor:
        if (namespace, name) != keep:
            victims.append((namespace, name))
            excess -= size
            if excess <= 0:
                break
    cursor.close()
    conn.executemany("DELETE FROM lc_workers WHERE namespace = ? AND name = ?", victims)
    return len(victims)


def _move_to_dead_letters(conn: sqlite3.Connection, seq: int, *, reason: str, error: str,
                          now: float, body_limit: int) -> int:
    """Move outbox row `seq` to the dead letters, its body bounded; 0 if it is gone."""
    row = conn.execute("SELECT kind, namespace, name, body, created_at FROM lc_outbox "
                       "WHERE seq = ?", (seq,)).fetchone()
    if row is None:
        return 0
    body, error = bounded_json(row[3], body_limit), clip(error, MAX_ERROR_TEXT)
    size = len(body.encode()) + len(error.encode("utf-8", "surrogatepass"))
    conn.execute(_UPSERT_DEAD_LETTER, (seq, *row[:3], body, row[4], reason, error, now, size))
    conn.execute("DELETE FROM lc_outbox WHERE seq = ?", (seq,))
    return 1


def _trim_dead_letters(conn: sqlite3.Connection, bounds: StoreBounds, *,
                       keep: int | None) -> int:
    """Drop the oldest dead letters over the count or the byte cap, never `keep`."""
    count, size = _usage(conn, "deadletters")
    victims: list[tuple[int]] = []
    if count > bounds.dead_letters or size > bounds.dead_letters_bytes:
        cursor = conn.execute("SELECT seq, bytes FROM lc_deadletters ORDER BY seq")
        for seq, row_bytes in cursor:
            if count <= bounds.dead_letters and size <= bounds.dead_letters_bytes:
                break
            if seq != keep:
                victims.append((seq,))
                count, size = count - 1, size - row_bytes
        cursor.close()
    conn.executemany("DELETE FROM lc_deadletters WHERE seq = ?", victims)
    return len(victims)


def _page(rows: Iterable[tuple[T, int]], limit: int, page_bytes: int, *,
          key: Callable[[T], tuple[Any, ...]]) -> Page[T]:
    """The first `limit` (item, size) of `rows`, fewer once their sizes pass `page_bytes`
    (never none); `next_key` set when rows remain."""
    items: list[T] = []
    used = 0
    for item, size in rows:
        if len(items) == limit or (items and used + size > page_bytes):
            return Page(items, key(items[-1]))
        items.append(item)
        used += size
    return Page(items, None)


def _listed_worker(row: tuple[Any, ...], item_bytes: int) -> ListedWorker:
    size, text = row[7], row[8]
    report = text if size <= item_bytes else truncated_json(text, size, item_bytes)
    return ListedWorker(row[0], row[1], row[2], row[3], row[4], row[5], bool(row[6]), report)


def _outbox_epoch(conn: sqlite3.Connection) -> str:
    """The random id this database's outbox got when it was first opened.

    Outbox seqs only grow within one database file; a wiped file starts again at 1. The GM
    orders a node's reports by (epoch, seq), so a new file (new epoch) is not mistaken for
    a replay of the old one's first reports. Autocommit: the INSERT is durable at once.
    """
    conn.execute("INSERT OR IGNORE INTO lc_meta (key, value) VALUES ('outbox_epoch', ?)",
                 (secrets.token_hex(8),))
    return conn.execute("SELECT value FROM lc_meta WHERE key = 'outbox_epoch'").fetchone()[0]


def _outbox_counts(conn: sqlite3.Connection) -> tuple[int, int]:
    size = conn.execute("SELECT COUNT(*) FROM lc_outbox").fetchone()[0]
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'lc_outbox'").fetchone()
    return size, (row[0] if row else 0)


def _dead_counts(conn: sqlite3.Connection) -> dict[str, int]:
    rows = conn.execute("SELECT reason, COUNT(*) FROM lc_deadletters GROUP BY reason").fetchall()
    return {reason: count for reason, count in rows}


def _worker(row: tuple[Any, ...]) -> WorkerRecord:
    """A WorkerRecord from a row of _WORKER_COLUMNS."""
    return WorkerRecord(row[0], row[1], row[2], row[3], orjson.loads(row[4]), row[5], row[6],
                        bool(row[7]))


def _connect(path: str, synchronous: str) -> sqlite3.Connection:
    """Open, configure, check and migrate the database (runs on the DB thread)."""
    _prepare_file(path)
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=True)
    except sqlite3.Error as exc:
        raise StoreOpenError(f"cannot open database {path}: {exc}") from None
    try:
        _configure(conn, path, synchronous)
    except BaseException:
        conn.close()
        raise
    return conn


def _prepare_file(path: str) -> None:
    """Create the parent directory and an owner-only file: objects may carry credentials."""
    if os.path.isdir(path):
        raise StoreOpenError(f"cannot open database {path}: it is a directory")
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and exc.filename != path else ""
        raise StoreOpenError(f"cannot open database {path}: {exc.strerror}{where}") from None


def _configure(conn: sqlite3.Connection, path: str, synchronous: str) -> None:
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        check = conn.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise StoreCorruptError(f"database {path} failed its integrity check: {check}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        _migrate(conn, path)
    except sqlite3.OperationalError as exc:  # locked, read-only, cannot open
        raise StoreOpenError(f"cannot open database {path}: {exc}") from None
    except sqlite3.DatabaseError as exc:  # not a database, malformed image
        raise StoreCorruptError(f"database {path} is corrupt: {exc}") from None


_ADDED_COLUMNS = (  # (table, column, definition) that older schemas lack
    ("lc_outbox", "fold", "TEXT"),  # schema 2: rows written before folding never fold
    ("lc_workers", "bytes", "INTEGER NOT NULL DEFAULT 0"),  # schema 3
    ("lc_workers", "owner_known", "INTEGER NOT NULL DEFAULT 1"),
    ("lc_deadletters", "bytes", "INTEGER NOT NULL DEFAULT 0"),
    ("lc_outbox", "bytes", "INTEGER NOT NULL DEFAULT 0"),  # schema 5
    ("lc_outbox", "covered", "INTEGER NOT NULL DEFAULT 0"),
)


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StoreOpenError(f"database {path} has schema version {version}; this LC "
                             f"understands up to {SCHEMA_VERSION}")
    for table, column, definition in _ADDED_COLUMNS:
        columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
        if columns and column not in columns:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
    conn.executescript(_SCHEMA)
    conn.execute("BEGIN IMMEDIATE")
    try:
        if version < 4:
            _fill_schema_4(conn)
        if version < 5:
            _fill_schema_5(conn)
        _recount_usage(conn)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _fill_schema_4(conn: sqlite3.Connection) -> None:
    """Sizes and owners of rows written before schema 4; dead-letter bodies cut to size,
    one at a time (a schema 3 table may hold thousands of whole bodies)."""
    conn.execute(
        "UPDATE lc_workers SET bytes = length(CAST(report AS BLOB)), owner_known = "
        "(routed_kind IS NOT NULL AND EXISTS (SELECT 1 FROM lc_resources r WHERE "
        "r.kind = lc_workers.routed_kind AND r.namespace = lc_workers.namespace AND "
        "r.name = lc_workers.owner_name))")
    long = conn.execute("SELECT seq FROM lc_deadletters WHERE length(CAST(body AS BLOB)) > ?",
                        (DEAD_LETTER_BODY,)).fetchall()
    for (seq,) in long:
        (body,) = conn.execute("SELECT body FROM lc_deadletters WHERE seq = ?", (seq,)).fetchone()
        conn.execute("UPDATE lc_deadletters SET body = ? WHERE seq = ?",
                     (bounded_json(body, DEAD_LETTER_BODY), seq))
    conn.execute("UPDATE lc_deadletters SET bytes = length(CAST(body AS BLOB)) + "
                 "length(CAST(error AS BLOB))")


def _fill_schema_5(conn: sqlite3.Connection) -> None:
    """Sizes of the outbox rows written before schema 5, and which ones are covered."""
    conn.execute("UPDATE lc_outbox SET bytes = length(CAST(body AS BLOB))")
    conn.execute("UPDATE lc_outbox SET covered = 1 WHERE fold IS NOT NULL AND EXISTS (SELECT 1 "
                 "FROM lc_outbox newer WHERE newer.fold = lc_outbox.fold AND "
                 "newer.seq > lc_outbox.seq)")


def _recount_usage(conn: sqlite3.Connection) -> None:
    """lc_usage from the tables themselves (its invariant, whatever happened before)."""
    total = "COUNT(*), COALESCE(SUM(bytes), 0)"
    conn.execute("DELETE FROM lc_usage")
    conn.execute(f"INSERT INTO lc_usage SELECT 'workers', {total} FROM lc_workers")
    conn.execute(f"INSERT INTO lc_usage SELECT 'unknown_owner', {total} FROM lc_workers "
                 "WHERE owner_known = 0")
    conn.execute(f"INSERT INTO lc_usage SELECT 'deadletters', {total} FROM lc_deadletters")
    conn.execute(f"INSERT INTO lc_usage SELECT 'outbox', {total} FROM lc_outbox")
    conn.execute(f"INSERT INTO lc_usage SELECT 'outbox_covered', {total} FROM lc_outbox "
                 "WHERE covered = 1")
