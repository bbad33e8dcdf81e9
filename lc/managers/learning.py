"""What incremental and lifelong learning share at the edge: triggers, samples, the job loop.

A learning job cycles Train -> Eval -> Deploy -> Train. The GM creates the stage's pod only
once an LC reports the stage `Ready` with the `input` the pod needs (upstream-gm.md
section 3.4), and that decision is made here, on the node that holds the job's Dataset:
that LC counts the samples, splits the new ones into train and eval sets by
`spec.dataset.trainProb`, evaluates the train trigger on them, writes the sample files
under the job's `outputDir` and reports `{"phase", "status", "input", "output": null}`
(upstream-lc.md sections 4.5-4.7). The deploy decision is made on the eval node when the
job names one (`sedna.io/Eval`, as upstream's GM sends Deploy/Waiting there), else on the
Dataset's node too, so exactly one LC decides each stage.

Where this departs from upstream, on purpose (upstream-lc.md section 5):
- a stage is decided once per Waiting condition (its position, stage and time form the
  cycle's token) and the token is committed with the report in one transaction, so a
  report is sent exactly once per cycle, across restarts, and a stale view of the stage
  never starts a second round (B-25, B-26);
- rounds, the sample offset and the pending samples are job state in the store and survive
  a restart (B-20); a job recreated under the same name (new uid) starts afresh;
- a missing trained model, bad eval metrics or a failed copy is reported as the stage
  `Failed` (the GM restarts the cycle) instead of a crash, a `null` report or a silent
  "Completed" (B-3, B-4, B-16, B-30);
- triggers: a metric index out of range, negative or malformed, or a metric that is not a
  number (a list named without an index, B-22) makes the condition false, never a crash
  (B-7); an unknown operator or a bad timer is an error logged once, and the trigger
  never fires; `checkPeriodSeconds` sets how often the trigger is evaluated (B-24); the
  timer compares clock times, not strings;
- eval samples are the new eval samples of the last five rounds, each once (B-23); txt and
  csv datasets work for both kinds, the format case-insensitively (B-27); copies truncate
  (B-6);
- files go through lc/files.py: the index is read and models are copied only if they are
  regular files within the LC's caps (a FIFO, a device or an oversized file is an error the
  stage reports or the job logs), in chunks on daemon threads, so a deleted job or a
  stopping LC ends a read or copy after one chunk; a stored job ticks only once the GM has
  confirmed it still exists (lc/managers/base.py `Confirmations`).
Not here: s3 outputs and datasets (no S3 client, an error logged once), so
`dataIndexURL` is never sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import math
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from datetime import time as clock
from typing import Any
from urllib.parse import urlsplit

import orjson

from lc import files
from lc.errors import LCError, StoreError
from lc.files import DEFAULT_LIMITS, Caps, FileLimits, FileRefused
from lc.managers.base import FileWork, Outgoing, every, supervise
from lc.managers.dataset import index_url, uid_of
from lc.managers.forward import status_body
from lc.report import WorkerReport
from lc.rootfs import host_to_local
from lc.store import Store
from shared.logs import event

log = logging.getLogger(__name__)

DEFAULT_CHECK_PERIOD = 10.0  # upstream's job loop tick
MIN_CHECK_PERIOD = 1.0
EVAL_ROUNDS_KEPT = 5  # upstream keeps the eval samples of the last five rounds
EVAL_NODE_ANNOTATION = "sedna.io/Eval"  # the GM records each stage's node (upstream-gm.md 3.4)
DEPLOY_NODE_ANNOTATION = "sedna.io/Deploy"
DEPLOY_NODE_PATH = ("deploySpec", "template", "spec", "nodeName")
Body = dict[str, Any]
SILENT: Body = {}  # a decision carried out with nothing to report (a hot model update)


class LearningError(LCError):
    """A learning job cannot take its next step: bad trigger or spec, missing model, I/O."""


# ---- triggers (upstream-lc.md section 4.7) ------------------------------------------

_EQ_EPSILON = 1e-6
_OPERATORS: dict[str, Callable[[float, float, bool], bool]] = {}
for _names, _test in (
    (("gt", ">"), lambda v, t, eq: not eq and v > t),
    (("ge", ">="), lambda v, t, eq: eq or v >= t),
    (("eq", "=", "=="), lambda v, t, eq: eq),
    (("ne", "!="), lambda v, t, eq: not eq),
    (("le", "<="), lambda v, t, eq: eq or v <= t),
    (("lt", "<"), lambda v, t, eq: not eq and v < t),
):
    for _name in _names:
        _OPERATORS[_name] = _test
_INDEXED = re.compile(r"^(?P<name>[^\[]*)\[(?P<index>[^\]]*)\]$")
_HHMM = re.compile(r"^(\d{1,2}):(\d{2})$")
END_OF_DAY = clock(23, 59, 59)  # `24:00`: after the last whole minute a timer compares


def _number(value: Any) -> float | None:
    """A metric or threshold as a float; None for anything that is not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = float(value.strip())
            return number if math.isfinite(number) else None
    return None


