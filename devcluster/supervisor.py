"""Supervision of the dev cluster's background tasks: nothing it runs may die unnoticed.

Every long-lived task of the dev cluster (each controller's workers, the process
runtime's per-pod loops) is started through one `Supervisor`. When a task ends in a way
nobody asked for (an exception, a cancellation from outside, or a long-lived loop that
simply returns), the supervisor logs it with its traceback, keeps a `Crash` in its
record, and restarts the task after an exponential backoff. A component that fails
`failure_threshold` times in a row without a stable run in between is unhealthy: the
API server's `/healthz` and `/readyz` fail and name it. Tests read `crashes` at teardown,
so a controller that died during a test fails that test instead of making it flaky.

A stop asked for through `Supervised.stop` or `Supervisor.stop` is never a crash, even
if the task raises while it is being cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("devcluster.supervisor")

Factory = Callable[[], Coroutine[Any, Any, None]]
OnExit = Callable[[BaseException | None], None]


@dataclass(frozen=True, slots=True)
class Crash:
    """One unexpected end of a supervised task."""

    task: str  # the task's name, e.g. "controller:kubelet" or "pod:default/web-0"
    component: str  # what health is reported for, e.g. "kubelet" or "process-runtime"
    error: str  # "TypeName: message" of the innermost cause
    traceback: str


class Supervised:
    """One supervised task: its current run, restart bookkeeping and a requested stop."""

    __slots__ = ("name", "component", "restart", "task", "restarts", "failures", "last_error",
                 "_factory", "_on_exit", "_owner", "_stopping", "_started", "_timer")

    def __init__(self, owner: Supervisor, name: str, factory: Factory, *, component: str, restart: bool,
                 on_exit: OnExit | None) -> None:
        self.name = name
        self.component = component
        self.restart = restart  # long-lived: every end is unexpected and restarted
        self.task: asyncio.Task | None = None  # the current run; replaced on each restart
        self.restarts = 0
        self.failures = 0  # consecutive unexpected ends without a stable run in between
        self.last_error = ""
        self._factory = factory
        self._on_exit = on_exit
        self._owner = owner
        self._stopping = False  # set before any cancel we ask for: its outcome is not a crash
        self._started = 0.0
        self._timer: asyncio.TimerHandle | None = None  # the pending restart, if backing off

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stable(self, now: float) -> bool:
        """Running for at least the owner's `stable_after` seconds since the last (re)start."""
        return self.task is not None and not self.task.done() and now - self._started >= self._owner.stable_after

    def cancel(self) -> None:
        """Ask the task to stop (no restart, not a crash); `stop` also waits for it."""
        self._stopping = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.task is not None:
            self.task.cancel()

    async def stop(self, *, within: float = 10.0) -> None:
        """Cancel the task and wait for it to end (at most `within` seconds)."""
        self.cancel()
        task = self.task
        if task is not None and not task.done():
            await asyncio.wait([task], timeout=within)
        self._owner._forget(self)

    def _launch(self) -> None:
        self._timer = None
        if self._stopping:
            return
        loop = asyncio.get_running_loop()
        self._started = loop.time()
        self.task = loop.create_task(self._factory(), name=self.name)
        self.task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task) -> None:
        if task is not self.task:
            return
        error = _outcome(task, long_lived=self.restart)
        if self._stopping:
            self._finish(None)
            return
        if error is None:
            self._owner._succeeded(self)
            self._finish(None)
            return
        self._owner._crashed(self, error)
        if self.restart:
            self._schedule_restart()
        else:
            self._finish(error)

    def _finish(self, error: BaseException | None) -> None:
        """The task is over for good: drop it and tell its owner."""
        self._owner._forget(self)
        if self._on_exit is not None:
            try:
                self._on_exit(error)
            except Exception as hook_error:  # the exit hook is ours: a bug in it is a crash too
                self._owner._crashed(self, hook_error)

    def _schedule_restart(self) -> None:
        delay = self._owner.backoff(self.failures)
        self.restarts += 1
        log.info("task=%s restart=%d in=%.3fs", self.name, self.restarts, delay)
        self._timer = asyncio.get_running_loop().call_later(delay, self._launch)


