"""DaemonSet controller: one pod per node the DaemonSet's pods fit, rolled on template change.

Which nodes: a node should run a daemon pod when the pod the controller would create fits
it (`placement.misfit`: nodeSelector, required node affinity, taints against the
template's tolerations plus the defaults every daemon pod gets). The pod is pinned to its
node the way the real controller does it, by a required node affinity
`matchFields metadata.name In [node]`, and bound by the scheduler.

Pods carry the template's labels plus `controller-revision-hash` (a hash of the template,
in the `pod-template-hash` format) and `pod-template-generation`, and a controller
ownerReference. A pod whose hash is not the current one is old: `RollingUpdate` deletes
old pods, at most `maxUnavailable` nodes without an available pod at a time (old pods
that are not available anyway go first), and the next sync creates the new ones;
`OnDelete` replaces a pod only once someone deleted it. Failed pods are deleted and
recreated. ControllerRevision objects are not kept (no `kubectl rollout undo` for
DaemonSets) and `maxSurge` is treated as 0.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Hashable, Iterable
from typing import Any

from devcluster.controllers.base import Controller
from devcluster.controllers.meta import controller_ref, get_controller_of, is_deleting
from devcluster.controllers.placement import misfit
from devcluster.controllers.podhash import pod_template_hash
from devcluster.controllers.podops import create_pod, delete_pod
from devcluster.controllers.replicaset import available_after, is_ready
from devcluster.controllers.rollout import IntOrPercentError, resolve_int_or_percent
from devcluster.storage.objects import get_or_none
from devcluster.strategy.workloads import TEMPLATE_GENERATION

log = logging.getLogger("devcluster.daemonset")

COMPONENT = "daemonset-controller"
HASH_LABEL = "controller-revision-hash"
GENERATION_LABEL = "pod-template-generation"

_DEFAULT_TOLERATIONS = (
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
)
_HOST_NETWORK_TOLERATION = ("node.kubernetes.io/network-unavailable", "NoSchedule")


def template_hash(ds: dict[str, Any]) -> str:
    return pod_template_hash(ds["spec"].get("template") or {}, (ds.get("status") or {}).get("collisionCount"))


def daemon_tolerations(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The template's tolerations plus the defaults a daemon pod gets (none duplicated)."""
    tols = [copy.deepcopy(t) for t in pod_spec.get("tolerations") or []]
    wanted = list(_DEFAULT_TOLERATIONS)
    if pod_spec.get("hostNetwork"):
        wanted.append(_HOST_NETWORK_TOLERATION)
    for key, effect in wanted:
        if not any(t.get("key") == key and t.get("effect") == effect for t in tols):
            tols.append({"key": key, "operator": "Exists", "effect": effect})
    return tols


def pin_to_node(pod_spec: dict[str, Any], node: str) -> None:
    """Replace the required node affinity by `metadata.name In [node]` (preferred terms stay)."""
    node_aff = pod_spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}


def template_generation(ds: dict[str, Any]) -> str:
    """The DaemonSet's template generation (its annotation; 1 for one stored before it had one)."""
    return str((ds["metadata"].get("annotations") or {}).get(TEMPLATE_GENERATION) or 1)


