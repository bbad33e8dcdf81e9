"""Run a reconciler: N workers over one work queue, after the caches it reads have synced.

A reconcile returns a typed outcome instead of (bool, error) pairs:
- `Done()` / None: converged; the key's backoff is forgotten;
- `Requeue(after)`: converged for now, look again later (e.g. waiting for pods to go);
- raising `TemporaryError` (or any unexpected exception): retried with per-key backoff;
- raising `PermanentError`: logged, not retried until the next change event;
- raising `OwnerGone`: the object was deleted mid-reconcile; nothing is left to do.
The outcome classes and the table from an error to what happens to the key (`retry_of`) are
gm/errors.py's.
A failure that keeps coming back is logged at warning level from the `WARN_AFTER`th retry
on, so a silent retry loop cannot hide in info lines. Every outcome is counted per controller so `/metrics` shows reconcile rate, latency and
errors.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

from gm.errors import Retry, retry_of
from gm.kube.workqueue import SHUTDOWN, WorkQueue
from shared.logs import event
from shared.metrics import SECONDS_BUCKETS

log = logging.getLogger("gm.controllers")

RESULTS = ("success", "requeue", "error", "permanent", "gone")
WARN_AFTER = 5  # consecutive retries of one key before its failure is logged as a warning


@dataclass(frozen=True, slots=True)
class Requeue:
    after: float


Reconcile = Callable[[str], Awaitable["Requeue | None"]]


class ReconcileMetrics:
    """Reconcile outcomes and latency, by controller."""

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self.total = Counter("sedna_gm_reconcile", "reconciles by controller and result",
                             ("controller", "result"), registry=registry)
        self.latency = Histogram("sedna_gm_reconcile_duration_seconds",
                                 "reconcile latency by controller", ("controller",),
                                 buckets=SECONDS_BUCKETS, registry=registry)


class ControllerRunner:
    """Owns the worker tasks of one controller."""

    def __init__(self, name: str, queue: WorkQueue, reconcile: Reconcile, *,
                 workers: int, metrics: ReconcileMetrics):
        self.name = name
        self.queue = queue
        self._reconcile = reconcile
        self._workers = workers
        self._metrics = metrics
        for result in RESULTS:
            metrics.total.labels(name, result)

    async def run(self, wait_synced: Callable[[], Awaitable[None]]) -> None:
        """Wait for the caches, then run the workers until the queue shuts down."""
        await wait_synced()
        event(log, "controller started", controller=self.name, workers=self._workers)
        async with asyncio.TaskGroup() as tg:
            for i in range(self._workers):
                tg.create_task(self._worker(), name=f"{self.name}-worker-{i}")

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            if key is SHUTDOWN:
                return
            try:
                await self._process(key)
            finally:
                self.queue.done(key)

    async def _process(self, key: Hashable) -> None:
        started = time.monotonic()
        result = "error"
        try:
            result = self._settle(key, await self._reconcile(str(key)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug or an unexpected API failure must not kill the worker
            result = self._failed(key, exc)
        finally:
            self._metrics.total.labels(self.name, result).inc()
            self._metrics.latency.labels(self.name).observe(time.monotonic() - started)

    def _failed(self, key: Hashable, exc: Exception) -> str:
        """Act on the key as `retry_of` says; returns the metrics result."""
        retry, delay = retry_of(exc)
        if retry is Retry.WAIT_FOR_CHANGE:
            self.queue.forget(key)
            event(log, "reconcile failed, waiting for a change", level=logging.WARNING,
                  controller=self.name, key=key, error=str(exc))
            return "permanent"
        if retry is Retry.GONE:
            self.queue.forget(key)
            event(log, "object gone mid-reconcile", level=logging.DEBUG, controller=self.name, key=key,
                  error=str(exc))
            return "gone"
        self._retry(key, delay)
        if retry is Retry.BACKOFF:
            event(log, "reconcile will retry", level=self._retry_level(key), controller=self.name,
                  key=key, error=str(exc), retries=self.queue.num_requeues(key))
        else:
            event(log, "reconcile crashed", level=logging.ERROR, exc_info=True, controller=self.name, key=key)
        return "error"

    def _settle(self, key: Hashable, outcome: Requeue | None) -> str:
        self.queue.forget(key)
        if isinstance(outcome, Requeue):
            self.queue.add_after(key, outcome.after)
            return "requeue"
        return "success"

    def _retry_level(self, key: Hashable) -> int:
        return logging.WARNING if self.queue.num_requeues(key) >= WARN_AFTER else logging.INFO

    def _retry(self, key: Hashable, delay: float | None) -> None:
        if delay is None:
            self.queue.add_rate_limited(key)
        else:
            self.queue.add_after(key, delay)
