"""The recent values of each job's key series, kept in the GM's memory for the status page.

Points are sampled from the status changes the informers deliver, so a chart shows what the
caches saw, nothing the GM did not. The store is bounded three ways: at most `max_points`
points per series (the oldest go first), at most `max_series` series per job, and at most
`max_jobs` jobs (the one updated least recently goes first). A deleted job is forgotten at
once. Values are kept in `array('d')` rings, so a full job costs about
`8 * max_points * (1 + max_series)` bytes: 3.8 KB with the defaults, 19 MB for 5,000 jobs.

A sample less than `min_interval` seconds after the last point replaces that point's values,
keeping its time (a stream of status writes is one point per interval, the interval's latest
values), and a sample whose values all equal the last point's adds nothing (the informers'
periodic resync re-delivers every object unchanged).
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

MAX_POINTS = 120
MAX_SERIES = 3
MAX_JOBS = 5000
MIN_INTERVAL = 5.0  # so 120 points span 10 minutes or more

JobKey = tuple[str, str, str]  # kind, namespace, name


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a job: its name and its points, oldest first (unix seconds, value)."""

    name: str
    times: tuple[float, ...]
    values: tuple[float, ...]


class _Job:
    """A job's rings. Invariant: `times` and every array in `values` have the same length,
    at most the history's `max_points`; a series absent from a sample repeats its last value
    (or NaN before its first)."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times = array("d")
        self.values: dict[str, array] = {}


class History:
    """Bounded per-job series; `record` from informer handlers, `series` for the page."""

    def __init__(self, *, max_points: int = MAX_POINTS, max_series: int = MAX_SERIES,
                 max_jobs: int = MAX_JOBS, min_interval: float = MIN_INTERVAL) -> None:
        if max_points < 2 or max_series < 1 or max_jobs < 1:
            raise ValueError("a history needs at least 2 points, 1 series and 1 job")
        self.max_points = max_points
        self.max_series = max_series
        self.max_jobs = max_jobs
        self.min_interval = min_interval
        self._jobs: OrderedDict[JobKey, _Job] = OrderedDict()  # least recently updated first

    def __len__(self) -> int:
        return len(self._jobs)

    def record(self, key: JobKey, values: Mapping[str, float], *, now: float) -> None:
        """Add a point of `values` (series name -> value) for the job at unix time `now`."""
        if not values:
            return
        job = self._jobs.get(key)
        if job is None:
            job = self._jobs[key] = _Job()
            if len(self._jobs) > self.max_jobs:
                self._jobs.popitem(last=False)
        self._jobs.move_to_end(key)
        for name in values:
            if name not in job.values and len(job.values) < self.max_series:
                job.values[name] = array("d", [float("nan")] * len(job.times))
        row = {name: float(values[name]) if name in values else _last(ring)
               for name, ring in job.values.items()}
        if job.times and all(_same(_last(ring), row[name]) for name, ring in job.values.items()):
            return
        self._append(job, row, now)

    def _append(self, job: _Job, row: Mapping[str, float], now: float) -> None:
        if job.times and now - job.times[-1] < self.min_interval:
            for name, ring in job.values.items():
                ring[-1] = row[name]
            return
        job.times.append(now)
        for name, ring in job.values.items():
            ring.append(row[name])
        if len(job.times) > self.max_points:
            del job.times[0]
            for ring in job.values.values():
                del ring[0]

    def forget(self, key: JobKey) -> None:
        """Drop a job's points (it was deleted)."""
        self._jobs.pop(key, None)

    def series(self, key: JobKey) -> list[Series]:
        """The job's series in the order they first appeared ([] for a job with no points)."""
        job = self._jobs.get(key)
        if job is None:
            return []
        times = tuple(job.times)
        return [Series(name, times, tuple(ring)) for name, ring in job.values.items()]


def _last(ring: array) -> float:
    return ring[-1] if ring else float("nan")


def _same(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)  # NaN equals NaN here: both mean "no value yet"
