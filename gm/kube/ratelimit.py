"""Rate limiters: a token bucket, and the per-item retry limiters of a controller.

`TokenBucket` is used two ways: the API client awaits it before every request (client
QPS/burst), and `BucketRateLimiter` turns it into a delay for re-queued keys. The
controller default (`default_controller_rate_limiter`) is the maximum of a per-key
exponential backoff (5 ms doubling to 5 min) and an overall 10 qps / burst 100 bucket, so a
single failing key backs off on its own while a storm of failures cannot flood the API.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from typing import Protocol


class TokenBucket:
    """`burst` tokens refilled at `qps` per second; `qps <= 0` means unlimited.

    `reserve()` always succeeds and returns how long the caller must wait for its token
    (the bucket may go into debt), so concurrent callers are served in order.
    """

    __slots__ = ("qps", "burst", "_tokens", "_last", "_clock")

    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic):
        if burst < 1 and qps > 0:
            raise ValueError(f"burst must be >= 1, got {burst}")
        self.qps = float(qps)
        self.burst = int(burst)
        self._tokens = float(burst)  # may go negative: outstanding reservations
        self._clock = clock
        self._last = clock()

    def reserve(self) -> float:
        """Take one token; return the delay in seconds until it is valid (0 if now)."""
        if self.qps <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens > -1e-9 else -self._tokens / self.qps  # float-noise tolerant

    def refund(self) -> None:
        """Give back the token of a `reserve()` the caller decided not to use."""
        self._tokens = min(float(self.burst), self._tokens + 1.0)

    async def wait(self) -> float:
        """Wait for one token; return the time waited."""
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)
        return delay


class RateLimiter(Protocol):
    """How long a key waits before its next retry (client-go's `RateLimiter`)."""

    def when(self, item: Hashable) -> float: ...

    def forget(self, item: Hashable) -> None: ...

    def num_requeues(self, item: Hashable) -> int: ...


class ItemExponentialFailureRateLimiter:
    """Per-key backoff: `base * 2**failures`, capped at `max_delay`; `forget` resets it."""

    def __init__(self, base_delay: float = 0.005, max_delay: float = 300.0):
        if base_delay <= 0 or max_delay < base_delay:
            raise ValueError(f"need 0 < base_delay <= max_delay, got {base_delay}, {max_delay}")
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        exp = self._failures.get(item, 0)
        self._failures[item] = exp + 1
        if exp > 1023:  # 2**exp would overflow a float long before this
            return self.max_delay
        return min(self.base_delay * (2.0 ** exp), self.max_delay)

    def forget(self, item: Hashable) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        return self._failures.get(item, 0)


class BucketRateLimiter:
    """An overall limit on retries of all keys together, from a token bucket."""

    def __init__(self, bucket: TokenBucket):
        self.bucket = bucket

    def when(self, item: Hashable) -> float:
        return self.bucket.reserve()

    def forget(self, item: Hashable) -> None:
        return None

    def num_requeues(self, item: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    """The longest delay any of the limiters asks for (each one records the attempt)."""

    def __init__(self, *limiters: RateLimiter):
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self.limiters = limiters

    def when(self, item: Hashable) -> float:
        return max([lim.when(item) for lim in self.limiters])

    def forget(self, item: Hashable) -> None:
        for lim in self.limiters:
            lim.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return max(lim.num_requeues(item) for lim in self.limiters)


def default_controller_rate_limiter(*, base_delay: float = 0.005, max_delay: float = 300.0,
                                    qps: float = 10.0, burst: int = 100) -> MaxOfRateLimiter:
    """Per-key exponential backoff combined with an overall token bucket."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(base_delay, max_delay),
        BucketRateLimiter(TokenBucket(qps, burst)),
    )
