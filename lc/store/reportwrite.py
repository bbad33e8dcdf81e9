"""A worker report's write: its worker record and its outbox rows, alone or merged with the
reports next to it in a batch.

A batch holds the reports of every worker that posted while the last one committed (8 at
16 concurrent workers, more with more). Written one by one, each costs a lookup of the
outbox's room, an UPSERT of its worker record and an INSERT per outbox row, each a round
trip from Python into SQLite (and back for the GIL). Merged, a run of them costs one room
lookup, one UPSERT per worker (the last report of each: the run commits as a whole, so the
earlier ones would never be seen) and one INSERT of all rows, with the same result per
report (`Appended`, its seqs in order). A run that might not all fit under the outbox's cap
is written one by one, where each report is refused or taken on its own.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from lc.store.bounds import usage
from lc.store.outbox import Appended, Row, append_rows, check_room, compact_outbox, insert_rows
from lc.store.workers import UPSERT_WORKER

WorkerRow = tuple[str, str, str, str, str, float, "str | None", int]
"""UPSERT_WORKER's parameters: namespace, name, owner kind and name, report JSON,
received_at, routed_kind, bytes."""


@dataclass(frozen=True, slots=True)
class ReportWrite:
    """The op of one worker report (run on the DB thread with the connection)."""

    worker: WorkerRow
    rows: list[Row]
    cap: int  # the outbox's byte cap
    written: dict[tuple[str, str], float]  # the store's record of worker rows this batch wrote

    def __call__(self, conn: sqlite3.Connection) -> Appended:
        used = check_room(conn, self.rows, self.cap)
        conn.execute(UPSERT_WORKER, self.worker)
        self.written[(self.worker[0], self.worker[1])] = self.worker[5]
        return append_rows(conn, self.rows, cap=self.cap, used=used)

    @staticmethod
    def merged(conn: sqlite3.Connection, run: list[ReportWrite]) -> list[Appended] | None:
        """Write `run` (consecutive in a batch, same cap) at once; None (nothing written) when
        it must be written one by one instead."""
        cap = run[0].cap
        records, used = usage(conn, "outbox")
        adding = sum(row[5] for write in run for row in write.rows)
        if records and used + adding > cap:
            return None
        latest: dict[tuple[str, str], WorkerRow] = {}
        for write in run:
            key = (write.worker[0], write.worker[1])
            latest[key] = write.worker  # the run's last report of the worker
            write.written[key] = write.worker[5]
        conn.executemany(UPSERT_WORKER, latest.values())
        rows = [row for write in run for row in write.rows]
        seqs, now = insert_rows(conn, rows)
        compacted = compact_outbox(conn, cap, used=used + adding)
        appended, start = [], 0
        for i, write in enumerate(run):
            count = len(write.rows)
            last = i == len(run) - 1
            appended.append(Appended(seqs[start:start + count], compacted if last else 0, now))
            start += count
        return appended
