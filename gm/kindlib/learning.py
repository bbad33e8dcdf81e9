"""What IncrementalLearningJob and LifelongLearningJob share: the stage machine, the report
rule and the status shape. Pure.

A learning job cycles through three stages, Train -> Eval -> Deploy -> Train, forever. The
LocalController of the dataset's node evaluates the triggers and reports a stage `Ready`
(with the stage's input in `data`); the GM then runs the stage's pod, and the pod's phase
moves the stage on (spec/upstream-gm.md §3.4, upstream-lc.md §4.5):

  (none)            -> Train/Waiting
  Waiting           -> (stays: the LC reports Ready)
  Train|Eval/Ready  -> Starting (Train: `cycle` + 1), the stage pod is created from `data.input`;
                       an input the pod cannot be built from -> Failed (reason InvalidInput)
  Deploy/Ready      -> hot update: Starting; otherwise Completed, `deploys` + 1 (the
                       inference pod is recreated, so it loads the newly deployed model)
  Starting|Running  -> the stage pod Running: Running (Deploy without hot update: Completed);
                       Succeeded: Completed; Failed: Failed; not there yet: stays
  Completed         -> the next stage's Waiting
  Failed            -> Train/Waiting (the LC's train trigger decides when to try again)

One step per reconcile: every status write enqueues the job again, so each state is written
and seen by the LC, as upstream's. The step is a function of the status and the pods, so
`build` (which pods) and `status` (which condition) compute the same one.

Status shape (upstream's condition fields, bounded, unlike upstream's ever-growing list):
- `conditions`: one entry per type (Waiting, Ready, Starting, Running, Failed) plus one
  `Completed` entry per stage, at most eight. Each carries `stage` and `data` (the JSON
  `{"input": ..., "output": ...}` the LC reported, carried from Ready to Starting/Running).
  Exactly one is True: the current state, and it is the last entry, where upstream's LC and
  the printer columns (`.status.conditions[-1:]`) read the current state. Completed is kept
  per stage because the LC reads the last Train/Completed output (the model to evaluate, to
  retrain and to deploy) and the last Eval/Completed output (the deploy trigger's metrics)
  in later stages.
- `cycle`: the train rounds started (the train and eval pods are `<job>-train-<cycle>`,
  `<job>-eval-<cycle>`); `deploys`: the deployments done by restarting the inference pod
  (`<job>-infer`, annotated with it, so a deploy recreates it); `startTime`.
- `completionTime` is never set: the job never finishes.

Reports (`report_rule`): the LC's `{"phase", "status", "input", "output"}` becomes the
current condition, input and output re-emitted in upstream's key order; its `reason` and
`message` (our LC says why it decided, e.g. the deploy trigger's values) become the
condition's, else `ReportedByLC` and upstream's "reported by lc".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gm.kube.resources import PODS
from gm.reconcile.declaration import Observed
from gm.reports import ReportInvalid, field
from gm.workers.gojson import go_json
from shared.objects import deep_get, label_prefix

TRAIN, EVAL, DEPLOY = "Train", "Eval", "Deploy"
STAGES = (TRAIN, EVAL, DEPLOY)
WAITING, READY, STARTING, RUNNING, COMPLETED, FAILED = (
    "Waiting", "Ready", "Starting", "Running", "Completed", "Failed")
TYPES = (WAITING, READY, STARTING, RUNNING, COMPLETED, FAILED)
NEXT_STAGE = {TRAIN: EVAL, EVAL: DEPLOY, DEPLOY: TRAIN}
WORKER_TYPES = {TRAIN: "train", EVAL: "eval", DEPLOY: "inference"}
REPORTED_TYPES = {"ready": READY, "completed": COMPLETED, "failed": FAILED, "waiting": WAITING}
GM_WAITING = "Waiting"  # the reason of a Waiting the stage machine moved to
REPORTED = "reported by lc"  # upstream's message for an LC's report; ours says why
REPORTED_REASON = "ReportedByLC"
MAX_REASON, MAX_MESSAGE = 128, 1024  # characters of an LC's reason and message kept

# the pod phase of a stage's pod (None: no such pod), asked for (stage, cycle)
PhaseOf = Callable[[str, int], "str | None"]
# why a stage pod cannot be built from a Ready condition's data (None: it can)
CheckInput = Callable[[str, str], "str | None"]


@dataclass(frozen=True, slots=True)
class Position:
    """Where a job is: its current state (the True condition) and its counters."""

    stage: str = TRAIN
    type: str = ""
    data: str = ""
    reason: str = ""
    message: str = ""
    cycle: int = 0
    deploys: int = 0

    @property
    def running_stage_pod(self) -> bool:
        """The Train or Eval pod of this cycle is wanted."""
        return self.stage in (TRAIN, EVAL) and self.type in (STARTING, RUNNING)


def condition_key(cond: Mapping[str, Any]) -> str:
    """Conditions are one per type, except Completed: one per stage."""
    type_ = cond.get("type")
    return f"{COMPLETED}/{cond.get('stage')}" if type_ == COMPLETED else str(type_)


def position(status: Mapping[str, Any] | None) -> Position:
    status = status or {}
    current = next((c for c in reversed(status.get("conditions") or ())
                    if c.get("status") == "True"), None)
    counters = {"cycle": _count(status.get("cycle")), "deploys": _count(status.get("deploys"))}
    if current is None:
        return Position(**counters)
    stage = current.get("stage") if current.get("stage") in STAGES else TRAIN
    return Position(stage=stage, type=str(current.get("type") or ""), data=str(current.get("data") or ""),
                    reason=str(current.get("reason") or ""), message=str(current.get("message") or ""),
                    **counters)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def step(pos: Position, phase_of: PhaseOf, *, hot: bool, check: CheckInput) -> Position:
    """The job's next position (the table in the module docstring)."""
    if pos.type not in TYPES:
        return Position(stage=TRAIN, type=WAITING, reason=GM_WAITING, message="waiting for the train trigger",
                        cycle=pos.cycle, deploys=pos.deploys)
    if pos.type == WAITING:
        return pos
    if pos.type == READY:
        return _ready(pos, hot=hot, check=check)
    if pos.type in (STARTING, RUNNING):
        return _started(pos, phase_of, hot=hot)
    if pos.type == COMPLETED:
        nxt = NEXT_STAGE[pos.stage]
        return _moved(pos, nxt, WAITING, GM_WAITING, f"waiting for the {nxt.lower()} trigger")
    return _moved(pos, TRAIN, WAITING, GM_WAITING, f"the {pos.stage.lower()} stage failed; "
                  "waiting for the train trigger")


