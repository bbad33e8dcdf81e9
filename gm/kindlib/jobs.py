"""Job semantics for the kinds whose spec embeds a batch/v1 JobSpec (ReidJob, VideoAnalyticsJob).

Upstream reads only `template` and starts one pod with a random name; here the JobSpec
means what it means for a Kubernetes Job, computed level-triggered from the cluster:

- `completions` indexes (default: `parallelism`, so every worker started must succeed),
  one deterministic pod per index, `<job>-<role>-<i>`, with `WORKER_NAME` its own name and
  `JOB_COMPLETION_INDEX` its index. An index is complete while its pod is Succeeded; the job
  is Succeeded when all are (a deleted Succeeded pod of a running job runs again: the pods
  are the record).
- `parallelism` (default 1): at most that many non-terminal pods at once, lowest indexes
  first.
- `backoffLimit` (default 6): a Failed pod is deleted and created again under the same name
  (its `sedna.io/attempt` annotation counts the index's failures, so the spec hash changes);
  once the failures exceed the limit, as for a Job, the job is Failed (BackoffLimitExceeded).
  Failures per index are kept in `status.indexFailures`: a failed pod is replaced only once
  its failure is recorded there, so deleting it never loses the count (the status write
  that records it enqueues the job again). `status.failed` is their sum, as a Job counts.
- `activeDeadlineSeconds`, from `status.startTime`: once past it no pod is created, live
  pods are deleted and the job is Failed (DeadlineExceeded); `wake` brings the reconciler
  back at the deadline.
- `ttlSecondsAfterFinished`: `expired` says when the reconciler deletes the finished CR
  (from `completionTime`, which is set on success and on failure alike).
- A finished job (Succeeded, or Failed by the backoff limit or the deadline) is final: its
  pods never come back and its status no longer changes. A job Failed by a bad spec is not
  finished: fixing the spec resumes it.
- `restartPolicy` is forced to Never when the template leaves it unset or says Always (an
  Always pod never ends, so the job could never finish); OnFailure is kept.

Not honoured: `suspend`, `completionMode` (completion is always per index),
`backoffLimitPerIndex`, `podFailurePolicy`, `successPolicy`, `selector` (the GM selects
its pods by owner).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gm.kindlib.conditions import WAITING, clear_true, exclusive, pod_counts, waiting_condition
from gm.kube.resources import PODS
from gm.reconcile.declaration import Build, Dependencies, KindDeclaration, Observed, Owns, Watches
from gm.reports import metrics_report, parse_time
from gm.workers.owned import Owner, build_pod
from gm.workers.specerrors import InvalidSpec
from gm.workers.storage import StoragePlan
from gm.workers.template import PodKnobs, checked_template, env_field, env_value, render_template
from shared import apis
from shared.objects import deep_get, find_condition, set_condition

ATTEMPT_ANNOTATION = "sedna.io/attempt"
CONDITION_TYPES = ("Running", "Completed", "Failed")
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
DEADLINE_EXCEEDED = "DeadlineExceeded"
COMPLETED = "Completed"
JOB_FAILURES = (BACKOFF_LIMIT_EXCEEDED, DEADLINE_EXCEEDED)
DEFAULT_BACKOFF_LIMIT = 6
MAX_COMPLETIONS = 10_000  # one pod name per index; more is a typo, not a job
_TERMINAL = ("Succeeded", "Failed")


# -- the JobSpec ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobSpec:
    parallelism: int
    completions: int
    backoff_limit: int
    deadline: int | None  # activeDeadlineSeconds
    ttl: int | None  # ttlSecondsAfterFinished


def job_spec(spec: Mapping[str, Any]) -> JobSpec:
    """The JobSpec knobs with their defaults; InvalidSpec naming the field that is wrong."""
    parallelism = _int(spec, "parallelism", default=1, low=1)
    completions = _int(spec, "completions", default=parallelism, low=1)
    if completions > MAX_COMPLETIONS:
        raise InvalidSpec("InvalidJobSpec", f"spec.completions must be at most {MAX_COMPLETIONS}")
    return JobSpec(parallelism=parallelism, completions=completions,
                   backoff_limit=_int(spec, "backoffLimit", default=DEFAULT_BACKOFF_LIMIT, low=0),
                   deadline=_int(spec, "activeDeadlineSeconds", default=None, low=1),
                   ttl=_int(spec, "ttlSecondsAfterFinished", default=None, low=0))


def _int(spec: Mapping[str, Any], key: str, *, default: int | None, low: int) -> Any:
    value = spec.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidSpec("InvalidJobSpec", f"spec.{key} must be an integer >= {low}, got {value!r}")
    return value


def _lenient(cr: Mapping[str, Any], key: str) -> int | None:
    """A knob read where a bad spec must not raise (wake, expired): None unless valid."""
    value = deep_get(cr, "spec", key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# -- what the cluster says about the job ----------------------------------------------


@dataclass(frozen=True, slots=True)
class Index:
    """One completion index: its pod (None when absent) and its failures so far."""

    index: int
    pod: Mapping[str, Any] | None
    failures: int
    recorded: int  # the failures `status.indexFailures` holds for it

    @property
    def phase(self) -> str:
        return deep_get(self.pod, "status", "phase", default="") if self.pod is not None else ""

    @property
    def live(self) -> bool:
        return self.pod is not None and self.phase not in _TERMINAL

    @property
    def replaceable(self) -> bool:
        """No pod, or a Failed one whose failure is recorded (so deleting it loses nothing)."""
        return self.pod is None or (self.phase == "Failed" and self.recorded >= self.failures)


@dataclass(frozen=True, slots=True)
class JobState:
    spec: JobSpec
    indexes: tuple[Index, ...]
    outcome: str | None  # COMPLETED, BACKOFF_LIMIT_EXCEEDED, DEADLINE_EXCEEDED, or None

    @property
    def failures(self) -> int:
        return sum(i.failures for i in self.indexes)

    @property
    def succeeded(self) -> int:
        return sum(1 for i in self.indexes if i.phase == "Succeeded")

    @property
    def active(self) -> int:
        return sum(1 for i in self.indexes
                   if i.live and not deep_get(i.pod, "metadata", "deletionTimestamp"))


def pod_name(job: str, role: str, index: int) -> str:
    return f"{job}-{role}-{index}"


def attempt_of(pod: Mapping[str, Any]) -> int:
    value = deep_get(pod, "metadata", "annotations", ATTEMPT_ANNOTATION, default="0")
    return int(value) if isinstance(value, str) and value.isdigit() else 0


def observe(cr: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *, spec: JobSpec,
            role: str, now: str) -> JobState:
    """The job as its pods and its recorded failures show it now."""
    by_name = {deep_get(p, "metadata", "name"): p for p in pods}
    recorded = _recorded(cr)
    indexes = []
    for i in range(spec.completions):
        pod = by_name.get(pod_name(cr["metadata"]["name"], role, i))
        seen = attempt_of(pod) + (deep_get(pod, "status", "phase") == "Failed") if pod else 0
        kept = recorded[i] if i < len(recorded) else 0
        indexes.append(Index(i, pod, max(kept, seen), kept))
    state = JobState(spec, tuple(indexes), None)
    return replace(state, outcome=_outcome(cr, state, now))


def _recorded(cr: Mapping[str, Any]) -> list[int]:
    values = deep_get(cr, "status", "indexFailures", default=None)
    if not isinstance(values, list):
        return []
    return [v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0 for v in values]


def _outcome(cr: Mapping[str, Any], state: JobState, now: str) -> str | None:
    """Why the job is over, checked in a Job's order (backoff, deadline, completion)."""
    if state.failures > state.spec.backoff_limit:
        return BACKOFF_LIMIT_EXCEEDED
    if state.spec.deadline is not None and _past(deep_get(cr, "status", "startTime"),
                                                 state.spec.deadline, now):
        return DEADLINE_EXCEEDED
    if state.succeeded == state.spec.completions:
        return COMPLETED
    return None


