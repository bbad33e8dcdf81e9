"""Status reports from the edge become CR status: one handler per kind, all idempotent.

The hub hands every `status` report it has authorized (the object is assigned to the
reporting node) to `UpstreamStatus.handle_status`. Each handler parses the report into a
small typed value first (pure, raising `ReportInvalid` with what is wrong), then writes
through `StatusWriter.update`: the change is a mutation of the *latest* status, so what the
reconcilers wrote survives, and a mutation that changes nothing writes nothing. Every
mutation is guarded by the ordering rule of gm/reportorder.py: it applies only if the report
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
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gm.controllers.common import DATASETS, FL, JI, MODELS
from gm.hub import ReportDeferred, ReportInvalid, ReportRefused
from gm.kube.errors import ApiError, Conflict, Invalid, NotFound
from gm.kube.resources import GVR
from gm.kube.status import StatusResult, StatusWriter
from gm.reportorder import Guard, ReportStamp
from proto import Message
from shared import apis
from shared.logs import event
from shared.objects import deep_get, find_condition, now_rfc3339, set_condition

log = logging.getLogger("sedna.gm.upstream")

TRAINING = "Training"
DO_TRAINING = "DoTraining"
_ROUND_MESSAGE = re.compile(r"Round (\d+) reaches at ")
_MAX_COUNT = 2**63 - 1
_FINISHED_TYPES = ("Complete", "Failed")

Metric = dict[str, str]


# -- parsing (pure) ---------------------------------------------------------------------


def field(body: Mapping[str, Any], key: str) -> Any:
    """body[key], or the value of a key equal to it ignoring case (Go's decoder); None if absent."""
    if key in body:
        return body[key]
    folded = key.casefold()
    return next((v for k, v in body.items() if isinstance(k, str) and k.casefold() == folded), None)


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _optional_map(value: Any, where: str) -> Mapping[str, Any] | None:
    if value is None or isinstance(value, Mapping):
        return value
    raise ReportInvalid(f"{where} must be an object, got {_type_name(value)}")


def metric_value(value: Any) -> str:
    """A metric's value as upstream's `ConvertMapToMetrics` writes it: strings verbatim,
    anything else as compact JSON (maps with sorted keys)."""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()
    except TypeError as exc:
        raise ReportInvalid(f"metric value {value!r} cannot be written as JSON: {exc}") from None


def to_metrics(values: Mapping[str, Any], *, drop: tuple[str, ...] = ()) -> list[Metric]:
    """`[{"key", "value"}]` sorted by key, leaving out the keys in `drop`."""
    return [{"key": str(k), "value": metric_value(values[k])}
            for k in sorted(values, key=str) if k not in drop]


def parse_dataset_report(body: Mapping[str, Any]) -> int:
    """The sample count of a Dataset report `{"numberOfSamples": N}`."""
    count = field(body, "numberOfSamples")
    if count is None:
        raise ReportInvalid("Dataset report needs numberOfSamples")
    if isinstance(count, bool) or not isinstance(count, int):
        raise ReportInvalid(f"numberOfSamples must be an integer, got {_type_name(count)}")
    if not 0 <= count <= _MAX_COUNT:
        raise ReportInvalid(f"numberOfSamples must be between 0 and {_MAX_COUNT}, got {count}")
    return count


def _output(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return _optional_map(field(body, "output"), "output")


def parse_ji_report(body: Mapping[str, Any]) -> list[Metric] | None:
    """The metrics of a JI report: `output.ownerInfo` without its two times.

    None when the report carries no ownerInfo (nothing to apply, as upstream)."""
    output = _output(body)
    owner_info = _optional_map(field(output, "ownerInfo"), "output.ownerInfo") if output else None
    if owner_info is None:
        return None
    return to_metrics(owner_info, drop=("startTime", "updateTime"))


@dataclass(frozen=True, slots=True)
class FLReport:
    """What an FL round report changes: the round (0 = none) and the aggregated model's metrics."""

    round: int
    update_time: str
    metrics: list[Metric] | None

    @property
    def message(self) -> str:
        return f"Round {self.round} reaches at {self.update_time}"


def parse_fl_report(body: Mapping[str, Any]) -> FLReport:
    """`output.ownerInfo.{currentRound, updateTime}` and `output.models[0].metrics`."""
    output = _output(body) or {}
    owner_info = _optional_map(field(output, "ownerInfo"), "output.ownerInfo") or {}
    round_ = field(owner_info, "currentRound")
    if round_ is None:
        round_ = 0
    if isinstance(round_, bool) or not isinstance(round_, int):
        raise ReportInvalid(f"output.ownerInfo.currentRound must be an integer, got {_type_name(round_)}")
    if not 0 <= round_ <= _MAX_COUNT:
        raise ReportInvalid(f"output.ownerInfo.currentRound must be between 0 and {_MAX_COUNT}, got {round_}")
    update_time = field(owner_info, "updateTime")
    if round_ > 0 and not isinstance(update_time, str):
        raise ReportInvalid(f"output.ownerInfo.updateTime must be a string, got {_type_name(update_time)}")
    return FLReport(round_, update_time if round_ > 0 else "", _model_metrics(output))


def _model_metrics(output: Mapping[str, Any]) -> list[Metric] | None:
    models = field(output, "models")
    if models is None:
        return None
    if not isinstance(models, list):
        raise ReportInvalid(f"output.models must be a list, got {_type_name(models)}")
    if not models:
        return None
    first = _optional_map(models[0], "output.models[0]")
    metrics = _optional_map(field(first, "metrics"), "output.models[0].metrics") if first else None
    if not metrics:
        return None  # upstream updates the Model only for a non-empty map
    return to_metrics(metrics)


def report_time(kind: str, body: Mapping[str, Any]) -> str:
    """The report's own time, if it carries one: Dataset `updateTime`, else `output.ownerInfo.updateTime`."""
    if kind == apis.DATASET.kind:
        value = field(body, "updateTime")
    else:
        output = field(body, "output")
        owner_info = field(output, "ownerInfo") if isinstance(output, Mapping) else None
        value = field(owner_info, "updateTime") if isinstance(owner_info, Mapping) else None
    return value if isinstance(value, str) else ""


def round_of(condition: Mapping[str, Any] | None) -> int:
    """The round a Training condition reports (0 when it reports none)."""
    if not condition or condition.get("reason") != DO_TRAINING:
        return 0
    match = _ROUND_MESSAGE.match(str(condition.get("message") or ""))
    return int(match.group(1)) if match else 0


# -- status mutations (pure; each may run once per write attempt) -----------------------


def set_sample_count(status: dict[str, Any], count: int, *, now: str) -> dict[str, Any]:
    if status.get("numberOfSamples") != count:
        status["numberOfSamples"] = count
        status["updateTime"] = now
    return status


def set_metrics(status: dict[str, Any], metrics: list[Metric], *, now: str | None = None) -> dict[str, Any]:
    """Replace `metrics`; `updateTime` (Models) moves only when they change."""
    if status.get("metrics") != metrics:
        status["metrics"] = metrics
        if now is not None:
            status["updateTime"] = now
    return status


def advance_round(status: dict[str, Any], report: FLReport, *, now: str) -> dict[str, Any]:
    """One Training condition carrying the newest round; older rounds and finished jobs are left."""
    conditions = status.get("conditions") or []
    if any(c.get("type") in _FINISHED_TYPES and c.get("status") == "True" for c in conditions):
        return status
    if report.round <= round_of(find_condition(conditions, TRAINING)):
        return status
    status["conditions"] = set_condition(conditions, TRAINING, "True", reason=DO_TRAINING,
                                         message=report.message, now=now)
    return status


# -- the handler ------------------------------------------------------------------------


Apply = Callable[[str, str, Mapping[str, Any], ReportStamp], Awaitable[None]]


class UpstreamStatus:
    """The GM's `StatusHandler`: dispatches a report by kind and writes the CR status."""

    def __init__(self, status: StatusWriter):
        self._status = status
        # Keyed by registry entries, so a handler can only exist for a real kind.
        table: tuple[tuple[apis.SednaKind, Apply], ...] = (
            (apis.DATASET, self._dataset),
            (apis.JOINT_INFERENCE, self._joint_inference),
            (apis.FEDERATED_LEARNING, self._federated_learning),
        )
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

    async def _joint_inference(self, namespace: str, name: str, body: Mapping[str, Any],
                               stamp: ReportStamp) -> None:
        metrics = parse_ji_report(body)
        if metrics is None:
            return
        await self._write(JI, apis.JOINT_INFERENCE.kind, namespace, name, stamp,
                          lambda s: set_metrics(s, metrics))

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