def _moved(pos: Position, stage: str, type_: str, reason: str, message: str, *,
           data: str = "", **counters: int) -> Position:
    return replace(pos, stage=stage, type=type_, data=data, reason=reason, message=message, **counters)


def _ready(pos: Position, *, hot: bool, check: CheckInput) -> Position:
    if pos.stage == DEPLOY:
        if hot:
            return _moved(pos, DEPLOY, STARTING, "HotUpdate", "the inference worker loads the new model",
                          data=pos.data)
        return _moved(pos, DEPLOY, COMPLETED, "Deployed", "the inference worker was restarted on the new model",
                      data=pos.data, deploys=pos.deploys + 1)
    problem = check(pos.stage, pos.data)
    if problem is not None:
        return _moved(pos, pos.stage, FAILED, "InvalidInput", problem, data=pos.data)
    cycle = pos.cycle + 1 if pos.stage == TRAIN else max(pos.cycle, 1)
    return _moved(pos, pos.stage, STARTING, "WorkerCreated", f"the {pos.stage.lower()} worker was created",
                  data=pos.data, cycle=cycle)


def _started(pos: Position, phase_of: PhaseOf, *, hot: bool) -> Position:
    phase = phase_of(pos.stage, pos.cycle)
    what = f"the {pos.stage.lower()} worker"
    if phase == "Succeeded":
        return _moved(pos, pos.stage, COMPLETED, "WorkerSucceeded", f"{what} succeeded", data=pos.data)
    if phase == "Failed":
        return _moved(pos, pos.stage, FAILED, "WorkerFailed", f"{what} failed", data=pos.data)
    if phase != "Running":
        return pos
    if pos.stage == DEPLOY and not hot:
        return _moved(pos, DEPLOY, COMPLETED, "Deployed", "the inference worker runs", data=pos.data)
    if pos.type == RUNNING:
        return pos
    return _moved(pos, pos.stage, RUNNING, "WorkerRunning", f"{what} is running", data=pos.data)


