"""What every manager offers the dispatcher, and the shape of an outbox entry.

A manager owns one Sedna kind on this node. The dispatcher persists downstream objects
and then tells the manager (`upsert`/`delete`); for worker reports it asks the manager
which outbox entries the report becomes. Managers never touch HTTP or the link.

A manager's per-object background work (a dataset monitor, a learning job) is an
`ObjectLoop`, held with its task in the manager's `Loops`. The task runs under `supervise`:
its policy is restart with backoff, since one object's loop crashing on a bug must not end
that object's reports for the life of the LC. The manager owns and cancels the returned
supervisor task as it would the plain task.

Managers whose work opens files the objects name (dataset monitors, learning jobs) share a
`FileWork`: the caps, the daemon threads that read (lc/files.py), the S3 requests' timeouts
and retries (lc/s3/), and the `Confirmations` that hold a stored object's work until the GM
has confirmed the object still exists. A loop that holds resources of its object (S3
clients, temporary downloads) releases them in `close`, which its `Loops` awaits once the
loop's task has ended: when the object goes, and when the manager stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from lc.files import DEFAULT_LIMITS, FileLimits, Workers
from lc.report import WorkerReport
from lc.s3 import DEFAULT_SETTINGS as S3_DEFAULTS
from lc.s3 import S3Settings
from lc.store.facade import Store
from shared.apis import canonical_kind
from shared.tasks import Restart, Supervised

log = logging.getLogger("lc.managers")

MONITOR_RESTART = Restart(initial=1.0, cap=60.0, stable_after=300.0)


def supervise(factory: Callable[[], Coroutine[Any, Any, None]], *, name: str,
              policy: Restart | None = None) -> asyncio.Task[None]:
    """Run `factory()` as task `name`, restarted with backoff whenever it ends unasked;
    cancelling the returned task ends it for good."""
    return Supervised(factory, name=name, policy=policy or MONITOR_RESTART, logger=log).start()


class Outgoing(NamedTuple):
    """One report for the GM: the target object and the status body (upstream shape)."""

    kind: str
    namespace: str
    name: str
    body: Any


class Manager(Protocol):
    """One kind's local logic."""

    kind: str  # CamelCase Sedna kind, e.g. "Dataset"
    takes_reports: bool  # whether worker reports of this kind are forwarded to the GM

    async def upsert(self, namespace: str, name: str, obj: dict[str, Any]) -> None:
        """The GM sent (or the store replayed) the latest version of an object."""

    async def delete(self, namespace: str, name: str) -> None:
        """The object is gone from this node."""

    def report_entries(self, report: WorkerReport, *, namespace: str,
                       name: str) -> list[Outgoing]:
        """The outbox entries a worker report for object namespace/name turns into."""

    async def stop(self) -> None:
        """Cancel and await every task the manager owns."""


async def every(period: Callable[[], float], wake: asyncio.Event,
                step: Callable[[], Awaitable[None]]) -> None:
    """Run `step` now, then again after `period()` seconds or as soon as `wake` is set,
    until cancelled (a monitor's loop: level-triggered, a wake only brings the next step
    forward)."""
    while True:
        wake.clear()
        await step()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), period())


ObjectKey = tuple[str, str, str]  # (canonical kind, namespace, name)


class Confirmations:
    """Which objects the GM has confirmed since this LC started.

    At start the LC replays its stored objects into the managers (a restarted LC resumes
    without the GM), but an object may have been deleted while the LC was away, and its
    index may be a FIFO the user has since been told about. Work that opens the files an
    object names therefore waits here until the GM confirms the object: it sent the object
    (any upsert, which is also how an upstream GM, which sends no snapshot, confirms), or a
    snapshot was applied (whatever it left out has been deleted by then), or the LC has no
    GM at all (`everything=True`: what is stored is all there is).

    Invariant: `_confirmed` and `_waiting` only hold keys while `_everything` is False.
    """

    __slots__ = ("_everything", "_confirmed", "_waiting")

    def __init__(self, *, everything: bool = False) -> None:
        self._everything = everything
        self._confirmed: set[ObjectKey] = set()
        self._waiting: dict[ObjectKey, asyncio.Event] = {}

    @property
    def everything(self) -> bool:
        return self._everything

    def confirm(self, kind: str, namespace: str, name: str) -> None:
        """The GM sent this object."""
        if self._everything:
            return
        key = (canonical_kind(kind), namespace, name)
        self._confirmed.add(key)
        waiting = self._waiting.pop(key, None)
        if waiting is not None:
            waiting.set()

    def confirm_all(self) -> None:
        """A snapshot was applied, or there is no GM: every object the LC holds exists."""
        self._everything = True
        self._confirmed.clear()
        waiting, self._waiting = self._waiting, {}
        for event in waiting.values():
            event.set()

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """The object left this node (a new one under its name needs the GM's word again)."""
        key = (canonical_kind(kind), namespace, name)
        self._confirmed.discard(key)
        self._waiting.pop(key, None)

    def confirmed(self, kind: str, namespace: str, name: str) -> bool:
        return self._everything or (canonical_kind(kind), namespace, name) in self._confirmed

    async def wait(self, kind: str, namespace: str, name: str) -> None:
        """Return once the object is confirmed."""
        if self.confirmed(kind, namespace, name):
            return
        key = (canonical_kind(kind), namespace, name)
        await self._waiting.setdefault(key, asyncio.Event()).wait()


