"""Status reports from the edge become CR status: one handler per kind, all idempotent.

The hub hands every `status` report it has authorized (the object is assigned to the
reporting node) to `UpstreamStatus.handle_status`. Each handler parses the report into a
small typed value first (pure, raising `ReportInvalid` with what is wrong), then writes
through `StatusWriter.update`: the change is a mutation of the *latest* status, so what the
reconcilers wrote survives, and a mutation that changes nothing writes nothing. Every
mutation is guarded by the ordering rule of gm/edge/order.py: it applies only if the report
is newer than the last one applied from that node (recorded in `status.lastReports`), so a
replayed, late or deferred report never moves a status backwards.

Departures from upstream (spec/upstream-gm.md §3.1-3.3, §3.11), on purpose:
- JI metrics are sorted by key (upstream's order is Go map order, so every report churns).
- The FL round is one `Training` condition that only moves forward (upstream appends one
  condition per round, without bound, and a late report can undo a newer round).
- Dataset `updateTime` moves only when the count changes.
- Reports are ordered (upstream writes whatever arrives last, so a resent report undoes newer
  ones); the order is recorded in the extra status field `lastReports`.
- Errors are typed for the hub: bad content is refused for good (acked with the reason),
  a missing object is refused, an API failure is deferred (no ack, the LC resends).

Report bodies are upstream's content JSON (upstream-lc.md §2.7, §3.4); our LC sends the same
shapes. Keys are matched case-insensitively when there is no exact match, as Go's decoder
does for upstream's GM.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from gm.controllers.common import DATASETS, FL, MODELS
from gm.controllers.declare import ReportRule, sedna_gvr
from gm.edge.order import Guard, ReportStamp
from gm.edge.reports import (  # noqa: F401 - the parsers and mutations are re-exported
    FLReport,
    ReportDeferred,
    ReportInvalid,
    ReportRefused,
    advance_round,
    field,
    metric_value,
    metrics_report,
    parse_dataset_report,
    parse_fl_report,
    parse_ji_report,
    report_time,
    round_of,
    set_metrics,
    set_sample_count,
    to_metrics,
)
from gm.kinds import report_rules
from gm.kube.errors import ApiError, Conflict, Invalid, NotFound
from gm.kube.resources import GVR
from gm.kube.status import StatusResult, StatusWriter
from proto import Message
from shared import apis
from shared.logs import event
from shared.objects import deep_get, now_rfc3339

log = logging.getLogger("sedna.gm.edge.status")


# -- the handler ------------------------------------------------------------------------


Apply = Callable[[str, str, Mapping[str, Any], ReportStamp], Awaitable[None]]


class UpstreamStatus:
    """The GM's `StatusHandler`: dispatches a report by kind and writes the CR status."""

    def __init__(self, status: StatusWriter, rules: Iterable[tuple[apis.SednaKind, ReportRule]] | None = None):
        """`rules`: the report rule each reconciled kind declares (gm/kinds, the default);
        Datasets and FL jobs (whose reports also write a Model) have their own handlers here."""
        self._status = status
        # Keyed by registry entries, so a handler can only exist for a real kind.
        table: list[tuple[apis.SednaKind, Apply]] = [
            (apis.DATASET, self._dataset),
            (apis.FEDERATED_LEARNING, self._federated_learning),
        ]
        table += [(api, self._by_rule(api, rule)) for api, rule in (report_rules() if rules is None else rules)
                  if api.kind not in (apis.DATASET.kind, apis.FEDERATED_LEARNING.kind)]
        self._handlers: dict[str, Apply] = {api.kind: handler for api, handler in table}

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self._handlers)

    def _handler(self, kind: str) -> Apply:
        """The handler for `kind`; ReportRefused saying why when there is none."""
        try:
            api = apis.require(kind)
        except apis.UnknownKind as exc:
            raise ReportRefused(f"the GM takes no status reports for kind {kind!r}: {exc}") from None
        handler = self._handlers.get(api.kind)
        if handler is None:
            raise ReportRefused(f"the GM takes no status reports for kind {kind!r}")
        return handler

    async def handle_status(self, node: str, message: Message, *, epoch: str = "") -> None:
        handler = self._handler(message.kind)
        body = message.body or {}
        stamp = ReportStamp(node, epoch, message.seq, report_time(message.kind, body))
        await handler(message.namespace, message.name, body, stamp)
        event(log, "status handled", level=logging.DEBUG, node=node, kind=message.kind,
              key=f"{message.namespace}/{message.name}", seq=message.seq)

    async def _dataset(self, namespace: str, name: str, body: Mapping[str, Any], stamp: ReportStamp) -> None:
        count = parse_dataset_report(body)
        now = now_rfc3339()
        await self._write(DATASETS, apis.DATASET.kind, namespace, name, stamp,
                          lambda s: set_sample_count(s, count, now=now))

    def _by_rule(self, api: apis.SednaKind, rule: ReportRule) -> Apply:
        gvr = sedna_gvr(api)

        async def apply(namespace: str, name: str, body: Mapping[str, Any], stamp: ReportStamp) -> None:
            mutate = rule(body, now_rfc3339())
            if mutate is not None:
                await self._write(gvr, api.kind, namespace, name, stamp, mutate)
        return apply

    async def _federated_learning(self, namespace: str, name: str, body: Mapping[str, Any],
                                  stamp: ReportStamp) -> None:
        report = parse_fl_report(body)
        now = now_rfc3339()
        result = await self._write(FL, apis.FEDERATED_LEARNING.kind, namespace, name, stamp,
                                   lambda s: advance_round(s, report, now=now))
        if report.metrics is None:
            return
        model = deep_get(result.object, "spec", "aggregationWorker", "model", "name")
        if not isinstance(model, str) or not model:
            event(log, "FL report has model metrics but the job names no aggregation model",
                  level=logging.WARNING, key=f"{namespace}/{name}")
            return
        try:  # the Model records its own order: a resent report may still owe it the metrics
            await self._write(MODELS, apis.MODEL.kind, namespace, model, stamp,
                              lambda s: set_metrics(s, report.metrics, now=now))
        except ReportRefused as exc:  # the job's round is applied; the Model is just missing
            event(log, "FL model metrics dropped", level=logging.WARNING,
                  key=f"{namespace}/{name}", model=model, reason=str(exc))

    async def _write(self, gvr: GVR, kind: str, namespace: str, name: str, stamp: ReportStamp,
                     mutate: Callable[[dict[str, Any]], dict[str, Any]]) -> StatusResult:
        """StatusWriter.update, applied only if the report is newer than the status records
        for its node, with API errors mapped to the hub's refuse/defer."""
        what = f"{kind} {namespace}/{name}"
        guard = Guard(stamp, mutate)
        try:
            result = await self._status.update(gvr, namespace, name, guard)
        except NotFound:
            raise ReportRefused(f"{what} does not exist") from None
        except Invalid as exc:
            raise ReportInvalid(f"the API server rejected the status of {what}: {exc.message}") from None
        except Conflict as exc:
            raise ReportDeferred(f"{what}: status kept changing under us: {exc.message}") from None
        except ApiError as exc:
            raise ReportDeferred(f"writing the status of {what}: {exc}") from None
        if guard.stale:
            event(log, "report not newer than the status, skipped", level=logging.DEBUG, node=stamp.node,
                  kind=kind, key=f"{namespace}/{name}", seq=stamp.seq, report_time=stamp.time)
        return result
