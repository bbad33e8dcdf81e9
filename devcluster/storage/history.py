"""The change history ring: what a watch from an older resourceVersion replays (spec §6.6).

Bounded by a count cap and a time window. `compacted` is the highest RV no longer
retained; a watch starting below it must get 410 Expired.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from devcluster.storage.watch import WatchEvent


class History:
    def __init__(self, *, limit: int = 50_000, window: float = 300.0, start_rv: int = 0) -> None:
        self.limit = limit
        self.window = window
        self.compacted = start_rv  # every event with rv <= compacted is forgotten
        # Parallel lists from index `_start`; rvs strictly increase, so bisect finds a start point.
        self._rvs: list[int] = []
        self._events: list[WatchEvent] = []
        self._start = 0

    def __len__(self) -> int:
        return len(self._rvs) - self._start

    def append(self, ev: WatchEvent, now: float) -> None:
        self._rvs.append(ev.rv)
        self._events.append(ev)
        self._trim(now)

    def since(self, rv: int) -> Iterator[WatchEvent]:
        """Events with RV greater than `rv`, oldest first. Caller checks `too_old` first."""
        i = bisect.bisect_right(self._rvs, rv, lo=self._start)
        return iter(self._events[i:])

    def too_old(self, rv: int) -> bool:
        return rv < self.compacted

    def compact(self, rv: int) -> None:
        """Forget every event with RV <= rv."""
        i = bisect.bisect_right(self._rvs, rv, lo=self._start)
        self._drop_to(i)
        self.compacted = max(self.compacted, rv)

    def reset(self, rv: int) -> None:
        self._rvs, self._events, self._start = [], [], 0
        self.compacted = rv

    def _trim(self, now: float) -> None:
        i = self._start
        end = len(self._rvs)
        if end - i > self.limit:
            i = end - self.limit
        horizon = now - self.window
        while i < end and self._events[i].time < horizon:
            i += 1
        if i > self._start:
            self.compacted = max(self.compacted, self._rvs[i - 1])
            self._drop_to(i)

    def _drop_to(self, i: int) -> None:
        self._start = max(self._start, i)
        # Release memory in chunks: slicing on every append would be O(n) per write.
        if self._start > 4096 and self._start * 2 > len(self._rvs):
            self._rvs = self._rvs[self._start:]
            self._events = self._events[self._start:]
            self._start = 0
