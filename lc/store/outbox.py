"""The outbox's rows, and its work on the DB thread: appending reports (refused when they would
take it over its cap, covered rows deleted once it is over), deleting what an ack or a newer
report covers, and the outbox epoch; and its tail, the newest settled rows in memory."""

from __future__ import annotations

import secrets
import sqlite3
import time
from collections import deque
from dataclasses import dataclass
from itertools import islice
from typing import Any

import orjson

from lc.errors import StoreBusyError
from lc.fold import fold_key
from lc.store.bounds import usage
from lc.store.codec import encode_sized


class OutboxFullError(StoreBusyError):
    """The outbox holds as many bytes of reports as it may; retry once the GM took some."""


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


Row = tuple[str, str, str, str, str | None, int]
"""An outbox row to insert: kind, namespace, name, body JSON, fold key, the body's bytes."""


@dataclass(frozen=True, slots=True)
class Appended:
    """What an append committed: the new rows' seqs (one per row, in order), how many covered
    rows went, and the rows' created_at."""

    seqs: list[int]
    compacted: int = 0
    created_at: float = 0.0


def outbox_row(kind: str, namespace: str, name: str, body: Any, source: str) -> Row:
    text, size = encode_sized(body)
    return (kind, namespace, name, text, fold_key(kind, namespace, name, body, source=source),
            size)


def append_rows(conn: sqlite3.Connection, rows: list[Row], *, cap: int,
                used: int | None = None) -> Appended:
    """Insert `rows`; once the outbox is over `cap`, delete the rows newer ones cover.
    `used`: the outbox's bytes before them, when the caller has just read them."""
    seqs, now = insert_rows(conn, rows)
    after = None if used is None else used + sum(row[5] for row in rows)
    return Appended(seqs, compact_outbox(conn, cap, used=after), now)


def insert_rows(conn: sqlite3.Connection, rows: list[Row]) -> tuple[list[int], float]:
    """Insert `rows` in one statement; their seqs (consecutive: AUTOINCREMENT in one
    transaction with no other writer) and their created_at."""
    now = time.time()
    if not rows:
        return [], now
    conn.executemany("INSERT INTO lc_outbox (kind, namespace, name, body, created_at, fold, "
                     "bytes) VALUES (?,?,?,?,?,?,?)",
                     [(kind, namespace, name, body, now, fold, size)
                      for kind, namespace, name, body, fold, size in rows])
    last = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
    return list(range(last - len(rows) + 1, last + 1)), now


def check_room(conn: sqlite3.Connection, rows: list[Row], cap: int) -> int:
    """Refuse (OutboxFullError) rows that would take the outbox over `cap`, counting as
    room what covered rows take and what the rows themselves would cover. An empty outbox
    takes anything, so no report waits for room that cannot come. Returns the outbox's
    bytes (before the rows)."""
    records, used = usage(conn, "outbox")
    adding = sum(row[5] for row in rows)
    if records == 0 or used + adding <= cap:
        return used
    covered = usage(conn, "outbox_covered")[1]
    superseded = sum(_newest_bytes(conn, fold) for fold in {row[4] for row in rows} - {None})
    live = used - covered - superseded
    if live + adding > cap:
        raise OutboxFullError(f"the outbox is full: {live} bytes of reports wait for the GM, "
                              f"and {adding} more would pass its cap of {cap}")
    return used


def _newest_bytes(conn: sqlite3.Connection, fold: str) -> int:
    """Bytes of the one uncovered row with fold key `fold` (0 if there is none)."""
    row = conn.execute("SELECT bytes FROM lc_outbox WHERE fold = ? AND covered = 0",
                       (fold,)).fetchone()
    return row[0] if row else 0


def compact_outbox(conn: sqlite3.Connection, cap: int, *, used: int | None = None) -> int:
    """Delete the covered rows when the outbox is over `cap` (its bytes are `used`, or
    looked up); how many went."""
    if (usage(conn, "outbox")[1] if used is None else used) <= cap:
        return 0
    if usage(conn, "outbox_covered")[0] == 0:
        return 0
    return conn.execute("DELETE FROM lc_outbox WHERE covered = 1").rowcount


