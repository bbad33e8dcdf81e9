"""ReplicaSet controller (spec §7.3): keep `spec.replicas` active pods, write status.

The store is read directly (no informer lag), so no creation "expectations" are needed:
a pod created in one sync is visible to the next.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Hashable, Iterable
from typing import Any

from devcluster.controllers.base import Controller
from devcluster.controllers.claim import claim
from devcluster.controllers.meta import (
    controller_ref,
    find_condition,
    get_controller_of,
    is_deleting,
    labels_of,
    now_time,
    seconds_since,
)
from devcluster.controllers.podops import create_pod, delete_pod
from devcluster.controllers.ranking import pods_to_delete
from devcluster.machinery.errors import ApiError
from devcluster.machinery.selectors import label_selector_from_object
from devcluster.storage.objects import get_or_none

log = logging.getLogger("devcluster.replicaset")

COMPONENT = "replicaset-controller"
MAX_BURST = 500
REPLICA_FAILURE = "ReplicaFailure"


def is_active(pod: dict[str, Any]) -> bool:
    """Counts toward replicas: not terminating and not finished."""
    return not is_deleting(pod) and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")


def is_ready(pod: dict[str, Any]) -> bool:
    cond = find_condition(pod.get("status", {}).get("conditions"), "Ready")
    return bool(cond and cond.get("status") == "True")


def available_after(pod: dict[str, Any], min_ready_seconds: int) -> float | None:
    """0 if the pod is available now, seconds until it will be, or None if not ready."""
    if not is_ready(pod):
        return None
    if min_ready_seconds <= 0:
        return 0.0
    cond = find_condition(pod["status"]["conditions"], "Ready") or {}
    elapsed = seconds_since(cond.get("lastTransitionTime"))
    if elapsed is None:
        return 0.0
    return max(0.0, min_ready_seconds - elapsed)


def build_pod(rs: dict[str, Any]) -> dict[str, Any]:
    """A pod for `rs`, from its template, owned by it."""
    tmpl = rs["spec"].get("template") or {}
    tmeta = tmpl.get("metadata") or {}
    meta: dict[str, Any] = {
        "generateName": rs["metadata"]["name"] + "-",
        "namespace": rs["metadata"]["namespace"],
        "ownerReferences": [controller_ref(rs)],
    }
    for field in ("labels", "annotations", "finalizers"):
        if tmeta.get(field):
            meta[field] = copy.deepcopy(tmeta[field])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(tmpl.get("spec") or {})}


def compute_status(rs: dict[str, Any], active: list[dict[str, Any]],
                   failure: tuple[str, str] | None = None) -> tuple[dict[str, Any], float | None]:
    """RS status from its active pods, and when availability will next change; `failure` is the
    (reason, message) of a pod create or delete that failed in this sync (ReplicaFailure)."""
    tmpl_labels = ((rs["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
    min_ready = int(rs["spec"].get("minReadySeconds") or 0)
    ready = available = 0
    wake: float | None = None
    for pod in active:
        after = available_after(pod, min_ready)
        if after is None:
            continue
        ready += 1
        if after == 0:
            available += 1
        else:
            wake = after if wake is None else min(wake, after)
    status = dict(rs.get("status") or {})
    status.update(
        replicas=len(active),
        fullyLabeledReplicas=sum(1 for p in active if tmpl_labels.items() <= labels_of(p).items()),
        readyReplicas=ready,
        availableReplicas=available,
        observedGeneration=rs["metadata"].get("generation", 1),
    )
    _replica_failure(status, failure)
    return status, wake


def _replica_failure(status: dict[str, Any], failure: tuple[str, str] | None) -> None:
    """As the real controller: the first failure sets the condition (later ones leave it as it is), a
    sync without failure removes it."""
    conds = [c for c in status.get("conditions") or [] if c.get("type") != REPLICA_FAILURE]
    current = find_condition(status.get("conditions"), REPLICA_FAILURE)
    if failure is not None:
        reason, message = failure
        conds.append(current or {"type": REPLICA_FAILURE, "status": "True", "lastTransitionTime": now_time(),
                                 "reason": reason, "message": message})
    if conds:
        status["conditions"] = conds
    else:
        status.pop("conditions", None)


class ReplicaSetController(Controller):
    """Creates and deletes pods so each ReplicaSet has `spec.replicas` active ones."""

    name = "replicaset-controller"

    def __init__(self, store: Any, *, resync: float = 5.0):
        super().__init__(store, resync=resync)
        reg = store.registry
        self.rs_rt = reg.lookup(group="apps", version="v1", resource="replicasets")
        self.pod_rt = reg.lookup(group="", version="v1", resource="pods")

    def keys_for(self, event: Any) -> Iterable[Hashable]:
        rt = event.rt
        if rt.key == self.rs_rt.key:
            return [(event.obj["metadata"]["namespace"], event.obj["metadata"]["name"])]
        if rt.key != self.pod_rt.key:
            return ()
        keys = set()
        for obj in (event.obj, event.old):
            if obj is None:
                continue
            ref = get_controller_of(obj)
            ns = obj["metadata"].get("namespace")
            if ref is not None:
                if ref.get("kind") == "ReplicaSet":
                    keys.add((ns, ref["name"]))
            elif event.type != "DELETED":
                keys.update(self._orphan_candidates(obj))
        return keys

    def _orphan_candidates(self, pod: dict[str, Any]) -> Iterable[Hashable]:
        ns = pod["metadata"].get("namespace")
        items, _ = self.store.list(self.rs_rt, ns)
        for rs in items:
            sel = rs["spec"].get("selector")
            if sel and label_selector_from_object(sel).matches(labels_of(pod)):
                yield (ns, rs["metadata"]["name"])

    def resync_keys(self) -> Iterable[Hashable]:
        items, _ = self.store.list(self.rs_rt, None)
        return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items]

    async def sync(self, key: Hashable) -> float | None:
        ns, name = key  # type: ignore[misc]
        rs = get_or_none(self.store, self.rs_rt, ns, name)
        if rs is None:
            return None
        if is_deleting(rs):
            return None
        owned = claim(self.store, self.pod_rt, rs)
        active = [p for p in owned if is_active(p)]
        failure = self._manage_replicas(rs, active)
        active = [p for p in self._owned_pods(rs) if is_active(p)]
        wake = self._write_status(rs, active, failure)
        if failure is not None:
            raise failure[1]  # retried with backoff, as the real controller requeues a failed sync
        return wake

    def _owned_pods(self, rs: dict[str, Any]) -> list[dict[str, Any]]:
        return self.store.controlled_by(self.pod_rt, rs["metadata"]["uid"], rs["metadata"]["namespace"])

    def _manage_replicas(self, rs: dict[str, Any], active: list[dict[str, Any]]) -> tuple[str, ApiError] | None:
        """Create or delete pods toward `spec.replicas`; the first failure stops the batch and is
        returned with its ReplicaFailure reason (FailedCreate, FailedDelete)."""
        want = int(rs["spec"].get("replicas", 1))
        diff = len(active) - want
        try:
            if diff < 0:
                for _ in range(min(-diff, MAX_BURST)):
                    create_pod(self.store, self.pod_rt, rs, build_pod(rs), component=COMPONENT)
            elif diff > 0:
                for pod in pods_to_delete(active, min(diff, MAX_BURST)):
                    self._delete_pod(rs, pod)
        except ApiError as err:
            return ("FailedCreate" if diff < 0 else "FailedDelete"), err
        return None

    def _delete_pod(self, rs: dict[str, Any], pod: dict[str, Any]) -> None:
        delete_pod(self.store, self.pod_rt, rs, pod, component=COMPONENT)

    def _write_status(self, rs: dict[str, Any], active: list[dict[str, Any]],
                      failure: tuple[str, ApiError] | None = None) -> float | None:
        status, wake = compute_status(rs, active, (failure[0], failure[1].message) if failure else None)
        if status != rs.get("status"):
            def edit(obj: dict[str, Any]) -> None:
                obj["status"] = status

            meta = rs["metadata"]
            self.store.mutate(self.rs_rt, meta["namespace"], meta["name"], edit, subresource="status")
        return wake
