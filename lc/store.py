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
- A report the GM can never apply (refused with a reason, or one that cannot be sent) is
  moved from the outbox to `lc_deadletters` with the reason, in one transaction, so it
  neither blocks the reports behind it nor disappears without a trace. The table keeps
  the newest MAX_DEAD_LETTERS rows.
- Worker records (GET /sedna/workers) are keyed by namespace/name; they go with their
  job (`forget_workers`) and expire after the worker TTL (`expire_workers`).
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson

from lc.errors import StoreClosedError, StoreCorruptError, StoreError, StoreOpenError
from lc.fold import fold_key
from lc.groupcommit import BatchObserver, GroupCommitter, Op

SCHEMA_VERSION = 3
MAX_DEAD_LETTERS = 10_000
DEFAULT_WORKER_TTL = 7 * 24 * 3600.0
DEAD_LETTER_REASONS = ("refused", "unsendable", "protocol")
"""refused: the GM acked it with an error; unsendable: this LC cannot encode it within the
protocol's limits; protocol: the GM closed the session over this report's frame."""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS lc_resources (
    kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    object TEXT NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (kind, namespace, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lc_outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    body TEXT NOT NULL, created_at REAL NOT NULL,
    fold TEXT);
CREATE INDEX IF NOT EXISTS lc_outbox_fold ON lc_outbox (fold, seq) WHERE fold IS NOT NULL;
CREATE TABLE IF NOT EXISTS lc_job_state (
    kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    state TEXT NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (kind, namespace, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lc_workers (
    namespace TEXT NOT NULL, name TEXT NOT NULL,
    owner_kind TEXT NOT NULL, owner_name TEXT NOT NULL,
    report TEXT NOT NULL, received_at REAL NOT NULL, routed_kind TEXT,
    PRIMARY KEY (namespace, name)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lc_workers_owner ON lc_workers (namespace, owner_name);
CREATE INDEX IF NOT EXISTS lc_workers_received ON lc_workers (received_at);
CREATE TABLE IF NOT EXISTS lc_deadletters (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    body TEXT NOT NULL, created_at REAL NOT NULL,
    reason TEXT NOT NULL, error TEXT NOT NULL, dead_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS lc_meta (
    key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
"""


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


def encode(value: Any) -> str:
    """JSON text for a stored value (orjson; non-string keys and big ints via json)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError as exc:
        raise StoreError(f"value cannot be stored as JSON: {exc}") from None


class Store:
    """Async facade over the SQLite file; open with `await Store.open(path)`."""

    def __init__(self, path: str, executor: ThreadPoolExecutor, conn: sqlite3.Connection,
                 *, observe: BatchObserver | None, worker_ttl: float = DEFAULT_WORKER_TTL) -> None:
        self.path = path
        self.worker_ttl = worker_ttl  # worker records older than this are dropped
        self._executor = executor
        self._conn = conn
        self._committer = GroupCommitter(self._run_batch, executor, observe=observe)
        self._outbox_grew = asyncio.Event()  # replaced by a fresh one after every set
        self._outbox_size = 0
        self._last_seq = 0
        self.outbox_epoch = ""  # set at open, see _outbox_epoch
        self._dead_counts: dict[str, int] = {}
        self._open = True

    # ---- lifecycle -------------------------------------------------------------------

    @classmethod
    async def open(cls, path: str, *, synchronous: str = "FULL",
                   observe: BatchObserver | None = None,
                   worker_ttl: float = DEFAULT_WORKER_TTL) -> Store:
        """Open (creating if needed) and check the database; raise a StoreError if unusable."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lc-store")
        loop = asyncio.get_running_loop()
        try:
            conn = await loop.run_in_executor(executor, _connect, path, synchronous)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        store = cls(path, executor, conn, observe=observe, worker_ttl=worker_ttl)
        store._outbox_size, store._last_seq = await store._read(_outbox_counts)
        store.outbox_epoch = await store._read(_outbox_epoch)
        store._dead_counts = await store._read(_dead_counts)
        store._committer.start()
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
        itself); returns its sequence number."""
        seqs = await self.write(_append_op([_row(kind, namespace, name, body, source)]),
                                on_commit=self._published)
        return seqs[0]

    async def write(self, op: Op, *, on_commit: Callable[[Any], None] | None = None) -> Any:
        """Run `op(conn)` in the next group-commit transaction; return its result.
        `on_commit(result)` runs once it committed, even if this caller is cancelled."""
        if not self._open:
            raise StoreClosedError("store is closed")
        return await self._committer.submit(op, on_commit=on_commit)

    def _published(self, seqs: list[int]) -> None:
        """Account for committed outbox rows and wake whoever waits for them."""
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

    async def dead_letter(self, seq: int, *, reason: str, error: str,
                          fold: str | None = None) -> bool:
        """Move outbox entry `seq` to the dead letters; False if it was no longer there.

        With its `fold` key, the older entries of that key it covered are dropped with it:
        the newest value of a latest-wins status could not be applied, and an older one
        would only show a stale value as current. The dead letter's error counts them."""
        if reason not in DEAD_LETTER_REASONS:
            raise ValueError(f"unknown dead-letter reason {reason!r}")

        def op(conn: sqlite3.Connection) -> tuple[int, int, dict[str, int]]:
            covered = _delete_covered(conn, seq, fold)
            why = error if not covered else (f"{error} ({covered} older reports of the same "
                                             f"object it superseded were dropped with it)")
            conn.execute(
                "INSERT OR REPLACE INTO lc_deadletters SELECT seq, kind, namespace, name, body, "
                "created_at, ?, ?, ? FROM lc_outbox WHERE seq = ?",
                (reason, why, time.time(), seq))
            moved = conn.execute("DELETE FROM lc_outbox WHERE seq = ?", (seq,)).rowcount
            conn.execute("DELETE FROM lc_deadletters WHERE seq IN (SELECT seq FROM "
                         "lc_deadletters ORDER BY seq DESC LIMIT -1 OFFSET ?)",
                         (MAX_DEAD_LETTERS,))
            return moved, covered, _dead_counts(conn)

        def committed(result: tuple[int, int, dict[str, int]]) -> None:
            self._acked(result[0] + result[1])
            self._dead_counts = result[2]

        moved, _, _ = await self.write(op, on_commit=committed)
        return moved == 1

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The newest dead letters, newest first."""
        rows = await self._read(lambda c: c.execute(
            "SELECT seq, kind, namespace, name, body, created_at, reason, error, dead_at "
            "FROM lc_deadletters ORDER BY seq DESC LIMIT ?", (limit,)).fetchall())
        return [DeadLetter(r[0], r[1], r[2], r[3], orjson.loads(r[4]), *r[5:]) for r in rows]

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
        """Store a worker's last report and its outbox entries in one transaction."""
        rows = [_row(k, ns, n, body, report["name"]) for k, ns, n, body in entries]
        now = time.time()
        worker = (report["namespace"], report["name"], report["ownerKind"],
                  report["ownerName"], encode(report), now, routed_kind)

        def op(conn: sqlite3.Connection) -> list[int]:
            conn.execute("DELETE FROM lc_workers WHERE received_at < ?", (now - self.worker_ttl,))
            conn.execute("INSERT OR REPLACE INTO lc_workers VALUES (?,?,?,?,?,?,?)", worker)
            return _append_op(rows)(conn)

        return await self.write(op, on_commit=self._published)

    async def route_worker(self, namespace: str, name: str, received_at: float, *,
                           routed_kind: str, entries: list[tuple[str, str, str, Any]]) -> bool:
        """Mark a stored report routed and append its entries, unless a newer one replaced it."""
        rows = [_row(k, ns, n, body, name) for k, ns, n, body in entries]

        def op(conn: sqlite3.Connection) -> list[int]:
            cur = conn.execute(
                "UPDATE lc_workers SET routed_kind = ? WHERE namespace = ? AND name = ? "
                "AND received_at = ? AND routed_kind IS NULL",
                (routed_kind, namespace, name, received_at))
            return _append_op(rows)(conn) if cur.rowcount == 1 else []

        seqs = await self.write(op, on_commit=self._published)
        return bool(seqs) or not rows

    async def workers(self) -> list[WorkerRecord]:
        """The last report of every worker within the TTL, by namespace and name."""
        cutoff = time.time() - self.worker_ttl
        rows = await self._read(lambda c: c.execute(
            "SELECT * FROM lc_workers WHERE received_at >= ? ORDER BY namespace, name",
            (cutoff,)).fetchall())
        return [_worker(r) for r in rows]

    async def forget_workers(self, namespace: str, owner_name: str, *, routed_kind: str,
                             unrouted: bool) -> int:
        """Drop the worker records of one job (routed to `routed_kind`, and with `unrouted`
        those no job took yet); returns how many went."""
        sql = ("DELETE FROM lc_workers WHERE namespace = ? AND owner_name = ? AND "
               "(routed_kind = ?" + (" OR routed_kind IS NULL)" if unrouted else ")"))
        return await self.write(lambda c: c.execute(
            sql, (namespace, owner_name, routed_kind)).rowcount)

    async def unrouted(self, namespace: str, owner_name: str) -> list[WorkerRecord]:
        """Stored reports for this owner that no manager has taken yet."""
        rows = await self._read(lambda c: c.execute(
            "SELECT * FROM lc_workers WHERE namespace = ? AND owner_name = ? "
            "AND routed_kind IS NULL ORDER BY received_at", (namespace, owner_name)).fetchall())
        return [_worker(r) for r in rows]

    # ---- resources -------------------------------------------------------------------

    async def put_resource(self, kind: str, namespace: str, name: str, obj: Any) -> None:
        """Insert or replace the object the GM sent for (kind, namespace, name)."""
        row = (kind, namespace, name, encode(obj), time.time())
        await self.write(lambda c: c.execute(
            "INSERT OR REPLACE INTO lc_resources VALUES (?,?,?,?,?)", row))

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
        append = _append_op([_row(kind, namespace, name, body, "")])
        row = (kind, namespace, name, encode(state), time.time())

        def op(conn: sqlite3.Connection) -> list[int]:
            seqs = append(conn)
            conn.execute("INSERT OR REPLACE INTO lc_job_state VALUES (?,?,?,?,?)", row)
            return seqs

        seqs = await self.write(op, on_commit=self._published)
        return seqs[0]

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
        return exc if isinstance(exc, StoreError) else StoreError(f"write failed: {exc}")
    conn.execute("RELEASE op")
    return result


Row = tuple[str, str, str, str, str | None]
"""An outbox row to insert: kind, namespace, name, body JSON, fold key."""


def _row(kind: str, namespace: str, name: str, body: Any, source: str) -> Row:
    return (kind, namespace, name, encode(body),
            fold_key(kind, namespace, name, body, source=source))


def _append_op(rows: list[Row]) -> Op:
    def op(conn: sqlite3.Connection) -> list[int]:
        now = time.time()
        seqs = []
        for kind, namespace, name, body, fold in rows:
            cur = conn.execute("INSERT INTO lc_outbox (kind, namespace, name, body, created_at, "
                               "fold) VALUES (?,?,?,?,?,?)",
                               (kind, namespace, name, body, now, fold))
            seqs.append(cur.lastrowid)
        return seqs
    return op


def _delete_covered(conn: sqlite3.Connection, seq: int, fold: str | None) -> int:
    """Delete the entries older than `seq` that share its fold key; how many went."""
    if fold is None:
        return 0
    return conn.execute("DELETE FROM lc_outbox WHERE fold = ? AND seq < ?", (fold, seq)).rowcount


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
    return WorkerRecord(row[0], row[1], row[2], row[3], orjson.loads(row[4]), row[5], row[6])


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


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StoreOpenError(f"database {path} has schema version {version}; this LC "
                             f"understands up to {SCHEMA_VERSION}")
    columns = [row[1] for row in conn.execute("PRAGMA table_info(lc_outbox)")]
    if columns and "fold" not in columns:  # schema 2: rows written before folding never fold
        conn.execute("ALTER TABLE lc_outbox ADD COLUMN fold TEXT")
    conn.executescript(_SCHEMA)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
