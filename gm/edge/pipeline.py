"""The status pipeline: a report the GM accepted is the GM's to apply.

Modelled on the kubelet's status manager, which keeps ~100 pods' status per node current
against one API server: the latest wanted change per object is kept in memory, one write
per object is in flight at a time, what arrives meanwhile is folded into the next write, a
failed write is retried with backoff, and an unchanged status is never written.

- **Coalescing.** Reports are queued per object (any node, any session). When the object's
  writer is free it takes every queued report and applies their mutations in arrival order
  to the latest status, each behind the ordering guard of gm/edge/order.py, then writes once.
  Consecutive writes of one object start at least `min_interval` apart (10 ms: at most 100
  writes a second per object however fast its workers report; the first write after a quiet
  spell goes at once), so a hot object costs the API server a bounded rate, not one write
  per report.
  The kinds' mutations already are their merge rules (metrics and counts: the last one
  wins; an FL round only moves forward; IL/LL stages in order), so a batch ends where the
  same reports applied one by one would.
- **The GM retries.** A write that fails transiently (5xx, 429, timeout, connection error,
  a 409 that outlasted the writer's re-reads, 401/403 while credentials or RBAC are fixed)
  is retried by the object's writer with exponential backoff (`base_delay` doubling to
  `max_delay`), carrying the reports that arrived in the meantime too. The LC's resend is
  only for a GM that went away.
- **Acks after commit.** Each report's future resolves once the write that carried it is
  committed (or the guard found it not newer: nothing to write, still settled). The hub acks
  on that. A GM that dies between write and ack is covered by the LC's resend, which the
  guard then finds stale.
- **Impossible writes end.** 400, 413 and 422 mean the write can never succeed: a batch
  that fails so is retried one report at a time, and the reports that fail alone are
  refused with the API server's reason (the LC dead-letters them). A missing object refuses
  its reports. Nothing stays queued forever behind a write that cannot succeed, and one
  object's writer never delays another object's.

Bounded: queued reports are bounded by the LCs' in-flight windows (a native LC sends no more
than its window without acks; an upstream session awaits each report). A resend of a report
still queued joins it instead of queueing twice.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from gm.edge.order import Guard, ReportStamp, SeqLedger
from gm.kube.apierrors import ApiError, BadRequest, Invalid, NotFound
from gm.kube.resources import GVR
from gm.kube.statuswriter import StatusWriter
from gm.reports import ReportInvalid, ReportRefused
from shared.logs import event
from shared.text import clip

log = logging.getLogger("sedna.gm.edge.pipeline")

Obj = dict[str, Any]
Mutate = Callable[[dict[str, Any]], dict[str, Any]]
ObjectKey = tuple[GVR, str, str]
PERMANENT_CODES = frozenset({400, 413, 422})
"""Answers after which the same write can never succeed (bad request, too large, invalid)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What became of one report: applied (written, or already in the status), or not newer."""

    applied: bool
    object: Obj  # the object as written (or as read when nothing changed)


APPLY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Upper bounds (seconds) of the apply-time histogram's buckets."""


@dataclass(slots=True)
class PipelineStats:
    """Counters for the GM's /metrics."""

    reports: int = 0  # reports submitted
    writes: int = 0  # status writes that committed
    unchanged: int = 0  # batches whose mutations changed nothing
    retries: int = 0  # writes retried after a transient failure
    refused: int = 0  # reports refused for good (permanent API errors, object gone, implausible)
    stale: int = 0  # reports not newer than the status (replays, resends)
    coalesced: int = 0  # reports that shared a write with an earlier one of the same batch
    # seconds from a report's submit to the commit of the write that settled it (applied or
    # stale): per APPLY_BUCKETS bound the reports within it (not cumulative), then the rest
    apply_counts: list[int] = field(default_factory=lambda: [0] * (len(APPLY_BUCKETS) + 1))
    apply_sum: float = 0.0

    def settled_after(self, seconds: float) -> None:
        self.apply_counts[bisect.bisect_left(APPLY_BUCKETS, seconds)] += 1
        self.apply_sum += seconds


