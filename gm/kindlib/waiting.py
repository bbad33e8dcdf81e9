"""What a job's workers are stuck on, from the observed pods and the nodes that exist. Pure.

A reconcile that can only wait must say so: a pod stuck terminating (its node is gone, so
no kubelet confirms the kill) blocks the recreation of its replacement; a pod bound to a
node that does not exist never starts; an unschedulable pod never gets a node. Each is a
`Wait` naming the pod, what it waits on and since when (from the object's own timestamps,
so the answer is the same on every reconcile and across GM restarts). The status layer
turns them into the job's `Waiting` condition, and a pod that cannot run is not counted as
active.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.objects import deep_get

FINISHED_PHASES = ("Succeeded", "Failed")
SHOWN = 3  # waits named in the condition message; the rest are counted


@dataclass(frozen=True, slots=True)
class Wait:
    pod: str
    reason: str  # PodTerminating | NodeNotFound | Unschedulable
    detail: str
    since: str  # RFC 3339, from the pod

    def describe(self) -> str:
        return f"pod {self.pod} {self.detail} since {self.since}"


def waits(pods: Iterable[Mapping[str, Any]], *, nodes: Collection[str]) -> list[Wait]:
    """Every wait among `pods`, oldest first. `nodes` = names of the nodes that exist."""
    found = [w for pod in pods if (w := _wait(pod, nodes)) is not None]
    return sorted(found, key=lambda w: (w.since, w.pod))


def stranded(pods: Iterable[Mapping[str, Any]], *, nodes: Collection[str]) -> set[str]:
    """Names of live pods bound to a node that does not exist: they cannot be running."""
    return {deep_get(p, "metadata", "name") for p in pods
            if _missing_node(p, nodes) and not _terminating(p) and not _finished(p)}


def summary(found: list[Wait]) -> tuple[str, str] | None:
    """(reason, message) for the Waiting condition, or None when nothing waits; the reason
    is the oldest wait's."""
    if not found:
        return None
    shown = "; ".join(w.describe() for w in found[:SHOWN])
    more = len(found) - SHOWN
    message = f"waiting: {shown}" + (f"; and {more} more" if more > 0 else "")
    return found[0].reason, message


def _wait(pod: Mapping[str, Any], nodes: Collection[str]) -> Wait | None:
    name = deep_get(pod, "metadata", "name") or "?"
    node = deep_get(pod, "spec", "nodeName")
    if _terminating(pod):
        gone = f" (its node {node} does not exist)" if node and node not in nodes else ""
        return Wait(name, "PodTerminating", f"is terminating{gone}",
                    deep_get(pod, "metadata", "deletionTimestamp"))
    if _finished(pod):
        return None
    if _missing_node(pod, nodes):
        return Wait(name, "NodeNotFound", f"is bound to node {node}, which does not exist",
                    deep_get(pod, "metadata", "creationTimestamp") or "")
    unschedulable = _unschedulable(pod)
    if unschedulable is not None:
        since, why = unschedulable
        return Wait(name, "Unschedulable", f"is unschedulable ({why})", since)
    return None


def _unschedulable(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    for cond in deep_get(pod, "status", "conditions", default=None) or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            since = cond.get("lastTransitionTime") or deep_get(pod, "metadata", "creationTimestamp") or ""
            return since, cond.get("message") or cond.get("reason") or "no node fits"
    return None


def _missing_node(pod: Mapping[str, Any], nodes: Collection[str]) -> bool:
    node = deep_get(pod, "spec", "nodeName")
    return bool(node) and node not in nodes


def _terminating(pod: Mapping[str, Any]) -> bool:
    return bool(deep_get(pod, "metadata", "deletionTimestamp"))


def _finished(pod: Mapping[str, Any]) -> bool:
    return deep_get(pod, "status", "phase") in FINISHED_PHASES
