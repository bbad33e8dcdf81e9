"""The trigger language of IL/LL specs (upstream-lc.md section 4.7), and the deploy trigger's
stats from an eval's models. Pure: a malformed metric makes a condition false, a malformed
trigger is a LearningError naming the field.

A metric names a number, or a list of numbers (the eval reports one value per class): `name`
compares every element and holds when all of them do (an empty list never holds), `name[i]`
compares element i alone. Upstream reads a list named without an index as 0 (its bug B-22),
so its own incremental-learning example, `precision_delta > 0.1`, never deploys. Every
evaluation comes with the values that decided it, for the report and the log."""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from datetime import time as clock
from typing import Any

from lc.errors import LearningError
from shared.text import clip

MIN_CHECK_PERIOD = 1.0
_EQ_EPSILON = 1e-6
_OPERATORS: dict[str, Callable[[float, float, bool], bool]] = {}
for _names, _test in (
    (("gt", ">"), lambda v, t, eq: not eq and v > t),
    (("ge", ">="), lambda v, t, eq: eq or v >= t),
    (("eq", "=", "=="), lambda v, t, eq: eq),
    (("ne", "!="), lambda v, t, eq: not eq),
    (("le", "<="), lambda v, t, eq: eq or v <= t),
    (("lt", "<"), lambda v, t, eq: not eq and v < t),
):
    for _name in _names:
        _OPERATORS[_name] = _test
_INDEXED = re.compile(r"^(?P<name>[^\[]*)\[(?P<index>[^\]]*)\]$")
_HHMM = re.compile(r"^(\d{1,2}):(\d{2})$")
END_OF_DAY = clock(23, 59, 59)  # `24:00`: after the last whole minute a timer compares


def number(value: Any) -> float | None:
    """A metric or threshold as a float; None for anything that is not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            parsed = float(value.strip())
            return parsed if math.isfinite(parsed) else None
    return None


def metric_values(stats: dict[str, Any], metric: str) -> list[float] | None:
    """The numbers a condition compares: `[stats[metric]]` for a number, every element for a
    list (`[]` for an empty one), `[element i]` for `name[i]`; None when absent, out of
    range or not numbers."""
    found = _INDEXED.match(metric)
    if found is None:
        value = stats.get(metric.strip())
        if isinstance(value, list):
            numbers = [number(v) for v in value]
            return None if any(n is None for n in numbers) else [n for n in numbers if n is not None]
        single = number(value)
        return None if single is None else [single]
    values = stats.get(found["name"].strip())
    try:
        index = int(found["index"])
    except ValueError:
        return None
    if not isinstance(values, list) or not 0 <= index < len(values):
        return None
    single = number(values[index])
    return None if single is None else [single]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a trigger (or its condition) holds, and the values that decided it."""

    holds: bool
    message: str


SHOWN_VALUES = 16  # elements of a list metric quoted in a message; the rest are counted


def _shown(value: float) -> str:
    return f"{value:.4g}"


def _listed(values: list[float]) -> str:
    shown = ", ".join(_shown(v) for v in values[:SHOWN_VALUES])
    more = len(values) - SHOWN_VALUES
    return f"[{shown}{f', ... ({more} more)' if more > 0 else ''}]"


@dataclass(frozen=True, slots=True)
class Condition:
    """`metric operator threshold` over a stats map."""

    operator: str
    threshold: float
    metric: str

    def holds(self, stats: dict[str, Any]) -> bool:
        return self.evaluate(stats).holds

    def compare(self, value: float) -> bool:
        return _OPERATORS[self.operator](value, self.threshold,
                                         abs(value - self.threshold) < _EQ_EPSILON)

    def evaluate(self, stats: dict[str, Any]) -> Verdict:
        """Whether the condition holds, saying which values decided it."""
        text = f"{self.metric.strip()} {self.operator} {_shown(self.threshold)}"
        values = metric_values(stats, self.metric)
        if values is None:
            known = clip(", ".join(sorted(str(k) for k in stats)) or "none")
            return Verdict(False, f"{text} is false: the metrics have no number at "
                                  f"{self.metric.strip()} (they have: {known})")
        listed = _INDEXED.match(self.metric) is None and isinstance(stats.get(self.metric.strip()), list)
        if not listed:
            holds = self.compare(values[0])
            return Verdict(holds, f"{text} is {str(holds).lower()}: the value is "
                                  f"{_shown(values[0])}")
        if not values:
            return Verdict(False, f"{text} is false: the list is empty")
        failed = next((i for i, v in enumerate(values) if not self.compare(v)), None)
        if failed is None:
            return Verdict(True, f"{text} is true for every element of {_listed(values)}")
        return Verdict(False, f"{text} is false: element {failed} is {_shown(values[failed])} "
                              f"in {_listed(values)}")


