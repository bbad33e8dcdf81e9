"""Which pods a ReplicaSet deletes first when it scales down (spec §7.3 step 4).

The order mirrors the real controller: the least valuable pod goes first.
"""

from __future__ import annotations

from typing import Any

from devcluster.controllers.meta import find_condition, parse_time

_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def _ready_since(pod: dict[str, Any]) -> str | None:
    cond = find_condition(pod.get("status", {}).get("conditions"), "Ready")
    if cond and cond.get("status") == "True":
        return cond.get("lastTransitionTime") or ""
    return None


def _restarts(pod: dict[str, Any]) -> int:
    return sum(int(cs.get("restartCount", 0)) for cs in pod.get("status", {}).get("containerStatuses") or [])


def _cost(pod: dict[str, Any]) -> int:
    raw = (pod.get("metadata", {}).get("annotations") or {}).get(DELETION_COST, "0")
    try:
        return int(raw)
    except ValueError:
        return 0


def _ts(value: str | None) -> float:
    t = parse_time(value)
    return t.timestamp() if t else 0.0


def deletion_rank(pod: dict[str, Any]) -> tuple:
    """Sort key: smaller means delete sooner."""
    spec, status = pod.get("spec", {}), pod.get("status", {})
    ready_since = _ready_since(pod)
    return (
        1 if spec.get("nodeName") else 0,
        _PHASE_RANK.get(status.get("phase", "Pending"), 0),
        1 if ready_since is not None else 0,
        _cost(pod),
        -_ts(ready_since) if ready_since is not None else 0.0,  # ready more recently first
        -_restarts(pod),
        -_ts(pod.get("metadata", {}).get("creationTimestamp")),  # newer first
    )


def pods_to_delete(pods: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """The `count` least valuable pods."""
    if count <= 0:
        return []
    return sorted(pods, key=deletion_rank)[:count]
