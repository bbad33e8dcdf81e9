"""Prometheus metrics without a dependency: counters, gauges and histograms with labels.

Both services export `/metrics` in the Prometheus text format (version 0.0.4). Metrics are
registered once at import or start-up (so they show with zero values before the first
event), and updating one is a dict lookup and an addition: cheap enough for hot paths.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

DEFAULT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _label_text(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _num(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class _Metric:
    kind = ""

    def __init__(self, name: str, help: str, labels: Sequence[str] = ()):
        self.name = name
        self.help = help
        self.label_names = tuple(labels)

    def _key(self, labels: dict[str, str] | None, values: tuple[str, ...]) -> tuple[str, ...]:
        if labels is not None:
            return tuple(str(labels[n]) for n in self.label_names)
        if len(values) != len(self.label_names):
            raise ValueError(f"{self.name} takes labels {self.label_names}, got {values}")
        return tuple(str(v) for v in values)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]


class Counter(_Metric):
    """A monotonically increasing count."""

    kind = "counter"

    def __init__(self, name: str, help: str, labels: Sequence[str] = ()):
        super().__init__(name, help, labels)
        self._values: dict[tuple[str, ...], float] = {} if labels else {(): 0.0}

    def inc(self, *values: str, amount: float = 1.0, labels: dict[str, str] | None = None) -> None:
        key = self._key(labels, values)
        self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, *values: str) -> float:
        return self._values.get(tuple(values), 0.0)

    def samples(self) -> Iterable[str]:
        for key, v in sorted(self._values.items()):
            yield f"{self.name}{_label_text(self.label_names, key)} {_num(v)}"


class Gauge(_Metric):
    """A value that goes up and down; may be computed at scrape time by a callback."""

    kind = "gauge"

    def __init__(self, name: str, help: str, labels: Sequence[str] = (),
                 fn: Callable[[], float] | None = None):
        super().__init__(name, help, labels)
        self._values: dict[tuple[str, ...], float] = {} if labels else {(): 0.0}
        self._fn = fn

    def set(self, value: float, *values: str, labels: dict[str, str] | None = None) -> None:
        self._values[self._key(labels, values)] = value

    def inc(self, *values: str, amount: float = 1.0) -> None:
        key = self._key(None, values)
        self._values[key] = self._values.get(key, 0.0) + amount

    def dec(self, *values: str, amount: float = 1.0) -> None:
        self.inc(*values, amount=-amount)

    def value(self, *values: str) -> float:
        if self._fn is not None and not values:
            return float(self._fn())
        return self._values.get(tuple(values), 0.0)

    def samples(self) -> Iterable[str]:
        if self._fn is not None:
            yield f"{self.name} {_num(float(self._fn()))}"
            return
        for key, v in sorted(self._values.items()):
            yield f"{self.name}{_label_text(self.label_names, key)} {_num(v)}"


class Histogram(_Metric):
    """Observations counted into cumulative buckets, with sum and count."""

    kind = "histogram"

    def __init__(self, name: str, help: str, labels: Sequence[str] = (),
                 buckets: Sequence[float] = DEFAULT_BUCKETS):
        super().__init__(name, help, labels)
        self.buckets = tuple(sorted(buckets))
        # per label set: [bucket counts..., +Inf count], sum
        self._data: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, value: float, *values: str, labels: dict[str, str] | None = None) -> None:
        key = self._key(labels, values)
        data = self._data.get(key)
        if data is None:
            data = self._data[key] = ([0] * (len(self.buckets) + 1), [0.0])
        data[0][bisect.bisect_left(self.buckets, value)] += 1
        data[1][0] += value

    def count(self, *values: str) -> int:
        data = self._data.get(tuple(values))
        return sum(data[0]) if data else 0

    def samples(self) -> Iterable[str]:
        for key, (counts, total) in sorted(self._data.items()):
            running = 0
            for bound, n in zip((*self.buckets, math.inf), counts, strict=True):
                running += n
                le = _label_text(self.label_names, key, f'le="{_num(bound)}"')
                yield f"{self.name}_bucket{le} {running}"
            labels = _label_text(self.label_names, key)
            yield f"{self.name}_sum{labels} {_num(total[0])}"
            yield f"{self.name}_count{labels} {running}"


class Registry:
    """A set of metrics rendered together on one `/metrics` page."""

    def __init__(self) -> None:
        self._metrics: dict[str, _Metric] = {}

    def _add(self, metric: _Metric) -> _Metric:
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name} registered twice")
        self._metrics[metric.name] = metric
        return metric

    def counter(self, name: str, help: str, labels: Sequence[str] = ()) -> Counter:
        return self._add(Counter(name, help, labels))  # type: ignore[return-value]

    def gauge(self, name: str, help: str, labels: Sequence[str] = (),
              fn: Callable[[], float] | None = None) -> Gauge:
        return self._add(Gauge(name, help, labels, fn))  # type: ignore[return-value]

    def histogram(self, name: str, help: str, labels: Sequence[str] = (),
                  buckets: Sequence[float] = DEFAULT_BUCKETS) -> Histogram:
        return self._add(Histogram(name, help, labels, buckets))  # type: ignore[return-value]

    def get(self, name: str) -> _Metric:
        return self._metrics[name]

    def render(self) -> str:
        lines: list[str] = []
        for metric in self._metrics.values():
            lines.extend(metric.header())
            lines.extend(metric.samples())  # type: ignore[attr-defined]
        return "\n".join(lines) + "\n"