def _seconds_until(start: Any, delay: int, now: str) -> float | None:
    """Seconds from `now` to `delay` after `start`; None unless both are zoned RFC 3339 times."""
    begin, moment = parse_time(start), parse_time(now)
    if begin is None or moment is None or begin.tzinfo is None or moment.tzinfo is None:
        return None
    return (begin - moment).total_seconds() + delay


def _past(start: Any, delay: int, now: str) -> bool:
    left = _seconds_until(start, delay, now)
    return left is not None and left <= 0


# -- finished, wake, expired: what the reconciler asks of the CR alone ---------------


def finished(cr: Mapping[str, Any]) -> bool:
    """Succeeded, or Failed by the job's own rules (a bad spec is not an end)."""
    status = cr.get("status") or {}
    if status.get("phase") == "Succeeded":
        return True
    return status.get("phase") == "Failed" and any(
        c.get("type") == "Failed" and c.get("status") == "True" and c.get("reason") in JOB_FAILURES
        for c in status.get("conditions") or ())


def wake(cr: Mapping[str, Any], now: str) -> float | None:
    """Seconds until the deadline of a running job, or until a finished one expires."""
    status = cr.get("status") or {}
    if finished(cr):
        ttl = _lenient(cr, "ttlSecondsAfterFinished")
        return None if ttl is None else _seconds_until(status.get("completionTime"), ttl, now)
    deadline = _lenient(cr, "activeDeadlineSeconds")
    left = None if deadline is None else _seconds_until(status.get("startTime"), deadline, now)
    # past the deadline yet not finished: something else (a bad spec) holds the job; an
    # edit brings it back, a wake now would only spin
    return left if left is not None and left > 0 else None


