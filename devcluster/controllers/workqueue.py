"""A deduplicating key queue with per-key retry backoff, for the in-process controllers.

Invariants (the same as a client-go workqueue):

- a key is handed to at most one worker at a time (`_processing`);
- adding a key that is already waiting is a no-op (`_dirty`);
- a key added while it is being processed runs once more after `done`;
- a key has at most one pending delayed add, due at `_deadlines[key]` (the earliest asked
  for). The deadline is kept here, not read back from the timer handle: under uvloop a
  `call_at` due in less than about half a millisecond returns a plain `Handle` with no
  `when()`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable


class KeyQueue:
    """FIFO of keys; `get` waits for one, `done` releases it, `add_after` delays one."""

    def __init__(self, *, base_delay: float = 0.005, max_delay: float = 2.0):
        self._queue: deque[Hashable] = deque()
        self._dirty: set[Hashable] = set()  # waiting keys: each is in `_queue` or in flight
        self._processing: set[Hashable] = set()  # keys handed to a worker, not yet done
        self._failures: dict[Hashable, int] = {}
        self._timers: dict[Hashable, asyncio.Handle] = {}  # key -> its pending delayed add
        self._deadlines: dict[Hashable, float] = {}  # key -> loop time that add is due
        self._wakeup = asyncio.Event()
        self._base = base_delay
        self._max = max_delay
        self._closed = False

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: Hashable) -> None:
        """Queue `key` unless it is already waiting; safe to call from listeners."""
        if self._closed or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._wakeup.set()

    def add_after(self, key: Hashable, delay: float) -> None:
        """Queue `key` after `delay` seconds; an earlier pending timer for it wins."""
        if delay <= 0:
            self.add(key)
            return
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        pending = self._deadlines.get(key)
        if pending is not None and pending <= when:
            return
        self._cancel_timer(key)
        self._deadlines[key] = when
        self._timers[key] = loop.call_at(when, self._fire, key)

    def pending_at(self, key: Hashable) -> float | None:
        """Loop time the delayed add of `key` is due, or None if none is pending."""
        return self._deadlines.get(key)

    def _cancel_timer(self, key: Hashable) -> None:
        timer = self._timers.pop(key, None)
        self._deadlines.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _fire(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self._deadlines.pop(key, None)
        self.add(key)

    def retry(self, key: Hashable) -> float:
        """Requeue `key` with exponential backoff; returns the delay used."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        delay = min(self._max, self._base * (2**n))
        self.add_after(key, delay)
        return delay

    def forget(self, key: Hashable) -> None:
        """Reset the backoff of `key` after a successful sync."""
        self._failures.pop(key, None)

    async def get(self) -> Hashable:
        """Wait for the next key and mark it in flight."""
        while not self._queue:
            self._wakeup.clear()
            await self._wakeup.wait()
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: Hashable) -> None:
        """Release `key`; if it was re-added meanwhile it goes back in the queue."""
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._wakeup.set()

    def release_in_flight(self) -> None:
        """Put every in-flight key back in the queue: its worker is gone (the controller's
        task ended and is being restarted), so nobody will call `done` for it."""
        for key in list(self._processing):
            self._processing.discard(key)
            self._dirty.discard(key)
            self.add(key)

    def close(self) -> None:
        """Cancel pending timers and refuse new keys."""
        self._closed = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._deadlines.clear()