def metric_value(stats: dict[str, Any], metric: str) -> float | None:
    """`stats[metric]`, or element i of the list `stats[name]` for `name[i]`; None when
    absent, out of range or not a number."""
    found = _INDEXED.match(metric)
    if found is None:
        return _number(stats.get(metric.strip()))
    values = stats.get(found["name"].strip())
    try:
        index = int(found["index"])
    except ValueError:
        return None
    if not isinstance(values, list) or not 0 <= index < len(values):
        return None
    return _number(values[index])


@dataclass(frozen=True, slots=True)
class Condition:
    """`metric operator threshold` over a stats map."""

    operator: str
    threshold: float
    metric: str

    def holds(self, stats: dict[str, Any]) -> bool:
        value = metric_value(stats, self.metric)
        if value is None:
            return False
        return _OPERATORS[self.operator](value, self.threshold,
                                         abs(value - self.threshold) < _EQ_EPSILON)


@dataclass(frozen=True, slots=True)
class Timer:
    """An inclusive daily window of wall-clock minutes; wraps midnight when start > end."""

    start: clock
    end: clock

    def contains(self, now: datetime) -> bool:
        minute = now.time().replace(second=0, microsecond=0)
        if self.start <= self.end:
            return self.start <= minute <= self.end
        return minute >= self.start or minute <= self.end


@dataclass(frozen=True, slots=True)
class Trigger:
    """A CR trigger: fires when the condition holds and, if set, the clock is in the timer."""

    condition: Condition | None
    timer: Timer | None = None
    check_period: float | None = None

    def fires(self, stats: dict[str, Any], now: datetime) -> bool:
        if self.timer is not None and not self.timer.contains(now):
            return False
        return self.condition is not None and self.condition.holds(stats)


def _clock(value: Any, where: str) -> clock:
    """`HH:MM`; `24:00` is the end of the day (upstream compares the strings, so the shipped
    lifelong-learning example's `end: 24:00` means until midnight): later than every minute,
    so as an end it holds all evening and as a start never."""
    found = _HHMM.match(value) if isinstance(value, str) else None
    if found is not None and (int(found[1]), int(found[2])) == (24, 0):
        return END_OF_DAY
    if found is None or int(found[1]) > 23 or int(found[2]) > 59:
        raise LearningError(f"{where} must be a time HH:MM, not {value!r}")
    return clock(int(found[1]), int(found[2]))


def _condition(raw: Any, where: str) -> Condition:
    if not isinstance(raw, dict):
        raise LearningError(f"{where}.condition must be an object")
    operator, metric = raw.get("operator"), raw.get("metric")
    if not isinstance(operator, str) or operator.strip() not in _OPERATORS:
        raise LearningError(f"{where}.condition.operator {operator!r} is not one of "
                            f"{', '.join(_OPERATORS)}")
    if not isinstance(metric, str) or not metric.strip():
        raise LearningError(f"{where}.condition.metric must be a non-empty string")
    threshold = _number(raw.get("threshold"))
    if threshold is None:
        raise LearningError(f"{where}.condition.threshold {raw.get('threshold')!r} is not a number")
    return Condition(operator.strip(), threshold, metric)


