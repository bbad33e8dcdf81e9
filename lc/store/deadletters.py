"""The dead letters (reports the GM can never apply, and why), and their work on the DB thread:
moving an outbox row here with its body bounded, and the count and byte caps, oldest first."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from lc.store.bounds import StoreBounds, usage
from lc.store.codec import bounded_json
from shared.text import clip

DEAD_LETTER_REASONS = ("refused", "unsendable", "protocol")
"""refused: the GM acked it with an error; unsendable: this LC cannot encode it within the
protocol's limits; protocol: the GM closed the session over this report's frame."""
MAX_ERROR_TEXT = 2048  # characters of a dead letter's error kept


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


UPSERT_DEAD_LETTER = (
    "INSERT INTO lc_deadletters (seq, kind, namespace, name, body, created_at, reason, error, "
    "dead_at, bytes) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT (seq) DO UPDATE SET "
    "kind = excluded.kind, namespace = excluded.namespace, name = excluded.name, "
    "body = excluded.body, created_at = excluded.created_at, reason = excluded.reason, "
    "error = excluded.error, dead_at = excluded.dead_at, bytes = excluded.bytes")


def move_to_dead_letters(conn: sqlite3.Connection, seq: int, *, reason: str, error: str,
                          now: float, body_limit: int) -> int:
    """Move outbox row `seq` to the dead letters, its body bounded; 0 if it is gone."""
    row = conn.execute("SELECT kind, namespace, name, body, created_at FROM lc_outbox "
                       "WHERE seq = ?", (seq,)).fetchone()
    if row is None:
        return 0
    body, error = bounded_json(row[3], body_limit), clip(error, MAX_ERROR_TEXT)
    size = len(body.encode()) + len(error.encode("utf-8", "surrogatepass"))
    conn.execute(UPSERT_DEAD_LETTER, (seq, *row[:3], body, row[4], reason, error, now, size))
    conn.execute("DELETE FROM lc_outbox WHERE seq = ?", (seq,))
    return 1


def trim_dead_letters(conn: sqlite3.Connection, bounds: StoreBounds, *,
                       keep: int | None) -> int:
    """Drop the oldest dead letters over the count or the byte cap, never `keep`."""
    count, size = usage(conn, "deadletters")
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


def dead_counts(conn: sqlite3.Connection) -> dict[str, int]:
    rows = conn.execute("SELECT reason, COUNT(*) FROM lc_deadletters GROUP BY reason").fetchall()
    return {reason: count for reason, count in rows}


def dead_kind_counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Dead letters held, by kind (the table is capped, so this reads a bounded set)."""
    rows = conn.execute("SELECT kind, COUNT(*) FROM lc_deadletters GROUP BY kind").fetchall()
    return {kind: count for kind, count in rows}