@dataclass(slots=True)
class _Report:
    stamp: ReportStamp
    mutate: Mutate
    done: asyncio.Future[Verdict]
    since: float  # loop time it was submitted


@dataclass(slots=True)
class _Queue:
    """One object's queued reports and its writer; at most one writer per object."""

    reports: dict[Hashable, _Report] = field(default_factory=dict)  # arrival order
    writer: asyncio.Task[None] | None = None


class StatusPipeline:
    """Per-object coalescing, GM-retried status writes for edge reports."""

    def __init__(self, writer: StatusWriter, *, base_delay: float = 0.005, max_delay: float = 2.0,
                 min_interval: float = 0.01, ledger: SeqLedger | None = None) -> None:
        if not 0 < base_delay <= max_delay:
            raise ValueError(f"need 0 < base_delay ({base_delay}) <= max_delay ({max_delay})")
        self._writer = writer
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._min_interval = min_interval
        self._queues: dict[ObjectKey, _Queue] = {}
        self._unsequenced = itertools.count()
        self.ledger = ledger if ledger is not None else SeqLedger()
        self.stats = PipelineStats()

    def submit(self, gvr: GVR, namespace: str, name: str, stamp: ReportStamp,
               mutate: Mutate) -> asyncio.Future[Verdict]:
        """Queue one report's mutation of an object's status; the future resolves when the
        write carrying it has committed, or fails with ReportRefused if it never can."""
        key = (gvr, namespace, name)
        queue = self._queues.setdefault(key, _Queue())
        ident: Hashable = (stamp.node, stamp.epoch, stamp.seq) if stamp.sequenced else next(self._unsequenced)
        report = queue.reports.get(ident)
        if report is None or report.done.done():  # a resend of a queued report shares its future
            loop = asyncio.get_running_loop()
            report = queue.reports[ident] = _Report(stamp, mutate, loop.create_future(), loop.time())
            self.stats.reports += 1
        if queue.writer is None:
            queue.writer = asyncio.create_task(self._drain(key, queue), name=f"status-{gvr.plural}-{namespace}/{name}")
        return report.done

    def queued(self) -> int:
        """Reports waiting for a write (for /metrics)."""
        return sum(len(q.reports) for q in self._queues.values())

    async def close(self) -> None:
        """Stop every writer; reports still queued stay unacked (the LCs resend them)."""
        writers = [q.writer for q in self._queues.values() if q.writer is not None]
        for task in writers:
            task.cancel()
        await asyncio.gather(*writers, return_exceptions=True)
        for queue in self._queues.values():
            for report in queue.reports.values():
                report.done.cancel()
        self._queues.clear()

    # -- one object's writer ---------------------------------------------------------------

    async def _drain(self, key: ObjectKey, queue: _Queue) -> None:
        """Write the object's queued reports until none is left; then the writer ends."""
        loop = asyncio.get_running_loop()
        try:
            while queue.reports:
                started = loop.time()
                batch = self._take(queue, [])
                await self._write_until_settled(key, queue, batch)
                if (rest := started + self._min_interval - loop.time()) > 0:
                    await asyncio.sleep(rest)  # what arrives meanwhile joins the next write
        finally:  # only close() cancels a writer: what it leaves queued stays unacked
            queue.writer = None
            if not queue.reports and self._queues.get(key) is queue:
                del self._queues[key]

    @staticmethod
    def _take(queue: _Queue, batch: list[_Report]) -> list[_Report]:
        """`batch` plus everything queued since, in arrival order; the queue is left empty."""
        batch.extend(r for r in queue.reports.values() if not r.done.done())
        queue.reports.clear()
        return batch

    async def _write_until_settled(self, key: ObjectKey, queue: _Queue, batch: list[_Report]) -> None:
        """Write `batch` (grown by what arrives while retrying) until it commits or cannot."""
        delay = self._base_delay
        while True:
            try:
                self._settle(batch, await self._write(key, batch))
                return
            except NotFound:
                self._refuse(key, batch, f"{_what(key)} does not exist")
                return
            except ApiError as exc:
                if exc.code in PERMANENT_CODES:
                    await self._one_by_one(key, batch, exc)
                    return
                self.stats.retries += 1
                event(log, "status write failed, retrying", level=logging.WARNING if delay >= self._max_delay else logging.INFO,
                      key=_what(key), reports=len(batch), retry_in=delay, error=str(exc))
            except Exception as exc:  # noqa: BLE001  a mutation that cannot take its report
                await self._crashed(key, batch, exc)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_delay)
            batch = self._take(queue, batch)

    async def _crashed(self, key: ObjectKey, batch: list[_Report], exc: Exception) -> None:
        """A write whose mutation raised (the client's failures are all ApiError, so this is a
        kind's code meeting a report it cannot take): it would raise again on every resend, so
        the report that raises alone is refused for good, with the error, and the others of its
        batch are written without it."""
        if len(batch) > 1:
            for report in batch:
                await self._write_until_settled(key, _Queue(), [report])
            return
        event(log, "status write crashed", level=logging.ERROR, exc_info=exc, key=_what(key))
        self._refuse(key, batch, f"the GM cannot apply this report to {_what(key)}: "
                                 f"{type(exc).__name__}: {clip(str(exc))}")

    async def _one_by_one(self, key: ObjectKey, batch: list[_Report], exc: ApiError) -> None:
        """A batch the API server refuses for good: find the reports it refuses alone."""
        if len(batch) == 1:
            reason = f"the API server refused the status of {_what(key)}: {exc.code} {exc.reason}: {exc.message}"
            self._refuse(key, batch, reason, invalid=isinstance(exc, Invalid | BadRequest))
            return
        for report in batch:
            await self._write_until_settled(key, _Queue(), [report])

    async def _write(self, key: ObjectKey, batch: list[_Report]) -> list[Verdict | str]:
        """One write applying every report of `batch` in order; per report its verdict, or
        the reason it was refused (implausible sequence)."""
        gvr, namespace, name = key
        guards = [Guard(r.stamp, r.mutate, self.ledger) for r in batch]

        def mutate(status: dict[str, Any]) -> dict[str, Any]:
            for guard in guards:
                status = guard(status)
            return status

        result = await self._writer.update(gvr, namespace, name, mutate)
        if result.written:
            self.stats.writes += 1
        else:
            self.stats.unchanged += 1
        for guard in guards:
            if guard.applied:
                self.ledger.applied(guard.stamp)
        return [g.refusal if g.refusal else Verdict(g.applied, result.object) for g in guards]

    def _settle(self, batch: list[_Report], verdicts: list[Verdict | str]) -> None:
        applied = 0
        now = asyncio.get_running_loop().time()
        for report, verdict in zip(batch, verdicts, strict=True):
            if isinstance(verdict, str):
                self.stats.refused += 1
                _fail(report.done, ReportRefused(verdict))
                continue
            applied += verdict.applied
            self.stats.stale += not verdict.applied
            self.stats.settled_after(now - report.since)
            if not report.done.done():
                report.done.set_result(verdict)
        self.stats.coalesced += max(applied - 1, 0)

    def _refuse(self, key: ObjectKey, batch: list[_Report], reason: str, *, invalid: bool = False) -> None:
        event(log, "status reports refused", level=logging.WARNING, key=_what(key), reports=len(batch), reason=reason)
        for report in batch:
            self.stats.refused += 1
            _fail(report.done, ReportInvalid(reason) if invalid else ReportRefused(reason))


def _fail(future: asyncio.Future[Verdict], exc: Exception) -> None:
    if not future.done():
        future.set_exception(exc)


def _what(key: ObjectKey) -> str:
    gvr, namespace, name = key
    return f"{gvr.plural} {namespace}/{name}"
