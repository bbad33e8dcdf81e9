"""A Deployment's progress deadline: Progressing=False/ProgressDeadlineExceeded when a rollout stalls.

Progress is any change of the rollout's counts (replicas, updated, ready, available); it
moves the Progressing condition's `lastUpdateTime`. A rollout that is not complete and has
not progressed for `progressDeadlineSeconds` since then gets `Progressing=False` with
reason `ProgressDeadlineExceeded`, which stays until the rollout progresses again (then
the condition is True again) and which `kubectl rollout status` reports as a failure.
Paused Deployments never time out. Pure: the controller passes the old and new status.
"""

from __future__ import annotations

import copy
from typing import Any

from devcluster.controllers.meta import find_condition, now_time, seconds_since

EXCEEDED = "ProgressDeadlineExceeded"
_COUNTS = ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas")


def _progressed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return any(old.get(k, 0) != new.get(k, 0) for k in _COUNTS) or not find_condition(
        old.get("conditions"), "Progressing")


def apply_deadline(d: dict[str, Any], old: dict[str, Any], new: dict[str, Any], *, complete: bool,
                   rs_name: str | None) -> float | None:
    """Edit `new`'s Progressing condition for the deadline; seconds until it could expire, or None."""
    deadline = d["spec"].get("progressDeadlineSeconds")
    cond = find_condition(new.get("conditions"), "Progressing")
    if deadline is None or complete or d["spec"].get("paused") or cond is None:
        return None
    now = now_time()
    if _progressed(old, new):
        cond["lastUpdateTime"] = now
        return float(deadline)
    before = find_condition(old.get("conditions"), "Progressing")
    if before is not None and before.get("reason") == EXCEEDED:
        cond.clear()
        cond.update(copy.deepcopy(before))
        return None
    elapsed = seconds_since(cond.get("lastUpdateTime")) or 0.0
    if elapsed < deadline:
        return max(0.05, deadline - elapsed)
    cond.update(status="False", reason=EXCEEDED, lastUpdateTime=now, lastTransitionTime=now,
                message=f'ReplicaSet "{rs_name}" has timed out progressing.' if rs_name
                else f'Deployment "{d["metadata"]["name"]}" has timed out progressing.')
    return None
