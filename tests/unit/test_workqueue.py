"""WorkQueue semantics: coalescing, per-key exclusivity, re-add while processing, delays,
rate-limited retries and shutdown with drain. Pure asyncio, no sleeps as synchronisation."""

from __future__ import annotations

import asyncio

import pytest

from gm.kube.metrics import KubeMetrics
from gm.kube.ratelimit import ItemExponentialFailureRateLimiter
from gm.kube.workqueue import SHUTDOWN, WorkQueue
from shared.metrics import sample
from tests.conftest import eventually


async def get_now(q: WorkQueue):
    """A get that must not block: the key is already waiting."""
    return await asyncio.wait_for(q.get(), timeout=1.0)


async def test_adds_coalesce_and_keep_fifo_order():
    q = WorkQueue("t")
    for key in ["a", "b", "a", "c", "b", "a"]:
        q.add(key)
    assert len(q) == 3
    assert [await get_now(q) for _ in range(3)] == ["a", "b", "c"]
    assert len(q) == 0


async def test_key_in_flight_is_not_handed_out_again():
    q = WorkQueue("t")
    q.add("a")
    assert await get_now(q) == "a"
    q.add("a")  # re-added while processing
    q.add("b")
    assert len(q) == 1  # only b is ready; a waits for done()
    assert await get_now(q) == "b"
    second = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    assert not second.done()  # a is still processing, so nobody may take it
    q.done("a")
    assert await asyncio.wait_for(second, 1.0) == "a"


async def test_readd_while_processing_runs_exactly_once_more():
    q = WorkQueue("t")
    q.add("a")
    key = await get_now(q)
    for _ in range(5):
        q.add("a")
    q.done(key)
    assert await get_now(q) == "a"
    q.done("a")
    assert len(q) == 0
    waiter = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    assert not waiter.done()
    waiter.cancel()


async def test_done_without_readd_does_not_requeue():
    q = WorkQueue("t")
    q.add("a")
    q.done(await get_now(q))
    assert len(q) == 0


async def test_workers_never_process_one_key_concurrently():
    q = WorkQueue("t")
    active: set[str] = set()
    overlaps = 0
    runs: dict[str, int] = {}

    async def worker():
        nonlocal overlaps
        while (key := await q.get()) is not SHUTDOWN:
            if key in active:
                overlaps += 1
            active.add(key)
            await asyncio.sleep(0)  # yield so other workers run meanwhile
            runs[key] = runs.get(key, 0) + 1
            active.discard(key)
            q.done(key)

    workers = [asyncio.create_task(worker()) for _ in range(4)]
    for i in range(200):
        q.add(f"k{i % 5}")
        await asyncio.sleep(0)
    await eventually(lambda: len(q) == 0 and not active, "queue drained", within=2.0, interval=0.001)
    assert await q.shut_down_with_drain(1.0)
    await asyncio.gather(*workers)
    assert overlaps == 0
    assert set(runs) == {f"k{i}" for i in range(5)}


async def test_blocked_get_wakes_on_add():
    q = WorkQueue("t")
    waiter = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.add("x")
    assert await asyncio.wait_for(waiter, 1.0) == "x"


async def test_cancelled_getter_does_not_swallow_a_key():
    q = WorkQueue("t")
    first = asyncio.create_task(q.get())
    second = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.add("x")  # wakes `first`...
    first.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await asyncio.wait_for(second, 1.0) == "x"


async def test_add_after_orders_by_ready_time():
    q = WorkQueue("t")
    q.add_after("late", 0.06)
    q.add_after("early", 0.02)
    q.add_after("now", 0)
    assert len(q) == 1
    got = [await asyncio.wait_for(q.get(), 1.0) for _ in range(3)]
    assert got == ["now", "early", "late"]


async def test_add_after_keeps_the_earliest_pending_delay():
    q = WorkQueue("t")
    loop = asyncio.get_running_loop()
    start = loop.time()
    q.add_after("a", 5.0)
    q.add_after("a", 0.02)  # earlier: replaces the 5 s wait
    q.add_after("a", 3.0)  # later: ignored
    assert await asyncio.wait_for(q.get(), 1.0) == "a"
    assert loop.time() - start < 1.0
    q.done("a")
    assert len(q) == 0


async def test_rate_limited_readd_backs_off_and_forget_resets():
    q = WorkQueue("t", rate_limiter=ItemExponentialFailureRateLimiter(0.01, 1.0))
    loop = asyncio.get_running_loop()
    q.add_rate_limited("a")
    q.add_rate_limited("a")  # coalesces with the pending retry (earliest wins)
    assert q.num_requeues("a") == 2
    start = loop.time()
    assert await asyncio.wait_for(q.get(), 1.0) == "a"
    assert loop.time() - start >= 0.009
    q.done("a")
    q.forget("a")
    assert q.num_requeues("a") == 0


async def test_shutdown_releases_blocked_getters_and_ignores_adds():
    q = WorkQueue("t")
    waiters = [asyncio.create_task(q.get()) for _ in range(3)]
    await asyncio.sleep(0)
    q.shut_down()
    assert await asyncio.wait_for(asyncio.gather(*waiters), 1.0) == [SHUTDOWN] * 3
    q.add("x")
    q.add_after("y", 0.01)
    assert len(q) == 0
    assert await get_now(q) is SHUTDOWN


async def test_shutdown_cancels_pending_delays():
    q = WorkQueue("t")
    q.add_after("a", 0.01)
    q.shut_down()
    assert q._timers == {}
    assert await get_now(q) is SHUTDOWN


async def test_shutdown_with_drain_waits_for_items_in_flight():
    q = WorkQueue("t")
    q.add("a")
    q.add("b")
    key = await get_now(q)
    release = asyncio.Event()
    finished: list[str] = []

    async def finish():
        await release.wait()
        finished.append(key)
        q.done(key)

    task = asyncio.create_task(finish())
    drain = asyncio.create_task(q.shut_down_with_drain(2.0))
    await asyncio.sleep(0)
    assert not drain.done()
    assert await get_now(q) is SHUTDOWN  # "b" is not handed out after shutdown
    release.set()
    assert await asyncio.wait_for(drain, 2.0) is True
    assert finished == ["a"]
    await task


async def test_shutdown_with_drain_times_out_on_a_stuck_worker():
    q = WorkQueue("t")
    q.add("a")
    await get_now(q)
    assert await q.shut_down_with_drain(0.02) is False


async def test_metrics_track_depth_adds_and_retries():
    m = KubeMetrics()
    q = WorkQueue("jobs", metrics=m)
    q.add("a")
    q.add("a")
    q.add("b")
    assert sample(m.registry, "sedna_gm_workqueue_depth", name="jobs") == 2
    assert sample(m.registry, "sedna_gm_workqueue_adds_total", name="jobs") == 2
    await get_now(q)
    assert sample(m.registry, "sedna_gm_workqueue_depth", name="jobs") == 1
    q.add_rate_limited("a")
    assert sample(m.registry, "sedna_gm_workqueue_retries_total", name="jobs") == 1