def delete_covered(conn: sqlite3.Connection, seq: int, fold: str | None) -> int:
    """Delete the entries older than `seq` that share its fold key; how many went."""
    if fold is None:
        return 0
    return conn.execute("DELETE FROM lc_outbox WHERE fold = ? AND seq < ?", (fold, seq)).rowcount


def outbox_epoch(conn: sqlite3.Connection) -> str:
    """The random id this database's outbox got when it was first opened.

    Outbox seqs only grow within one database file; a wiped file starts again at 1. The GM
    orders a node's reports by (epoch, seq), so a new file (new epoch) is not mistaken for
    a replay of the old one's first reports. Autocommit: the INSERT is durable at once.
    """
    conn.execute("INSERT OR IGNORE INTO lc_meta (key, value) VALUES ('outbox_epoch', ?)",
                 (secrets.token_hex(8),))
    return conn.execute("SELECT value FROM lc_meta WHERE key = 'outbox_epoch'").fetchone()[0]


def outbox_counts(conn: sqlite3.Connection) -> tuple[int, int]:
    size = conn.execute("SELECT COUNT(*) FROM lc_outbox").fetchone()[0]
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'lc_outbox'").fetchone()
    return size, (row[0] if row else 0)


TAIL_ENTRIES = 4096
TAIL_BYTES = 8 << 20


class OutboxTail:
    """The newest settled outbox entries, kept in memory so that the link, which follows the
    outbox, gets them without reading back what was just written.

    Invariant: the tail holds every entry appended with a seq above `base`, in seq order, as
    committed (entries a newer one covered may since have been compacted away: the link folds
    them anyway). It serves `after(seq)` only for `seq >= base`; whoever asks from further
    back reads the database. Over TAIL_ENTRIES or TAIL_BYTES it starts again, empty, from
    the newest seq (nobody followed it). Rows are kept as stored and decoded when served.
    """

    __slots__ = ("_entries", "_bytes", "_base")

    def __init__(self) -> None:
        self._entries: deque[tuple[int, Row, float]] = deque()  # (seq, row, created_at)
        self._bytes = 0
        self._base = -1  # nothing is served before restart()

    def restart(self, base: int) -> None:
        self._entries = deque()
        self._bytes = 0
        self._base = base

    def extend(self, seqs: list[int], rows: list[Row], created_at: float, last_seq: int) -> None:
        """Add settled rows (their seqs in order); `last_seq` is the highest seq before them."""
        if self._base < 0:
            return
        if self._entries and seqs[0] <= self._entries[-1][0] or seqs[0] <= self._base:
            self.restart(max(last_seq, seqs[-1]))  # out of order: never guess, read instead
            return
        entries = self._entries
        for seq, row in zip(seqs, rows, strict=True):
            entries.append((seq, row, created_at))
            self._bytes += row[5]
        if len(entries) > TAIL_ENTRIES or self._bytes > TAIL_BYTES:
            self.restart(seqs[-1])

    def forget(self, seq: int, fold: str | None = None) -> None:
        """Entry `seq` was deleted, and with `fold` the older entries of that key too."""
        if not self._entries or seq <= self._base:
            return
        kept = [e for e in self._entries
                if not (e[0] == seq or (fold is not None and e[1][4] == fold and e[0] < seq))]
        if len(kept) != len(self._entries):
            self._entries = deque(kept)
            self._bytes = sum(e[1][5] for e in kept)

    def forget_upto(self, seq: int) -> None:
        """Every entry up to `seq` was deleted."""
        while self._entries and self._entries[0][0] <= seq:
            self._bytes -= self._entries.popleft()[1][5]

    def after(self, seq: int, limit: int) -> list[OutboxEntry] | None:
        """Up to `limit` entries with a higher seq than `seq`, oldest first, forgetting those
        up to `seq` (the one reader has them); None when the tail does not hold them all."""
        if self._base < 0 or seq < self._base:
            return None
        self.forget_upto(seq)
        self._base = seq
        # decoded from what was stored: the same values a read of the database returns
        return [OutboxEntry(s, row[0], row[1], row[2], orjson.loads(row[3]), created_at, row[4])
                for s, row, created_at in islice(self._entries, limit)]
