"""KeyQueue delayed adds under both event loops the dev cluster runs on (asyncio and uvloop).

Under uvloop a `call_at` due in less than about half a millisecond returns a plain
`Handle` without `when()`; the queue must keep its own deadlines so that re-adding a key
with such a delay pending never fails.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import pytest
import uvloop

from devcluster.controllers.workqueue import KeyQueue

LOOPS = [pytest.param(asyncio.new_event_loop, id="asyncio"), pytest.param(uvloop.new_event_loop, id="uvloop")]
# from "now" through sub-millisecond (uvloop's plain-Handle range) to seconds
DELAYS = [0.0, 0.00001, 0.0001, 0.0004, 0.0009, 0.002, 0.05, 0.3, 1.2]


def run(loop_factory: Callable[[], asyncio.AbstractEventLoop], coro_fn) -> None:
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(asyncio.wait_for(coro_fn(), 20))


async def drain(q: KeyQueue, n: int) -> list:
    out = []
    for _ in range(n):
        key = await q.get()
        q.done(key)
        out.append(key)
    return out


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_every_delay_fires_once_and_in_deadline_order(loop_factory):
    async def scenario():
        q = KeyQueue()
        loop = asyncio.get_running_loop()
        added = loop.time()
        for i, delay in enumerate(DELAYS):
            q.add_after(("k", i), delay)
        assert [q.pending_at(("k", i)) is None for i in range(len(DELAYS))] == [d == 0 for d in DELAYS]
        got = await drain(q, len(DELAYS))
        elapsed = loop.time() - added
        assert sorted(got) == [("k", i) for i in range(len(DELAYS))]  # each fired exactly once
        # in deadline order wherever deadlines are a millisecond apart (uvloop's timer grain;
        # below it, the order of a plain Handle and a 0 ms timer is the loop's business)
        grains = [math.ceil(DELAYS[i] * 1000) for _, i in got]
        assert grains == sorted(grains)
        assert elapsed >= DELAYS[-1] - 0.01  # the longest one really waited (uvloop rounds to ms)
        assert len(q) == 0 and all(q.pending_at(("k", i)) is None for i in range(len(DELAYS)))

    run(loop_factory, scenario)


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_re_adding_with_a_pending_sub_millisecond_delay_keeps_the_earliest(loop_factory):
    async def scenario():
        q = KeyQueue()
        for delay in DELAYS[1:]:  # every later add is due later than the first: first wins
            q.add_after("a", delay)
        first = q.pending_at("a")
        assert first is not None
        q.add_after("b", 1.2)
        q.add_after("b", 0.0001)  # an earlier deadline replaces the later timer
        assert q.pending_at("b") <= asyncio.get_running_loop().time() + 0.0001
        assert sorted(await drain(q, 2)) == ["a", "b"]
        assert q.pending_at("a") is None and q.pending_at("b") is None
        # each key fired once: nothing else becomes due
        q.add("sentinel")
        assert await drain(q, 1) == ["sentinel"]

    run(loop_factory, scenario)


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_retry_backoff_starts_below_a_millisecond_and_close_cancels(loop_factory):
    async def scenario():
        q = KeyQueue(base_delay=0.0001, max_delay=0.5)
        for _ in range(4):  # 0.1 ms, 0.2 ms, 0.4 ms, 0.8 ms: all re-adds while one is pending
            q.retry("k")
        assert await drain(q, 1) == ["k"]
        q.add_after("late", 3.0)
        assert q.pending_at("late") is not None
        q.close()
        assert q.pending_at("late") is None
        q.add_after("late", 0.0001)  # closed: refused
        assert q.pending_at("late") is None and len(q) == 0

    run(loop_factory, scenario)
