"""One learning job's loop on this node: take the Dataset's new samples, decide the stage of
the job's latest condition if this LC decides it, and commit the decision with its report
once per condition."""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from lc.errors import LCError, LearningError
from lc.managers.base import FileWork, ObjectLoop
from lc.managers.dataset import uid_of
from lc.managers.learning.kind import LearningKind, Tick
from lc.managers.learning.samples import read_samples, split_new
from lc.managers.learning.spec import annotation_of, spec_field, train_prob
from lc.managers.learning.stages import SILENT, Body, Stage, current_stage
from lc.managers.learning.state import JobState
from lc.store.facade import Store
from shared.logs import event

log = logging.getLogger("lc.managers.learning")

EVAL_NODE_ANNOTATION = "sedna.io/Eval"  # the GM records each stage's node (upstream-gm.md 3.4)
DEPLOY_NODE_ANNOTATION = "sedna.io/Deploy"
DEPLOY_NODE_PATH = ("deploySpec", "template", "spec", "nodeName")


class LearningJob(ObjectLoop):
    """One job's periodic tick: take new samples, decide the current stage, report once."""

    def __init__(self, store: Store, learning: LearningKind, namespace: str, name: str,
                 obj: dict[str, Any], state: JobState, *, rootfs: str, node: str,
                 work: FileWork | None = None) -> None:
        super().__init__(store, namespace, name, obj, rootfs=rootfs, work=work)
        self.kind = learning.kind
        self.state = state
        self.ticks = 0
        self._learning = learning
        self._node = node

    @property
    def task_name(self) -> str:
        return f"learning-job:{self.kind}:{self.key}"

    def update(self, obj: dict[str, Any]) -> None:
        """Take the GM's newer object (its conditions move the stage) and look at once."""
        if uid_of(obj) != uid_of(self.obj):
            self.state = JobState(uid=uid_of(obj))  # a new job under the same name
        self.obj = obj
        self._wake.set()

    def period(self) -> float:
        """The train trigger's check period: the job decides now and then that often (or when
        the GM sends a newer job)."""
        return self._learning.check_period(self.obj)

    async def step(self) -> None:
        await self.tick()

    async def tick(self, now: datetime | None = None) -> None:
        """One pass: take the new samples, then decide the stage if it is this LC's to decide."""
        async with self._stepping:
            try:
                await self._tick(now or datetime.now().astimezone())
            except (LearningError, LCError) as exc:
                self._log_error(str(exc))
            else:
                self._last_error = None
            finally:
                self.ticks += 1

    async def _tick(self, now: datetime) -> None:
        job = self.obj
        dataset = await self._dataset(job)
        if dataset is not None:
            await self._take_samples(job, dataset)
        stage = current_stage(job)
        task = self._task(job, stage, dataset is not None)
        if task is None or stage is None:
            return
        fmt = str(spec_field(dataset or {}, "format") or "txt")
        tick = Tick(job, dataclasses.replace(self.state, train=list(self.state.train),
                                             evals=[list(v) for v in self.state.evals]),
                    self._rootfs, now, fmt, limits=self._work.limits)
        body = await self._work.workers.run(functools.partial(task, tick), stop=tick.stop,
                                            name=f"learning-stage:{self.key}")
        if body is not None:
            tick.state.done = stage.token
            await self._commit(tick.state, body)

    async def _commit(self, state: JobState, body: Body) -> None:
        """Record the decision with its report (if any) in one transaction, then take it."""
        kind = self._learning.kind
        if body is SILENT:
            await self._store.put_state(kind, self.namespace, self.name, state.to_json())
        else:
            await self._store.append_report_with_state(kind, self.namespace, self.name, body,
                                                       state.to_json())
        if self.state.uid == state.uid:  # not replaced by a new job meanwhile
            self.state = state
        event(log, "learning stage decided", key=self.key, kind=kind, stage=state.done,
              reported=body.get("status", "nothing"), round=state.rounds,
              reason=body.get("reason", ""), why=body.get("message", ""))

    def _task(self, job: dict[str, Any], stage: Stage | None,
              home: bool) -> Callable[[Tick], Body | None] | None:
        """The task for the job's latest condition, if this LC decides it and has not yet."""
        if stage is None or stage.token == self.state.done:
            return None
        if (stage.stage, stage.type) == ("Deploy", "Running"):
            hot = self._learning.hot_updates(job) and self._on(job, DEPLOY_NODE_ANNOTATION,
                                                               home, DEPLOY_NODE_PATH)
            return self._learning.hot_update if hot else None
        if stage.type != "Waiting":
            return None
        if stage.stage == "Train" and home:
            return self._learning.train_input
        if stage.stage == "Eval" and home:
            return self._learning.eval_input
        if stage.stage == "Deploy" and self._on(job, EVAL_NODE_ANNOTATION, home):
            return self._learning.deploy
        return None

    def _on(self, job: dict[str, Any], annotation: str, home: bool,
            template_node: tuple[str, ...] = ()) -> bool:
        """Whether this node is the one the annotation (else the template) names; with
        neither, whether it holds the job's Dataset."""
        node = annotation_of(job, annotation) or (spec_field(job, *template_node)
                                                  if template_node else None)
        return node == self._node if isinstance(node, str) and node else home

    async def _dataset(self, job: dict[str, Any]) -> dict[str, Any] | None:
        name = spec_field(job, "dataset", "name")
        if not isinstance(name, str) or not name:
            raise LearningError("spec.dataset.name must be a non-empty string")
        return await self._store.get_resource("Dataset", self.namespace, name)

    async def _take_samples(self, job: dict[str, Any], dataset: dict[str, Any]) -> None:
        prob = train_prob(job)
        stop = threading.Event()
        lines, header = await self._work.workers.run(
            functools.partial(read_samples, dataset, self._rootfs, limits=self._work.limits,
                              stop=stop), stop=stop, name=f"learning-samples:{self.key}")
        if split_new(self.state, lines, header, prob):
            await self._store.put_state(self._learning.kind, self.namespace, self.name,
                                        self.state.to_json())

    def _problem(self, error: str) -> None:
        event(log, "learning job cannot proceed", level=logging.WARNING, key=self.key,
              kind=self._learning.kind, error=error)
