"""Upstream status reports, parsed and turned into status mutations. Pure.

A report body is upstream's content JSON (upstream-lc.md §2.7, §3.4): each parser checks it
into a small typed value, raising `ReportInvalid` with what is wrong, and each mutation
changes a status dict the way the report asks (idempotent; it may run once per write
attempt). gm/edge/status.py applies them through the status writer, in report order; the kind
modules (gm/kinds) name the rule their reports follow. Keys are matched case-insensitively
when there is no exact match, as Go's decoder does for upstream's GM.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from gm.errors import GMError
from shared import apis
from shared.objects import find_condition, set_condition

TRAINING = "Training"
DO_TRAINING = "DoTraining"
INDEX_READABLE = "IndexReadable"
INDEX_COUNTED = "Counted"
_CONDITION_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")  # as metav1.Condition
_MAX_REASON = 128
MAX_CONDITION_MESSAGE = 1024
_ROUND_MESSAGE = re.compile(r"Round (\d+) reaches at ")
_LAST_ROUND = re.compile(r" after round (\d+)$")  # a finished job's Training condition
_MAX_COUNT = 2**63 - 1
_FINISHED_TYPES = ("Complete", "Failed")

Metric = dict[str, str]


# -- what becomes of a report ----------------------------------------------------------


class ReportError(GMError):
    """Base of the errors a status handler raises to steer the hub: what becomes of a report."""


class ReportRefused(ReportError):
    """The report will never be applied (wrong node, bad content): refuse it and ack with the reason."""


class ReportInvalid(ReportRefused):
    """The report's content does not have the shape its kind requires."""


class ReportDeferred(ReportError):
    """The report could not be applied now (e.g. API server down): no ack, the LC resends."""



# -- what only reports write -----------------------------------------------------------


REPORT_ONLY_STATUS = frozenset({"lastReports", "metrics", "numberOfSamples", "updateTime"})
"""Status fields only the edge's reports write and nothing else reads: no reconciler computes
from them and no LC reads them. A new version of a CR that differs from the last only in
these (every applied report makes one) is not sent down to the nodes again and does not
make its controller reconcile. Conditions are not among them: the learning jobs' state
machines run on them, at the GM and at the edge."""


def edge_view(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object without its resourceVersion, managedFields and REPORT_ONLY_STATUS: two
    versions equal in this view differ only by what reports wrote."""
    view = dict(obj)
    meta = view.get("metadata")
    if isinstance(meta, Mapping):
        view["metadata"] = {k: v for k, v in meta.items() if k not in ("resourceVersion", "managedFields")}
    status = view.get("status")
    if isinstance(status, Mapping):
        view["status"] = {k: v for k, v in status.items() if k not in REPORT_ONLY_STATUS}
    return view


# -- parsing (pure) ---------------------------------------------------------------------


def parse_time(value: Any) -> datetime | None:
    """A report time (RFC 3339, or upstream's local `YYYY-MM-DD HH:MM:SS`); None if it is neither."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


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


@dataclass(frozen=True, slots=True)
class IndexProblem:
    """Why the LC could not count a Dataset's index (a CamelCase reason and a message)."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class DatasetReport:
    """A Dataset report: the sample count, and the index problem when the LC could not count.

    Our LC sends `{"numberOfSamples": N, "error": {"reason", "message"}}` when the index
    cannot be read, N being the last count it reported; upstream's GM decodes only
    `numberOfSamples` (Go ignores unknown fields), so the same body keeps the count there."""

    count: int
    problem: IndexProblem | None = None


def parse_dataset_status(body: Mapping[str, Any]) -> DatasetReport:
    """`numberOfSamples` and the optional `error` of a Dataset report."""
    count = parse_dataset_report(body)
    error = _optional_map(field(body, "error"), "error")
    if error is None:
        return DatasetReport(count)
    reason, message = field(error, "reason"), field(error, "message")
    if not isinstance(reason, str) or len(reason) > _MAX_REASON or not _CONDITION_REASON.match(reason):
        raise ReportInvalid(f"error.reason must be a CamelCase word of at most {_MAX_REASON} "
                            f"characters, got {reason!r:.140}")
    if not isinstance(message, str):
        raise ReportInvalid(f"error.message must be a string, got {_type_name(message)}")
    if not message.strip():
        raise ReportInvalid("error.message must not be empty: the IndexReadable condition needs a message")
    return DatasetReport(count, IndexProblem(reason, message[:MAX_CONDITION_MESSAGE]))


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
    """The round a Training condition reports (0 when it reports none): the round in progress,
    or once the job finished, the last one (`after_round`)."""
    if not condition:
        return 0
    message = str(condition.get("message") or "")
    if condition.get("reason") == DO_TRAINING:
        match = _ROUND_MESSAGE.match(message)
    else:
        match = _LAST_ROUND.search(message) if condition.get("status") == "False" else None
    return int(match.group(1)) if match else 0


def after_round(message: str, round_: int) -> str:
    """A finished FL job's message, saying its last round (what `round_of` reads back from the
    Training condition the finish turned False), so the round outlives the training."""
    return f"{message} after round {round_}" if round_ else message


# -- status mutations (pure; each may run once per write attempt) -----------------------


def set_sample_count(status: dict[str, Any], count: int, *, now: str) -> dict[str, Any]:
    if status.get("numberOfSamples") != count:
        status["numberOfSamples"] = count
        status["updateTime"] = now
    return status


class DatasetStatusUpdate:
    """The status mutation of one Dataset report: the sample count (`set_sample_count`; a
    problem report carries the LC's last count, so it is the latest value as for upstream) and
    the `IndexReadable` condition: False with the LC's reason and message when the report
    carries a problem, True again once a report without one arrives (a Dataset that never
    had a problem gets no condition, so upstream LCs' reports change nothing new).

    `raised` says whether the last run put a new or different problem into the condition;
    the run that was written is the last one, so after the write it tells whether the
    report deserves a Warning Event."""

    __slots__ = ("report", "now", "raised")

    def __init__(self, report: DatasetReport, *, now: str) -> None:
        self.report = report
        self.now = now
        self.raised = False

    def __call__(self, status: dict[str, Any]) -> dict[str, Any]:
        status = set_sample_count(status, self.report.count, now=self.now)
        conditions = status.get("conditions") or []
        old = find_condition(conditions, INDEX_READABLE)
        problem = self.report.problem
        self.raised = problem is not None and (old is None or (
            old.get("status"), old.get("reason"), old.get("message")) != ("False", problem.reason, problem.message))
        if problem is not None:
            status["conditions"] = set_condition(conditions, INDEX_READABLE, "False", reason=problem.reason,
                                                 message=problem.message, now=self.now, heartbeat_key=None)
        elif old is not None:
            status["conditions"] = set_condition(conditions, INDEX_READABLE, "True", reason=INDEX_COUNTED,
                                                 message="the index file was read and its samples counted",
                                                 now=self.now, heartbeat_key=None)
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


def metrics_report(body: Mapping[str, Any], now: str) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """The report rule of a kind whose workers report statistics (JI, FE, ...): the
    report's `ownerInfo` without its times becomes `status.metrics`, sorted by key."""
    metrics = parse_ji_report(body)
    if metrics is None:
        return None
    return lambda status: set_metrics(status, metrics)