def expired(cr: Mapping[str, Any], now: str) -> bool:
    """Finished for at least ttlSecondsAfterFinished: the CR itself is to be deleted."""
    ttl = _lenient(cr, "ttlSecondsAfterFinished")
    return finished(cr) and ttl is not None and _past(
        deep_get(cr, "status", "completionTime"), ttl, now)


# -- build: the pods the job wants now -------------------------------------------------


@dataclass(frozen=True, slots=True)
class Worker:
    """What a kind puts in every pod of its job: its role (worker type, name part), the env
    after the identity entries, and the storage its mounts need."""

    role: str
    env: tuple[dict[str, Any], ...]
    storage: StoragePlan


MakePod = Callable[[int, int], dict[str, Any]]


def desired_pods(state: JobState, make: MakePod) -> list[dict[str, Any]]:
    """Pods to keep or (re)create. Terminal pods are kept as they are; live pods are rebuilt
    (an edit recreates them); free slots go to the lowest indexes without a usable pod.
    A job that is over keeps only its terminal pods, so its live ones are deleted."""
    if state.outcome is not None:
        return [kept(i.pod) for i in state.indexes if i.pod is not None and not i.live]
    out: list[dict[str, Any]] = []
    slots = state.spec.parallelism - sum(1 for i in state.indexes if i.live)
    for index in state.indexes:
        if index.live:
            out.append(make(index.index, index.failures))
        elif index.phase != "Succeeded" and index.replaceable and slots > 0:
            out.append(make(index.index, index.failures))
            slots -= 1
        elif index.pod is not None:
            out.append(kept(index.pod))
    return out


def kept(pod: Mapping[str, Any]) -> dict[str, Any]:
    """An observed pod as a desired child that changes nothing (its own spec hash)."""
    meta = pod.get("metadata") or {}
    fields = ("name", "namespace", "labels", "annotations", "ownerReferences")
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {k: copy.deepcopy(meta[k]) for k in fields if k in meta},
            "spec": copy.deepcopy(pod.get("spec") or {})}


def job_pod(owner: Owner, worker: Worker, template: Any, *, index: int,
            attempt: int) -> dict[str, Any]:
    """The pod of one index at one attempt."""
    name = pod_name(owner.name, worker.role, index)
    env = [env_field("WORKER_NAME", "metadata.name"), env_value("JOB_NAME", owner.name),
           env_value("NAMESPACE", owner.namespace), *worker.env,
           env_value("JOB_COMPLETION_INDEX", str(index)),
           *(env_value(k, v) for k, v in worker.storage.env)]
    rendered = render_template(template, where="spec.template", env=env, storage=worker.storage,
                               knobs=PodKnobs(restart_policy="Never"))
    if rendered["spec"].get("restartPolicy") == "Always":
        rendered["spec"]["restartPolicy"] = "Never"
    annotations = {**rendered["metadata"].get("annotations", {}), ATTEMPT_ANNOTATION: str(attempt)}
    rendered["metadata"]["annotations"] = annotations
    return build_pod(owner, name=name, worker_type=worker.role, rendered=rendered)


def build_job_pods(cr: Mapping[str, Any], deps: Dependencies, *, owner: Owner,
                   worker: Callable[[], Worker]) -> list[dict[str, Any]]:
    """Every pod the job wants, from its spec and the pods it has. `worker` is only asked
    for while the job runs: a finished job keeps its terminal pods as they are, whatever
    its spec or its Model say now."""
    pods = deps.observed(PODS)
    if finished(cr):
        return [kept(p) for p in pods if deep_get(p, "status", "phase") in _TERMINAL]
    spec, template, made = job_spec(cr["spec"]), cr["spec"].get("template"), worker()
    checked_template(template, where="spec.template")  # a bad template fails every time
    state = observe(cr, pods, spec=spec, role=made.role, now=deps.now)
    return desired_pods(state, lambda i, attempt: job_pod(owner, made, template, index=i,
                                                          attempt=attempt))


