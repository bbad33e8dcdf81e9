"""Compute a CR's status from its observed children. Pure: the reconciler writes the result.

Status is a function of the cluster (level-triggered), not of events: recomputing it from
the same children gives the same dict, so a reconcile that finds nothing new writes
nothing. Fields that upstream reports own (JI `metrics`, the FL round in the Training
condition's message) are carried over untouched.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gm.controllers.conditions import (  # noqa: F401 - pod_counts re-exported
    WAITING,
    clear_true,
    deployment_active,
    deployment_failed,
    exclusive,
    pod_counts,
    waiting_condition,
)
from shared.objects import deep_get

JI_CONDITION_TYPES = ("Pending", "Running", "Failed")
FL_CONDITION_TYPES = ("Training", "Complete", "Failed")


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


def _fl_conditions(conditions: list[dict], phase: str, problem: tuple[str, str] | None,
                   now: str) -> list[dict]:
    if problem is not None:
        return exclusive(conditions, FL_CONDITION_TYPES, "Failed", reason=problem[0],
                          message=problem[1], now=now)
    if phase == "Failed":
        return exclusive(conditions, FL_CONDITION_TYPES, "Failed", reason="WorkerFailed",
                          message="a worker of the FederatedLearningJob failed", now=now)
    if phase == "Succeeded":
        return exclusive(conditions, FL_CONDITION_TYPES, "Complete", reason="Completed",
                          message="all workers succeeded", now=now)
    if phase == "Running":
        # upstream round reports refine this condition's message: keep it
        return exclusive(conditions, FL_CONDITION_TYPES, "Training", reason="Training",
                          message="the workers are running", now=now, keep=True)
    return clear_true(conditions, now)


# -- JointInferenceService -------------------------------------------------------------


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
        conditions = exclusive(conditions, JI_CONDITION_TYPES, "Failed", reason=problem[0],
                                message=problem[1], now=now)
    elif failures:
        name, why = failures[0]
        conditions = exclusive(conditions, JI_CONDITION_TYPES, "Failed", reason="WorkerFailed",
                                message=f"deployment {name}: {why}", now=now)
    elif active >= expected:
        conditions = exclusive(conditions, JI_CONDITION_TYPES, "Running", reason="WorkersAvailable",
                                message="all workers are available", now=now)
    else:
        conditions = exclusive(conditions, JI_CONDITION_TYPES, "Pending", reason="WorkersStarting",
                                message=f"{active}/{expected} workers available", now=now)
    status["conditions"] = conditions
    if converged_generation is not None:
        status["observedGeneration"] = converged_generation
    return status