# -- status (pure) --------------------------------------------------------------------


def with_position(status: Mapping[str, Any], pos: Position, *, now: str) -> dict[str, Any]:
    """`status` with `pos` as its current condition (last, True) and its counters."""
    out = dict(status)
    out["conditions"] = set_current(out.get("conditions") or [], pos, now=now)
    out["cycle"] = pos.cycle
    out["deploys"] = pos.deploys
    if not out.get("startTime"):
        out["startTime"] = now
    return out


def set_current(conditions: list[Mapping[str, Any]], pos: Position, *, now: str) -> list[dict[str, Any]]:
    """One entry per key (`condition_key`), `pos` the True one and the last; the others False.
    An unchanged current entry is kept as it is, so an unchanged state writes nothing. A list
    written by upstream's GM (appended, repeated types) shrinks to the newest entry per key."""
    pos = described(pos)
    new = {"type": pos.type, "status": "True", "stage": pos.stage, "reason": pos.reason,
           "message": pos.message, "data": pos.data}
    key = condition_key(new)
    newest: dict[str, Mapping[str, Any]] = {}
    for cond in conditions:
        newest.pop(condition_key(cond), None)
        newest[condition_key(cond)] = cond
    old = newest.pop(key, None)
    if old is not None and all(old.get(k) == v for k, v in new.items()):
        current = dict(old)
    else:
        current = {**new, "lastHeartbeatTime": now, "lastTransitionTime": now}
    return [*(_false(c, pos, now) for c in newest.values()), current]


def described(pos: Position) -> Position:
    """`pos` with a reason and a message: a state read from a condition written without them
    (by upstream's GM or LC) gets its type as the reason and says what it is."""
    if pos.reason.strip() and pos.message.strip():
        return pos
    what = f"the {pos.stage.lower()} stage is {pos.type.lower()}"
    if pos.type == WAITING:
        what = f"waiting for the {pos.stage.lower()} trigger"
    return replace(pos, reason=pos.reason.strip() or pos.type or GM_WAITING,
                   message=pos.message.strip() or what)


def _false(cond: Mapping[str, Any], pos: Position, now: str) -> dict[str, Any]:
    """A former state: it keeps what it said when it was current; one written without a
    reason or message (by upstream's GM) says what holds instead."""
    out = dict(cond)
    if not out.get("reason") or not out.get("message"):
        out["reason"] = out.get("reason") or "Superseded"
        out["message"] = out.get("message") or f"the job is {pos.stage}/{pos.type} now"
    if out.get("status") == "False":
        return out
    return {**out, "status": "False", "lastTransitionTime": now}


def completed_data(status: Mapping[str, Any] | None, stage: str) -> Mapping[str, Any]:
    """The parsed data of the stage's Completed condition ({} when none or not JSON)."""
    for cond in (status or {}).get("conditions") or ():
        if cond.get("type") == COMPLETED and cond.get("stage") == stage:
            return parse_data(cond.get("data"))
    return {}


def has_completed(status: Mapping[str, Any] | None, stage: str) -> bool:
    return any(c.get("type") == COMPLETED and c.get("stage") == stage
               for c in (status or {}).get("conditions") or ())


def parse_data(data: Any) -> Mapping[str, Any]:
    if not isinstance(data, str) or not data:
        return {}
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, Mapping) else {}


# -- pods of a stage (selected by worker type, named by cycle) ------------------------


def stage_pod_name(job: str, stage: str, cycle: int) -> str:
    if stage == DEPLOY:
        return infer_pod_name(job)
    return f"{job}-{WORKER_TYPES[stage]}-{cycle}"