def kafka_env(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`KAFKA_ENABLED=true` when the spec asks for Kafka, as upstream."""
    return [env_value("KAFKA_ENABLED", "true")] if spec.get("kafkaSupport") is True else []


# -- status ----------------------------------------------------------------------------


def job_status(cr: Mapping[str, Any], observed: Observed, *, role: str, kind: str) -> dict:
    """The job's new status; a finished job's status is final."""
    status = dict(cr.get("status") or {})
    if finished(cr):
        status["active"] = pod_counts(observed.of(PODS))[0]  # the live pods it deletes
        return status
    now = observed.now
    if observed.problem is not None:
        return _problem_status(status, observed, observed.problem, now)
    state = observe(cr, observed.of(PODS), spec=job_spec(cr["spec"]), role=role, now=now)
    status.update(active=state.active, succeeded=state.succeeded, failed=state.failures,
                  indexFailures=[i.failures for i in state.indexes], phase=_phase(state))
    if not status.get("startTime"):
        status["startTime"] = now
    if state.outcome is not None and not status.get("completionTime"):
        status["completionTime"] = now
    status["conditions"] = _conditions(list(status.get("conditions") or []), state, kind, now)
    return status


def _problem_status(status: dict, observed: Observed, problem: tuple[str, str], now: str) -> dict:
    """A bad spec: the Failed condition says why; something missing the GM waits for (a
    Model that does not exist yet): the Waiting condition says what. The counters and phase
    are the pods'."""
    active, succeeded, _ = pod_counts(observed.of(PODS))
    status.update(active=active, succeeded=succeeded, phase="Running" if active else "Pending")
    status.setdefault("failed", 0)
    conditions = list(status.get("conditions") or [])
    reason, message = problem
    if observed.retrying:
        failed = find_condition(conditions, "Failed")
        if failed is not None and failed.get("status") == "True":
            conditions = set_condition(conditions, "Failed", "False", reason=reason,
                                       message=f"{WAITING} instead: {message}", now=now)
        status["conditions"] = waiting_condition(conditions, problem, now=now)
        return status
    status["conditions"] = waiting_condition(
        exclusive(conditions, CONDITION_TYPES, "Failed", reason=reason, message=message, now=now),
        None, now=now)
    return status


def _phase(state: JobState) -> str:
    if state.outcome == COMPLETED:
        return "Succeeded"
    if state.outcome is not None:
        return "Failed"
    return "Running" if state.active or state.succeeded else "Pending"


def _conditions(conditions: list[dict], state: JobState, kind: str, now: str) -> list[dict]:
    conditions = waiting_condition(conditions, None, now=now)  # nothing missing any more
    current = _condition(state, kind)
    if current is None:
        return clear_true(conditions, now)
    type_, reason, message = current
    return exclusive(conditions, CONDITION_TYPES, type_, reason=reason, message=message, now=now)


def _condition(state: JobState, kind: str) -> tuple[str, str, str] | None:
    """(type, reason, message) of the one True condition, None while nothing has started."""
    spec, done = state.spec, f"{state.succeeded}/{state.spec.completions} completions succeeded"
    tries = f"{state.failures} failed pods (backoffLimit {spec.backoff_limit})"
    if state.outcome == COMPLETED:
        return "Completed", COMPLETED, f"the {kind} completed: {done}"
    if state.outcome == DEADLINE_EXCEEDED:
        return "Failed", DEADLINE_EXCEEDED, \
            f"the job was active longer than its activeDeadlineSeconds ({spec.deadline}): {done}"
    if state.outcome == BACKOFF_LIMIT_EXCEEDED:
        return "Failed", BACKOFF_LIMIT_EXCEEDED, \
            f"the job has reached the specified backoff limit: {tries}, {done}"
    if state.active or state.succeeded:
        return "Running", "Running", f"{state.active} active, {done}, {tries}"
    return None


# -- the declaration -------------------------------------------------------------------


def declaration(api: apis.SednaKind, *, role: str, build: Build, controller: str, component: str,
                owns: tuple[Owns, ...] = (), watches: tuple[Watches, ...] = ()) -> KindDeclaration:
    """A job kind: its pods are `recreate` children that never come back once it is finished,
    and the job rules answer status, finished, wake and expired; `owns` and `watches` are
    what the kind adds (a Service, its Models). Reports: upstream parses a job's report and
    discards it; here its `ownerInfo` (without its two times) becomes `status.metrics`,
    sorted by key, as for JointInferenceService: what the workers say they are doing is
    worth showing the user."""
    def status(cr: dict, observed: Observed) -> dict:
        return job_status(cr, observed, role=role, kind=api.kind)

    return KindDeclaration(
        api=api, owns=(Owns(PODS, on_edit="recreate", frozen_when_finished=True), *owns),
        build=build, status=status, watches=watches, controller=controller, component=component,
        finished=finished, wake=wake, expired=expired, report=metrics_report)
