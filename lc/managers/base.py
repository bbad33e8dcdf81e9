"""What every manager offers the dispatcher, and the shape of an outbox entry.

A manager owns one Sedna kind on this node. The dispatcher persists downstream objects
and then tells the manager (`upsert`/`delete`); for worker reports it asks the manager
which outbox entries the report becomes. Managers never touch HTTP or the link.

A manager's per-object background work (a dataset monitor) runs under `supervise`: its
policy is restart with backoff, since one object's monitor crashing on a bug must not
end that object's reports for the life of the LC. The manager owns and cancels the
returned supervisor task as it would the plain task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, NamedTuple, Protocol

from lc.report import WorkerReport
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