@dataclass(frozen=True, slots=True)
class FileWork:
    """What the managers that open user-named files share (one per LC)."""

    limits: FileLimits = DEFAULT_LIMITS
    workers: Workers = field(default_factory=Workers)
    s3: S3Settings = S3_DEFAULTS
    confirmations: Confirmations = field(default_factory=lambda: Confirmations(everything=True))


class ObjectLoop:
    """One object's loop on this node: once the GM confirmed the object, `step` now and then
    every `period()` seconds, or sooner when woken, until cancelled. A subclass's `step`
    holds `_stepping` (one step at a time: no duplicate reports) and logs through
    `_log_error`, which logs a problem when it first appears or changes."""

    kind = ""  # the object's kind, as Confirmations know it

    def __init__(self, store: Store, namespace: str, name: str, obj: dict[str, Any], *,
                 rootfs: str, work: FileWork | None = None) -> None:
        self.namespace, self.name = namespace, name
        self.obj = obj
        self._store = store
        self._rootfs = rootfs
        self._work = work or FileWork()
        self._wake = asyncio.Event()
        self._stepping = asyncio.Lock()
        self._last_error: str | None = None  # the problem last logged; None once a step went well

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def task_name(self) -> str:
        """The name of the loop's task."""
        raise NotImplementedError

    def period(self) -> float:
        """Seconds from one step to the next."""
        raise NotImplementedError

    async def step(self) -> None:
        """One pass over the object."""
        raise NotImplementedError

    def _problem(self, error: str) -> None:
        """Log a problem the loop has not logged just before (at WARNING)."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release what the loop holds for its object; its task has ended."""

    async def run(self) -> None:
        """Once the GM confirmed the object, step now and then every period (or sooner when
        woken) until cancelled."""
        await self._work.confirmations.wait(self.kind, self.namespace, self.name)
        await every(self.period, self._wake, self.step)

    def _log_error(self, error: str) -> None:
        # Logged when the error first appears or changes, not on every step.
        if error != self._last_error:
            self._problem(error)
        self._last_error = error


L = TypeVar("L", bound=ObjectLoop)
LoopKey = tuple[str, str]  # (namespace, name)


class Loops(Generic[L]):
    """A manager's per-object loops and their supervised tasks.

    Invariant: while started, every loop held has exactly one task; before `start` and after
    `stop`, none has."""

    __slots__ = ("_loops", "_tasks", "_started")

    def __init__(self, *, started: bool = True) -> None:
        self._loops: dict[LoopKey, L] = {}
        self._tasks: dict[LoopKey, asyncio.Task[None]] = {}
        self._started = started

    def __len__(self) -> int:
        return len(self._loops)

    def get(self, namespace: str, name: str) -> L | None:
        return self._loops.get((namespace, name))

    def add(self, loop: L) -> None:
        """Hold `loop` (a new object's), and run it if started."""
        key = (loop.namespace, loop.name)
        self._loops[key] = loop
        if self._started:
            self._run(key)

    def start(self) -> None:
        """Run every loop held, and every later one at once."""
        self._started = True
        for key in self._loops:
            self._run(key)

    async def remove(self, namespace: str, name: str) -> L | None:
        """Forget the object's loop and cancel its task; the loop, if there was one."""
        loop = self._loops.pop((namespace, name), None)
        task = self._tasks.pop((namespace, name), None)
        if task is not None:
            await cancel(task)
        if loop is not None:
            await loop.close()
        return loop

    async def stop(self) -> None:
        """Cancel every task, then close and forget every loop."""
        tasks, self._tasks, self._started = self._tasks, {}, False
        loops, self._loops = self._loops, {}
        for task in tasks.values():
            await cancel(task)
        for loop in loops.values():
            await loop.close()

    def _run(self, key: LoopKey) -> None:
        if key not in self._tasks:
            loop = self._loops[key]
            self._tasks[key] = supervise(loop.run, name=loop.task_name)


async def cancel(task: asyncio.Task[None]) -> None:
    """Cancel `task` and wait until it ended."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
