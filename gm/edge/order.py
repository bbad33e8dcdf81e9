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

A sequence number must also be one the node's LC could have reached. Without node
authentication anyone can connect under a node's name, read the epoch from
`status.lastReports` and send seq 2^63-1: recorded as the newest, it would make every later
real report stale. So each record carries `appliedAt` (when the GM applied it), the GM keeps
the newest applied seq per (node, epoch) in memory too (`SeqLedger`), and a report whose seq
is further ahead of those than an LC could have counted since (`MAX_RATE` reports a second,
plus `SLACK`) is refused, not recorded. A record without `appliedAt` (written by an older
GM) bounds nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gm.reports import parse_time

FIELD = "lastReports"
MAX_NODES = 64
MAX_RATE = 10_000  # reports a second: far above what one LC's worker API takes in
SLACK = 100_000  # seqs an LC may skip at once (reports it folded or dead-lettered itself)

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

    def as_record(self, applied_at: str = "") -> dict[str, Any]:
        """The `lastReports` entry for this report: the node plus whatever it carries."""
        record: dict[str, Any] = {"node": self.node}
        if self.epoch:
            record["epoch"] = self.epoch
        if self.seq:
            record["seq"] = self.seq
        if self.time:
            record["time"] = self.time
        if applied_at and self.seq:
            record["appliedAt"] = applied_at
        return record


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


def with_stamp(status: dict[str, Any], stamp: ReportStamp, *, applied_at: str = "") -> dict[str, Any]:
    """`status` with the node's entry replaced by `stamp`, moved last (most recent), bounded."""
    others = [dict(r) for r in records(status) if r["node"] != stamp.node]
    status[FIELD] = [*others[-(MAX_NODES - 1):], stamp.as_record(applied_at)]
    return status


def _rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SeqLedger:
    """The newest applied seq per (node, epoch) in this process, and when: the anchor for
    telling a sequence number an LC could have reached from a forged one."""

    __slots__ = ("_applied", "_clock", "max_entries")

    def __init__(self, *, clock: Callable[[], float] = time.time, max_entries: int = 100_000) -> None:
        self._applied: dict[tuple[str, str], tuple[int, float]] = {}
        self._clock = clock
        self.max_entries = max_entries

    def now(self) -> float:
        return self._clock()

    def applied(self, stamp: ReportStamp) -> None:
        key = (stamp.node, stamp.epoch)
        known = self._applied.get(key)
        if known is None or stamp.seq > known[0]:
            if known is None and len(self._applied) >= self.max_entries:
                self._applied.pop(next(iter(self._applied)))
            self._applied[key] = (stamp.seq, self._clock())

    def implausible(self, stamp: ReportStamp, record: Record | None) -> str:
        """Why `stamp`'s seq is beyond what its LC could have reached; "" when it is not."""
        anchors = []
        if (known := self._applied.get((stamp.node, stamp.epoch))) is not None:
            anchors.append(known)
        if record is not None and record.get("epoch", "") == stamp.epoch:
            seq, at = record.get("seq"), parse_time(record.get("appliedAt"))
            if isinstance(seq, int) and at is not None and at.tzinfo is not None:
                anchors.append((seq, at.timestamp()))
        if not anchors:
            return ""
        now = self._clock()
        ceiling = max(seq + MAX_RATE * max(now - at, 0.0) + SLACK for seq, at in anchors)
        if stamp.seq <= ceiling:
            return ""
        return (f"seq {stamp.seq} of node {stamp.node} is beyond any its LC could have reached "
                f"(at most {int(ceiling)}): refused, not recorded")


class Guard:
    """Wraps a status mutation so it applies only for a report newer than the recorded one
    and at a sequence number its LC could have reached.

    StatusWriter may run the mutation once per attempt (after a 409 it re-reads), so the
    check is made against each status it is given; `applied` and `refusal` tell the caller
    how the last attempt decided (neither: the report was not newer, `stale`).
    """

    __slots__ = ("stamp", "mutate", "ledger", "applied", "refusal")

    def __init__(self, stamp: ReportStamp, mutate: Mutate, ledger: SeqLedger | None = None) -> None:
        self.stamp = stamp
        self.mutate = mutate
        self.ledger = ledger
        self.applied = False
        self.refusal = ""

    @property
    def stale(self) -> bool:
        return not self.applied and not self.refusal

    def __call__(self, status: dict[str, Any]) -> dict[str, Any]:
        self.applied, self.refusal = False, ""
        record = record_for(status, self.stamp.node)
        if not is_newer(self.stamp, record):
            return status
        if self.ledger is not None and self.stamp.sequenced:
            self.refusal = self.ledger.implausible(self.stamp, record)
            if self.refusal:
                return status
        self.applied = True
        at = _rfc3339(self.ledger.now()) if self.ledger is not None else ""
        return with_stamp(self.mutate(status), self.stamp, applied_at=at)
