"""The shape every in-process controller shares: listener -> key queue -> worker(s).

Store listeners run synchronously inside a write, so `keys_for` only computes keys and
enqueues; all reads and writes happen in `sync`, on a worker task. A periodic resync
re-enqueues every key so a missed trigger heals. `freeze()` pauses the workers (keys keep
accumulating) so tests can look at intermediate states.

The workers and the resync loop run as one task, `controller:<name>`, owned by the dev
cluster's `Supervisor`: if anything ends it, the supervisor logs the crash and restarts
it with backoff, and each (re)start enqueues every key, so the restarted controller
converges whatever changed while it was down. The queue (and its delayed adds) outlives
restarts.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Hashable, Iterable
from typing import Any

from devcluster.controllers.workqueue import KeyQueue
from devcluster.machinery.errors import ApiError
from devcluster.supervisor import Supervised, Supervisor

log = logging.getLogger("devcluster.controllers")


class Controller(abc.ABC):
    """A level-triggered reconciler over the store; subclasses define keys and `sync`."""

    name = "controller"

    def __init__(self, store: Any, *, resync: float = 5.0, workers: int = 1):
        self.store = store
        self.resync = resync
        self.workers = workers
        self.queue = KeyQueue()
        self._unfrozen = asyncio.Event()
        self._unfrozen.set()
        self._unsubscribe: Any = None
        self._supervised: Supervised | None = None
        self.syncs = 0  # completed syncs, for tests and debugging

    # -- subclass hooks -------------------------------------------------------------

    @abc.abstractmethod
    def keys_for(self, event: Any) -> Iterable[Hashable]:
        """Keys to reconcile after a store change. Must not write or block."""

    @abc.abstractmethod
    def resync_keys(self) -> Iterable[Hashable]:
        """Every key this controller is responsible for."""

    @abc.abstractmethod
    async def sync(self, key: Hashable) -> float | None:
        """Converge one key; return a delay to run it again later, or None."""

    def prime(self) -> None:  # noqa: B027 - optional hook
        """Build indexes from the store before the workers start."""

    # -- lifecycle ------------------------------------------------------------------

    @property
    def task_name(self) -> str:
        return f"controller:{self.name}"

    @property
    def started(self) -> bool:
        return self._supervised is not None

    @property
    def task(self) -> asyncio.Task | None:
        """The current run of the workers (a new task after each restart)."""
        return self._supervised.task if self._supervised is not None else None

    def start(self, supervisor: Supervisor) -> Supervised:
        """Subscribe to the store and start the workers under `supervisor`."""
        self.prime()
        self._unsubscribe = self.store.add_listener(self._on_event)
        self._supervised = supervisor.spawn(self.task_name, self._run, component=self.name)
        return self._supervised

    async def stop(self) -> None:
        """Unsubscribe, stop the workers and wait for them."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.queue.close()
        if self._supervised is not None:
            await self._supervised.stop()
            self._supervised = None

    def freeze(self) -> None:
        """Pause processing; changes keep being queued."""
        self._unfrozen.clear()

    def unfreeze(self) -> None:
        """Resume processing of everything queued meanwhile."""
        self._unfrozen.set()

    @property
    def frozen(self) -> bool:
        return not self._unfrozen.is_set()

    # -- internals ------------------------------------------------------------------

    def _on_event(self, event: Any) -> None:
        try:
            for key in self.keys_for(event):
                self.queue.add(key)
        except Exception:  # a listener must never break the writer
            log.exception("controller=%s listener failed", self.name)

    async def _run(self) -> None:
        """One run of the workers; every key is enqueued first (a restart misses nothing)."""
        self.queue.release_in_flight()  # no worker of an earlier run holds a key any more
        for key in self.resync_keys():
            self.queue.add(key)
        async with asyncio.TaskGroup() as tg:
            for i in range(self.workers):
                tg.create_task(self._worker(), name=f"{self.name}:worker-{i}")
            tg.create_task(self._resync_loop(), name=f"{self.name}:resync")

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.resync)
            try:
                for key in self.resync_keys():
                    self.queue.add(key)
            except Exception:
                log.exception("controller=%s resync failed", self.name)

    async def _worker(self) -> None:
        while True:
            await self._unfrozen.wait()
            key = await self.queue.get()
            try:
                await self._unfrozen.wait()
                await self._sync_one(key)
            finally:
                self.queue.done(key)

    async def _sync_one(self, key: Hashable) -> None:
        try:
            again = await self.sync(key)
        except ApiError as err:
            delay = self.queue.retry(key)
            log.debug("controller=%s key=%s error=%r retry_in=%.3f", self.name, key, err, delay)
            return
        except Exception:
            delay = self.queue.retry(key)
            log.exception("controller=%s key=%s sync crashed; retry_in=%.3f", self.name, key, delay)
            return
        self.syncs += 1
        self.queue.forget(key)
        if again is not None:
            self.queue.add_after(key, again)
