"""The database's tables, their triggers and invariants, and opening a file: created owner-only,
checked, configured (WAL, synchronous) and migrated to `SCHEMA_VERSION` (runs on the DB
thread)."""

from __future__ import annotations

import os
import sqlite3

from lc.errors import StoreCorruptError, StoreOpenError
from lc.store.bounds import DEAD_LETTER_BODY
from lc.store.codec import bounded_json

SCHEMA_VERSION = 6

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
    UPDATE lc_usage SET records = records + 1, bytes = bytes + NEW.bytes WHERE what = 'workers';
    UPDATE lc_usage SET records = records + 1, bytes = bytes + NEW.bytes
     WHERE what = 'unknown_owner' AND NEW.owner_known = 0;
END;
CREATE TRIGGER IF NOT EXISTS lc_workers_removed AFTER DELETE ON lc_workers BEGIN
    UPDATE lc_usage SET records = records - 1, bytes = bytes - OLD.bytes WHERE what = 'workers';
    UPDATE lc_usage SET records = records - 1, bytes = bytes - OLD.bytes
     WHERE what = 'unknown_owner' AND OLD.owner_known = 0;
END;
CREATE TRIGGER IF NOT EXISTS lc_workers_changed AFTER UPDATE OF bytes, owner_known
ON lc_workers BEGIN
    UPDATE lc_usage SET bytes = bytes - OLD.bytes + NEW.bytes WHERE what = 'workers';
    UPDATE lc_usage SET records = records - 1, bytes = bytes - OLD.bytes
     WHERE what = 'unknown_owner' AND OLD.owner_known = 0;
    UPDATE lc_usage SET records = records + 1, bytes = bytes + NEW.bytes
     WHERE what = 'unknown_owner' AND NEW.owner_known = 0;
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
run for every report). A migration that fills `bytes` recounts lc_usage afterwards.

Every statement of a trigger finds its lc_usage row by its key alone: a `WHERE what = 'a' OR
what = 'b'` makes SQLite collect the keys in a temporary table first, which cost ~180 us per
worker record written, 20 times the UPSERT itself."""

_REPLACED_TRIGGERS = {  # schema version -> triggers an older file holds in another form
    6: ("lc_workers_added", "lc_workers_removed", "lc_workers_changed"),
}


def connect(path: str, synchronous: str) -> sqlite3.Connection:
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
    for since, triggers in _REPLACED_TRIGGERS.items():
        for trigger in triggers if version < since else ():
            conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")  # _SCHEMA creates it anew
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
