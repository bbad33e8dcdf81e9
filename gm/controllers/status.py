"""Compute a CR's status from its observed children. Pure: the reconciler writes the result.

Status is a function of the cluster (level-triggered), not of events: recomputing it from
the same children gives the same dict, so a reconcile that finds nothing new writes
nothing. Fields that upstream reports own (JI `metrics`, the FL round in the Training
condition's message) are carried over untouched.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from shared.objects import deep_get, find_condition, set_condition

JI_CONDITION_TYPES = ("Pending", "Running", "Failed")
FL_CONDITION_TYPES = ("Training", "Complete", "Failed")
WAITING = "Waiting"  # FL: True while a worker waits on something (see waiting.py); beside the phase ones


def _terminating(obj: Mapping[str, Any]) -> bool:
    return bool(deep_get(obj, "metadata", "deletionTimestamp"))


def pod_counts(pods: Iterable[Mapping[str, Any]], *,
               stranded: Collection[str] = ()) -> tuple[int, int, int]:
    """(active, succeeded, failed) as Kubernetes Jobs count them, except that a pod in
    `stranded` (bound to a node that does not exist) is not active: it cannot run."""
    active = succeeded = failed = 0
    for pod in pods:
        phase = deep_get(pod, "status", "phase", default="")
        if phase == "Succeeded":
            succeeded += 1
        elif phase == "Failed":
            failed += 1
        elif not _terminating(pod) and deep_get(pod, "metadata", "name") not in stranded:
            active += 1
    return active, succeeded, failed


def keep_or_set(conditions: list[dict], type_: str, status: str, *, reason: str, message: str,
                now: str, transition_key: str = "lastTransitionTime") -> list[dict]:
    """Set a condition, but keep an existing entry of the same status as it is (its reason
    and message may carry what upstream reported, e.g. the FL round)."""
    old = find_condition(conditions, type_)
    if old is not None and old.get("status") == status and status == "True":
        return conditions
    return set_condition(conditions, type_, status, reason=reason, message=message, now=now,
                         transition_key=transition_key)


def _exclusive(conditions: list[dict], types: tuple[str, ...], current: str, *, reason: str,
               message: str, now: str, keep: bool = False) -> list[dict]:
    """One entry per type: `current` True with the reason, the others False. With `keep`,
    an entry that is already True keeps its reason and message."""
    for type_ in types:
        if type_ == current and keep:
            conditions = keep_or_set(conditions, type_, "True", reason=reason, message=message, now=now)
        elif type_ == current:
            conditions = set_condition(conditions, type_, "True", reason=reason, message=message, now=now)
        elif find_condition(conditions, type_) is not None:
            conditions = set_condition(conditions, type_, "False", reason="", message="", now=now)
    return conditions


# -- FederatedLearningJob --------------------------------------------------------------


def fl_phase(pods: list[Mapping[str, Any]], *, all_present: bool, stranded: Collection[str] = ()) -> str:
    active, succeeded, failed = pod_counts(pods, stranded=stranded)
    if failed:
        return "Failed"
    if all_present and succeeded and not active and succeeded == len(pods):
        return "Succeeded"
    return "Running" if active or succeeded else "Pending"


def fl_status(job: Mapping[str, Any], pods: list[Mapping[str, Any]], *, all_present: bool,
              converged_generation: int | None, problem: tuple[str, str] | None, now: str,
              stranded: Collection[str] = (), waiting: tuple[str, str] | None = None) -> dict:
    """The FL job's new status. `problem` = (reason, message) of a bad spec, if any;
    `converged_generation` = the generation the pods now run, when they all match it;
    `stranded` = pods that cannot run (not counted active); `waiting` = (reason, message)
    of what the workers wait on (waiting.summary), if anything."""
    status = dict(job.get("status") or {})
    active, succeeded, failed = pod_counts(pods, stranded=stranded)
    phase = fl_phase(pods, all_present=all_present, stranded=stranded)
    status.update(active=active, succeeded=succeeded, failed=failed, phase=phase)
    if pods and not status.get("startTime"):
        status["startTime"] = now
    if phase == "Succeeded" and not status.get("completionTime"):
        status["completionTime"] = now
    conditions = _fl_conditions(list(status.get("conditions") or []), phase, problem, now)
    status["conditions"] = waiting_condition(conditions, waiting, now=now)
    if converged_generation is not None:
        status["observedGeneration"] = converged_generation
    return status


def waiting_condition(conditions: list[dict], waiting: tuple[str, str] | None, *,
                      now: str) -> list[dict]:
    """`Waiting` True with what and since when; False once nothing waits (absent if never)."""
    if waiting is not None:
        reason, message = waiting
        return set_condition(conditions, WAITING, "True", reason=reason, message=message, now=now)
    if find_condition(conditions, WAITING) is not None:
        return set_condition(conditions, WAITING, "False", reason="", message="", now=now)
    return conditions


def _fl_conditions(conditions: list[dict], phase: str, problem: tuple[str, str] | None,
                   now: str) -> list[dict]:
    if problem is not None:
        return _exclusive(conditions, FL_CONDITION_TYPES, "Failed", reason=problem[0],
                          message=problem[1], now=now)
    if phase == "Failed":
        return _exclusive(conditions, FL_CONDITION_TYPES, "Failed", reason="WorkerFailed",
                          message="a worker of the FederatedLearningJob failed", now=now)
    if phase == "Succeeded":
        return _exclusive(conditions, FL_CONDITION_TYPES, "Complete", reason="Completed",
                          message="all workers succeeded", now=now)
    if phase == "Running":
        # upstream round reports refine this condition's message: keep it
        return _exclusive(conditions, FL_CONDITION_TYPES, "Training", reason="Training",
                          message="the workers are running", now=now, keep=True)
    return _clear(conditions, now)


def _clear(conditions: list[dict], now: str) -> list[dict]:
    """No pods yet and no problem: nothing is True."""
    for cond in list(conditions):
        if cond.get("status") == "True" and cond.get("type") != WAITING:
            conditions = set_condition(conditions, cond["type"], "False", reason="", message="", now=now)
    return conditions


# -- JointInferenceService -------------------------------------------------------------


def deployment_failed(dep: Mapping[str, Any]) -> str | None:
    """Why a Deployment counts as failed (a condition says so), else None."""
    for cond in deep_get(dep, "status", "conditions", default=None) or ():
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return cond.get("message") or "replica failure"
        if cond.get("type") == "Progressing" and cond.get("status") == "False":
            return cond.get("message") or cond.get("reason") or "progress deadline exceeded"
    return None


def deployment_active(dep: Mapping[str, Any]) -> bool:
    return not _terminating(dep) and (deep_get(dep, "status", "availableReplicas", default=0) or 0) > 0


def ji_status(ji: Mapping[str, Any], deployments: list[Mapping[str, Any]], *, expected: int,
              converged_generation: int | None, problem: tuple[str, str] | None, now: str) -> dict:
    """The JI service's new status: active/failed workers, one condition per type."""
    status = dict(ji.get("status") or {})
    active = sum(1 for d in deployments if deployment_active(d))
    failures = [(deep_get(d, "metadata", "name"), why) for d in deployments
                if (why := deployment_failed(d)) is not None]
    status.update(active=active, failed=len(failures))
    if deployments and not status.get("startTime"):
        status["startTime"] = now
    conditions = list(status.get("conditions") or [])
    if problem is not None:
        conditions = _exclusive(conditions, JI_CONDITION_TYPES, "Failed", reason=problem[0],
                                message=problem[1], now=now)
    elif failures:
        name, why = failures[0]
        conditions = _exclusive(conditions, JI_CONDITION_TYPES, "Failed", reason="WorkerFailed",
                                message=f"deployment {name}: {why}", now=now)
    elif active >= expected:
        conditions = _exclusive(conditions, JI_CONDITION_TYPES, "Running", reason="WorkersAvailable",
                                message="all workers are available", now=now)
    else:
        conditions = _exclusive(conditions, JI_CONDITION_TYPES, "Pending", reason="WorkersStarting",
                                message=f"{active}/{expected} workers available", now=now)
    status["conditions"] = conditions
    if converged_generation is not None:
        status["observedGeneration"] = converged_generation
    return status
