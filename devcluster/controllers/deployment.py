"""Deployment controller (spec §7.4): ReplicaSets per template, rolling and recreate rollouts.

A sync reads as: claim ReplicaSets, find the one whose template equals the Deployment's
(the "new" RS), roll (create/scale new, scale old down within surge and availability
bounds), clean up old history, write status. The arithmetic lives in `rollout.py`.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Hashable, Iterable
from typing import Any

from devcluster.controllers.base import Controller
from devcluster.controllers.claim import claim
from devcluster.controllers.meta import (
    annotations_of,
    controller_ref,
    find_condition,
    get_controller_of,
    is_deleting,
    labels_of,
    set_condition,
)
from devcluster.controllers.podhash import pod_template_hash
from devcluster.controllers.progress import apply_deadline
from devcluster.controllers.rollout import (
    IntOrPercentError,
    RSCounts,
    fenceposts,
    new_rs_replicas,
    scale_down_old,
)
from devcluster.machinery.errors import ApiError
from devcluster.machinery.selectors import label_selector_from_object
from devcluster.storage.objects import get_or_none

log = logging.getLogger("devcluster.deployment")

COMPONENT = "deployment-controller"
HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_NOT_COPIED = {REVISION, REVISION_HISTORY, DESIRED, MAX_REPLICAS, LAST_APPLIED}


# -- pure helpers -------------------------------------------------------------------


def revision_of(rs: dict[str, Any]) -> int:
    try:
        return int(annotations_of(rs).get(REVISION, "0"))
    except ValueError:
        return 0


def template_matches(rs: dict[str, Any], d: dict[str, Any]) -> bool:
    """Whether the RS runs the Deployment's template (ignoring the hash label)."""
    tmpl = copy.deepcopy(rs["spec"].get("template") or {})
    labels = (tmpl.get("metadata") or {}).get("labels")
    if labels is not None:
        labels.pop(HASH_LABEL, None)
    return tmpl == (d["spec"].get("template") or {})


def rs_annotations(d: dict[str, Any], base: dict[str, str], *, revision: int | None, surge: int) -> dict[str, str]:
    """RS annotations: the Deployment's own (minus the controller's), revision and sizes."""
    out = {k: v for k, v in base.items() if k in (REVISION, REVISION_HISTORY)}
    out.update({k: v for k, v in annotations_of(d).items() if k not in _NOT_COPIED})
    if revision is not None:
        out[REVISION] = str(revision)
    replicas = int(d["spec"].get("replicas", 1))
    out[DESIRED] = str(replicas)
    out[MAX_REPLICAS] = str(replicas + surge)
    return out


def build_rs(d: dict[str, Any], *, pod_hash: str, replicas: int, revision: int, surge: int) -> dict[str, Any]:
    """The ReplicaSet `<deployment>-<hash>` for the Deployment's current template."""
    spec = d["spec"]
    tmpl = copy.deepcopy(spec.get("template") or {})
    tmpl.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = pod_hash
    selector = copy.deepcopy(spec.get("selector") or {})
    selector.setdefault("matchLabels", {})[HASH_LABEL] = pod_hash
    rs_spec: dict[str, Any] = {"replicas": replicas, "selector": selector, "template": tmpl}
    if spec.get("minReadySeconds"):
        rs_spec["minReadySeconds"] = spec["minReadySeconds"]
    name = d["metadata"]["name"]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{name}-{pod_hash}",
            "namespace": d["metadata"]["namespace"],
            "labels": dict(tmpl["metadata"]["labels"]),
            "annotations": rs_annotations(d, {}, revision=revision, surge=surge),
            "ownerReferences": [controller_ref(d)],
        },
        "spec": rs_spec,
    }


def _spec_replicas(rs: dict[str, Any] | None) -> int:
    return int(rs["spec"].get("replicas", 1)) if rs else 0


def _st(rs: dict[str, Any] | None, field: str) -> int:
    return int((rs or {}).get("status", {}).get(field, 0) or 0) if rs else 0


