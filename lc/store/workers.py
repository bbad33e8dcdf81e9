"""The worker records (the last report of each worker, `GET /sedna/workers`), and their work on
the DB thread: the TTLs (shorter for an owner this node does not hold) and the byte caps,
oldest first, never a record the same transaction wrote."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import orjson

from lc.store.bounds import StoreBounds, usages
from lc.store.codec import truncated_json


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


WORKER_COLUMNS = ("namespace, name, owner_kind, owner_name, report, received_at, routed_kind, "
                   "owner_known")
LIVE = "received_at >= iif(owner_known, ?, ?)"
"""A worker record within its TTL; the arguments are `Store._cutoffs()`."""
UPSERT_WORKER = (
    "INSERT INTO lc_workers (namespace, name, owner_kind, owner_name, report, received_at, "
    "routed_kind, bytes, owner_known) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, "
    "?7 IS NOT NULL AND EXISTS (SELECT 1 FROM lc_resources WHERE kind = ?7 AND "
    "namespace = ?1 AND name = ?4)) "
    "ON CONFLICT (namespace, name) DO UPDATE SET owner_kind = excluded.owner_kind, "
    "owner_name = excluded.owner_name, report = excluded.report, "
    "received_at = excluded.received_at, routed_kind = excluded.routed_kind, "
    "bytes = excluded.bytes, owner_known = excluded.owner_known")
"""Write a worker's record (namespace, name, owner kind and name, report JSON, received_at,
routed_kind, bytes); its owner is known when this node holds the job `routed_kind` names."""


def expire_workers(conn: sqlite3.Connection, bounds: StoreBounds, now: float) -> None:
    conn.execute("DELETE FROM lc_workers WHERE received_at < ?", (now - bounds.worker_ttl,))
    conn.execute("DELETE FROM lc_workers WHERE owner_known = 0 AND received_at < ?",
                 (now - bounds.unknown_ttl,))


def over_caps(used: dict[str, tuple[int, int]], bounds: StoreBounds) -> bool:
    """Whether the worker records (`usages`) take more bytes than a cap allows."""
    return (used["unknown_owner"][1] > bounds.unknown_owner_bytes
            or used["workers"][1] > bounds.workers_bytes)


def trim_workers(conn: sqlite3.Connection, bounds: StoreBounds, *,
                  keep: Collection[tuple[str, str]] = (),
                  used: dict[str, tuple[int, int]] | None = None) -> Counter[str]:
    """Drop the oldest records over each byte cap, never those in `keep` (the records the
    transaction wrote: each one was answered 200). One lookup when within the caps, none
    when given what `usages` read in this transaction."""
    dropped: Counter[str] = Counter()
    used = usages(conn) if used is None else used
    excess = used["unknown_owner"][1] - bounds.unknown_owner_bytes
    if excess > 0:
        dropped["unknown_owner"] = _drop_oldest_workers(conn, excess, keep, unknown=True)
        used = usages(conn)  # what went was in the workers' bytes too
    excess = used["workers"][1] - bounds.workers_bytes
    if excess > 0:
        dropped["worker"] = _drop_oldest_workers(conn, excess, keep, unknown=False)
    return +dropped


def _drop_oldest_workers(conn: sqlite3.Connection, excess: int,
                         keep: Collection[tuple[str, str]], *, unknown: bool) -> int:
    """Drop the oldest records (of unknown owners only, with `unknown`) until `excess`
    bytes went or only `keep` is left; how many went."""
    where = "WHERE owner_known = 0 " if unknown else ""
    victims: list[tuple[str, str]] = []
    cursor = conn.execute(f"SELECT namespace, name, bytes FROM lc_workers {where}"
                          "ORDER BY received_at")
    for namespace, name, size in cursor:
        if (namespace, name) not in keep:
            victims.append((namespace, name))
            excess -= size
            if excess <= 0:
                break
    cursor.close()
    conn.executemany("DELETE FROM lc_workers WHERE namespace = ? AND name = ?", victims)
    return len(victims)


def listed_worker(row: tuple[Any, ...], item_bytes: int) -> ListedWorker:
    size, text = row[7], row[8]
    report = text if size <= item_bytes else truncated_json(text, size, item_bytes)
    return ListedWorker(row[0], row[1], row[2], row[3], row[4], row[5], bool(row[6]), report)


def worker_record(row: tuple[Any, ...]) -> WorkerRecord:
    """A WorkerRecord from a row of WORKER_COLUMNS."""
    return WorkerRecord(row[0], row[1], row[2], row[3], orjson.loads(row[4]), row[5], row[6],
                        bool(row[7]))