def parse_trigger(raw: Any, where: str) -> Trigger:
    """The trigger at `where` (e.g. spec.trainSpec.trigger); LearningError naming the bad field."""
    if not isinstance(raw, dict):
        raise LearningError(f"{where} must be an object")
    timer = raw.get("timer")
    if timer is not None and not isinstance(timer, dict):
        raise LearningError(f"{where}.timer must be an object")
    period = raw.get("checkPeriodSeconds")
    if period is not None and (_number(period) is None or float(period) <= 0):
        raise LearningError(f"{where}.checkPeriodSeconds must be a positive number")
    return Trigger(
        condition=_condition(raw["condition"], where) if "condition" in raw else None,
        timer=None if timer is None else Timer(_clock(timer.get("start"), f"{where}.timer.start"),
                                               _clock(timer.get("end"), f"{where}.timer.end")),
        check_period=None if period is None else max(float(period), MIN_CHECK_PERIOD))


def deploy_stats(models: list[dict[str, Any]] | None) -> dict[str, list[float]]:
    """The deploy trigger's stats from an eval's `[new, old]` models: each metric of the new
    model and `<metric>_delta` = new - old element-wise (upstream-lc.md section 4.5.7)."""
    if not models or len(models) != 2:
        raise LearningError(f"eval reported {len(models or [])} models, the deploy trigger "
                            f"needs 2 (new, deployed)")
    new, old = (_metric_lists(m, which) for m, which in zip(models, ("new", "deployed"), strict=True))
    stats: dict[str, list[float]] = {}
    for name, values in new.items():
        before = old.get(name)
        if before is None or len(before) != len(values):
            raise LearningError(f"metric {name!r} of the deployed model does not match the new one")
        stats[name] = values
        stats[f"{name}_delta"] = [a - b for a, b in zip(values, before, strict=True)]
    return stats


def _metric_lists(model: Any, which: str) -> dict[str, list[float]]:
    metrics = model.get("metrics") if isinstance(model, dict) else None
    if not isinstance(metrics, dict):
        raise LearningError(f"the {which} model's metrics must be an object")
    out: dict[str, list[float]] = {}
    for name, values in metrics.items():
        numbers = [_number(v) for v in values] if isinstance(values, list) else [None]
        if any(n is None for n in numbers):
            raise LearningError(f"metric {name!r} of the {which} model is not a list of numbers")
        out[name] = [n for n in numbers if n is not None]
    return out


# ---- the job's conditions -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stage:
    """The job's latest condition: where the GM's state machine stands."""

    stage: str  # Train, Eval or Deploy
    type: str  # Waiting, Ready, Starting, Running, Completed or Failed
    token: str  # identifies this condition among the job's history


def _conditions(job: dict[str, Any]) -> list[dict[str, Any]]:
    status = job.get("status")
    conds = status.get("conditions") if isinstance(status, dict) else None
    return [c for c in conds if isinstance(c, dict)] if isinstance(conds, list) else []


def current_stage(job: dict[str, Any]) -> Stage | None:
    """The latest condition's stage and type (capitalised), None without conditions."""
    conds = _conditions(job)
    if not conds:
        return None
    last = conds[-1]
    stage, kind = str(last.get("stage", "")).capitalize(), str(last.get("type", "")).capitalize()
    token = f"{len(conds)}|{stage}|{kind}|{last.get('lastTransitionTime', '')}"
    return Stage(stage, kind, token)


def reported_models(job: dict[str, Any], stage: str) -> list[dict[str, Any]]:
    """`output.models` of the newest `<stage>`/Completed condition that carries models."""
    for cond in reversed(_conditions(job)):
        if (str(cond.get("stage", "")).lower(), str(cond.get("type", "")).lower()) != \
                (stage.lower(), "completed"):
            continue
        models = _data_models(cond.get("data"))
        if models:
            return models
    return []


