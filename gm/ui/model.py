"""The status page's model: what it shows, built from what the GM holds (pure).

The caller reads its sources (the hub's sessions, the informer caches, the history, the
warning log) and passes them here; the renderer (gm/ui/render.py) turns the result into HTML.
The model decides what is shown and in which order; it neither escapes nor formats.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gm.ui.history import History, Series
from gm.ui.jobs import JobSummary, summarize
from gm.ui.warnings import WarningEntry

MAX_JOB_ROWS = 2000  # jobs listed; the counts by kind still cover every job


@dataclass(frozen=True, slots=True)
class NodeRow:
    """An LC as the hub knows it. The LC's outbox depth is not among it: the LC does not
    report it (its own /metrics has it); `pending` and `acked_seq` are the GM's side."""

    node: str
    connected: bool
    mode: str  # native or upstream ("" when disconnected)
    since: float | None  # unix time the session opened (None: not known)
    last_frame: float | None  # unix time of the last frame from the node
    pending: int | None  # object versions queued for the node (None: not connected)
    acked_seq: int | None  # the highest report seq acked in this session (None: not known)


@dataclass(frozen=True, slots=True)
class JobView:
    summary: JobSummary
    series: list[Series]


@dataclass(frozen=True, slots=True)
class Page:
    now: float  # unix time it was built
    nodes: list[NodeRow]
    jobs: list[JobView]
    jobs_total: int  # every job in the caches, listed or not
    by_kind: dict[str, int]  # kind -> its jobs in the caches
    warnings: list[WarningEntry]  # newest first


def build_page(*, now: float, nodes: Iterable[NodeRow], jobs: Iterable[tuple[str, Mapping[str, Any]]],
               history: History, warnings: Iterable[WarningEntry]) -> Page:
    """`jobs`: (kind, cached object) of every reconciled CR."""
    summaries = sorted((summarize(kind, obj) for kind, obj in jobs), key=lambda s: s.key)
    listed = [JobView(s, history.series(s.key)) for s in summaries[:MAX_JOB_ROWS]]
    return Page(now=now, nodes=sorted(nodes, key=lambda n: (not n.connected, n.node)), jobs=listed,
                jobs_total=len(summaries), by_kind=dict(sorted(Counter(s.kind for s in summaries).items())),
                warnings=list(warnings))
