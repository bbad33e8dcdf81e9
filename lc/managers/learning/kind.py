"""What a learning kind plugs into the job loop: its stage tasks, each over one tick's view of
the job (IL and LL override what differs, upstream-lc.md sections 4.5, 4.6)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lc.errors import LearningError
from lc.files import DEFAULT_LIMITS, FileLimits
from lc.managers.dataset import url_prefix
from lc.managers.learning.samples import INDEX_FILE, sample_file, sample_index
from lc.managers.learning.spec import output_dir, spec_field
from lc.managers.learning.stages import Body, stage_body
from lc.managers.learning.state import JobState
from lc.managers.learning.storage import JobStorage
from lc.managers.learning.triggers import parse_trigger
from lc.s3 import S3Credential, is_s3

DEFAULT_CHECK_PERIOD = 10.0  # upstream's job loop tick
EVAL_ROUNDS_KEPT = 5  # upstream keeps the eval samples of the last five rounds


@dataclass(slots=True)
class Tick:
    """What a stage task sees: the job, its state (a copy the task may change), the node's
    paths and file caps, its Dataset's index URL and format, where its files go (`storage`:
    host paths or s3 objects) and the flag set when the tick is cancelled (the task runs in a
    thread of its own; file work checks the flag between chunks, S3 requests while they
    wait). A task returns the report to make, or None to look again next tick."""

    job: dict[str, Any]
    state: JobState
    rootfs: str
    now: datetime
    dataset_format: str
    limits: FileLimits = DEFAULT_LIMITS
    stop: threading.Event = field(default_factory=threading.Event)
    dataset_url: str = ""
    storage: JobStorage | None = None

    def __post_init__(self) -> None:
        if self.storage is None:
            self.storage = JobStorage(self.rootfs, self.limits, self.stop)

    @property
    def out(self) -> str:
        return output_dir(self.job)

    def write(self, subdir: str, samples: list[str]) -> tuple[str, str]:
        """Write samples to `<out>/data/<subdir>/<round>/` (a host directory or an s3 prefix):
        the sample file, and for a txt Dataset on S3 upstream's `dataIndex.txt` beside it.
        Returns (dataURL, dataIndexURL or "")."""
        assert self.storage is not None
        directory = f"{self.out}/data/{subdir}/{self.state.rounds}"
        name, data = sample_file(samples, self.dataset_format, self.state.header)
        self.storage.write(f"{directory}/{name}", data, what="samples file")
        if not is_s3(self.dataset_url) or not name.endswith(".txt"):
            return f"{directory}/{name}", ""
        index = sample_index(samples, url_prefix(self.dataset_url))
        self.storage.write(f"{directory}/{INDEX_FILE}", index, what="sample index file")
        return f"{directory}/{name}", f"{directory}/{INDEX_FILE}"

    def data(self, subdir: str, samples: list[str]) -> dict[str, str]:
        """The sample files' URLs as a stage's input has them (`dataIndexURL` only when
        there is one, as upstream)."""
        data_url, index_url = self.write(subdir, samples)
        return {"dataURL": data_url, **({"dataIndexURL": index_url} if index_url else {})}

    def copy_model(self, source: str, target: str, *,
                   target_credential: S3Credential | None = None) -> None:
        """Copy a model between host paths and s3 URLs within the model cap (see
        lc/managers/learning/storage.py)."""
        assert self.storage is not None
        self.storage.copy_model(source, target, target_credential=target_credential)


class LearningKind:
    """A learning kind's stage tasks; IL and LL override what differs (sections 4.5, 4.6)."""

    kind = ""

    def train_input(self, tick: Tick) -> Body | None:
        """The Train/Ready report once the train trigger fires on the pending samples."""
        trigger = parse_trigger(spec_field(tick.job, "trainSpec", "trigger"), "spec.trainSpec.trigger")
        verdict = trigger.decide({"num_of_samples": len(tick.state.train)}, tick.now)
        if not verdict.holds:
            return None
        models = self.train_models(tick, tick.state.rounds + 1)
        tick.state.rounds += 1
        data: Body = {} if models is None else {"models": models}
        data.update(tick.data("train", tick.state.train))
        data["outputDir"] = f"{tick.out}/train/{tick.state.rounds}"
        tick.state.train = []
        return stage_body("Train", "Ready", data, reason="TrainTriggerFired",
                          message=f"round {tick.state.rounds}: {verdict.message}")

    def train_models(self, tick: Tick, round_: int) -> list[dict[str, Any]] | None:
        """The models a train round starts from (None: the input has no models)."""
        return None

    def eval_input(self, tick: Tick) -> Body | None:
        raise NotImplementedError

    def deploy(self, tick: Tick) -> Body | None:
        raise NotImplementedError

    def hot_updates(self, job: dict[str, Any]) -> bool:
        """Whether the job's inference worker reloads its model in place (IL only)."""
        return False

    def hot_update(self, tick: Tick) -> Body | None:
        raise NotImplementedError

    def forget(self, job: dict[str, Any], rootfs: str) -> None:
        """Remove what the LC wrote for a job that left this node (blocking file I/O)."""

    def check_period(self, job: dict[str, Any]) -> float:
        """How often the train trigger is evaluated: its checkPeriodSeconds, else 10 s."""
        try:
            trigger = parse_trigger(spec_field(job, "trainSpec", "trigger"), "spec.trainSpec.trigger")
        except LearningError:
            return DEFAULT_CHECK_PERIOD
        return trigger.check_period or DEFAULT_CHECK_PERIOD

    def eval_samples(self, tick: Tick) -> list[str]:
        """The eval set: the new eval samples of the last rounds, each once."""
        tick.state.evals = tick.state.evals[-EVAL_ROUNDS_KEPT:]
        return [s for version in tick.state.evals for s in version]