def infer_pod_name(job: str) -> str:
    return f"{job}-infer"


def phases(kind: str, job: str, pods: list[Mapping[str, Any]]) -> PhaseOf:
    """The phase of the stage's pod: the pod of the stage's worker type (by label) with the
    cycle's name; a pod being deleted does not count."""
    label = f"{label_prefix(kind)}worker-type"

    def phase_of(stage: str, cycle: int) -> str | None:
        name = stage_pod_name(job, stage, cycle)
        for pod in pods:
            meta = pod.get("metadata") or {}
            if (meta.get("labels") or {}).get(label) == WORKER_TYPES[stage] and meta.get("name") == name \
                    and not meta.get("deletionTimestamp"):
                return deep_get(pod, "status", "phase") or "Pending"
        return None
    return phase_of


# -- reports --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StageReport:
    """An LC's stage report: the condition it asks for, why (our LC says; upstream's does not),
    and its models (for LL's KB)."""

    stage: str
    type: str
    data: str
    models: tuple[Mapping[str, Any], ...]
    reason: str = REPORTED_REASON
    message: str = REPORTED


_INPUT_KEYS = ("models", "dataURL", "dataIndexURL", "outputDir")
_OUTPUT_KEYS = ("models", "ownerInfo")
_INT_KEYS = ("number_of_labeled_unseen_sample", "number_of_model", "number_of_unseen_sample")


def parse_stage_report(body: Mapping[str, Any]) -> StageReport:
    """`{"phase": train|eval|deploy, "status": ready|completed|failed|waiting, "input", "output"}`
    (case-insensitive, as upstream's decoder); input and output keep only upstream's fields."""
    phase, state = field(body, "phase"), field(body, "status")
    stage = next((s for s in STAGES if isinstance(phase, str) and s.lower() == phase.lower()), None)
    if stage is None:
        raise ReportInvalid(f"phase must be one of train, eval, deploy, got {phase!r}")
    type_ = REPORTED_TYPES.get(state.lower()) if isinstance(state, str) else None
    if type_ is None:
        raise ReportInvalid(f"status must be one of {', '.join(REPORTED_TYPES)}, got {state!r}")
    data: dict[str, Any] = {}
    models: tuple[Mapping[str, Any], ...] = ()
    for key, keys in (("input", _INPUT_KEYS), ("output", _OUTPUT_KEYS)):
        part = field(body, key)
        if part is None:
            continue
        if not isinstance(part, Mapping):
            raise ReportInvalid(f"{key} must be an object")
        data[key] = _section(part, keys, where=key)
        if key == "output":
            models = tuple(data[key].get("models") or ())
    reason, message = _why(body, "reason", MAX_REASON), _why(body, "message", MAX_MESSAGE)
    return StageReport(stage, type_, go_json(data) if data else "", models,
                       reason=reason or REPORTED_REASON, message=message or REPORTED)


