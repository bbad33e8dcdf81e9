"""Scheduler stand-in (spec §7.5): bind each unscheduled pod to a fitting Ready node.

A pod fits a node when it passes the filters of `placement` (cordon, taints and
tolerations, nodeSelector and required node affinity); among fitting nodes the one with
the fewest pods wins (name breaks ties). When nothing fits the pod gets `PodScheduled=False/Unschedulable` and a
`FailedScheduling` event, and is retried whenever a node changes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable
from typing import Any

from devcluster.controllers.base import Controller
from devcluster.controllers.meta import find_condition, is_deleting, set_condition
from devcluster.controllers.placement import misfit, unschedulable_message
from devcluster.storage.objects import get_or_none

COMPONENT = "default-scheduler"


def needs_scheduling(pod: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    return (
        not spec.get("nodeName")
        and spec.get("schedulerName", "default-scheduler") in ("", "default-scheduler")
        and not is_deleting(pod)
        and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
    )


def pick_node(pod: dict[str, Any], nodes: list[dict[str, Any]], load: Counter) -> tuple[str | None, str]:
    """(node name, "") for a fit, or (None, the FailedScheduling message)."""
    spec = pod.get("spec") or {}
    reasons: Counter = Counter()
    fits = []
    for node in nodes:
        why = misfit(spec, node)
        if why is None:
            fits.append(node["metadata"]["name"])
        else:
            reasons[why] += 1
    if fits:
        return min(fits, key=lambda n: (load[n], n)), ""
    return None, unschedulable_message(len(nodes), reasons)


class Scheduler(Controller):
    """Assigns `spec.nodeName` to pods that have none."""

    name = "default-scheduler"

    def __init__(self, store: Any, *, resync: float = 5.0):
        super().__init__(store, resync=resync)
        reg = store.registry
        self.pod_rt = reg.lookup(group="", version="v1", resource="pods")
        self.node_rt = reg.lookup(group="", version="v1", resource="nodes")

    def keys_for(self, event: Any) -> Iterable[Hashable]:
        if event.rt.key == self.node_rt.key:
            return self.resync_keys()
        if event.rt.key == self.pod_rt.key and event.type != "DELETED" and needs_scheduling(event.obj):
            meta = event.obj["metadata"]
            return [(meta["namespace"], meta["name"])]
        return ()

    def resync_keys(self) -> Iterable[Hashable]:
        items, _ = self.store.list(self.pod_rt, None)
        return [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in items if needs_scheduling(p)]

    async def sync(self, key: Hashable) -> float | None:
        ns, name = key  # type: ignore[misc]
        pod = get_or_none(self.store, self.pod_rt, ns, name)
        if pod is None:
            return None
        if not needs_scheduling(pod):
            return None
        nodes, _ = self.store.list(self.node_rt, None)
        pods, _ = self.store.list(self.pod_rt, None)
        load = Counter(p["spec"].get("nodeName") for p in pods if p.get("spec", {}).get("nodeName"))
        node, message = pick_node(pod, nodes, load)
        if node is None:
            self._unschedulable(pod, message)
        else:
            self._bind(pod, node)
        return None

    def _bind(self, pod: dict[str, Any], node: str) -> None:
        meta = pod["metadata"]
        self.store.bind(meta["namespace"], meta["name"], node, uid=meta["uid"])  # also PodScheduled=True
        self.store.record_event(
            pod, reason="Scheduled", message=f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}",
            component=COMPONENT,
        )

    def _unschedulable(self, pod: dict[str, Any], message: str) -> None:
        cond = find_condition((pod.get("status") or {}).get("conditions"), "PodScheduled")
        if cond and cond.get("status") == "False" and cond.get("message") == message:
            return  # already reported; a node change will retry

        def edit(obj: dict[str, Any]) -> None:
            conds = obj.setdefault("status", {}).setdefault("conditions", [])
            set_condition(conds, "PodScheduled", "False", reason="Unschedulable", message=message)

        meta = pod["metadata"]
        self.store.mutate(self.pod_rt, meta["namespace"], meta["name"], edit, subresource="status")
        self.store.record_event(pod, reason="FailedScheduling", message=message, type="Warning",
                                component=COMPONENT)