def _data_models(data: Any) -> list[dict[str, Any]]:
    if isinstance(data, str):
        try:
            data = orjson.loads(data)
        except orjson.JSONDecodeError:
            return []
    output = data.get("output") if isinstance(data, dict) else None
    models = output.get("models") if isinstance(output, dict) else None
    return [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []


# ---- models in upstream's shape -------------------------------------------------------

_MODEL_HEAD = ("format", "url", "device_soc_versions", "metrics", "history_metric", "current_metric")
_MODEL_TAIL = ("number_of_labeled_unseen_sample", "number_of_model", "number_of_unseen_sample")


def upstream_model(model: dict[str, Any]) -> dict[str, Any]:
    """A model in the key order and with the fields of upstream's Model struct: empty
    optional fields left out, `classes` always present (null when empty)."""
    out = {k: model[k] for k in _MODEL_HEAD if model.get(k) or k in ("format", "url")}
    out["classes"] = model.get("classes") or None
    out.update((k, model[k]) for k in _MODEL_TAIL if model.get(k))
    return out


def model_of(fmt: str, url: str, devices: tuple[str, ...] = ()) -> dict[str, Any]:
    """A Model CR's format/url/devices as an upstream model entry."""
    return upstream_model({"format": fmt, "url": url, "device_soc_versions": list(devices)})


def matching_model(models: list[dict[str, Any]], fmt: str,
                   devices: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """The first model of format `fmt`; if `devices` is set, a candidate naming exactly one
    device must name one of them (upstream-lc.md section 4.5.4 step 5)."""
    for model in models:
        if model.get("format") != fmt:
            continue
        theirs = model.get("device_soc_versions") or []
        if devices and isinstance(theirs, list) and len(theirs) == 1 and theirs[0] not in devices:
            continue
        return upstream_model(model)
    return None


# ---- samples and files ------------------------------------------------------------------


@dataclass(slots=True)
class JobState:
    """What a learning job remembers between ticks and across restarts (lc_job_state)."""

    uid: str = ""
    rounds: int = 0  # train triggers fired so far; round r writes <out>/.../<r>
    previous: int = 0  # dataset samples already split into train/eval
    train: list[str] = field(default_factory=list)  # train samples not yet sent
    evals: list[list[str]] = field(default_factory=list)  # new eval samples, per round
    header: str = ""  # the csv header line of the dataset
    done: str = ""  # token of the latest condition a report was made for

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, raw: Any, uid: str) -> JobState:
        """The stored state if it belongs to this object (same uid), else a fresh one."""
        if not isinstance(raw, dict) or raw.get("uid") != uid:
            return cls(uid=uid)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})


def read_samples(dataset: dict[str, Any], rootfs: str, *, limits: FileLimits = DEFAULT_LIMITS,
                 stop: threading.Event | None = None) -> tuple[list[str], str]:
    """(sample lines, csv header or "") of a Dataset's index file (blocking file I/O)."""
    url, fmt = index_url(dataset)
    try:
        data = files.read_bytes(host_to_local(rootfs, url), limits.index, what="index file",
                                name=url, stop=stop)
    except FileRefused as exc:
        raise LearningError(str(exc)) from None
    text = data.decode("utf-8", errors="surrogateescape")
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    if fmt.lower() == "csv":
        return lines[1:], lines[0] if lines else ""
    return lines, ""


def split_new(state: JobState, lines: list[str], header: str, train_prob: float) -> bool:
    """Split the samples past `state.previous` into train and eval (floor(p*n) train);
    True if the state changed. A dataset that shrank is read on once it grows past it."""
    if len(lines) <= state.previous:
        return False
    new = lines[state.previous:]
    cut = math.floor(train_prob * len(new))
    state.train.extend(new[:cut])
    state.evals.append(new[cut:])
    state.previous, state.header = len(lines), header
    return True


