import asyncio

import pytest

from shared.tasks import FailFast, Restart, Supervised, until_first_done
from tests.conftest import eventually


async def test_first_to_end_stops_the_others():
    stopped = []

    async def forever(name):
        try:
            await asyncio.Event().wait()
        finally:
            stopped.append(name)

    async def fails():
        raise RuntimeError("reader broke")

    tasks = [asyncio.create_task(forever("writer")), asyncio.create_task(forever("pinger")),
             asyncio.create_task(fails())]
    done = await until_first_done(tasks)
    assert [str(t.exception()) for t in done] == ["reader broke"]
    assert sorted(stopped) == ["pinger", "writer"]
    assert all(t.done() for t in tasks)


async def test_cancelling_the_caller_while_a_child_fails_still_cancels():
    # the case a Python 3.11 TaskGroup gets wrong: a child failing as the parent is cancelled
    started = asyncio.Event()

    async def fails_soon():
        started.set()
        await asyncio.sleep(0)
        raise RuntimeError("boom")

    async def forever():
        await asyncio.Event().wait()

    children = [asyncio.create_task(fails_soon()), asyncio.create_task(forever())]
    parent = asyncio.create_task(until_first_done(children))
    await started.wait()
    parent.cancel()
    with pytest.raises(asyncio.CancelledError):
        await parent
    assert all(t.done() for t in children)


# ---- Supervised -----------------------------------------------------------------------------

FAST = Restart(initial=0.01, cap=0.02, stable_after=60)


class Runs:
    """A task body that records each run and does what the test scripts for it."""

    def __init__(self, *steps: str) -> None:
        self.steps = list(steps)  # per run: "raise", "return" or "block"
        self.started = 0
        self.blocked = asyncio.Event()

    async def __call__(self) -> None:
        step = self.steps[min(self.started, len(self.steps) - 1)]
        self.started += 1
        if step == "raise":
            raise RuntimeError(f"run {self.started} broke")
        if step == "block":
            self.blocked.set()
            await asyncio.Event().wait()


@pytest.mark.expect_log_errors(r"task ended, restarting")
async def test_a_task_that_raises_is_restarted_after_backoff():
    body = Runs("raise", "raise", "block")
    sup = Supervised(body, name="monitor", policy=FAST)
    sup.start()
    try:
        await eventually(lambda: body.blocked.is_set(), message="third run")
        assert (body.started, sup.restarts, sup.current.get_name()) == (3, 2, "monitor")
    finally:
        assert await sup.stop(within=1)
    assert sup.current.cancelled() and not sup.running


async def test_a_task_cancelled_from_outside_is_restarted():
    body = Runs("block")
    sup = Supervised(body, name="link", policy=FAST)
    sup.start()
    try:
        await eventually(lambda: body.blocked.is_set(), message="first run")
        first = sup.current
        first.cancel()
        await eventually(lambda: sup.current is not first and body.started == 2, message="second run")
        assert sup.restarts == 1 and not sup.current.done()
    finally:
        await sup.stop(within=1)


async def test_a_task_that_returns_is_restarted_too():
    body = Runs("return", "block")
    sup = Supervised(body, name="loop", policy=FAST)
    sup.start()
    try:
        await eventually(lambda: body.started == 2 and body.blocked.is_set(), message="second run")
    finally:
        await sup.stop(within=1)


@pytest.mark.parametrize("step, why", [
    pytest.param("raise", "raised RuntimeError('run 1 broke')", id="raises"),
    pytest.param("return", "returned", id="returns"),
])
@pytest.mark.expect_log_errors(r"task ended, failing the process")
async def test_fail_fast_reports_once_and_stops_supervising(step, why):
    fatal: list[tuple[str, str]] = []
    body = Runs(step)
    sup = Supervised(body, name="informer pods", policy=FailFast(),
                     on_fatal=lambda name, w: fatal.append((name, w)))
    supervisor = sup.start()
    await asyncio.wait_for(supervisor, 1)
    assert fatal == [("informer pods", why)]
    assert body.started == 1 and not sup.running


@pytest.mark.expect_log_errors(r"task ended, failing the process")
async def test_fail_fast_counts_a_cancel_from_outside():
    fatal: list[tuple[str, str]] = []
    body = Runs("block")
    sup = Supervised(body, name="events", policy=FailFast(), on_fatal=lambda n, w: fatal.append((n, w)))
    supervisor = sup.start()
    await eventually(lambda: body.blocked.is_set(), message="running")
    sup.current.cancel()
    await asyncio.wait_for(supervisor, 1)
    assert fatal == [("events", "cancelled")]


async def test_stop_ends_a_run_without_reporting_it():
    fatal: list[tuple[str, str]] = []
    body = Runs("block")
    sup = Supervised(body, name="events", policy=FailFast(), on_fatal=lambda n, w: fatal.append((n, w)))
    sup.start()
    await eventually(lambda: body.blocked.is_set(), message="running")
    assert await sup.stop(within=1)
    assert fatal == [] and sup.current.cancelled()


@pytest.mark.expect_log_errors(r"task did not stop in time")
async def test_stop_is_bounded_when_the_task_ignores_cancellation():
    release, entered, resisted = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def stubborn():
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            resisted.set()
            await release.wait()  # a cleanup that hangs

    sup = Supervised(stubborn, name="link", policy=FAST)
    sup.start()
    await eventually(entered.is_set, message="running")
    assert await sup.stop(within=0.05) is False
    assert resisted.is_set() and sup.running
    release.set()
    await eventually(lambda: not sup.running, message="ends once its cleanup returns")


def test_restart_backoff_doubles_to_the_cap():
    policy = Restart(initial=0.5, cap=4.0)
    assert [policy.delay(n, rand=lambda: 1.0) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert policy.delay(3, rand=lambda: 0.0) == 1.0  # jitter keeps at least half


def test_fail_fast_without_a_handler_is_refused():
    with pytest.raises(ValueError, match="on_fatal"):
        Supervised(Runs("block"), name="x", policy=FailFast())


async def test_an_end_the_owner_expects_is_not_reported():
    fatal: list[tuple[str, str]] = []
    body = Runs("block")
    sup = Supervised(body, name="controllers", policy=FailFast(), on_fatal=lambda n, w: fatal.append((n, w)))
    supervisor = sup.start()
    await eventually(lambda: body.blocked.is_set(), message="running")
    sup.expect_end()  # e.g. the owner shuts its queue down and the run returns
    sup.current.cancel()
    await asyncio.wait_for(supervisor, 1)
    assert fatal == [] and body.started == 1


@pytest.mark.expect_log_errors(r"task ended, restarting")
async def test_a_factory_that_raises_counts_as_a_failed_run():
    calls = []

    def factory():
        calls.append(1)
        if len(calls) == 1:
            raise TypeError("not a coroutine function")
        return asyncio.Event().wait()

    sup = Supervised(factory, name="misbuilt", policy=FAST)
    sup.start()
    try:
        await eventually(lambda: len(calls) == 2 and not sup.current.done(), message="second run")
        assert sup.restarts == 1
    finally:
        await sup.stop(within=1)