def build_pod(ds: dict[str, Any], node: str, *, pod_hash: str) -> dict[str, Any]:
    """The daemon pod of `ds` for `node`."""
    tmpl = copy.deepcopy(ds["spec"].get("template") or {})
    tmeta = tmpl.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {})
    labels[HASH_LABEL] = pod_hash
    labels[GENERATION_LABEL] = template_generation(ds)
    meta: dict[str, Any] = {"generateName": ds["metadata"]["name"] + "-", "namespace": ds["metadata"]["namespace"],
                            "labels": labels, "ownerReferences": [controller_ref(ds)]}
    if tmeta.get("annotations"):
        meta["annotations"] = tmeta["annotations"]
    spec = tmpl.get("spec") or {}
    spec["tolerations"] = daemon_tolerations(spec)
    pin_to_node(spec, node)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def should_run(ds: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether a daemon pod of `ds` fits `node` (its template, with the default tolerations)."""
    spec = copy.deepcopy((ds["spec"].get("template") or {}).get("spec") or {})
    spec["tolerations"] = daemon_tolerations(spec)
    return misfit(spec, node) is None


def pod_node(pod: dict[str, Any]) -> str | None:
    """The node a daemon pod runs on or is pinned to."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return spec["nodeName"]
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and field.get("values"):
                return field["values"][0]
    return None


def _finished(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _available(pod: dict[str, Any], min_ready: int) -> bool:
    return not is_deleting(pod) and available_after(pod, min_ready) == 0


def compute_status(ds: dict[str, Any], by_node: dict[str, list[dict[str, Any]]], eligible: set[str], *,
                   pod_hash: str) -> dict[str, Any]:
    """DaemonSet status from the pods per node and the nodes that should run one."""
    min_ready = int(ds["spec"].get("minReadySeconds") or 0)
    current = ready = updated = available = 0
    for node in eligible:
        pods = [p for p in by_node.get(node, []) if not is_deleting(p)]
        if not pods:
            continue
        current += 1
        pod = pods[0]
        ready += is_ready(pod)
        available += _available(pod, min_ready)
        updated += (pod["metadata"].get("labels") or {}).get(HASH_LABEL) == pod_hash
    status = dict(ds.get("status") or {})
    status.update(
        desiredNumberScheduled=len(eligible), currentNumberScheduled=current,
        numberMisscheduled=sum(1 for n, pods in by_node.items() if n not in eligible and pods),
        numberReady=ready, updatedNumberScheduled=updated, numberAvailable=available,
        observedGeneration=ds["metadata"].get("generation", 1),
    )
    if len(eligible) - available > 0:
        status["numberUnavailable"] = len(eligible) - available
    else:
        status.pop("numberUnavailable", None)
    return status


class DaemonSetController(Controller):
    """Keeps one pod of each DaemonSet on every node it should run on."""

    name = "daemonset-controller"

    def __init__(self, store: Any, *, resync: float = 5.0):
        super().__init__(store, resync=resync)
        reg = store.registry
        self.ds_rt = reg.lookup(group="apps", version="v1", resource="daemonsets")
        self.pod_rt = reg.lookup(group="", version="v1", resource="pods")
        self.node_rt = reg.lookup(group="", version="v1", resource="nodes")

    def keys_for(self, event: Any) -> Iterable[Hashable]:
        if event.rt.key == self.ds_rt.key:
            return [(event.obj["metadata"]["namespace"], event.obj["metadata"]["name"])]
        if event.rt.key == self.node_rt.key:
            return self.resync_keys()
        if event.rt.key != self.pod_rt.key:
            return ()
        ref = get_controller_of(event.obj)
        if ref is not None and ref.get("kind") == "DaemonSet":
            return [(event.obj["metadata"]["namespace"], ref["name"])]
        return ()

    def resync_keys(self) -> Iterable[Hashable]:
        items, _ = self.store.list(self.ds_rt, None)
        return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items]

    async def sync(self, key: Hashable) -> float | None:
        ns, name = key  # type: ignore[misc]
        ds = get_or_none(self.store, self.ds_rt, ns, name)
        if ds is None:
            return None
        if is_deleting(ds):
            return None
        nodes, _ = self.store.list(self.node_rt, None)
        eligible = {n["metadata"]["name"] for n in nodes if should_run(ds, n)}
        pod_hash = template_hash(ds)
        by_node = self._pods_by_node(ds)
        self._manage(ds, by_node, eligible, pod_hash)
        if (ds["spec"].get("updateStrategy") or {}).get("type", "RollingUpdate") == "RollingUpdate":
            self._roll(ds, self._pods_by_node(ds), eligible, pod_hash)
        return self._write_status(ds, self._pods_by_node(ds), eligible, pod_hash)

    def _pods_by_node(self, ds: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        pods = self.store.controlled_by(self.pod_rt, ds["metadata"]["uid"], ds["metadata"]["namespace"])
        for pod in sorted(pods, key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"])):
            node = pod_node(pod)
            if node is not None:
                out.setdefault(node, []).append(pod)
        return out

    def _manage(self, ds: dict[str, Any], by_node: dict[str, list[dict[str, Any]]], eligible: set[str],
                pod_hash: str) -> None:
        """Create missing daemon pods, delete failed, extra and misplaced ones."""
        for node in sorted(eligible | set(by_node)):
            pods = by_node.get(node, [])
            for pod in pods:
                if _finished(pod) and not is_deleting(pod):
                    self._delete_pod(ds, pod)
            live = [p for p in pods if not _finished(p)]
            if node not in eligible:
                for pod in live:
                    self._delete_pod(ds, pod)
            elif not live:
                self._create_pod(ds, node, pod_hash)
            else:
                for pod in live[1:]:
                    self._delete_pod(ds, pod)

    def _roll(self, ds: dict[str, Any], by_node: dict[str, list[dict[str, Any]]], eligible: set[str],
              pod_hash: str) -> None:
        """Delete old pods while at most maxUnavailable nodes lack an available pod."""
        ru = (ds["spec"].get("updateStrategy") or {}).get("rollingUpdate") or {}
        try:
            max_unavailable = max(1, resolve_int_or_percent(ru.get("maxUnavailable", 1), len(eligible),
                                                            round_up=True, default="1"))
        except IntOrPercentError:
            max_unavailable = 1
        min_ready = int(ds["spec"].get("minReadySeconds") or 0)
        unavailable = 0
        old_available = []
        for node in sorted(eligible):
            pods = [p for p in by_node.get(node, []) if not _finished(p)]
            pod = pods[0] if pods else None
            is_old = pod is not None and (pod["metadata"].get("labels") or {}).get(HASH_LABEL) != pod_hash
            if pod is None or not _available(pod, min_ready):
                unavailable += 1
                if is_old and not is_deleting(pod):
                    self._delete_pod(ds, pod)
            elif is_old:
                old_available.append(pod)
        for pod in old_available[:max(0, max_unavailable - unavailable)]:
            self._delete_pod(ds, pod)

    def _create_pod(self, ds: dict[str, Any], node: str, pod_hash: str) -> None:
        create_pod(self.store, self.pod_rt, ds, build_pod(ds, node, pod_hash=pod_hash), component=COMPONENT)

    def _delete_pod(self, ds: dict[str, Any], pod: dict[str, Any]) -> None:
        delete_pod(self.store, self.pod_rt, ds, pod, component=COMPONENT)

    def _write_status(self, ds: dict[str, Any], by_node: dict[str, list[dict[str, Any]]], eligible: set[str],
                      pod_hash: str) -> float | None:
        status = compute_status(ds, by_node, eligible, pod_hash=pod_hash)
        if status != ds.get("status"):
            def edit(obj: dict[str, Any]) -> None:
                obj["status"] = status

            meta = ds["metadata"]
            self.store.mutate(self.ds_rt, meta["namespace"], meta["name"], edit, subresource="status")
        return self._next_availability(ds, by_node)

    def _next_availability(self, ds: dict[str, Any], by_node: dict[str, list[dict[str, Any]]]) -> float | None:
        """When a ready pod becomes available (minReadySeconds), so status moves on time."""
        min_ready = int(ds["spec"].get("minReadySeconds") or 0)
        waits = [available_after(p, min_ready) for pods in by_node.values() for p in pods]
        pending = [w for w in waits if w is not None and w > 0]
        return min(pending) if pending else None