def write_samples(directory: str, samples: list[str], fmt: str, header: str, *,
                  stop: threading.Event | None = None) -> str:
    """Write `samples` as `data.txt` or `data.csv` (header first) in `directory`, created
    if needed, replacing any earlier file whole; returns the file's name."""
    fmt = fmt.lower()
    if fmt not in ("txt", "csv"):
        raise LearningError(f"dataset format {fmt!r} cannot be written (txt or csv)")
    name = f"data.{fmt}"
    lines = ([header] if fmt == "csv" else []) + samples
    data = "".join(line + "\n" for line in lines).encode("utf-8", errors="surrogateescape")
    try:
        os.makedirs(directory, exist_ok=True)
        files.replace_file(os.path.join(directory, name), [data], what="samples file", stop=stop)
    except OSError as exc:
        raise LearningError(f"cannot write samples in {directory}: {exc.strerror}") from None
    except FileRefused as exc:
        raise LearningError(f"cannot write samples in {directory}: {exc.detail}") from None
    return name


def copy_model(source: str, target: str, rootfs: str, *, caps: Caps = DEFAULT_LIMITS.model,
               stop: threading.Event | None = None) -> None:
    """Copy a model file between host paths under the rootfs, replacing the target whole; the
    source must be a regular file within `caps`."""
    for url in (source, target):
        if urlsplit(url).scheme:
            raise LearningError(f"model URL {url} is not a local path (no S3 client here)")
    src, dst = host_to_local(rootfs, source), host_to_local(rootfs, target)
    try:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        files.copy_file(src, dst, caps, what="model", names=(source, target), stop=stop)
    except OSError as exc:
        raise LearningError(f"cannot copy model {source} to {target}: {exc.strerror}") from None
    except FileRefused as exc:
        raise LearningError(f"cannot copy model {source} to {target}: {exc}") from None


def output_dir(job: dict[str, Any]) -> str:
    """`spec.outputDir` as a host path without trailing `/`; s3 and other schemes refused."""
    out = _spec(job).get("outputDir")
    if not isinstance(out, str) or not out:
        raise LearningError("spec.outputDir must be a non-empty string")
    if urlsplit(out).scheme:
        raise LearningError(f"outputDir {out} is not a local path (no S3 client here)")
    return out.rstrip("/") or "/"


def _spec(job: dict[str, Any]) -> dict[str, Any]:
    spec = job.get("spec")
    return spec if isinstance(spec, dict) else {}


def spec_field(job: dict[str, Any], *path: str) -> Any:
    value: Any = _spec(job)
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def annotation_of(job: dict[str, Any], name: str) -> str:
    meta = job.get("metadata")
    notes = meta.get("annotations") if isinstance(meta, dict) else None
    value = notes.get(name) if isinstance(notes, dict) else None
    return value if isinstance(value, str) else ""


def train_prob(job: dict[str, Any]) -> float:
    prob = _number(spec_field(job, "dataset", "trainProb"))
    if prob is None or not 0.0 <= prob <= 1.0:
        raise LearningError("spec.dataset.trainProb must be a number in [0, 1]")
    return prob


def stage_body(phase: str, status: str, data: dict[str, Any] | None = None) -> Body:
    """An LC-originated status report: `input` only when it has something, `output` null."""
    body: Body = {"phase": phase, "status": status}
    if data:
        body["input"] = data
    body["output"] = None
    return body


def stage_failed(job: dict[str, Any], stage: str, why: str) -> Body:
    """The stage reported Failed (the GM restarts the cycle), with the reason logged here
    since the report cannot carry it."""
    meta = job.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    event(log, "learning stage failed", level=logging.WARNING, kind=job.get("kind", ""),
          key=f"{meta.get('namespace', '')}/{meta.get('name', '')}", stage=stage, error=why)
    return stage_body(stage, "Failed")