def _age_key(rs: dict[str, Any]) -> tuple:
    return (revision_of(rs), rs["metadata"].get("creationTimestamp", ""), rs["metadata"]["name"])


def is_complete(d: dict[str, Any], new: dict[str, Any] | None, olds: list[dict[str, Any]]) -> bool:
    """All pods run the new template and are available."""
    replicas = int(d["spec"].get("replicas", 1))
    if new is None:
        return False
    return (
        _spec_replicas(new) == replicas
        and _st(new, "replicas") == replicas
        and _st(new, "availableReplicas") == replicas
        and all(_spec_replicas(o) == 0 and _st(o, "replicas") == 0 for o in olds)
    )


def compute_status(
    d: dict[str, Any], new: dict[str, Any] | None, olds: list[dict[str, Any]], *,
    unavailable_allowed: int, progress: tuple[str, str],
) -> dict[str, Any]:
    """Deployment status from its ReplicaSets; `progress` is the Progressing (reason, message)."""
    all_rs = ([new] if new else []) + olds
    replicas = int(d["spec"].get("replicas", 1))
    available = sum(_st(rs, "availableReplicas") for rs in all_rs)
    status = copy.deepcopy(d.get("status") or {})
    status.update(
        observedGeneration=d["metadata"].get("generation", 1),
        replicas=sum(_st(rs, "replicas") for rs in all_rs),
        updatedReplicas=_st(new, "replicas"),
        readyReplicas=sum(_st(rs, "readyReplicas") for rs in all_rs),
        availableReplicas=available,
        unavailableReplicas=max(0, sum(_spec_replicas(rs) for rs in all_rs) - available),
    )
    conds = status.setdefault("conditions", [])
    if available >= replicas - unavailable_allowed:
        set_condition(conds, "Available", "True", reason="MinimumReplicasAvailable",
                      message="Deployment has minimum availability.", heartbeat_field="lastUpdateTime")
    else:
        set_condition(conds, "Available", "False", reason="MinimumReplicasUnavailable",
                      message="Deployment does not have minimum availability.",
                      heartbeat_field="lastUpdateTime")
    reason, message = progress
    set_condition(conds, "Progressing", "True", reason=reason, message=message,
                  heartbeat_field="lastUpdateTime")
    _replica_failure(conds, new, olds)
    conds.sort(key=lambda c: 0 if c["type"] == "Available" else 1)
    return status


def _replica_failure(conds: list[dict[str, Any]], new: dict[str, Any] | None, olds: list[dict[str, Any]]) -> None:
    """A ReplicaSet's ReplicaFailure (the new one's first) shown on the Deployment, as the real
    controller shows it: kept while its status and reason stay, removed with the last one."""
    found = next((c for rs in ([new] if new else []) + olds
                  for c in (rs.get("status") or {}).get("conditions") or [] if c.get("type") == "ReplicaFailure"), None)
    current = find_condition(conds, "ReplicaFailure")
    if current is not None and found is not None and (current.get("status"), current.get("reason")) == (
            found.get("status"), found.get("reason")):
        return
    conds[:] = [c for c in conds if c.get("type") != "ReplicaFailure"]
    if found is not None:
        when = found.get("lastTransitionTime")
        conds.append({"type": "ReplicaFailure", "status": found.get("status"), "lastUpdateTime": when,
                      "lastTransitionTime": when, "reason": found.get("reason"), "message": found.get("message")})


# -- the controller -----------------------------------------------------------------


