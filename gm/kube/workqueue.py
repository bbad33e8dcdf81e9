"""A work queue of object keys with client-go semantics, for the GM's reconcilers.

Event handlers `add` keys (synchronously, never blocking); workers `get` a key, reconcile,
then call `done`. Invariants, kept at the fields that hold them:

- a key is waiting at most once (`_dirty`): adding a waiting key is a no-op;
- a key is handed to at most one worker at a time (`_processing`);
- a key added while it is being processed waits in `_dirty` and is queued again by `done`,
  so the change that caused the add is always seen by a later run.

Shutdown stops handing out keys: `get` returns `SHUTDOWN` at once, even with keys left.
Reconcile is level-triggered, so a dropped backlog is recomputed by the next process from
its informer caches; what must not be cut short is the work in flight, which
`shut_down_with_drain` waits for.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable
from typing import Final

from gm.kube.metrics import KubeMetrics
from gm.kube.ratelimit import RateLimiter, default_controller_rate_limiter


class _Shutdown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "SHUTDOWN"


SHUTDOWN: Final = _Shutdown()
"""What `get` returns once the queue is shut down."""


class WorkQueue:
    """Deduplicating FIFO of keys with per-key exclusivity, delays and rate-limited retries."""

    def __init__(self, name: str = "", *, rate_limiter: RateLimiter | None = None,
                 metrics: KubeMetrics | None = None):
        self.name = name
        self._queue: deque[Hashable] = deque()  # keys ready to hand out; each also in _dirty
        self._dirty: set[Hashable] = set()  # keys that need a run: queued, or re-added in flight
        self._processing: set[Hashable] = set()  # keys handed to a worker and not yet done
        self._timers: dict[Hashable, tuple[float, asyncio.TimerHandle]] = {}  # add_after waits
        self._getters: deque[asyncio.Future[None]] = deque()  # workers blocked in get()
        self._idle = asyncio.Event()  # set while nothing is processing
        self._idle.set()
        self._shutting_down = False
        self._limiter = rate_limiter if rate_limiter is not None else default_controller_rate_limiter()
        self._metrics = metrics

    def __len__(self) -> int:
        """Keys waiting to be handed out (the queue depth metric)."""
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def add(self, key: Hashable) -> None:
        """Mark `key` as needing a run; a no-op if it is already waiting."""
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if self._metrics is not None:
            self._metrics.queue_adds.labels(self.name).inc()
        if key in self._processing:
            return  # done() queues it again
        self._queue.append(key)
        self._set_depth()
        self._wake_one()

    async def get(self) -> Hashable:
        """Wait for a key and mark it processing; `SHUTDOWN` once the queue is shut down."""
        while not self._queue and not self._shutting_down:
            waiter = asyncio.get_running_loop().create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if not waiter.done():
                    self._getters.remove(waiter)
                elif self._queue:
                    self._wake_one()  # pass on a wake-up this cancelled getter consumed
                raise
        if self._shutting_down:
            return SHUTDOWN
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        self._idle.clear()
        self._set_depth()
        return key

    def done(self, key: Hashable) -> None:
        """Release `key`; if it was re-added meanwhile, queue it for one more run."""
        self._processing.discard(key)
        if not self._processing:
            self._idle.set()
        if key in self._dirty and not self._shutting_down:
            self._queue.append(key)
            self._set_depth()
            self._wake_one()

    def add_after(self, key: Hashable, delay: float) -> None:
        """Add `key` after `delay` seconds; an earlier pending delay for it wins."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        ready_at = loop.time() + delay
        pending = self._timers.get(key)
        if pending is not None:
            if pending[0] <= ready_at:
                return
            pending[1].cancel()
        self._timers[key] = (ready_at, loop.call_at(ready_at, self._timer_fired, key))

    def add_rate_limited(self, key: Hashable) -> None:
        """Re-add `key` after the rate limiter's backoff (a failed reconcile)."""
        if self._metrics is not None:
            self._metrics.queue_retries.labels(self.name).inc()
        self.add_after(key, self._limiter.when(key))

    def forget(self, key: Hashable) -> None:
        """Reset `key`'s backoff (a successful reconcile); does not remove it from the queue."""
        self._limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        return self._limiter.num_requeues(key)

    def shut_down(self) -> None:
        """Stop accepting keys; blocked and future `get` calls return `SHUTDOWN`."""
        self._shutting_down = True
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    async def shut_down_with_drain(self, grace: float | None = None) -> bool:
        """Shut down, then wait up to `grace` s until every key in flight is `done`; False on timeout."""
        self.shut_down()
        try:
            async with asyncio.timeout(grace):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    def _timer_fired(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def _wake_one(self) -> None:
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _set_depth(self) -> None:
        if self._metrics is not None:
            self._metrics.queue_depth.labels(self.name).set(len(self._queue))
