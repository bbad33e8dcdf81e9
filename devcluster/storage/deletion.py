"""DELETE and what it sets off: preconditions, graceful pod deletion, finalizers, the removal of
an object (one RV, one DELETED event) and the cascades of namespaces and CRDs (spec §4.7, §5.6-§5.7).
"""

from __future__ import annotations

from typing import Any

from devcluster.machinery.errors import ApiError, conflict
from devcluster.machinery.objmeta import rfc3339
from devcluster.machinery.resource import ResourceType
from devcluster.storage.objects import CRD_KEY, NS_KEY, POD_KEY, SERVICE_KEY, ObjectStore
from devcluster.storage.watch import WatchEvent, _with_rv
from devcluster.strategy import crds, rules

# a delete that removes one of these at once answers with the object, not a Status
_RETURN_DELETED = frozenset({POD_KEY, SERVICE_KEY, ("", "serviceaccounts")})


class DeleteVerbs(ObjectStore):
    """The delete verbs and removals of `Store`."""

    def delete(self, rt: ResourceType, namespace: str | None, name: str, propagation: str | None = None,
               grace_period: int | None = None, preconditions: dict[str, Any] | None = None, *,
               orphan_dependents: bool | None = None, dry_run: bool = False) -> dict[str, Any]:
        """DELETE semantics (spec §5.6): the marked object, the removed pod, or a success Status."""
        ns = self._ns(rt, namespace)
        old = self.get(rt, ns, name)
        self._check_preconditions(rt, old, preconditions)
        propagation = rules.propagation_of(propagation, orphan_dependents)
        om = old["metadata"]
        finalizers = rules.gc_finalizers(om.get("finalizers") or [], propagation)
        grace = self._grace(rt, old, grace_period)
        if finalizers or grace > 0 or self._removal_blocked(rt, old):
            return self._mark_deleting(rt, old, finalizers, grace, dry_run)
        # a running pod deleted with no grace is marked (timestamp now, grace 0) and removed at once:
        # the answer is the marked pod
        last = _marked_now(old, self._clock()) if rt.key == POD_KEY and self._graceful(old) else old
        if dry_run:
            return last if rt.key in _RETURN_DELETED else _success(rt, old)
        last = self._remove(rt, old, last)
        return last if rt.key in _RETURN_DELETED else _success(rt, old)

    def _check_preconditions(self, rt: ResourceType, old: dict[str, Any], pre: dict[str, Any] | None) -> None:
        if not pre:
            return
        om = old["metadata"]
        uid, rv = pre.get("uid"), pre.get("resourceVersion")
        if uid and uid != om["uid"]:
            raise conflict(rt.resource, rt.group, om["name"],
                           f"Precondition failed: UID in precondition: {uid}, UID in object meta: {om['uid']}")
        if rv and str(rv) != om["resourceVersion"]:
            raise conflict(rt.resource, rt.group, om["name"],
                           f"Precondition failed: ResourceVersion in precondition: {rv}, "
                           f"ResourceVersion in object meta: {om['resourceVersion']}")

    def _grace(self, rt: ResourceType, obj: dict[str, Any], requested: int | None) -> int:
        """Pods only: requested, else terminationGracePeriodSeconds, else 30; 0 if unscheduled or done."""
        if rt.key != POD_KEY:
            return 0
        spec = obj.get("spec") or {}
        grace = requested if requested is not None else spec.get("terminationGracePeriodSeconds", 30)
        grace = 1 if grace < 0 else int(grace)
        return grace if self._graceful(obj) else 0

    @staticmethod
    def _graceful(pod: dict[str, Any]) -> bool:
        """Whether a pod's deletion is graceful at all: scheduled and not done."""
        phase = (pod.get("status") or {}).get("phase")
        return bool((pod.get("spec") or {}).get("nodeName")) and phase not in ("Succeeded", "Failed")

    def _mark_deleting(self, rt: ResourceType, old: dict[str, Any], finalizers: list[str], grace: int,
                       dry_run: bool) -> dict[str, Any]:
        om = old["metadata"]
        new = dict(old)
        m = new["metadata"] = dict(om)
        now = self._clock()
        if finalizers:
            m["finalizers"] = finalizers
        else:
            m.pop("finalizers", None)
        if not om.get("deletionTimestamp"):
            m["deletionTimestamp"] = rfc3339(now + grace)
            if rt.key != NS_KEY:  # a namespace's own delete sets the timestamp only
                m["deletionGracePeriodSeconds"] = grace
            if m.get("generation"):
                m["generation"] += 1
            self._mark_status(rt, new, now)
        elif grace < om.get("deletionGracePeriodSeconds", 0):
            m["deletionTimestamp"] = rfc3339(now + grace)
            m["deletionGracePeriodSeconds"] = grace
        m["resourceVersion"] = om["resourceVersion"]
        if rules.same_content(old, new) or dry_run:
            return new if dry_run else old
        if self._removable(rt, new):
            return self._remove(rt, old, new)
        stored = self._commit(rt, "MODIFIED", new, old)
        self._drain(rt, stored)
        return self.get(rt, om.get("namespace"), om["name"]) if self._exists(rt, stored) else stored

    def _mark_status(self, rt: ResourceType, new: dict[str, Any], now: float) -> None:
        if rt.key == NS_KEY:
            new["status"] = {**(new.get("status") or {}), "phase": "Terminating"}
        elif rt.key == CRD_KEY:
            new["status"] = crds.terminating_condition(new.get("status") or {}, now)

    def delete_collection(self, rt: ResourceType, namespace: str | None, *, label_selector: Any = None,
                          field_selector: Any = None, propagation: str | None = None,
                          grace_period: int | None = None, dry_run: bool = False) -> list[dict[str, Any]]:
        """DELETE on a collection (spec §5.7): the affected objects, each as deleted or marked."""
        items, _ = self.list(rt, namespace, label_selector=label_selector, field_selector=field_selector)
        out = []
        for obj in items:
            m = obj["metadata"]
            try:
                res = self.delete(rt, m.get("namespace"), m["name"], propagation, grace_period, dry_run=dry_run)
            except ApiError as err:
                if err.code != 404:  # removed meanwhile by a cascade
                    raise
                continue
            out.append(obj if res.get("kind") == "Status" else res)
        return out

    # -- removal and cascades ------------------------------------------------------------------

    def _removable(self, rt: ResourceType, obj: dict[str, Any]) -> bool:
        m = obj["metadata"]
        return (bool(m.get("deletionTimestamp")) and not m.get("finalizers")
                and not m.get("deletionGracePeriodSeconds") and not self._removal_blocked(rt, obj))

    def _removal_blocked(self, rt: ResourceType, obj: dict[str, Any]) -> bool:
        """Namespaces and CRDs stay until their contents are gone."""
        if rt.key == NS_KEY:
            return self._namespace_has_content(obj["metadata"]["name"])
        if rt.key == CRD_KEY:
            spec = obj.get("spec") or {}
            return bool(self._objects.get((spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))))
        return False

    def _namespace_has_content(self, ns: str) -> bool:
        return self._ns_counts.get(ns, 0) > 0

    def _drain(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        """After marking a namespace or CRD for deletion, delete what it contains."""
        if rt.key == NS_KEY:
            self._delete_namespace_content(obj["metadata"]["name"])
        elif rt.key == CRD_KEY:
            self._delete_crd_instances(obj)
        self._finalize_container(rt, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])

    def _delete_namespace_content(self, ns: str) -> None:
        for rt in self._storage_types():
            if rt.namespaced and self._objects.get(rt.key):
                self.delete_collection(rt, ns, propagation="Background")

    def _delete_crd_instances(self, crd: dict[str, Any]) -> None:
        spec = crd.get("spec") or {}
        rt = self.registry.for_resource(spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
        if rt is not None:
            self.delete_collection(rt, None, propagation="Background")

    def _finalize_container(self, rt: ResourceType, ns: str, name: str) -> None:
        """Remove a terminating namespace or CRD once its contents are gone."""
        obj = self._bucket(rt).get((ns, name))
        if obj is not None and self._removable(rt, obj):
            self._remove(rt, obj, obj)

    def _remove(self, rt: ResourceType, old: dict[str, Any], last: dict[str, Any]) -> dict[str, Any]:
        """Delete from storage: one RV, one DELETED event carrying the last state."""
        m = last["metadata"]
        key = (m.get("namespace", ""), m["name"])
        self.rv += 1
        gone = _with_rv(last, self.rv)
        del self._bucket(rt)[key]
        self._index_remove(rt, key)
        self._control_remove(rt, key, old)
        self._encoded.pop(id(old), None)
        self._emit(WatchEvent("DELETED", rt, gone, old, self.rv, self._clock()))
        self._after_remove(rt, gone)
        return gone

    def _after_remove(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        m = obj["metadata"]
        if rt.key == SERVICE_KEY:
            self._services.release(obj)
        elif rt.key == CRD_KEY:
            self.registry.unregister_crd(obj)
        if rt.namespaced:
            ns_rt = self.registry.for_resource(*NS_KEY)
            assert ns_rt is not None
            ns_obj = self._objects[NS_KEY].get(("", m.get("namespace", "")))
            if ns_obj is not None and ns_obj["metadata"].get("deletionTimestamp"):
                self._finalize_container(ns_rt, "", ns_obj["metadata"]["name"])
        if rt.crd:
            crd_rt = self.registry.for_resource(*CRD_KEY)
            assert crd_rt is not None
            crd = self._objects.get(CRD_KEY, {}).get(("", crds.crd_name(rt)))
            if crd is not None and crd["metadata"].get("deletionTimestamp"):
                self._finalize_container(crd_rt, "", crd["metadata"]["name"])

    def _exists(self, rt: ResourceType, obj: dict[str, Any]) -> bool:
        m = obj["metadata"]
        return (m.get("namespace", ""), m["name"]) in self._bucket(rt)


def _marked_now(obj: dict[str, Any], now: float) -> dict[str, Any]:
    """`obj` as a graceful delete with no grace leaves it for the moment before its removal."""
    m = dict(obj["metadata"], deletionTimestamp=rfc3339(now), deletionGracePeriodSeconds=0)
    if m.get("generation"):
        m["generation"] += 1
    return {**obj, "metadata": m}

def _success(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    m = obj["metadata"]
    details: dict[str, Any] = {"name": m["name"], "kind": rt.resource, "uid": m["uid"]}
    if rt.group:
        details["group"] = rt.group
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
