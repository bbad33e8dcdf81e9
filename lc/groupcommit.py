"""Group commit: many concurrent writers, one transaction per batch, on one DB thread.

A worker must get its 200 only after its report is durably committed, and a durable
commit costs an fsync. Committing each report alone would cap throughput at one report
per fsync; here a single writer task takes everything queued while the previous batch
was being committed and commits it as one transaction, so the fsync is shared. Each
caller awaits a future that resolves only after *its* batch committed.

Invariants: exactly one batch runs at a time (one writer task, one DB thread); a future
is resolved once, after COMMIT returned or with the error that prevented it; if the
writer task dies, every waiting future fails instead of hanging.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from lc.errors import StoreBusyError, StoreClosedError, StoreError

log = logging.getLogger(__name__)

Op = Callable[[Any], Any]
Item = tuple[Op, "asyncio.Future[Any]", Callable[[Any], None] | None, bool]
"""A write operation (called on the DB thread with the connection, inside a transaction),
its caller's future, what runs once it committed, and whether it must be durable."""

BatchRunner = Callable[[list[Op], bool], list[Any]]
"""Runs ops in one transaction, durably (fsync before it returns) when told so; returns per
op its result or the exception it raised."""

BatchObserver = Callable[[int, float], None]
"""Told (batch size, seconds the commit took) after each committed batch."""


class GroupCommitter:
    """Batches submitted ops into transactions run by `run_batch` on `executor`."""

    __slots__ = ("_run_batch", "_executor", "_max_batch", "_max_waiting", "_observe", "_queue",
                 "_task", "_closed", "batches")

    def __init__(self, run_batch: BatchRunner, executor: Executor, *, max_batch: int = 512,
                 max_waiting: int = 10_000, observe: BatchObserver | None = None) -> None:
        self._run_batch = run_batch
        self._max_waiting = max_waiting  # beyond this, refuse (503) rather than queue forever
        self._executor = executor
        self._max_batch = max_batch
        self._observe = observe
        self._queue: asyncio.Queue[Item | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.batches = 0  # transactions committed so far

    def start(self) -> None:
        """Start the writer task on the running loop."""
        self._task = asyncio.create_task(self._writer(), name="lc-store-group-commit")
        self._task.add_done_callback(self._on_writer_done)

    async def submit(self, op: Op, *, on_commit: Callable[[Any], None] | None = None,
                     durable: bool = True) -> Any:
        """Queue `op`; return its result once the transaction holding it committed.

        `on_commit(result)` runs on the event loop right after the commit even if the caller
        was cancelled meanwhile: bookkeeping that must follow a committed write goes there.
        A batch of ops that all need not be `durable` commits without waiting for the disk
        (a crash may undo it, never reorder it: a later durable commit makes it durable too)."""
        if self._closed:
            raise StoreClosedError("store is closed")
        if self._queue.qsize() >= self._max_waiting:
            raise StoreBusyError(f"{self._max_waiting} writes already wait for a commit")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((op, future, on_commit, durable))
        try:
            return await future
        except BaseException:
            # The future holds the error, whose traceback holds this frame: without this the
            # cycle (and every frame of the caller's, with the report it held) would wait for
            # the garbage collector.
            del future
            raise

    async def close(self) -> None:
        """Commit everything already submitted, then stop the writer."""
        if self._closed:
            return
        self._closed = True
        self._queue.put_nowait(None)
        if self._task is not None:
            await asyncio.shield(self._task)

    async def _writer(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch, stop = await self._next_batch()
            if batch:
                await self._commit(loop, batch)
            del batch  # its ops hold what they wrote (whole reports): not while idle
            if stop:
                return

    async def _next_batch(self) -> tuple[list[Item], bool]:
        """Wait for one op, then take whatever else is already queued (up to max_batch)."""
        item = await self._queue.get()
        if item is None:
            return [], True
        batch = [item]
        while len(batch) < self._max_batch and not self._queue.empty():
            item = self._queue.get_nowait()
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    async def _commit(self, loop: asyncio.AbstractEventLoop,
                      batch: list[Item]) -> None:
        started = time.perf_counter()
        try:
            results = await loop.run_in_executor(self._executor, self._run_batch,
                                                 [item[0] for item in batch], any(item[3] for item in batch))
        except asyncio.CancelledError:
            _fail(batch, StoreClosedError("store writer cancelled during a commit"))
            raise
        except Exception as exc:  # the whole transaction failed: every caller learns why
            log.error("store commit failed", extra={"error": str(exc), "batch": len(batch)})
            _fail(batch, exc if isinstance(exc, StoreError) else StoreError(f"commit failed: {exc}"))
            return
        self.batches += 1
        if self._observe is not None:
            self._observe(len(batch), time.perf_counter() - started)
        for (_, future, on_commit, _), result in zip(batch, results, strict=True):
            if on_commit is not None and not isinstance(result, BaseException):
                on_commit(result)
            if future.done():
                continue  # the caller went away; its op is committed all the same
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    def _on_writer_done(self, task: asyncio.Task[None]) -> None:
        """Fail every queued op if the writer ended abnormally, so no caller hangs."""
        if task.cancelled() or task.exception() is not None:
            self._closed = True
            error = StoreClosedError("store writer stopped")
            while not self._queue.empty():
                item = self._queue.get_nowait()
                if item is not None and not item[1].done():
                    item[1].set_exception(error)


def _fail(batch: list[Item], error: BaseException) -> None:
    for _, future, _ in batch:
        if not future.done():
            future.set_exception(error)
