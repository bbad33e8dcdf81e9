"""`Store`: the async API over the SQLite file. Every call runs on one dedicated thread with its
own connection; writes are grouped into one transaction per batch (lc/groupcommit.py), a
failing one undone alone (a savepoint each, once one failed); counters the LC reads often (the outbox's size and last seq, the dead
letters by reason, what the caps dropped) are kept here as commits land."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from lc.errors import StoreClosedError, StoreError
from lc.groupcommit import BatchObserver, GroupCommitter, Op
from lc.store.bounds import Page, StoreBounds, page, usage, usages
from lc.store.codec import encode, encode_sized, head_chars
from lc.store.deadletters import (
    DEAD_LETTER_REASONS,
    DeadLetter,
    ListedDeadLetter,
    dead_counts,
    dead_kind_counts,
    move_to_dead_letters,
    trim_dead_letters,
)
from lc.store.outbox import (
    Appended,
    OutboxEntry,
    OutboxTail,
    Row,
    append_rows,
    compact_outbox,
    delete_covered,
    outbox_counts,
    outbox_epoch,
    outbox_row,
)
from lc.store.reportwrite import ReportWrite
from lc.store.schema import connect
from lc.store.workers import (
    LIVE,
    WORKER_COLUMNS,
    ListedWorker,
    WorkerRecord,
    expire_workers,
    listed_worker,
    over_caps,
    trim_workers,
    worker_record,
)
from shared.logs import kv

log = logging.getLogger(__name__)

DEFAULT_BOUNDS = StoreBounds()
EXPIRE_EVERY = 1.0  # longest time (store clock) between deletions of expired worker records


class Store:
    """Async facade over the SQLite file; open with `await Store.open(path)`."""

    def __init__(self, path: str, *, observe: BatchObserver | None,
                 bounds: StoreBounds = DEFAULT_BOUNDS, clock: Callable[[], float] = time.time,
                 synchronous: str = "FULL") -> None:
        self.path = path
        # FULL (or EXTRA): a durable write is answered once the write-ahead log holding it is
        # fsynced. Every commit runs with NORMAL (in WAL mode: it does not wait for the disk)
        # and the group committer's sync thread fsyncs the log (`_sync_wal`), once for every
        # batch that committed meanwhile. NORMAL or OFF: as configured, no fsync of our own.
        self._mode = synchronous.upper()
        self._deferred_sync = self._mode in ("FULL", "EXTRA")
        self._synchronous = "NORMAL" if self._deferred_sync else self._mode
        self._wal_fd: int | None = None  # sync thread only
        self.syncs = 0  # fsyncs of the log so far (for tests)
        self.bounds = bounds
        self.clock = clock  # wall-clock seconds: what received_at and the TTLs count in
        self._conn: sqlite3.Connection  # DB thread only, from open() on
        self._observe = observe
        self._committer = GroupCommitter(self._run_batch, observe=self._batch_committed,
                                         sync=self._sync_wal if self._deferred_sync else None)
        self._outbox_grew = asyncio.Event()  # set and cleared at once as entries commit
        self._tail = OutboxTail()
        self._outbox_size = 0
        self._last_seq = 0
        self.outbox_epoch = ""  # set at open, see lc/store/outbox.py outbox_epoch
        self._dead_counts: dict[str, int] = {}
        self._dropped: Counter[str] = Counter()  # records dropped by a cap, since open
        # DB thread only, within one batch: the worker records it wrote (key -> received_at)
        self._written: dict[tuple[str, str], float] = {}
        # DB thread only: when `_sweep` deletes expired records next, and how often (never
        # later than a tenth of the shorter TTL past their expiry)
        self._expire_at = 0.0
        self._expire_every = min(EXPIRE_EVERY, bounds.unknown_ttl / 10)
        # Appended by the DB thread once a batch committed, emptied by _batch_committed on the
        # loop: what each batch's sweep dropped.
        self._swept: deque[Counter[str]] = deque()
        self._open = True

    # ---- lifecycle -------------------------------------------------------------------

    @classmethod
    async def open(cls, path: str, *, synchronous: str = "FULL",
                   observe: BatchObserver | None = None, bounds: StoreBounds = DEFAULT_BOUNDS,
                   clock: Callable[[], float] = time.time) -> Store:
        """Open (creating if needed) and check the database, and bring it within `bounds`;
        raise a StoreError if unusable."""
        store = cls(path, observe=observe, bounds=bounds, clock=clock, synchronous=synchronous)
        store._committer.start()
        try:
            store._conn = await store._committer.call(connect, path, store._synchronous)
            if store._deferred_sync and not await store._read(_in_wal_mode):
                # a file system without shared memory keeps SQLite out of WAL mode: no log to
                # fsync, so the commits themselves wait for the disk
                await store._read(lambda c: c.execute(f"PRAGMA synchronous = {store._mode}"))
                store._deferred_sync = False
        except BaseException:
            await store._committer.close()
            raise
        store._outbox_size, store._last_seq = await store._read(outbox_counts)
        store._tail.restart(store._last_seq)
        store.outbox_epoch = await store._read(outbox_epoch)
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
        self._tail.restart(-1)
        try:
            await self._committer.call(self._conn.close)  # after every write already submitted
        finally:
            await self._committer.close()
            if self._wal_fd is not None:
                os.close(self._wal_fd)
                self._wal_fd = None

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
        rows = [outbox_row(kind, namespace, name, body, source)]
        cap = self.bounds.outbox_bytes
        appended = await self.write(lambda c: append_rows(c, rows, cap=cap),
                                    on_commit=lambda a: self._published(a, rows))
        return appended.seqs[0]

    async def outbox_bytes(self) -> int:
        """Bytes of the reports in the outbox (their JSON bodies)."""
        return (await self._read(lambda c: usage(c, "outbox")))[1]

    async def outbox_oldest(self) -> float | None:
        """Unix time the oldest report in the outbox was committed; None when it is empty."""
        row = await self._read(lambda c: c.execute(
            "SELECT created_at FROM lc_outbox ORDER BY seq LIMIT 1").fetchone())
        return None if row is None else row[0]

    async def write(self, op: Op, *, on_commit: Callable[[Any], None] | None = None,
                    durable: bool = True) -> Any:
        """Run `op(conn)` in the next group-commit transaction; return its result.
        `on_commit(result)` runs once it committed, even if this caller is cancelled. A write
        that a crash may undo (the delete of an acked report, which is then sent again and
        found stale by the GM) passes `durable=False`: alone, it does not wait for the disk."""
        if not self._open:
            raise StoreClosedError("store is closed")
        return await self._committer.submit(op, on_commit=on_commit, durable=durable)

    def _published(self, appended: Appended, rows: list[Row]) -> None:
        """Account for committed (and settled) outbox rows, keep them in the tail and wake
        whoever waits for them."""
        if appended.compacted:
            self._outbox_size -= appended.compacted
            self._dropped["outbox_covered"] += appended.compacted
        seqs = appended.seqs
        if not seqs:
            return
        self._outbox_size += len(seqs)
        if appended.compacted:  # which rows went is not known here: the tail starts again
            self._tail.restart(max(self._last_seq, seqs[-1]))
        else:
            self._tail.extend(seqs, rows, appended.created_at, self._last_seq)
        self._last_seq = max(self._last_seq, seqs[-1])
        self._outbox_grew.set()  # wakes who waits now; wait_outbox checks _last_seq again
        self._outbox_grew.clear()

    def _acked(self, deleted: int) -> None:
        self._outbox_size -= deleted

    async def pending(self, after_seq: int = 0, limit: int = 100) -> list[OutboxEntry]:
        """Unacked entries with seq > after_seq, oldest first; only those whose commit was
        settled (on disk, with a durable setting): a report is not sent before it is kept.
        From memory when the tail holds every entry after `after_seq` (the link following
        the outbox), else read from the database."""
        if not self._open:
            raise StoreClosedError("store is closed")
        served = self._tail.after(after_seq, limit)
        if served is not None:
            return served
        horizon = self._last_seq
        rows = await self._read(lambda c: c.execute(
            "SELECT seq, kind, namespace, name, body, created_at, fold FROM lc_outbox "
            "WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
            (after_seq, horizon, limit)).fetchall())
        return [OutboxEntry(r[0], r[1], r[2], r[3], orjson.loads(r[4]), r[5], r[6]) for r in rows]

    async def ack(self, upto: int) -> int:
        """Drop every entry with seq <= upto (cumulative ack); returns how many went."""
        def committed(deleted: int) -> None:
            self._acked(deleted)
            self._tail.forget_upto(upto)

        return await self.write(
            lambda c: c.execute("DELETE FROM lc_outbox WHERE seq <= ?", (upto,)).rowcount,
            on_commit=committed, durable=False)

    async def ack_one(self, seq: int, *, fold: str | None = None) -> bool:
        """Drop the entry `seq` and, with its `fold` key, every older entry of that key (it
        covered them); True if `seq` was there."""
        return (await self.ack_many([(seq, fold)]))[0]

    async def ack_many(self, acks: list[tuple[int, str | None]]) -> list[bool]:
        """`ack_one` for each (seq, fold) of `acks`, in one write; per ack, whether its
        entry was there."""
        def op(conn: sqlite3.Connection) -> tuple[list[bool], int]:
            found, deleted = [], 0
            for seq, fold in acks:
                mine = conn.execute("DELETE FROM lc_outbox WHERE seq = ?", (seq,)).rowcount
                found.append(mine == 1)
                deleted += mine + delete_covered(conn, seq, fold)
            return found, deleted

        def committed(result: tuple[list[bool], int]) -> None:
            self._acked(result[1])
            for seq, fold in acks:
                self._tail.forget(seq, fold)

        found, _ = await self.write(op, on_commit=committed, durable=False)
        return found

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

    async def dead_letter_kinds(self) -> dict[str, int]:
        """Dead letters held, by kind."""
        return await self._read(dead_kind_counts)

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
            covered = delete_covered(conn, seq, fold)
            why = error if not covered else (f"{error} ({covered} older reports of the same "
                                             f"object it superseded were dropped with it)")
            moved = move_to_dead_letters(conn, seq, reason=reason, error=why, now=now,
                                          body_limit=bounds.dead_letter_body)
            dropped = Counter(dead_letter=trim_dead_letters(conn, bounds, keep=seq))
            return moved, covered, dropped, dead_counts(conn)

        def committed(result: tuple[int, int, Counter[str], dict[str, int]]) -> None:
            self._acked(result[0] + result[1])
            self._tail.forget(seq, fold)
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
            return page(rows, limit, page_bytes, key=lambda d: (d.seq,))

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
        holds; records beyond the TTLs and caps go in the same transaction, once for all
        the reports it holds (`_sweep`). Nothing is stored (OutboxFullError) when the
        entries would take the outbox over its cap."""
        rows = [outbox_row(k, ns, n, body, report["name"]) for k, ns, n, body in entries]
        text, size = encode_sized(report)
        worker = (report["namespace"], report["name"], report["ownerKind"], report["ownerName"],
                  text, self.clock(), routed_kind, size)
        op = ReportWrite(worker, rows, self.bounds.outbox_bytes, self._written)
        appended = await self.write(op, on_commit=lambda a: self._published(a, rows))
        return appended.seqs

    async def route_worker(self, namespace: str, name: str, received_at: float, *,
                           routed_kind: str, entries: list[tuple[str, str, str, Any]]) -> bool:
        """Mark a stored report routed to its (now known) job and append its entries, unless
        a newer one replaced it. Never refused for the outbox's size: the report was
        accepted, and what waits is bounded by the unknown owners' cap."""
        rows = [outbox_row(k, ns, n, body, name) for k, ns, n, body in entries]
        cap = self.bounds.outbox_bytes

        def op(conn: sqlite3.Connection) -> Appended:
            cur = conn.execute(
                "UPDATE lc_workers SET routed_kind = ?, owner_known = 1 WHERE namespace = ? "
                "AND name = ? AND received_at = ? AND routed_kind IS NULL",
                (routed_kind, namespace, name, received_at))
            return append_rows(conn, rows, cap=cap) if cur.rowcount == 1 else Appended([])

        appended = await self.write(op, on_commit=lambda a: self._published(a, rows))
        return bool(appended.seqs) or not rows

    async def workers(self) -> list[WorkerRecord]:
        """The last report of every worker within its TTL, by namespace and name (whole
        reports, every row: for tests and tools; the API lists with `worker_page`)."""
        rows = await self._read(lambda c: c.execute(
            f"SELECT {WORKER_COLUMNS} FROM lc_workers WHERE {LIVE} ORDER BY namespace, name",
            self._cutoffs()).fetchall())
        return [worker_record(r) for r in rows]

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
                f"END FROM lc_workers WHERE (namespace, name) > (?, ?) AND {LIVE} "
                "ORDER BY namespace, name", args)
            rows = ((listed_worker(r, item_bytes), min(r[7], item_bytes)) for r in cursor)
            return page(rows, limit, page_bytes, key=lambda w: (w.namespace, w.name))

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
            f"SELECT {WORKER_COLUMNS} FROM lc_workers WHERE namespace = ? AND owner_name = ? "
            f"AND routed_kind IS NULL AND {LIVE} ORDER BY received_at",
            (namespace, owner_name, *self._cutoffs())).fetchall())
        return [worker_record(r) for r in rows]

    async def _trim(self) -> None:
        """Apply the TTLs and caps now (at open: the file may predate them)."""
        bounds, now = self.bounds, self.clock()

        def op(conn: sqlite3.Connection) -> tuple[Counter[str], dict[str, int]]:
            expire_workers(conn, bounds, now)
            dropped = trim_workers(conn, bounds)
            dropped.update(dead_letter=trim_dead_letters(conn, bounds, keep=None),
                           outbox_covered=compact_outbox(conn, bounds.outbox_bytes))
            return +dropped, dead_counts(conn)

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
        rows = [outbox_row(kind, namespace, name, body, "")]
        row = (kind, namespace, name, encode(state), time.time())
        cap = self.bounds.outbox_bytes

        def op(conn: sqlite3.Connection) -> Appended:
            appended = append_rows(conn, rows, cap=cap)
            conn.execute("INSERT OR REPLACE INTO lc_job_state VALUES (?,?,?,?,?)", row)
            return appended

        appended = await self.write(op, on_commit=lambda a: self._published(a, rows))
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
        try:
            return await self._committer.call(fn, self._conn)
        except sqlite3.Error as exc:
            raise StoreError(f"read failed: {exc}") from None

    def _sync_wal(self) -> None:
        """Sync thread: make every commit so far durable. A commit in WAL mode is frames
        written to the -wal file; an fdatasync of that file (its header, its frames and the
        size they extend it to) puts them on disk, which is what synchronous=FULL does after
        each commit. SQLite keeps the file (the same inode) while its connection is open, and
        syncs it itself before a checkpoint."""
        if not self._deferred_sync:
            return
        if self._wal_fd is None:
            self._wal_fd = os.open(self.path + "-wal", os.O_RDONLY | os.O_CLOEXEC)
        os.fdatasync(self._wal_fd)
        self.syncs += 1

    def _run_batch(self, ops: list[Op]) -> list[Any]:
        """One transaction (committed as the connection is set up to; `_sync_wal` makes it
        durable), then the worker records' housekeeping for all of its ops (`_sweep`).

        One failing op spares the others: the ops run back to back first, and if one fails,
        the transaction is rolled back and run again with each op in a savepoint, where a
        failure undoes that op alone. Ops only read and write the connection (and note what
        they wrote in `_written`), so running one twice is running it once."""
        try:
            try:
                results, swept = self._transaction(ops, isolated=False)
            except _OpFailed:
                self._written.clear()
                results, swept = self._transaction(ops, isolated=True)
        finally:
            self._written.clear()
        if isinstance(swept, StoreError):  # the reports stand; the next batch sweeps again
            log.error("store housekeeping failed", extra=kv(error=str(swept)))
        elif swept:
            self._swept.append(swept)
        return results

    def _transaction(self, ops: list[Op], *, isolated: bool) -> tuple[list[Any], Any]:
        conn = self._conn
        results: list[Any] = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            if isolated:
                results = [_run_in_savepoint(conn, op) for op in ops]
            else:
                for run in _runs(ops):
                    try:
                        merged = ReportWrite.merged(conn, run) if len(run) > 1 else None
                        results.extend(merged if merged is not None else (op(conn) for op in run))
                    except _OP_ERRORS as exc:
                        raise _OpFailed from exc
            swept = self._sweep(conn) if self._written else Counter()
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return results, swept

    def _sweep(self, conn: sqlite3.Connection) -> Counter[str] | StoreError:
        """After a batch that wrote worker records: delete those past their TTL (at most
        every `_expire_every` seconds: reads skip expired records anyway, this only frees
        their room) and the oldest over the byte caps, never a record of this batch; what
        the caps dropped. Within the caps and with no expiry due, one lookup."""
        now = max(self._written.values())
        expire = now >= self._expire_at
        try:
            used = usages(conn)
        except sqlite3.Error as exc:  # the reports stand; the next batch sweeps again
            return StoreError(f"usage lookup failed: {exc}").with_traceback(None)
        if not expire and not over_caps(used, self.bounds):
            return Counter()

        def sweep(conn: sqlite3.Connection) -> Counter[str]:
            if expire:
                expire_workers(conn, self.bounds, now)
                self._expire_at = now + self._expire_every
            return trim_workers(conn, self.bounds, keep=self._written,
                                used=None if expire else used)
        return _run_in_savepoint(conn, sweep)

    def _batch_committed(self, size: int, seconds: float) -> None:
        """Group-commit observer (on the loop, after each committed batch): count what its
        sweep dropped, then tell the caller's observer."""
        while self._swept:
            self._dropped.update(self._swept.popleft())
        if self._observe is not None:
            self._observe(size, seconds)


_OP_ERRORS = (sqlite3.Error, StoreError, ValueError, TypeError, KeyError)  # one op's failure, not the batch's


def _in_wal_mode(conn: sqlite3.Connection) -> bool:
    return conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"


def _runs(ops: list[Op]) -> Iterator[list[Op]]:
    """`ops` in order, in runs: consecutive worker report writes together (ReportWrite.merged),
    every other op alone."""
    run: list[Op] = []
    for op in ops:
        if type(op) is ReportWrite:
            run.append(op)
            continue
        if run:
            yield run
            run = []
        yield [op]
    if run:
        yield run


class _OpFailed(Exception):
    """An op failed in a batch run without savepoints: run it again with them."""


def _run_in_savepoint(conn: sqlite3.Connection, op: Op) -> Any:
    conn.execute("SAVEPOINT op")
    try:
        result = op(conn)
    except _OP_ERRORS as exc:
        conn.execute("ROLLBACK TO op")
        conn.execute("RELEASE op")
        # without its traceback: it would keep the op's frame, and what it wrote, alive
        return (exc if isinstance(exc, StoreError)
                else StoreError(f"write failed: {exc}")).with_traceback(None)
    conn.execute("RELEASE op")
    return result