@dataclass(frozen=True, slots=True)
class Timer:
    """An inclusive daily window of wall-clock minutes; wraps midnight when start > end."""

    start: clock
    end: clock

    def contains(self, now: datetime) -> bool:
        minute = now.time().replace(second=0, microsecond=0)
        if self.start <= self.end:
            return self.start <= minute <= self.end
        return minute >= self.start or minute <= self.end


@dataclass(frozen=True, slots=True)
class Trigger:
    """A CR trigger: fires when the condition holds and, if set, the clock is in the timer."""

    condition: Condition | None
    timer: Timer | None = None
    check_period: float | None = None

    def fires(self, stats: dict[str, Any], now: datetime) -> bool:
        return self.decide(stats, now).holds

    def decide(self, stats: dict[str, Any], now: datetime) -> Verdict:
        """Whether the trigger fires now, with the time or the values that decided it."""
        if self.timer is not None and not self.timer.contains(now):
            return Verdict(False, f"the time {now:%H:%M} is outside the timer's "
                                  f"{self.timer.start:%H:%M}-{self.timer.end:%H:%M}")
        if self.condition is None:
            return Verdict(False, "the trigger has no condition")
        return self.condition.evaluate(stats)


def _clock(value: Any, where: str) -> clock:
    """`HH:MM`; `24:00` is the end of the day (upstream compares the strings, so the shipped
    lifelong-learning example's `end: 24:00` means until midnight): later than every minute,
    so as an end it holds all evening and as a start never."""
    found = _HHMM.match(value) if isinstance(value, str) else None
    if found is not None and (int(found[1]), int(found[2])) == (24, 0):
        return END_OF_DAY
    if found is None or int(found[1]) > 23 or int(found[2]) > 59:
        raise LearningError(f"{where} must be a time HH:MM, not {value!r}")
    return clock(int(found[1]), int(found[2]))


def _condition(raw: Any, where: str) -> Condition:
    if not isinstance(raw, dict):
        raise LearningError(f"{where}.condition must be an object")
    operator, metric = raw.get("operator"), raw.get("metric")
    if not isinstance(operator, str) or operator.strip() not in _OPERATORS:
        raise LearningError(f"{where}.condition.operator {operator!r} is not one of "
                            f"{', '.join(_OPERATORS)}")
    if not isinstance(metric, str) or not metric.strip():
        raise LearningError(f"{where}.condition.metric must be a non-empty string")
    threshold = number(raw.get("threshold"))
    if threshold is None:
        raise LearningError(f"{where}.condition.threshold {raw.get('threshold')!r} is not a number")
    return Condition(operator.strip(), threshold, metric)


def parse_trigger(raw: Any, where: str) -> Trigger:
    """The trigger at `where` (e.g. spec.trainSpec.trigger); LearningError naming the bad field."""
    if not isinstance(raw, dict):
        raise LearningError(f"{where} must be an object")
    timer = raw.get("timer")
    if timer is not None and not isinstance(timer, dict):
        raise LearningError(f"{where}.timer must be an object")
    period = raw.get("checkPeriodSeconds")
    if period is not None and (number(period) is None or float(period) <= 0):
        raise LearningError(f"{where}.checkPeriodSeconds must be a positive number")
    return Trigger(
        condition=_condition(raw["condition"], where) if "condition" in raw else None,
        timer=None if timer is None else Timer(_clock(timer.get("start"), f"{where}.timer.start"),
                                               _clock(timer.get("end"), f"{where}.timer.end")),
        check_period=None if period is None else max(float(period), MIN_CHECK_PERIOD))


def deploy_stats(models: list[dict[str, Any]] | None) -> dict[str, list[float]]:
    """The deploy trigger's stats from an eval's `[new, old]` models: each metric of the new
    model and `<metric>_delta` = new - old element-wise (upstream-lc.md section 4.5.7)."""
    if not models or len(models) != 2:
        raise LearningError(f"eval reported {len(models or [])} models, the deploy trigger "
                            f"needs 2 (new, deployed)")
    new, old = (_metric_lists(m, which) for m, which in zip(models, ("new", "deployed"), strict=True))
    stats: dict[str, list[float]] = {}
    for name, values in new.items():
        before = old.get(name)
        if before is None or len(before) != len(values):
            raise LearningError(f"metric {name!r} of the deployed model does not match the new one")
        stats[name] = values
        stats[f"{name}_delta"] = [a - b for a, b in zip(values, before, strict=True)]
    return stats


def _metric_lists(model: Any, which: str) -> dict[str, list[float]]:
    metrics = model.get("metrics") if isinstance(model, dict) else None
    if not isinstance(metrics, dict):
        raise LearningError(f"the {which} model's metrics must be an object")
    out: dict[str, list[float]] = {}
    for name, values in metrics.items():
        numbers = [number(v) for v in values] if isinstance(values, list) else [None]
        if any(n is None for n in numbers):
            raise LearningError(f"metric {name!r} of the {which} model is not a list of numbers")
        out[name] = [n for n in numbers if n is not None]
    return out
