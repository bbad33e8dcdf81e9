"""One learning job's loop on this node: take the Dataset's new samples, decide the stage of
the job's latest condition if this LC decides it, and commit the decision with its report
once per condition.

A Dataset on S3 is read here, on the event loop, with the Dataset's credential: its ETag is
asked first, and the index is read (within LC_INDEX_MAX_BYTES and LC_INDEX_MAX_LINES) only
when it changed since the last read. The job's S3 clients (lc/s3/clients.py) are kept for
the credentials the last tick used and closed, with the job's scratch files, when the job
leaves the node."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from lc.errors import LCError, LearningError
from lc.managers.base import FileWork, ObjectLoop
from lc.managers.dataset import annotations_of, index_url, uid_of
from lc.managers.learning.kind import LearningKind, Tick
from lc.managers.learning.samples import parse_samples, read_samples, split_new
from lc.managers.learning.spec import annotation_of, spec_field, train_prob
from lc.managers.learning.stages import SILENT, Body, Stage, current_stage
from lc.managers.learning.state import JobState
from lc.managers.learning.storage import JobStorage
from lc.s3 import S3Clients, S3Credential, S3Url, is_s3
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
        self._s3 = S3Clients(settings=self._work.s3)
        self._index_etag = ""  # of the s3 index last read ("" = none read yet)

    @property
    def task_name(self) -> str:
        return f"learning-job:{self.kind}:{self.key}"

    def update(self, obj: dict[str, Any]) -> None:
        """Take the GM's newer object (its conditions move the stage) and look at once."""
        if uid_of(obj) != uid_of(self.obj):
            self.state = JobState(uid=uid_of(obj))  # a new job under the same name
            self._index_etag = ""  # which reads its Dataset's samples from the start
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
        used: set[S3Credential] = set()
        try:
            if dataset is not None:
                await self._take_samples(job, dataset, used)
            stage = current_stage(job)
            task = self._task(job, stage, dataset is not None)
            if task is None or stage is None:
                return
            tick = self._new_tick(job, dataset or {}, now)
            try:
                body = await self._work.workers.run(functools.partial(task, tick), stop=tick.stop,
                                                    name=f"learning-stage:{self.key}")
            finally:
                assert tick.storage is not None
                used |= tick.storage.used
            if body is not None:
                tick.state.done = stage.token
                await self._commit(tick.state, body)
        finally:
            await self._s3.keep(used)  # the clients of credentials no longer used go

    def _new_tick(self, job: dict[str, Any], dataset: dict[str, Any], now: datetime) -> Tick:
        stop = threading.Event()
        storage = JobStorage(self._rootfs, self._work.limits, stop, asyncio.get_running_loop(),
                             self._s3, annotations_of(job), owner=f"{self.kind} {self.key}")
        fmt = str(spec_field(dataset, "format") or "txt")
        url = spec_field(dataset, "url")
        return Tick(job, dataclasses.replace(self.state, train=list(self.state.train),
                                             evals=[list(v) for v in self.state.evals]),
                    self._rootfs, now, fmt, limits=self._work.limits, stop=stop,
                    dataset_url=url if isinstance(url, str) else "", storage=storage)

    async def close(self) -> None:
        """The job left this node: its S3 clients and scratch files go with it."""
        await self._s3.close()

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

    async def _take_samples(self, job: dict[str, Any], dataset: dict[str, Any],
                            used: set[S3Credential]) -> None:
        prob = train_prob(job)
        if is_s3(index_url(dataset)[0]):
            read = await self._read_s3_samples(dataset, used)
            if read is None:
                return  # the index has not changed since it was last read
            lines, header = read
        else:
            stop = threading.Event()
            lines, header = await self._work.workers.run(
                functools.partial(read_samples, dataset, self._rootfs, limits=self._work.limits,
                                  stop=stop), stop=stop, name=f"learning-samples:{self.key}")
        if split_new(self.state, lines, header, prob):
            await self._store.put_state(self._learning.kind, self.namespace, self.name,
                                        self.state.to_json())

    async def _read_s3_samples(self, dataset: dict[str, Any],
                               used: set[S3Credential]) -> tuple[list[str], str] | None:
        """The s3 index's samples and header, None when its ETag is the one last read."""
        url, fmt = index_url(dataset)
        meta = dataset.get("metadata") or {}
        credential = S3Credential.required(annotations_of(dataset), url=url,
                                           owner=f"Dataset {self.namespace}/{meta.get('name', '')}")
        used.add(credential)
        client = await self._s3.get(credential)
        target, caps = S3Url.parse(url), self._work.limits.index
        info = await client.stat(target)
        if info.etag and info.etag == self._index_etag:
            return None
        data = await client.read(target, caps, what="index file")
        read = parse_samples(data, fmt, max_lines=caps.lines, name=url)
        self._index_etag = info.etag
        return read

    def _problem(self, error: str) -> None:
        event(log, "learning job cannot proceed", level=logging.WARNING, key=self.key,
              kind=self._learning.kind, error=error)
