"""What a learning kind plugs into the job loop: its stage tasks, each over one tick's view of
the job (IL and LL override what differs, upstream-lc.md sections 4.5, 4.6)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lc.errors import LearningError
from lc.files import DEFAULT_LIMITS, FileLimits
from lc.managers.learning.models import copy_model
from lc.managers.learning.samples import write_samples
from lc.managers.learning.spec import output_dir, spec_field
from lc.managers.learning.stages import Body, stage_body
from lc.managers.learning.state import JobState
from lc.managers.learning.triggers import parse_trigger
from lc.rootfs import host_to_local

DEFAULT_CHECK_PERIOD = 10.0  # upstream's job loop tick
EVAL_ROUNDS_KEPT = 5  # upstream keeps the eval samples of the last five rounds


@dataclass(slots=True)
class Tick:
    """What a stage task sees: the job, its state (a copy the task may change), the node's
    paths and file caps, and the flag set when the tick is cancelled (the task runs in a
    thread of its own; file work checks the flag between chunks). A task returns the report
    to make, or None to look again next tick."""

    job: dict[str, Any]
    state: JobState
    rootfs: str
    now: datetime
    dataset_format: str
    limits: FileLimits = DEFAULT_LIMITS
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def out(self) -> str:
        return output_dir(self.job)

    def write(self, subdir: str, samples: list[str]) -> str:
        """Write samples to `<out>/data/<subdir>/<round>/`; returns the file's host path."""
        directory = f"{self.out}/data/{subdir}/{self.state.rounds}"
        name = write_samples(host_to_local(self.rootfs, directory), samples,
                             self.dataset_format, self.state.header, stop=self.stop)
        return f"{directory}/{name}"

    def copy_model(self, source: str, target: str) -> None:
        """Copy a model between host paths (see `copy_model`) within the model cap."""
        copy_model(source, target, self.rootfs, caps=self.limits.model, stop=self.stop)


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
        data["dataURL"] = tick.write("train", tick.state.train)
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
