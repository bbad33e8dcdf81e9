"""Group commit: many concurrent writers, one transaction per batch, on one DB thread.

A worker must get its 200 only after its report is durably committed, and a durable
commit costs an fsync. Committing each report alone would cap throughput at one report
per fsync; here the DB thread takes everything queued while the previous batch was being
committed and commits it as one transaction, so the fsync is shared. Each caller awaits a
future that resolves only after *its* batch committed.

The thread takes its next batch itself, as soon as the last one committed: it does not wait
for the event loop to come round and hand it over (which, with a busy loop, left the
thread idle ~40% of the time at 16 concurrent workers). The results of a batch go back to
the loop in one callback. Plain calls (`call`: reads, opening and closing the connection)
run on the same thread, after the writes taken with them.

With a `sync` (the store passes an fsync of its write-ahead log), the wait for the disk
leaves the DB thread: a batch commits without waiting for the disk, and a second thread
makes every batch committed so far durable with one `sync()` and only then settles them,
while the DB thread already runs the next batch. A caller is answered exactly as late as
with a commit that waits for the disk itself (after the sync that covered its commit
returned), but the statements of one batch and the fsync of the one before overlap, and
one fsync covers every batch that committed while the last one ran. When nothing waits to
be committed and the sync thread holds no batch, the DB thread syncs the batch itself: there
is nothing to overlap, and waking a thread costs about what the disk does. A batch none of
whose writes must be durable is settled as soon as it committed.

Invariants: exactly one batch runs at a time (one DB thread); a future is resolved once, on
the loop, after COMMIT returned (and, for a durable batch, a sync begun after it returned)
or with the error that prevented it; batches that wait for a sync are settled in commit
order; if a thread dies, every waiting future fails instead of hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from lc.errors import StoreBusyError, StoreClosedError, StoreError

log = logging.getLogger(__name__)

Op = Callable[[Any], Any]

BatchRunner = Callable[[list[Op]], list[Any]]
"""Runs ops in one transaction; returns per op its result or the exception it raised. It
commits as its connection is set up to; `sync` is what makes commits durable beyond that."""

BatchObserver = Callable[[int, float], None]
"""Told (batch size, seconds from its start until it was committed and, if it had to be, on
disk) after each committed batch."""


class _Write(NamedTuple):
    op: Op  # called on the DB thread with the connection, inside a transaction
    future: asyncio.Future[Any]
    on_commit: Callable[[Any], None] | None  # runs on the loop once it committed
    durable: bool  # whether its batch must wait for the disk


class _Call(NamedTuple):
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: asyncio.Future[Any]


class _Committed(NamedTuple):
    writes: list[_Write]
    results: list[Any]
    started: float  # perf_counter when the batch began


_STOP = None
RIDE_WAIT = 0.01  # seconds a batch of writes that need not be durable waits for one that must


class GroupCommitter:
    """Batches submitted ops into transactions run by `run_batch` on a thread of its own."""

    __slots__ = ("_run_batch", "_sync", "_name", "_max_batch", "_max_waiting", "_observe",
                 "_jobs", "_unsynced", "_handed", "_synced", "_loop", "_threads", "_stopped",
                 "_closed", "batches")

    def __init__(self, run_batch: BatchRunner, *, sync: Callable[[], None] | None = None,
                 name: str = "lc-store", max_batch: int = 512, max_waiting: int = 10_000,
                 observe: BatchObserver | None = None) -> None:
        self._run_batch = run_batch
        self._sync = sync
        self._name = name
        self._max_waiting = max_waiting  # beyond this, refuse (503) rather than queue forever
        self._max_batch = max_batch
        self._observe = observe
        self._jobs: queue.SimpleQueue[_Write | _Call | None] = queue.SimpleQueue()
        # committed batches that wait for a sync: (writes, results, when the batch started)
        self._unsynced: queue.SimpleQueue[_Committed | None] = queue.SimpleQueue()
        # batches handed to the sync thread, and those it settled; each written by one thread
        self._handed = 0
        self._synced = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = []
        self._stopped: asyncio.Future[None] | None = None
        self._closed = False
        self.batches = 0  # transactions committed so far

    def start(self) -> None:
        """Start the DB thread; its results go to the running loop."""
        self._loop = asyncio.get_running_loop()
        self._stopped = self._loop.create_future()
        # a daemon: a loop that ends without close() must not keep the process alive; what
        # it was committing is then what a crash would leave (SQLite rolls it back or keeps it)
        self._threads = [threading.Thread(target=self._serve, name=self._name, daemon=True)]
        if self._sync is not None:
            self._threads.append(threading.Thread(target=self._sync_serve,
                                                  name=f"{self._name}-sync", daemon=True))
        for thread in self._threads:
            thread.start()

    async def submit(self, op: Op, *, on_commit: Callable[[Any], None] | None = None,
                     durable: bool = True) -> Any:
        """Queue `op`; return its result once the transaction holding it committed.

        `on_commit(result)` runs on the event loop right after the commit even if the caller
        was cancelled meanwhile: bookkeeping that must follow a committed write goes there.
        A batch of ops that all need not be `durable` commits without waiting for the disk
        (a crash may undo it, never reorder it: a later durable commit makes it durable too)."""
        if self._closed:
            raise StoreClosedError("store is closed")
        if self._jobs.qsize() >= self._max_waiting:
            raise StoreBusyError(f"{self._max_waiting} writes already wait for a commit")
        future: asyncio.Future[Any] = self._loop_now().create_future()
        self._jobs.put(_Write(op, future, on_commit, durable))
        try:
            return await future
        except BaseException:
            # The future holds the error, whose traceback holds this frame: without this the
            # cycle (and every frame of the caller's, with the report it held) would wait for
            # the garbage collector.
            del future
            raise

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` on the DB thread, outside any transaction, after the writes
        already queued; return what it returned or raise what it raised."""
        if self._closed:
            raise StoreClosedError("store is closed")
        future: asyncio.Future[Any] = self._loop_now().create_future()
        self._jobs.put(_Call(fn, args, future))
        return await future

    async def close(self) -> None:
        """Commit everything already submitted, then stop the thread."""
        if self._closed:
            if self._stopped is not None:
                await asyncio.shield(self._stopped)
            return
        self._closed = True
        if not self._threads:
            return
        self._jobs.put(_STOP)
        assert self._stopped is not None
        await asyncio.shield(self._stopped)  # set by the last thread as its last step

    def _loop_now(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise StoreClosedError("store is not open")
        return self._loop

    # ---- the DB thread ---------------------------------------------------------------

    def _serve(self) -> None:
        try:
            while True:
                writes, calls, stop = self._take()
                if writes:
                    self._commit(writes)
                del writes  # its ops hold what they wrote (whole reports): not while idle
                for job in calls:
                    self._run_call(job)
                del calls
                if stop:
                    return
        except BaseException:
            log.exception("store writer thread crashed")
            raise
        finally:
            if self._sync is not None:
                self._unsynced.put(None)  # the sync thread ends once it synced what came before
            else:
                self._to_loop(self._thread_ended)

    def _sync_serve(self) -> None:
        """Make every committed batch durable with one sync, then settle them in order."""
        try:
            while True:
                batches = [self._unsynced.get()]
                while True:
                    try:
                        batches.append(self._unsynced.get_nowait())
                    except queue.Empty:
                        break
                stop = batches[-1] is None
                waiting = [b for b in batches if b is not None]
                del batches
                if waiting:
                    self._sync_and_settle(waiting)
                    self._synced += len(waiting)
                del waiting
                if stop:
                    return
        except BaseException:
            log.exception("store sync thread crashed")
            raise
        finally:
            self._to_loop(self._thread_ended)

    def _sync_and_settle(self, waiting: list[_Committed]) -> None:
        assert self._sync is not None
        try:
            self._sync()
            error: BaseException | None = None
        except Exception as exc:
            error = exc.with_traceback(None)
        now = time.perf_counter()
        self._to_loop(self._settle_synced, waiting, error, now)

    def _take(self) -> tuple[list[_Write], list[_Call], bool]:
        """Wait for one job, then take whatever else is already queued (up to max_batch
        writes): the writes form one batch, the calls run after it. Writes none of which
        must be durable (acks' deletes) wait up to RIDE_WAIT for one that must, and ride
        its transaction instead of costing one of their own."""
        writes: list[_Write] = []
        calls: list[_Call] = []
        durable = False
        deadline = 0.0
        job = self._jobs.get()
        while True:
            if job is _STOP:
                return writes, calls, True
            if type(job) is _Write:
                writes.append(job)
                durable = durable or job.durable
                if len(writes) >= self._max_batch:
                    return writes, calls, False
            else:
                calls.append(job)
            try:
                job = self._jobs.get_nowait()
                continue
            except queue.Empty:
                if durable or calls:
                    return writes, calls, False
            if not deadline:
                deadline = time.monotonic() + RIDE_WAIT
            try:
                job = self._jobs.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                return writes, calls, False

    def _commit(self, writes: list[_Write]) -> None:
        started = time.perf_counter()
        durable = self._sync is not None and any(w.durable for w in writes)
        try:
            results: list[Any] | None = self._run_batch([w.op for w in writes])
            error: BaseException | None = None
        except Exception as exc:  # the whole transaction failed: every caller learns why
            results, error = None, exc
        if results is not None and durable:
            committed = _Committed(writes, results, started)
            if self._synced == self._handed and self._jobs.empty():
                # nothing to overlap the sync with, and nothing waits for the sync thread:
                # sync here rather than wake it (a thread wake-up costs as much as the disk)
                self._sync_and_settle([committed])
                return
            self._handed += 1
            self._unsynced.put(committed)
            return
        self._to_loop(self._settle_batch, writes, results, error, time.perf_counter() - started)

    def _run_call(self, job: _Call) -> None:
        try:
            result, error = job.fn(*job.args), None
        except Exception as exc:
            result, error = None, exc.with_traceback(None)
        self._to_loop(_settle, job.future, result, error)

    def _to_loop(self, callback: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(callback, *args)

    # ---- back on the loop ------------------------------------------------------------

    def _settle_batch(self, writes: list[_Write], results: list[Any] | None,
                      error: BaseException | None, seconds: float, *,
                      failure: BaseException | None = None) -> None:
        """Resolve a batch's futures with its results, or all with `error` (nothing
        committed); each committed write's on_commit gets its result. With `failure`, the
        writes committed (on_commit runs) but every caller gets `failure`."""
        if results is None:
            log.error("store commit failed", extra={"error": str(error), "batch": len(writes)})
            failure = error if isinstance(error, StoreError) else StoreError(f"commit failed: {error}")
            for write in writes:
                _settle(write.future, None, failure)
            return
        self.batches += 1
        if self._observe is not None:
            self._observe(len(writes), seconds)
        for write, result in zip(writes, results, strict=True):
            failed = isinstance(result, BaseException)
            if write.on_commit is not None and not failed:
                write.on_commit(result)
            if failure is not None:
                _settle(write.future, None, failure)
            else:
                _settle(write.future, None if failed else result, result if failed else None)

    def _settle_synced(self, batches: list[_Committed], error: BaseException | None,
                       synced_at: float) -> None:
        """Settle batches a sync covered; if it failed, their writes stand (they committed and
        are counted) but their callers learn that the disk may not hold them."""
        for writes, results, started in batches:
            if error is None:
                self._settle_batch(writes, results, None, synced_at - started)
                continue
            log.error("store sync failed", extra={"error": str(error), "batch": len(writes)})
            self._settle_batch(writes, results, None, synced_at - started,
                               failure=StoreError(f"commit not known to be on disk: {error}"))

    def _thread_ended(self) -> None:
        """Fail every job still queued (the thread ended abnormally, or after close)."""
        self._closed = True
        error = StoreClosedError("store writer stopped")
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not _STOP:
                _settle(job.future, None, error)
        while True:  # committed, but the sync thread that would settle them is gone
            try:
                batch = self._unsynced.get_nowait()
            except queue.Empty:
                break
            if batch is not None:
                self._settle_batch(batch.writes, batch.results, None, 0.0,
                                   failure=StoreError("store sync thread stopped"))
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return  # the caller went away; its op ran all the same
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