def _why(body: Mapping[str, Any], key: str, limit: int) -> str:
    """The report's `reason` or `message` (what our LC adds), clipped; "" when absent."""
    value = field(body, key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ReportInvalid(f"{key} must be a string")
    return value if len(value) <= limit else value[:limit - 3] + "..."


def _section(part: Mapping[str, Any], keys: tuple[str, ...], *, where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in keys:
        value = field(part, key)
        if value in (None, "", [], {}):
            continue
        if key == "models":
            if not isinstance(value, list):
                raise ReportInvalid(f"{where}.models must be a list")
            out[key] = [_model(m, where=f"{where}.models[{i}]") for i, m in enumerate(value)]
        elif key == "ownerInfo":
            if not isinstance(value, Mapping):
                raise ReportInvalid(f"{where}.ownerInfo must be an object")
            out[key] = _sorted(value)
        else:
            if not isinstance(value, str):
                raise ReportInvalid(f"{where}.{key} must be a string")
            out[key] = value
    return out


def _model(model: Any, *, where: str) -> dict[str, Any]:
    """A model in upstream's key order (its omitempty rules; `classes` is null when absent)."""
    if not isinstance(model, Mapping):
        raise ReportInvalid(f"{where} must be an object")
    out: dict[str, Any] = {}
    for key in ("format", "url"):
        value = field(model, key)
        if value is not None and not isinstance(value, str):
            raise ReportInvalid(f"{where}.{key} must be a string")
        out[key] = value or ""
    for key in ("device_soc_versions", "metrics", "history_metric", "current_metric"):
        value = field(model, key)
        if value not in (None, "", [], {}, 0):
            out[key] = _sorted(value)
    classes = field(model, "classes")
    if classes is not None and not (isinstance(classes, list) and all(isinstance(c, str) for c in classes)):
        raise ReportInvalid(f"{where}.classes must be a list of strings")
    out["classes"] = classes
    for key in _INT_KEYS:
        value = field(model, key)
        if value in (None, 0):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ReportInvalid(f"{where}.{key} must be a non-negative integer")
        out[key] = value
    return out


def _sorted(value: Any) -> Any:
    """Maps with sorted keys, as Go writes a map (upstream's struct fields keep their order)."""
    if isinstance(value, Mapping):
        return {str(k): _sorted(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def reported(status: Mapping[str, Any], report: StageReport, *, now: str) -> dict[str, Any]:
    """The report's (stage, type, data) as the current condition."""
    pos = replace(position(status), stage=report.stage, type=report.type, data=report.data,
                  reason=report.reason, message=report.message)
    out = dict(status)
    out["conditions"] = set_current(out.get("conditions") or [], pos, now=now)
    return out


def stage_report_rule(extra: Callable[[dict[str, Any], StageReport], dict[str, Any]] | None = None):
    """The report rule of a learning kind; `extra` adds what the kind derives (LL's KB)."""
    def rule(body: Mapping[str, Any], now: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        report = parse_stage_report(body)

        def mutate(status: dict[str, Any]) -> dict[str, Any]:
            out = reported(status, report, now=now)
            return extra(out, report) if extra is not None else out
        return mutate
    return rule


# -- the two ends a kind plugs its builders into --------------------------------------


def advanced(cr: Mapping[str, Any], pods: list[Mapping[str, Any]], *, kind: str, hot: bool,
             check: CheckInput) -> Position:
    """The position the job moves to now, from its status and its pods."""
    name = deep_get(cr, "metadata", "name", default="")
    return step(position(cr.get("status")), phases(kind, name, pods), hot=hot, check=check)


def learning_status(cr: Mapping[str, Any], observed: Observed, *, kind: str, hot: bool,
                    check: CheckInput) -> dict[str, Any]:
    """The job's new status: the next position, or Failed (in the current stage) with the
    reason when the spec is bad (it moves on to Train/Waiting once the spec is fixed), or
    Waiting with the reason while an object the spec names does not exist (`_held`)."""
    old = cr.get("status") or {}
    if observed.problem is not None:
        pos = _held(position(old), observed.problem, retrying=observed.retrying)
    else:
        pos = _unheld(advanced(cr, observed.of(PODS), kind=kind, hot=hot, check=check))
    return with_position(old, pos, now=observed.now)


def _held(pos: Position, problem: tuple[str, str], *, retrying: bool) -> Position:
    """Where a problem puts the job: Failed in its stage; or, for one the GM retries (a Model
    that does not exist yet), Waiting with the problem's reason, in the stage it waited in,
    else in Train, where the cycle starts again once the object appears (as after a failure)."""
    reason, message = problem
    if not retrying:
        return replace(pos, type=FAILED, reason=reason, message=message)
    stage = pos.stage if pos.type == WAITING else TRAIN
    return _moved(pos, stage, WAITING, reason, message)


def _unheld(pos: Position) -> Position:
    """A job that waited on a missing object waits for its trigger once the object is there."""
    if pos.type != WAITING or pos.reason in (GM_WAITING, REPORTED_REASON):
        return pos
    return replace(pos, reason=GM_WAITING, message=f"waiting for the {pos.stage.lower()} trigger")
