"""Status never moves backwards: the ordering rule for reports relayed from the edge.

An LC resends every report the GM has not acked (after a reconnect, or after its ack
timeout), and the GM defers a report it cannot apply now while it goes on with later ones.
So a report can arrive after a newer one for the same object was applied. Each status the
GM writes from reports therefore records, per reporting node, the newest report it applied
(`status.lastReports`), and a report is applied only if it is newer than that record.

What "newer" means depends on what the report carries:

- A native LC's report has its outbox `seq` (>= 1), ordered within the outbox's `epoch`
  (the random id the LC's database got when it was created, sent in the hello). Same epoch:
  newer iff the seq is higher. Another epoch means the LC's outbox was wiped and its seqs
  started again at 1; its reports are newer than anything of the old epoch. The epoch is
  opaque, not a time, so a reset LC with a wrong clock is not ignored: the price is that
  two processes claiming the same node name would each be taken as a reset of the other.
  A native LC that sends no epoch (versions before it was added) is ordered by seq alone.
- An upstream LC's report has no seq. Upstream LCs never resend (no acks), so arrival order
  is right; the report's own time (`ownerInfo.updateTime`, Dataset `updateTime`) is used
  when both it and the record have one: a report older than the recorded one is skipped.
  Equal times keep arrival order (upstream times have one-second resolution).

The record is bounded (`MAX_NODES` entries, the least recently updated go first): a node
dropped from it is treated as new, the same as an LC seen for the first time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

FIELD = "lastReports"
MAX_NODES = 64

Record = Mapping[str, Any]
Mutate = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ReportStamp:
    """Where a report sits in its node's order: outbox epoch and seq, and/or its own time."""

    node: str
    epoch: str = ""  # "" when the LC sent none (upstream LCs, older native LCs)
    seq: int = 0  # 0: unsequenced (upstream mode)
    time: str = ""  # the report's own time as written in it; "" when it has none

    @property
    def sequenced(self) -> bool:
        return self.seq > 0

    def as_record(self) -> dict[str, Any]:
        """The `lastReports` entry for this report: the node plus whatever it carries."""
        record: dict[str, Any] = {"node": self.node}
        if self.epoch:
            record["epoch"] = self.epoch
        if self.seq:
            record["seq"] = self.seq
        if self.time:
            record["time"] = self.time
        return record


def parse_time(value: Any) -> datetime | None:
    """A report time (RFC 3339, or upstream's local `YYYY-MM-DD HH:MM:SS`); None if it is neither."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _not_older(new: datetime | None, old: datetime | None) -> bool:
    """False only when both times exist, are comparable, and `new` is before `old`."""
    if new is None or old is None or (new.tzinfo is None) != (old.tzinfo is None):
        return True
    return new >= old


def is_newer(stamp: ReportStamp, record: Record | None) -> bool:
    """Whether a report with `stamp` may be applied over the node's recorded last report."""
    if record is None:
        return True
    if stamp.sequenced:
        seq = record.get("seq")
        if record.get("epoch", "") != stamp.epoch or not isinstance(seq, int) or seq < 1:
            return True  # a new outbox, or the first sequenced report of this node
        return stamp.seq > seq
    return _not_older(parse_time(stamp.time), parse_time(record.get("time")))


def records(status: Mapping[str, Any]) -> list[Record]:
    """The well-formed entries of `status.lastReports` (anything else is ignored)."""
    value = status.get(FIELD)
    if not isinstance(value, list):
        return []
    return [r for r in value if isinstance(r, Mapping) and isinstance(r.get("node"), str)]


def record_for(status: Mapping[str, Any], node: str) -> Record | None:
    return next((r for r in records(status) if r["node"] == node), None)


def with_stamp(status: dict[str, Any], stamp: ReportStamp) -> dict[str, Any]:
    """`status` with the node's entry replaced by `stamp`, moved last (most recent), bounded."""
    others = [dict(r) for r in records(status) if r["node"] != stamp.node]
    status[FIELD] = [*others[-(MAX_NODES - 1):], stamp.as_record()]
    return status


class Guard:
    """Wraps a status mutation so it applies only for a report newer than the recorded one.

    StatusWriter may run the mutation once per attempt (after a 409 it re-reads), so the
    check is made against each status it is given; `stale` tells the caller how the last
    attempt decided.
    """

    __slots__ = ("stamp", "mutate", "stale")

    def __init__(self, stamp: ReportStamp, mutate: Mutate) -> None:
        self.stamp = stamp
        self.mutate = mutate
        self.stale = False

    def __call__(self, status: dict[str, Any]) -> dict[str, Any]:
        self.stale = not is_newer(self.stamp, record_for(status, self.stamp.node))
        if self.stale:
            return status
        return with_stamp(self.mutate(status), self.stamp)