# ---- one tick's view and the kinds' hooks ---------------------------------------------


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
        if not trigger.fires({"num_of_samples": len(tick.state.train)}, tick.now):
            return None
        models = self.train_models(tick, tick.state.rounds + 1)
        tick.state.rounds += 1
        data: Body = {} if models is None else {"models": models}
        data["dataURL"] = tick.write("train", tick.state.train)
        data["outputDir"] = f"{tick.out}/train/{tick.state.rounds}"
        tick.state.train = []
        return stage_body("Train", "Ready", data)

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


# ---- the per-job loop -------------------------------------------------------------------


class LearningJob:
    """One job's periodic tick: take new samples, decide the current stage, report once."""

    def __init__(self, store: Store, learning: LearningKind, namespace: str, name: str,
                 obj: dict[str, Any], state: JobState, *, rootfs: str, node: str,
                 work: FileWork | None = None) -> None:
        self.namespace, self.name = namespace, name
        self.obj = obj
        self.state = state
        self.ticks = 0
        self._store = store
        self._learning = learning
        self._rootfs = rootfs
        self._node = node
        self._work = work or FileWork()
        self._wake = asyncio.Event()
        self._ticking = asyncio.Lock()  # one tick at a time: no duplicate reports
        self._last_error: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def update(self, obj: dict[str, Any]) -> None:
        """Take the GM's newer object (its conditions move the stage) and look at once."""
        if uid_of(obj) != uid_of(self.obj):
            self.state = JobState(uid=uid_of(obj))  # a new job under the same name
        self.obj = obj
        self._wake.set()

    async def run(self) -> None:
        """Once the GM confirmed the job, decide now and then every train-trigger check period
        (or when the GM sends a newer job)."""
        await self._work.confirmations.wait(self._learning.kind, self.namespace, self.name)
        await every(lambda: self._learning.check_period(self.obj), self._wake, self.tick)

    async def tick(self, now: datetime | None = None) -> None:
        async with self._ticking:
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
              reported=body.get("status", "nothing"), round=state.rounds)

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

    def _log_error(self, error: str) -> None:
        # Logged when the error first appears or changes, not on every tick.
        if error != self._last_error:
            event(log, "learning job cannot proceed", level=logging.WARNING, key=self.key,
                  kind=self._learning.kind, error=error)
        self._last_error = error


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
        self._started = False
        self._jobs: dict[tuple[str, str], LearningJob] = {}
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}  # once started

    def job(self, namespace: str, name: str) -> LearningJob | None:
        return self._jobs.get((namespace, name))

    def start(self) -> None:
        """Start the job loops (and every later job's at once)."""
        self._started = True
        for key in self._jobs:
            self._run(key)

    async def upsert(self, namespace: str, name: str, obj: dict[str, Any]) -> None:
        job = self._jobs.get((namespace, name))
        if job is not None:
            job.update(obj)
            return
        try:
            stored = await self._store.get_state(self.kind, namespace, name)
        except StoreError as exc:
            event(log, "learning job state unreadable, starting afresh", level=logging.WARNING,
                  key=f"{namespace}/{name}", error=str(exc))
            stored = None
        self._jobs[(namespace, name)] = LearningJob(
            self._store, self._learning, namespace, name, obj,
            JobState.from_json(stored, uid_of(obj)), rootfs=self._rootfs, node=self._node,
            work=self._work)
        if self._started:
            self._run((namespace, name))

    def _run(self, key: tuple[str, str]) -> None:
        if key not in self._tasks:
            self._tasks[key] = supervise(self._jobs[key].run,
                                         name=f"learning-job:{self.kind}:{key[0]}/{key[1]}")

    async def delete(self, namespace: str, name: str) -> None:
        job = self._jobs.pop((namespace, name), None)
        task = self._tasks.pop((namespace, name), None)
        if task is not None:
            await _cancel(task)
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
        tasks, self._tasks, self._started = self._tasks, {}, False
        for task in tasks.values():
            await _cancel(task)


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
