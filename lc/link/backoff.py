"""Reconnect delays for the GM link: exponential backoff with full jitter.

Upstream's LC redials every 5 s forever, and after a failed hello it redials at once in a
tight loop (upstream-lc.md B-10). Here every redial waits: the delay ceiling doubles from
`base` up to `cap` with each consecutive failure and resets once a session is
established, and the actual delay is drawn uniformly from [ceiling/2, ceiling] so a GM
restart does not make every edge node redial in the same instant while each still waits
at least half the ceiling.
"""

from __future__ import annotations

import random
from collections.abc import Callable


class Backoff:
    """Delays for consecutive failed attempts; pure apart from the injected random source."""

    __slots__ = ("base", "cap", "factor", "_failures", "_random")

    def __init__(self, *, base: float = 0.5, cap: float = 30.0, factor: float = 2.0,
                 rand: Callable[[], float] = random.random) -> None:
        if not 0 < base <= cap:
            raise ValueError(f"need 0 < base ({base}) <= cap ({cap})")
        if factor < 1:
            raise ValueError(f"factor must be >= 1, got {factor}")
        self.base = base
        self.cap = cap
        self.factor = factor
        self._failures = 0  # consecutive failures since the last reset
        self._random = rand

    @property
    def failures(self) -> int:
        return self._failures

    def ceiling(self, failures: int) -> float:
        """The largest delay after `failures` consecutive failures (>= 1)."""
        exponent = max(failures - 1, 0)
        # Stop multiplying at the cap: a long outage must not overflow the float.
        delay = self.base
        for _ in range(exponent):
            delay *= self.factor
            if delay >= self.cap:
                return self.cap
        return min(delay, self.cap)

    def next_delay(self) -> float:
        """Count one more failure and return how long to wait before the next attempt."""
        self._failures += 1
        ceiling = self.ceiling(self._failures)
        return ceiling / 2 + self._random() * ceiling / 2

    def reset(self) -> None:
        """A session was established: the next failure starts again from `base`."""
        self._failures = 0