class DeploymentController(Controller):
    """Rolls Deployments out through ReplicaSets."""

    name = "deployment-controller"

    def __init__(self, store: Any, *, resync: float = 5.0):
        super().__init__(store, resync=resync)
        reg = store.registry
        self.d_rt = reg.lookup(group="apps", version="v1", resource="deployments")
        self.rs_rt = reg.lookup(group="apps", version="v1", resource="replicasets")
        self.pod_rt = reg.lookup(group="", version="v1", resource="pods")

    # -- triggers -------------------------------------------------------------------

    def keys_for(self, event: Any) -> Iterable[Hashable]:
        obj, ns = event.obj, event.obj["metadata"].get("namespace")
        if event.rt.key == self.d_rt.key:
            return [(ns, obj["metadata"]["name"])]
        if event.rt.key == self.rs_rt.key:
            return self._owner_keys(event)
        if event.rt.key == self.pod_rt.key and event.type == "DELETED":
            return self._pod_owner_keys(obj)  # Recreate waits for old pods to be gone
        return ()

    def _owner_keys(self, event: Any) -> set[Hashable]:
        keys: set[Hashable] = set()
        for obj in (event.obj, event.old):
            if obj is None:
                continue
            ns = obj["metadata"].get("namespace")
            ref = get_controller_of(obj)
            if ref is not None:
                if ref.get("kind") == "Deployment":
                    keys.add((ns, ref["name"]))
            elif event.type != "DELETED":
                keys.update(self._matching(ns, labels_of(obj)))
        return keys

    def _matching(self, ns: str, labels: dict[str, str]) -> Iterable[Hashable]:
        items, _ = self.store.list(self.d_rt, ns)
        for d in items:
            sel = d["spec"].get("selector")
            if sel and label_selector_from_object(sel).matches(labels):
                yield (ns, d["metadata"]["name"])

    def _pod_owner_keys(self, pod: dict[str, Any]) -> list[Hashable]:
        ref = get_controller_of(pod)
        if ref is None or ref.get("kind") != "ReplicaSet":
            return []
        ns = pod["metadata"]["namespace"]
        try:
            rs = self.store.get(self.rs_rt, ns, ref["name"])
        except ApiError:
            return []
        dref = get_controller_of(rs)
        return [(ns, dref["name"])] if dref and dref.get("kind") == "Deployment" else []

    def resync_keys(self) -> Iterable[Hashable]:
        items, _ = self.store.list(self.d_rt, None)
        return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items]

    # -- reconcile ------------------------------------------------------------------

    async def sync(self, key: Hashable) -> float | None:
        ns, name = key  # type: ignore[misc]
        d = get_or_none(self.store, self.d_rt, ns, name)
        if d is None:
            return None
        if is_deleting(d):
            return None
        rss = [rs for rs in claim(self.store, self.rs_rt, d) if not is_deleting(rs)]
        new = next((rs for rs in rss if template_matches(rs, d)), None)
        olds = sorted((rs for rs in rss if rs is not new), key=_age_key)
        try:
            surge, unavailable = self._fenceposts(d)
        except IntOrPercentError as err:
            self.store.record_event(d, reason="InvalidStrategy", message=str(err), type="Warning",
                                    component=COMPONENT)
            return None
        created = False
        if not d["spec"].get("paused"):
            if _strategy(d) == "Recreate":
                new, created = self._recreate(d, new, olds)
            else:
                new, created = self._rolling(d, new, olds, surge, unavailable)
        elif new is not None:
            new = self._scale(d, new, int(d["spec"].get("replicas", 1)), surge)
        olds = [self._reload(rs) for rs in olds]
        olds = [rs for rs in olds if rs is not None]
        if is_complete(d, new, olds):
            olds = self._cleanup(d, olds)
        d = self._sync_revision(d, new)
        return self._write_status(d, new, olds, created=created,
                                  unavailable=unavailable if _strategy(d) != "Recreate" else 0)

    def _fenceposts(self, d: dict[str, Any]) -> tuple[int, int]:
        ru = (d["spec"].get("strategy") or {}).get("rollingUpdate") or {}
        return fenceposts(ru.get("maxSurge"), ru.get("maxUnavailable"), int(d["spec"].get("replicas", 1)))

    def _mutate_rs(self, rs: dict[str, Any], edit: Any, subresource: str | None = None) -> dict[str, Any] | None:
        meta = rs["metadata"]
        try:
            return self.store.mutate(self.rs_rt, meta["namespace"], meta["name"], edit, subresource=subresource)
        except ApiError as err:
            if err.code == 404:
                return None
            raise

    def _reload(self, rs: dict[str, Any]) -> dict[str, Any] | None:
        return get_or_none(self.store, self.rs_rt, rs["metadata"]["namespace"], rs["metadata"]["name"])

    # -- strategies -----------------------------------------------------------------

    def _rolling(self, d, new, olds, surge: int, unavailable: int) -> tuple[dict | None, bool]:
        replicas = int(d["spec"].get("replicas", 1))
        total = sum(_spec_replicas(rs) for rs in olds) + _spec_replicas(new)
        target = new_rs_replicas(replicas=replicas, surge=surge, new_spec=_spec_replicas(new), total_spec=total)
        created = False
        if new is None:
            new, created = self._create_new(d, olds, target, surge)
            if new is None:
                return None, False
        else:
            new = self._ensure_revision(d, new, olds)
            new = self._scale(d, new, target, surge)
        plan = scale_down_old(
            [RSCounts(rs["metadata"]["name"], _spec_replicas(rs), _st(rs, "availableReplicas")) for rs in olds],
            replicas=replicas, unavailable=unavailable,
            new=RSCounts(new["metadata"]["name"], _spec_replicas(new), _st(new, "availableReplicas")),
        )
        for rs in olds:
            if rs["metadata"]["name"] in plan:
                self._scale(d, rs, plan[rs["metadata"]["name"]], surge)
        return new, created

    def _recreate(self, d, new, olds) -> tuple[dict | None, bool]:
        for rs in olds:
            if _spec_replicas(rs) > 0:
                self._scale(d, rs, 0, 0)
        if self._old_pods_exist(olds):
            return new, False
        replicas = int(d["spec"].get("replicas", 1))
        if new is None:
            return self._create_new(d, olds, replicas, 0)
        new = self._ensure_revision(d, new, olds)
        return self._scale(d, new, replicas, 0), False

    def _old_pods_exist(self, olds: list[dict[str, Any]]) -> bool:
        if not olds:
            return False
        ns = olds[0]["metadata"]["namespace"]
        return any(self.store.controlled_by(self.pod_rt, rs["metadata"]["uid"], ns) for rs in olds)

    # -- ReplicaSet writes -----------------------------------------------------------

    def _create_new(self, d, olds, replicas: int, surge: int) -> tuple[dict | None, bool]:
        revision = max((revision_of(rs) for rs in olds), default=0) + 1
        collisions = (d.get("status") or {}).get("collisionCount")
        pod_hash = pod_template_hash(d["spec"].get("template") or {}, collisions)
        body = build_rs(d, pod_hash=pod_hash, replicas=replicas, revision=revision, surge=surge)
        ns = d["metadata"]["namespace"]
        try:
            rs = self.store.create(self.rs_rt, ns, body)
        except ApiError as err:
            if err.code != 409:
                raise
            self._bump_collision(d, body["metadata"]["name"])
            return None, False
        self.store.record_event(
            d, reason="ScalingReplicaSet",
            message=f"Scaled up replica set {rs['metadata']['name']} from 0 to {replicas}",
            component=COMPONENT,
        )
        return rs, True

    def _bump_collision(self, d: dict[str, Any], rs_name: str) -> None:
        """A different template already owns `<deployment>-<hash>`: rehash with a new count."""
        existing = self.store.get(self.rs_rt, d["metadata"]["namespace"], rs_name)
        if template_matches(existing, d):
            raise ApiError(409, "Conflict", f"replica set {rs_name} exists and is not owned by this deployment")

        def edit(obj: dict[str, Any]) -> None:
            st = obj.setdefault("status", {})
            st["collisionCount"] = int(st.get("collisionCount") or 0) + 1

        meta = d["metadata"]
        self.store.mutate(self.d_rt, meta["namespace"], meta["name"], edit, subresource="status")

    def _ensure_revision(self, d, new: dict[str, Any], olds: list[dict[str, Any]]) -> dict[str, Any]:
        """A re-used RS (rollback) gets the next revision; its old one goes into the history."""
        top = max((revision_of(rs) for rs in olds), default=0)
        current = revision_of(new)
        if current > top:
            return new

        def edit(obj: dict[str, Any]) -> None:
            ann = obj["metadata"].setdefault("annotations", {})
            if current:
                hist = [h for h in ann.get(REVISION_HISTORY, "").split(",") if h]
                ann[REVISION_HISTORY] = ",".join([*hist, str(current)])
            ann[REVISION] = str(top + 1)

        return self._mutate_rs(new, edit) or new

    def _scale(self, d: dict[str, Any], rs: dict[str, Any], replicas: int, surge: int) -> dict[str, Any]:
        """Set `spec.replicas` and the size annotations; event when the size changes."""
        before = _spec_replicas(rs)

        def edit(obj: dict[str, Any]) -> None:
            obj["spec"]["replicas"] = replicas
            meta = obj["metadata"]
            meta["annotations"] = rs_annotations(d, meta.get("annotations") or {}, revision=None, surge=surge)

        out = self._mutate_rs(rs, edit) or rs
        if before != replicas:
            word = "up" if replicas > before else "down"
            self.store.record_event(
                d, reason="ScalingReplicaSet",
                message=f"Scaled {word} replica set {rs['metadata']['name']} from {before} to {replicas}",
                component=COMPONENT,
            )
        return out

    def _cleanup(self, d: dict[str, Any], olds: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Delete the oldest idle old RSs beyond `revisionHistoryLimit`."""
        limit = int(d["spec"].get("revisionHistoryLimit", 10))
        idle = [rs for rs in olds if _spec_replicas(rs) == 0 and _st(rs, "replicas") == 0]
        doomed = idle[: max(0, len(idle) - limit)]
        for rs in doomed:
            meta = rs["metadata"]
            try:
                self.store.delete(self.rs_rt, meta["namespace"], meta["name"], preconditions={"uid": meta["uid"]})
            except ApiError as err:
                if err.code not in (404, 409):
                    raise
        gone = {id(rs) for rs in doomed}
        return [rs for rs in olds if id(rs) not in gone]

    # -- Deployment writes ------------------------------------------------------------

    def _sync_revision(self, d: dict[str, Any], new: dict[str, Any] | None) -> dict[str, Any]:
        if new is None:
            return d
        rev = annotations_of(new).get(REVISION)
        if rev is None or annotations_of(d).get(REVISION) == rev:
            return d

        def edit(obj: dict[str, Any]) -> None:
            obj["metadata"].setdefault("annotations", {})[REVISION] = rev

        meta = d["metadata"]
        # Through /status, as the real controller does: an annotation written there never bumps generation.
        return self.store.mutate(self.d_rt, meta["namespace"], meta["name"], edit, subresource="status")

    def _write_status(self, d, new, olds, *, created: bool, unavailable: int) -> float | None:
        """Write status; returns when the progress deadline could next expire."""
        status = compute_status(d, new, olds, unavailable_allowed=unavailable,
                                progress=_progress(d, new, olds, created=created))
        wake = apply_deadline(d, d.get("status") or {}, status, complete=is_complete(d, new, olds),
                              rs_name=new["metadata"]["name"] if new else None)
        if status == d.get("status"):
            return wake

        def edit(obj: dict[str, Any]) -> None:
            obj["status"] = status

        meta = d["metadata"]
        self.store.mutate(self.d_rt, meta["namespace"], meta["name"], edit, subresource="status")
        return wake


def _strategy(d: dict[str, Any]) -> str:
    return (d["spec"].get("strategy") or {}).get("type") or "RollingUpdate"


def _progress(d, new, olds, *, created: bool) -> tuple[str, str]:
    if new is None:
        return "ReplicaSetUpdated", f'Deployment "{d["metadata"]["name"]}" is progressing.'
    name = new["metadata"]["name"]
    if created:
        return "NewReplicaSetCreated", f'Created new replica set "{name}"'
    if is_complete(d, new, olds):
        return "NewReplicaSetAvailable", f'ReplicaSet "{name}" has successfully progressed.'
    return "ReplicaSetUpdated", f'ReplicaSet "{name}" is progressing.'
