"""The learning jobs of one kind on this node: one loop task per job, started once the LC
resumed every stored object, and the worker reports relayed as upstream does."""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

from lc.errors import LearningError, StoreError
from lc.managers.base import FileWork, Loops, Outgoing
from lc.managers.dataset import uid_of
from lc.managers.forward import status_body
from lc.managers.learning.kind import LearningKind
from lc.managers.learning.loop import LearningJob
from lc.managers.learning.state import JobState
from lc.report import WorkerReport
from lc.store.facade import Store
from shared.logs import event

log = logging.getLogger("lc.managers.learning")


class LearningManager:
    """Owns one LearningJob task per job of its kind on this node; relays worker reports
    (train/eval completions with their models, deploy results) as upstream does.

    Jobs tick only once `start` ran, i.e. after the LC resumed every stored object: a job
    resumed before its Models would otherwise decide on a partial view of the node. A stored
    job then waits for the GM's confirmation too (see `LearningJob.run`)."""

    takes_reports = True
    include_models = True

    def __init__(self, learning: LearningKind, store: Store, *, rootfs: str, node: str,
                 work: FileWork | None = None) -> None:
        self.kind = learning.kind
        self._learning = learning
        self._store = store
        self._rootfs = rootfs
        self._node = node
        self._work = work or FileWork()
        self._jobs: Loops[LearningJob] = Loops(started=False)

    def job(self, namespace: str, name: str) -> LearningJob | None:
        return self._jobs.get(namespace, name)

    def start(self) -> None:
        """Start the job loops (and every later job's at once)."""
        self._jobs.start()

    async def upsert(self, namespace: str, name: str, obj: dict[str, Any]) -> None:
        job = self._jobs.get(namespace, name)
        if job is not None:
            job.update(obj)
            return
        try:
            stored = await self._store.get_state(self.kind, namespace, name)
        except StoreError as exc:
            event(log, "learning job state unreadable, starting afresh", level=logging.WARNING,
                  key=f"{namespace}/{name}", error=str(exc))
            stored = None
        self._jobs.add(LearningJob(
            self._store, self._learning, namespace, name, obj,
            JobState.from_json(stored, uid_of(obj)), rootfs=self._rootfs, node=self._node,
            work=self._work))

    async def delete(self, namespace: str, name: str) -> None:
        job = await self._jobs.remove(namespace, name)
        if job is None:
            return
        try:
            await self._work.workers.run(
                functools.partial(self._learning.forget, job.obj, self._rootfs),
                stop=threading.Event(), name=f"learning-forget:{namespace}/{name}")
        except LearningError as exc:
            event(log, "learning job files not removed", level=logging.WARNING,
                  key=f"{namespace}/{name}", kind=self.kind, error=str(exc))

    def report_entries(self, report: WorkerReport, *, namespace: str,
                       name: str) -> list[Outgoing]:
        return [Outgoing(self.kind, namespace, name,
                         status_body(report, include_models=self.include_models))]

    async def stop(self) -> None:
        await self._jobs.stop()
