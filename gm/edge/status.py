"""Status reports from the edge become CR status: one handler per kind, all idempotent.

The hub hands every `status` report it has authorized (the object is assigned to the
reporting node) to `UpstreamStatus.submit`. Each handler parses the report into a small
typed value first (pure, raising `ReportInvalid` with what is wrong, before anything is
queued), then queues its status mutation on the status pipeline (gm/edge/pipeline.py), which
folds it with the object's other pending reports into one write of the *latest* status, so
what the reconcilers wrote survives, retries failed writes itself, and resolves the report
once its write committed. `submit` queues synchronously, so reports are queued in the order
the hub received them. Every mutation is guarded by the ordering rule of gm/edge/order.py: it
applies only if the report is newer than the last one applied from that node (recorded in
`status.lastReports`), so a replayed or late report never moves a status backwards.

Departures from upstream (spec/upstream-gm.md §3.1-3.3, §3.11), on purpose:
- JI metrics are sorted by key (upstream's order is Go map order, so every report churns).
- The FL round is one `Training` condition that only moves forward (upstream appends one
  condition per round, without bound, and a late report can undo a newer round).
- Dataset `updateTime` moves only when the count changes. A report carrying an `error` (our
  LC, when the index cannot be read) sets the `IndexReadable` condition False and raises a
  Warning Event on the Dataset; the next plain count sets it True again.
- Reports are ordered (upstream writes whatever arrives last, so a resent report undoes newer
  ones); the order is recorded in the extra status field `lastReports`.
- Errors are typed for the hub: bad content is refused for good (acked with the reason),
  a missing object or a status the API server can never take is refused, and an API failure
  is retried by the GM (the LC's resend is only for a GM that went away).

Report bodies are upstream's content JSON (upstream-lc.md §2.7, §3.4); our LC sends the same
shapes. Keys are matched case-insensitively when there is no exact match, as Go's decoder
does for upstream's GM.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from gm.edge.order import ReportStamp
from gm.edge.pipeline import StatusPipeline, Verdict
from gm.kinds import report_rules
from gm.kube.events import EventRecorder
from gm.kube.resources import DATASETS, FL, MODELS, sedna_gvr
from gm.reconcile.declaration import ReportRule
from gm.reports import (  # noqa: F401 - the parsers and mutations are re-exported
    DatasetStatusUpdate,
    FLReport,
    ReportRefused,
    advance_round,
    field,
    metric_value,
    metrics_report,
    parse_dataset_report,
    parse_dataset_status,
    parse_fl_report,
    parse_ji_report,
    report_time,
    round_of,
    set_metrics,
    set_sample_count,
    to_metrics,
)
from proto import Message
from shared import apis
from shared.logs import event
from shared.objects import deep_get, now_rfc3339

log = logging.getLogger("sedna.gm.edge.status")


# -- the handler ------------------------------------------------------------------------


Submit = Callable[[str, str, Mapping[str, Any], ReportStamp], Awaitable[None]]


class UpstreamStatus:
    """The GM's `StatusHandler`: dispatches a report by kind onto the status pipeline."""

    def __init__(self, pipeline: StatusPipeline,
                 rules: Iterable[tuple[apis.SednaKind, ReportRule]] | None = None, *,
                 events: EventRecorder | None = None):
        """`rules`: the report rule each reconciled kind declares (gm/kinds, the default);
        Datasets and FL jobs (whose reports also write a Model) have their own handlers here.
        `events`: where Warning Events about reported problems go (none without it)."""
        self.pipeline = pipeline
        self.events = events
        # Keyed by registry entries, so a handler can only exist for a real kind.
        table: list[tuple[apis.SednaKind, Submit]] = [
            (apis.DATASET, self._dataset),
            (apis.FEDERATED_LEARNING, self._federated_learning),
        ]
        table += [(api, self._by_rule(api, rule)) for api, rule in (report_rules() if rules is None else rules)
                  if api.kind not in (apis.DATASET.kind, apis.FEDERATED_LEARNING.kind)]
        self._handlers: dict[str, Submit] = {api.kind: handler for api, handler in table}

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self._handlers)

    def _handler(self, kind: str) -> Submit:
        """The handler for `kind`; ReportRefused saying why when there is none."""
        try:
            api = apis.require(kind)
        except apis.UnknownKind as exc:
            raise ReportRefused(f"the GM takes no status reports for kind {kind!r}: {exc}") from None
        handler = self._handlers.get(api.kind)
        if handler is None:
            raise ReportRefused(f"the GM takes no status reports for kind {kind!r}")
        return handler

    def submit(self, node: str, message: Message, *, epoch: str = "") -> Awaitable[None]:
        """Parse and queue one report now (ReportRefused/ReportInvalid raised here when it is
        bad); the awaitable completes once its effect is committed, or raises ReportRefused."""
        handler = self._handler(message.kind)
        body = message.body or {}
        stamp = ReportStamp(node, epoch, message.seq, report_time(message.kind, body))
        return handler(message.namespace, message.name, body, stamp)

    async def handle_status(self, node: str, message: Message, *, epoch: str = "") -> None:
        """Submit one report and wait until it is applied."""
        await self.submit(node, message, epoch=epoch)

    def _dataset(self, namespace: str, name: str, body: Mapping[str, Any], stamp: ReportStamp) -> Awaitable[None]:
        update = DatasetStatusUpdate(parse_dataset_status(body), now=now_rfc3339())
        written = self.pipeline.submit(DATASETS, namespace, name, stamp, update)
        if update.report.problem is None or self.events is None:
            return _done(written)
        return self._index_warning(written, update)

    async def _index_warning(self, written: asyncio.Future[Verdict], update: DatasetStatusUpdate) -> None:
        """Once the report is written: a Warning Event if it put a new problem into the status."""
        verdict = await asyncio.shield(written)
        problem = update.report.problem
        if verdict.applied and update.raised and problem is not None and self.events is not None:
            self.events.warning(verdict.object, problem.reason, problem.message)

    def _by_rule(self, api: apis.SednaKind, rule: ReportRule) -> Submit:
        gvr = sedna_gvr(api)

        def submit(namespace: str, name: str, body: Mapping[str, Any], stamp: ReportStamp) -> Awaitable[None]:
            mutate = rule(body, now_rfc3339())
            if mutate is None:
                return _nothing()
            return _done(self.pipeline.submit(gvr, namespace, name, stamp, mutate))
        return submit

    def _federated_learning(self, namespace: str, name: str, body: Mapping[str, Any],
                            stamp: ReportStamp) -> Awaitable[None]:
        report = parse_fl_report(body)
        now = now_rfc3339()
        job = self.pipeline.submit(FL, namespace, name, stamp, lambda s: advance_round(s, report, now=now))
        if report.metrics is None:
            return _done(job)
        return self._model_metrics(job, namespace, name, stamp, report.metrics, now)

    async def _model_metrics(self, job: asyncio.Future[Verdict], namespace: str, name: str, stamp: ReportStamp,
                             metrics: list[dict[str, str]], now: str) -> None:
        """After the job's round: the aggregation Model's metrics (the Model records its own
        order, so a resent report may still owe it the metrics)."""
        verdict = await asyncio.shield(job)
        model = deep_get(verdict.object, "spec", "aggregationWorker", "model", "name")
        if not isinstance(model, str) or not model:
            event(log, "FL report has model metrics but the job names no aggregation model",
                  level=logging.WARNING, key=f"{namespace}/{name}")
            return
        try:
            await _done(self.pipeline.submit(MODELS, namespace, model, stamp, lambda s: set_metrics(s, metrics, now=now)))
        except ReportRefused as exc:  # the job's round is applied; the Model is just missing
            event(log, "FL model metrics dropped", level=logging.WARNING,
                  key=f"{namespace}/{name}", model=model, reason=str(exc))


async def _done(verdict: asyncio.Future[Verdict]) -> None:
    """Wait for a queued report; cancelling the wait leaves the report queued (a resend joins it)."""
    await asyncio.shield(verdict)


async def _nothing() -> None:
    return None



