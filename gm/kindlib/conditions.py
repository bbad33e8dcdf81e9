"""Condition and counting rules every kind's status shares. Pure.

Status is a function of the cluster (level-triggered), not of events: recomputing it from
the same children gives the same dict, so a reconcile that finds nothing new writes
nothing. One entry per condition type, upserted, never appended. Every entry, True or False,
has a reason and a message (`shared.objects.set_condition` refuses one without): a False
entry says what holds instead.

A reconcile problem the GM retries by itself (`Problem.retryable`: a Model, Dataset or
Secret the spec names that does not exist yet, an admission refusal) is a wait, not a
failure: the kinds show it as their waiting state (`Pending`, or the `Waiting` condition)
with the problem's reason and message, and it clears when the object appears.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from shared.objects import deep_get, find_condition, set_condition

WAITING = "Waiting"  # True while a worker waits on something (see waiting.py); beside the phase ones


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


def exclusive(conditions: list[dict], types: tuple[str, ...], current: str, *, reason: str,
               message: str, now: str, keep: bool = False) -> list[dict]:
    """One entry per type: `current` True with the reason, the others False. With `keep`,
    an entry that is already True keeps its reason and message."""
    for type_ in types:
        if type_ == current and keep:
            conditions = keep_or_set(conditions, type_, "True", reason=reason, message=message, now=now)
        elif type_ == current:
            conditions = set_condition(conditions, type_, "True", reason=reason, message=message, now=now)
        elif find_condition(conditions, type_) is not None:
            conditions = set_condition(conditions, type_, "False", reason=reason,
                                       message=f"{current} instead: {message}", now=now)
    return conditions


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




def waiting_condition(conditions: list[dict], waiting: tuple[str, str] | None, *,
                      now: str) -> list[dict]:
    """`Waiting` True with what and since when; False once nothing waits (absent if never)."""
    if waiting is not None:
        reason, message = waiting
        return set_condition(conditions, WAITING, "True", reason=reason, message=message, now=now)
    if find_condition(conditions, WAITING) is not None:
        return set_condition(conditions, WAITING, "False", reason=NOT_WAITING,
                             message="nothing the workers need is missing", now=now)
    return conditions


NOT_WAITING = "NothingMissing"
NO_WORKERS = "NoWorkers"


def clear_true(conditions: list[dict], now: str) -> list[dict]:
    """No pods yet and no problem: nothing is True."""
    for cond in list(conditions):
        if cond.get("status") == "True" and cond.get("type") != WAITING:
            conditions = set_condition(conditions, cond["type"], "False", reason=NO_WORKERS,
                                       message="no worker has started", now=now)
    return conditions
