"""How long and how much the store keeps and hands out: the TTLs and byte caps
(`StoreBounds`), the `lc_usage` lookup every cap is enforced from (one lookup per write, not a
scan), and listing pages bounded in bytes."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any, Generic, TypeVar

MAX_DEAD_LETTERS = 10_000
DEAD_LETTER_BODY = 64 << 10
DEFAULT_WORKER_TTL = 7 * 24 * 3600.0
USAGE = ("workers", "unknown_owner", "deadletters", "outbox", "outbox_covered")
"""The entries of lc_usage (lc/store/schema.py keeps them)."""
DROPPED = ("unknown_owner", "worker", "dead_letter", "outbox_covered")
"""Which cap dropped a record: the unknown owners' bytes, the workers table's bytes, the
dead letters' bytes or count, or the outbox's bytes (only reports a newer one covers)."""


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


def usage(conn: sqlite3.Connection, what: str) -> tuple[int, int]:
    """(records, bytes) of one lc_usage entry."""
    row = conn.execute("SELECT records, bytes FROM lc_usage WHERE what = ?", (what,)).fetchone()
    return (row[0], row[1]) if row else (0, 0)


def usages(conn: sqlite3.Connection) -> dict[str, tuple[int, int]]:
    """(records, bytes) of every lc_usage entry (five rows), in one lookup."""
    found = {what: (records, size) for what, records, size in
             conn.execute("SELECT what, records, bytes FROM lc_usage")}
    return {what: found.get(what, (0, 0)) for what in USAGE}


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing; `next_key` is where the next page starts after (None: last)."""

    items: list[T]
    next_key: tuple[Any, ...] | None


def page(rows: Iterable[tuple[T, int]], limit: int, page_bytes: int, *,
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
