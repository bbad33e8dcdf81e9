"""The bytes of request bodies the worker API reads and processes at once, bounded.

A report body is buffered, decoded to Python objects and encoded again for the store, so a
report costs the LC a few times its body for as long as its request runs. Each body is
bounded (1 MiB), but bodies at once were not: 256 reports of 1 MB posted together took the
LC to 663 MiB, over the chart's memory limit. So a request takes a share of one
`BodyBudget` before its body is read (its declared Content-Length) and as the body arrives
(a chunked body, or one that inflates past its declared length), and gives it back when
the request ends, however it ends.

Taking what a request declares may wait its turn (first come, first served) for at most
`wait` seconds, and only while the bytes already waiting fit in the budget too: a waiting
request's connection holds what aiohttp read ahead of its body. Growing a share never
waits: requests that hold part of the budget while waiting for more could wait for each
other forever. Either refusal is `BudgetExceeded`, which the API answers 503 with
Retry-After, closing the connection without reading the body.
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType

DEFAULT_BUDGET = 16 << 20  # bytes of bodies at once (LC_BODY_BUDGET_BYTES)
DEFAULT_WAIT = 1.0  # seconds a declared length may wait for room (LC_BODY_BUDGET_WAIT)


class BudgetExceeded(Exception):
    """No room in the body budget for this request now: the client should retry later."""


class BodyBudget:
    """Bytes of request bodies held at once, at most `total`.

    Invariants: `used` is the sum of the held shares, at most `total` (a share grows only
    into free room, a waiter is granted only what fits); `_waiters` holds, oldest first,
    the requests not granted yet, and `waiting` is the sum of what they ask for, at most
    `total`."""

    __slots__ = ("total", "wait", "used", "waiting", "_waiters")

    def __init__(self, total: int, *, wait: float) -> None:
        if total < 1 or wait < 0:
            raise ValueError("a body budget needs total >= 1 and wait >= 0")
        self.total = total
        self.wait = wait  # seconds a declared length may wait for room
        self.used = 0
        self.waiting = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def share(self) -> Share:
        """An empty share for one request; use it as a context manager, so it is given
        back whatever ends the request."""
        return Share(self)

    def try_share(self, size: int) -> Share | None:
        """A share holding `size` bytes at once, or None when that would wait (or not fit):
        for a caller that has a slower path which waits (lc/lane.py leaves it to aiohttp's)."""
        if self._waiters or self.used + size > self.total:
            return None
        share = Share(self)
        self.used += size
        share.held = size
        return share

    async def _take(self, size: int) -> None:
        """Add `size` to `used`, waiting behind earlier requests for at most `wait`."""
        if not self._waiters and self.used + size <= self.total:
            self.used += size
            return
        if self.wait <= 0 or self.waiting + size > self.total:
            raise self._exceeded(size)
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = (size, granted)
        self._waiters.append(waiter)
        self.waiting += size
        try:
            async with asyncio.timeout(self.wait):
                await asyncio.shield(granted)
        except TimeoutError:
            if not granted.done():
                raise self._exceeded(size) from None
        except BaseException:  # cancelled: what was granted meanwhile goes back
            if granted.done():
                self._give(size)
            raise
        finally:
            if not granted.done():
                self._waiters.remove(waiter)
                self.waiting -= size
                granted.cancel()
                self._grant()  # the next waiter may fit where this one did not

    def _grow(self, size: int) -> None:
        """Add `size` to `used` now, or refuse."""
        if self.used + size > self.total:
            raise self._exceeded(size)
        self.used += size

    def _give(self, size: int) -> None:
        self.used -= size
        self._grant()

    def _grant(self) -> None:
        """Grant waiters, oldest first, while the oldest fits."""
        while self._waiters and self.used + self._waiters[0][0] <= self.total:
            size, granted = self._waiters.popleft()
            self.waiting -= size
            self.used += size
            granted.set_result(None)

    def _exceeded(self, size: int) -> BudgetExceeded:
        return BudgetExceeded(f"this LC holds at most {self.total} bytes of request bodies at "
                              f"once; {self.used} are taken and {self.waiting} wait, so {size} "
                              f"more do not fit")


class Share:
    """One request's part of a BodyBudget: `held` bytes, given back on exit."""

    __slots__ = ("_budget", "held")

    def __init__(self, budget: BodyBudget) -> None:
        self._budget = budget
        self.held = 0

    async def take(self, size: int) -> None:
        """Hold `size` bytes more, waiting for room as the budget allows (BudgetExceeded)."""
        if size > 0:
            await self._budget._take(size)
            self.held += size

    def grow_to(self, size: int) -> None:
        """Hold at least `size` bytes in all, without waiting (BudgetExceeded)."""
        if size > self.held:
            self._budget._grow(size - self.held)
            self.held = size

    def release(self) -> None:
        """Give back everything held (idempotent)."""
        held, self.held = self.held, 0
        if held:
            self._budget._give(held)

    def __enter__(self) -> Share:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
