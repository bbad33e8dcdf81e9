"""What the status page shows of one job, read from the CR as the GM caches it (pure).

The status fields differ by kind: the multi-edge kinds and JointInferenceService carry
`active`/`failed` (`succeeded` for the ones that end) and their workers' counters in
`metrics` (a list of `{key, value}`, values as strings); FederatedLearningJob has `phase`
and its round in the `Training` condition's message; the learning jobs (IL, LL) have a stage
in their current condition, `cycle` and `deploys`. Each kind's key series (`key_values`) is
what its chart draws: JI its inference and hard-example counts, FL its round, IL and LL their
cycle and the metrics of the model their last Eval stage evaluated (the first two of its
numeric keys, read from the condition's free-form `data` as the job metrics read them), or
before any evaluation their stage (Train 1, Eval 2, Deploy 3), the multi-edge kinds
with workers' counters those counters, and the two services that report none (object search,
object tracking) their active workers. Nothing here trusts the status' shape: a field of another
type is treated as absent.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gm.jobmetrics import evaluation
from gm.reports import round_of

JI, FL = "JointInferenceService", "FederatedLearningJob"
IL, LL = "IncrementalLearningJob", "LifelongLearningJob"
LEARNING = (IL, LL)
# the kinds whose workers report counters (`metrics`); the others chart their active workers
COUNTING = (JI, "FeatureExtractionService", "ReidJob", "VideoAnalyticsJob")
STAGE_ORDER = {"Train": 1, "Eval": 2, "Deploy": 3}
WORKER_FIELDS = ("active", "succeeded", "failed")
MAX_METRICS = 12  # metrics a job shows (a worker names them: bounded here, clipped when drawn)
MAX_CHART_SERIES = 3
MAX_NUMBER_TEXT = 40  # longer metric values are not charted
# the series a kind charts, alone, when its status has them (else its counters by name)
PREFERRED = {JI: ("inferenceNumber", "hardExampleNumber")}


@dataclass(frozen=True, slots=True)
class JobSummary:
    kind: str
    namespace: str
    name: str
    phase: str  # status.phase, else the current condition's type ("" when neither)
    stage: str  # a learning job's current stage
    round: int | None  # an FL job's round (None: another kind, or no round in the status)
    cycle: int | None  # a learning job's train cycles
    workers: tuple[tuple[str, int], ...]  # (active|succeeded|failed, count) present in the status
    metrics: tuple[tuple[str, str], ...]  # the latest reported metrics, at most MAX_METRICS
    reason: str  # the current condition's reason and message
    message: str
    updated: str  # the newest condition transition or start time the status records

    @property
    def key(self) -> tuple[str, str, str]:
        return self.kind, self.namespace, self.name


def summarize(kind: str, obj: Mapping[str, Any]) -> JobSummary:
    meta = _map(obj.get("metadata"))
    status = _map(obj.get("status"))
    conditions = _conditions(status)
    current = _current(conditions)
    learning = kind in LEARNING
    return JobSummary(
        kind=kind, namespace=_text(meta.get("namespace")), name=_text(meta.get("name")),
        phase=_text(status.get("phase")) or _text(current.get("type")),
        stage=_text(current.get("stage")) if learning else "",
        round=(_fl_round(conditions) or None) if kind == FL else None,
        cycle=_count(status.get("cycle")) if learning else None,
        workers=tuple((f, n) for f in WORKER_FIELDS if (n := _count(status.get(f))) is not None),
        metrics=_metrics(status),
        reason=_text(current.get("reason")), message=_text(current.get("message")),
        updated=max([_text(c.get("lastTransitionTime")) for c in conditions] + [_text(status.get("startTime"))]))


def key_values(kind: str, obj: Mapping[str, Any]) -> dict[str, float]:
    """The values the job's chart draws now (series name -> value), at most MAX_CHART_SERIES."""
    status = _map(obj.get("status"))
    if kind == FL:  # a finished job's Training condition keeps its last round (gm/reports.py round_of)
        out = {"round": float(r)} if (r := _fl_round(_conditions(status))) else {}
    elif kind in LEARNING:  # the model just trained as evaluated, once it was; else the stage
        evaluated = evaluation(status)
        out = {"cycle": float(_count(status.get("cycle")) or 0)}
        if evaluated and evaluated[0]:
            out.update(evaluated[0][:MAX_CHART_SERIES - 1])
        else:
            out["stage"] = float(STAGE_ORDER.get(_text(_current(_conditions(status)).get("stage")), 0))
    elif kind in COUNTING:
        numbers = {k: v for k, text in _metrics(status) if (v := _number(text)) is not None}
        chosen = [k for k in PREFERRED.get(kind, ()) if k in numbers] or sorted(numbers)
        out = {k: numbers[k] for k in chosen}
    else:
        active = _count(status.get("active"))
        out = {"active": float(active)} if active is not None else {}
    return dict(list(out.items())[:MAX_CHART_SERIES])


def _fl_round(conditions: list[Mapping[str, Any]]) -> int:
    training = [c for c in conditions if c.get("type") == "Training"]
    return round_of(training[-1]) if training else 0


def _current(conditions: list[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The last condition that holds (status True), else the last one."""
    for cond in reversed(conditions):
        if cond.get("status") == "True":
            return cond
    return conditions[-1] if conditions else {}


def _conditions(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    conds = status.get("conditions")
    return [c for c in conds if isinstance(c, Mapping)] if isinstance(conds, list) else []


def _metrics(status: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    found = status.get("metrics")
    if not isinstance(found, list):
        return ()
    pairs = ((_text(m.get("key")), _text(m.get("value"))) for m in found
             if isinstance(m, Mapping) and m.get("key") is not None)
    return tuple(itertools.islice(pairs, MAX_METRICS))


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str:
    if value is None or isinstance(value, (dict, list)):
        return ""
    return str(value)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(text: str) -> float | None:
    if len(text) > MAX_NUMBER_TEXT:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