class Supervisor:
    """Starts, restarts and stops the dev cluster's tasks; keeps the crash record."""

    def __init__(self, *, backoff_base: float = 0.05, backoff_max: float = 5.0, failure_threshold: int = 3,
                 stable_after: float = 10.0) -> None:
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.failure_threshold = failure_threshold
        self.stable_after = stable_after  # a run this long resets a component's failure count
        self.crashes: list[Crash] = []  # every unexpected end, in order; never cleared
        self._tasks: dict[str, Supervised] = {}  # live tasks by name (finished one-shots leave)
        self._failures: dict[str, int] = {}  # component -> consecutive failures
        self._last: dict[str, Supervised] = {}  # component -> the task that failed last

    def spawn(self, name: str, factory: Factory, *, component: str | None = None, restart: bool = True,
              on_exit: OnExit | None = None) -> Supervised:
        """Run `factory()` as a task named `name`. `restart=True` (long-lived loops): any end
        but a requested stop is a crash and the task is restarted with backoff. `restart=False`
        (one-shot work): a normal return is fine, an exception is recorded as a crash; either
        way `on_exit(error or None)` is called once."""
        if name in self._tasks:
            raise ValueError(f"task {name!r} is already supervised")
        handle = Supervised(self, name, factory, component=component or name, restart=restart, on_exit=on_exit)
        self._tasks[name] = handle
        handle._launch()
        return handle

    def get(self, name: str) -> Supervised | None:
        return self._tasks.get(name)

    def names(self) -> list[str]:
        return list(self._tasks)

    def backoff(self, failures: int) -> float:
        return min(self.backoff_max, self.backoff_base * (2 ** max(0, failures - 1)))

    def health(self) -> dict[str, str | None]:
        """Component -> None when healthy, or why it is not: failed `failure_threshold` times in
        a row and has not run stably since."""
        now = asyncio.get_running_loop().time()
        out: dict[str, str | None] = {h.component: None for h in self._tasks.values()}
        for component, failures in self._failures.items():
            last = self._last[component]
            if failures >= self.failure_threshold and not last.stable(now):
                out[component] = f"crashed {failures} times in a row, last: {last.last_error}"
            else:
                out.setdefault(component, None)
        return out

    def unhealthy(self) -> dict[str, str]:
        return {c: why for c, why in self.health().items() if why is not None}

    async def stop(self, *, within: float = 10.0) -> None:
        """Stop every task (no restarts) and wait for them."""
        handles = list(self._tasks.values())
        for h in handles:
            h.cancel()
        tasks = [h.task for h in handles if h.task is not None and not h.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=within)
        self._tasks.clear()

    # -- called by Supervised --------------------------------------------------------

    def _crashed(self, handle: Supervised, error: BaseException) -> None:
        now = asyncio.get_running_loop().time()
        if now - handle._started >= self.stable_after:
            self._failures[handle.component] = 0  # it ran stably before this failure
        failures = self._failures.get(handle.component, 0) + 1
        self._failures[handle.component] = failures
        self._last[handle.component] = handle
        handle.failures = failures
        handle.last_error = _describe(error)
        tb = "".join(traceback.format_exception(error))
        self.crashes.append(Crash(handle.name, handle.component, handle.last_error, tb))
        log.error("task=%s component=%s crashed failures=%d error=%s", handle.name, handle.component,
                  failures, handle.last_error, exc_info=error)

    def _succeeded(self, handle: Supervised) -> None:
        self._failures.pop(handle.component, None)

    def _forget(self, handle: Supervised) -> None:
        if self._tasks.get(handle.name) is handle:
            del self._tasks[handle.name]


class TaskEndedError(RuntimeError):
    """A long-lived task returned, or was cancelled by someone other than its supervisor."""


def _outcome(task: asyncio.Task, *, long_lived: bool) -> BaseException | None:
    """The error a finished run counts as, or None for a normal end."""
    if task.cancelled():
        return TaskEndedError(f"task {task.get_name()} was cancelled from outside its supervisor")
    error = task.exception()
    if error is None and long_lived:
        return TaskEndedError(f"long-lived task {task.get_name()} returned")
    return error


def _describe(error: BaseException) -> str:
    """`TypeName: message` of the innermost cause (exception groups of one are unwrapped)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"
