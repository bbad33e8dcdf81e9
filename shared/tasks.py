"""Owning long-lived tasks: groups that end together, and supervised tasks with a policy.

A session (GM hub, LC link) is over when any of its loops ends, normally or by raising;
`until_first_done` then cancels and awaits the others. Plain tasks and `asyncio.wait`
rather than a TaskGroup: on Python 3.11 a TaskGroup whose child fails can swallow a
cancellation of the parent arriving at the same moment, and a shutdown must always end
every session.

A long-lived task that must outlive any one failure (an informer, the event writer, a
dataset monitor, the LC's link) runs under a `Supervised`, whose policy is written where
the task is started: `Restart` runs it again after a jittered exponential backoff,
`FailFast` reports the end to the owner (`on_fatal`), which stops the process with a
clear log. Any end the owner did not ask for counts: an exception, a return, or a
cancellation from somewhere else, so a task can never die silently and leave its owner
half working.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from shared.logs import event

log = logging.getLogger(__name__)


async def until_first_done(tasks: Iterable[asyncio.Task]) -> set[asyncio.Task]:
    """Wait for the first task to finish, cancel and await the rest; returns the finished set.
    If the caller is cancelled, every task is cancelled and awaited before it propagates."""
    tasks = list(tasks)
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return done


@dataclass(frozen=True, slots=True)
class Restart:
    """Run the task again after `initial * 2**(n-1)` seconds (capped, jittered to [d/2, d]).

    A run that lasted `stable_after` seconds resets the count, so a task that fails once a
    day restarts quickly while one that fails at once backs off to `cap`."""

    initial: float = 0.5
    cap: float = 30.0
    stable_after: float = 60.0

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.cap:
            raise ValueError(f"need 0 < initial ({self.initial}) <= cap ({self.cap})")

    def delay(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        ceiling = min(self.initial * 2 ** min(failures - 1, 60), self.cap)
        return ceiling * (0.5 + rand() / 2)


@dataclass(frozen=True, slots=True)
class FailFast:
    """Any end of the task is fatal to its owner: `on_fatal(name, why)` is called once."""


Policy = Restart | FailFast
FatalHandler = Callable[[str, str], None]


class Supervised:
    """One named long-lived task run under a policy; `start()` once, `await stop(within)`.

    The supervisor is a task of its own (named `supervise <name>`) that starts each run as
    a task named `name` and waits for it; `current` is the run in progress. Cancelling
    the supervisor (what `stop` does) cancels the run and ends supervision; the run ending
    in any other way is handled by the policy and logged with its cause.
    """

    def __init__(self, factory: Callable[[], Coroutine[Any, Any, Any]], *, name: str,
                 policy: Policy, on_fatal: FatalHandler | None = None,
                 logger: logging.Logger = log) -> None:
        if isinstance(policy, FailFast) and on_fatal is None:
            raise ValueError(f"{name}: a fail-fast task needs an on_fatal handler")
        self.name = name
        self.policy = policy
        self.restarts = 0  # runs started after the first
        self.current: asyncio.Task[Any] | None = None
        self._factory = factory
        self._on_fatal = on_fatal
        self._log = logger
        self._task: asyncio.Task[None] | None = None
        self._ending = False  # the owner is ending the task: its end is not a failure

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> asyncio.Task[None]:
        """Start supervising; returns the supervisor task (cancel it, or `stop`, to end)."""
        if self._task is not None:
            raise RuntimeError(f"{self.name} is already supervised")
        self._task = asyncio.create_task(self._supervise(), name=f"supervise {self.name}")
        self._task.add_done_callback(self._supervisor_done)
        return self._task

    def expect_end(self) -> None:
        """The owner is ending the task by other means (e.g. shutting down its queue): when
        the current run ends, supervision ends with it, unreported."""
        self._ending = True

    async def stop(self, within: float) -> bool:
        """Cancel the task and wait at most `within` seconds; False (and logged) if it hung."""
        self._ending = True
        task = self._task
        if task is None or task.done():
            return True
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=within)
        if not done:
            event(self._log, "task did not stop in time", level=logging.ERROR, task=self.name,
                  within=within)
        return bool(done)

    async def _supervise(self) -> None:
        failures = 0
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            run = self.current = asyncio.create_task(self._run_once(), name=self.name)
            try:
                await asyncio.wait({run})
            except asyncio.CancelledError:
                run.cancel()
                await asyncio.gather(run, return_exceptions=True)  # a second cancel cuts this short
                raise
            if self._ending:
                return
            why = _ending(run)
            if isinstance(self.policy, FailFast):
                self._fatal(why)
                return
            failures = 1 if loop.time() - began >= self.policy.stable_after else failures + 1
            await self._restart_after(self.policy.delay(failures), why, run)

    async def _run_once(self) -> None:
        await self._factory()  # called inside the run, so a factory that raises is a failed run

    def _supervisor_done(self, task: asyncio.Task[None]) -> None:
        """The supervisor itself must never die silently either (it would be a bug here)."""
        if task.cancelled() or task.exception() is None:
            return
        event(self._log, "supervisor crashed", level=logging.ERROR, task=self.name,
              error=repr(task.exception()))
        if self._on_fatal is not None:
            self._on_fatal(self.name, f"supervisor raised {task.exception()!r}")

    async def _restart_after(self, delay: float, why: str, run: asyncio.Task[Any]) -> None:
        # a raise is a bug worth an error line; a return or a stray cancel is a warning
        crashed = not run.cancelled() and run.exception() is not None
        event(self._log, "task ended, restarting", level=logging.ERROR if crashed else logging.WARNING,
              task=self.name, why=why, restart_in=round(delay, 3), restarts=self.restarts)
        await asyncio.sleep(delay)
        self.restarts += 1

    def _fatal(self, why: str) -> None:
        event(self._log, "task ended, failing the process", level=logging.ERROR, task=self.name,
              why=why)
        assert self._on_fatal is not None
        self._on_fatal(self.name, why)


def _ending(task: asyncio.Task[Any]) -> str:
    """How a finished run ended, for the log and the owner."""
    if task.cancelled():
        return "cancelled"
    exc = task.exception()
    return "returned" if exc is None else f"raised {exc!r}"
