"""The in-memory store: objects, the global resourceVersion, change history and the verbs.

Every verb runs the API semantics of spec §4-§6 synchronously, then commits: one commit =
one RV bump = one event, delivered to watchers and listeners inside the write. Stored
objects are immutable (a write builds a new dict), so reads return them without copying
and their JSON encoding is cached until they are replaced.
"""

from __future__ import annotations

import bisect
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import orjson

from devcluster.machinery.errors import (
    ApiError,
    FieldError,
    already_exists,
    bad_request,
    conflict,
    expired,
    forbidden_object,
    invalid,
    not_found,
    timeout,
    too_old,
    unsupported_media,
)
from devcluster.machinery.objmeta import generated_name, micro_time, new_uid, rfc3339
from devcluster.machinery.resource import ResourceType
from devcluster.machinery.selectors import LabelSelector, parse_field_selector, parse_label_selector
from devcluster.storage import managedfields
from devcluster.storage.allocator import AllocationError, ServiceAllocator
from devcluster.storage.apply import server_side_apply
from devcluster.storage.history import History
from devcluster.storage.pager import Page, Pager
from devcluster.storage.patch import json_patch, merge_patch, strategic_merge_patch
from devcluster.storage.registry import Registry
from devcluster.storage.watch import Watch, WatchEvent, _with_rv
from devcluster.strategy import crds, rules
from devcluster.strategy.defaults import admit_pod, sync_app_armor
from devcluster.strategy.dispatch import apply_builtin_defaults, initial_status, validate_object

log = logging.getLogger("devcluster.store")

Key = tuple[str, str]  # (namespace or "", name)
Listener = Callable[[WatchEvent], None]

INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
NS_KEY = ("", "namespaces")
CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
SERVICE_KEY = ("", "services")
POD_KEY = ("", "pods")
EVENT_KEY = ("", "events")
# a delete that removes one of these at once answers with the object, not a Status
_RETURN_DELETED = frozenset({POD_KEY, SERVICE_KEY, ("", "serviceaccounts")})
_STRATEGIC_415 = ("the body of the request was in an unknown format - accepted media types include: "
                  "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml")
_MAX_EVENT_INDEX = 50_000


def _copy(obj: Any) -> Any:
    """A deep copy of JSON data (orjson round trip: faster than copy.deepcopy)."""
    return orjson.loads(orjson.dumps(obj))


class Store:
    """All objects of the dev cluster and the API verbs over them (see devcluster/README.md)."""

    def __init__(self, registry: Registry | None = None, *, history_limit: int = 50_000,
                 history_window: float = 300.0, bookmark_interval: float = 30.0,
                 watch_timeout: float = 1800.0, continue_ttl: float = 300.0, start_rv: int = 1000,
                 seed: int | None = None, clock: Callable[[], float] = time.time) -> None:
        self.registry = registry or Registry.with_builtins()
        # the admission steps (devcluster/admission.py) every write goes through; None = none, as a
        # bare store for unit tests (DevCluster installs them)
        self.admission: Any = None
        self.rv = start_rv  # the global counter: +1 per persisted write
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self._clock = clock
        self._rng = random.Random(seed)
        # (group, resource) -> {(namespace, name): stored object}
        self._objects: dict[tuple[str, str], dict[Key, dict[str, Any]]] = {}
        self._sorted: dict[tuple[str, str], list[Key]] = {}  # sorted keys per bucket, kept in step with it
        self._ns_counts: dict[str, int] = {}  # namespace -> number of namespaced objects in it
        # (group, resource, controller uid or "") -> keys of the objects it controls ("" = no controller);
        # kept in step with the buckets so controllers find their children without scanning
        self._controlled: dict[tuple[str, str, str], dict[Key, None]] = {}
        self._watchers: dict[tuple[str, str], set[Watch]] = {}
        self._listeners: list[Listener] = []
        self._history = History(limit=history_limit, window=history_window, start_rv=start_rv)
        self._pager = Pager(ttl=continue_ttl)
        self._services = ServiceAllocator()
        self._event_index: dict[tuple[str, str, str, str], Key] = {}
        self._encoded: dict[int, tuple[dict[str, Any], bytes]] = {}  # id(stored obj) -> (obj, JSON)
        ns_rt = self.registry.for_resource(*NS_KEY)
        assert ns_rt is not None
        for name in INITIAL_NAMESPACES:
            self.create(ns_rt, None, {"metadata": {"name": name}})

    # -- reads ---------------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        """The stored object (shared: do not mutate); ApiError 404 when absent."""
        obj = self._bucket(rt).get((self._ns(rt, namespace), name))
        if obj is None:
            raise not_found(rt.resource, rt.group, name)
        return obj

    def controlled_by(self, rt: ResourceType, uid: str | None,
                      namespace: str | None = None) -> list[dict[str, Any]]:
        """Objects of `rt` whose controller ownerReference has `uid`; `uid=None` gives the
        objects without a controller (adoption candidates). Shared: do not mutate."""
        keys = self._controlled.get((*rt.key, uid or ""), {})
        bucket = self._bucket(rt)
        return [bucket[k] for k in keys if namespace is None or k[0] == namespace]

    def list(self, rt: ResourceType, namespace: str | None, *, label_selector: Any = None,
             field_selector: Any = None) -> tuple[list[dict[str, Any]], int]:
        """Matching objects sorted by namespace then name, and the snapshot RV."""
        match = self._matcher(rt, None, label_selector, field_selector)
        items = [o for o in self._scan(rt, namespace) if match(o)]
        return items, self.rv

    def list_page(self, rt: ResourceType, namespace: str | None, *, label_selector: Any = None,
                  field_selector: Any = None, limit: int | None = None, continue_token: str | None = None,
                  resource_version: str | None = None, resource_version_match: str | None = None) -> Page:
        """LIST with pagination and resourceVersion semantics (spec §5.2)."""
        if continue_token:
            return self._pager.next(continue_token, limit)
        self._check_list_rv(resource_version, resource_version_match)
        items, rv = self.list(rt, namespace, label_selector=label_selector, field_selector=field_selector)
        return self._pager.first(items, rv, limit)

    def _check_list_rv(self, resource_version: str | None, match: str | None) -> None:
        rv = _parse_rv(resource_version)
        if match not in (None, "", "NotOlderThan", "Exact"):
            raise bad_request(f'resourceVersionMatch: Unsupported value: "{match}"')
        if match and rv is None:
            raise bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
        if rv is None:
            return
        if rv > self.rv:
            raise timeout(f"Too large resource version: {rv}, current: {self.rv}")
        if match == "Exact" and rv != self.rv:
            if rv <= self._history.compacted:
                raise too_old(rv, self._history.compacted + 1)
            raise expired(f"resource version {rv} is not the current state ({self.rv}); "
                          "this server only serves exact lists of the current state")

    def _scan(self, rt: ResourceType, namespace: str | None) -> list[dict[str, Any]]:
        bucket = self._bucket(rt)
        keys = self._sorted.get(rt.key)
        if keys is None:
            keys = self._sorted[rt.key] = sorted(bucket)
        if namespace and rt.namespaced:
            lo = bisect.bisect_left(keys, (namespace, ""))
            hi = bisect.bisect_left(keys, (namespace + "\x00", ""))
            keys = keys[lo:hi]
        return [bucket[k] for k in keys]

    def encode(self, obj: dict[str, Any], rt: ResourceType | None = None) -> bytes:
        """JSON of an object; cached while `obj` is the stored version (lists, watch fan-out)."""
        hit = self._encoded.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        data = orjson.dumps(obj)
        if rt is not None and self._is_current(rt, obj):
            self._encoded[id(obj)] = (obj, data)
        return data

    def _is_current(self, rt: ResourceType, obj: dict[str, Any]) -> bool:
        m = obj.get("metadata") or {}
        return self._bucket(rt).get((m.get("namespace", ""), m.get("name", ""))) is obj

    # -- create --------------------------------------------------------------------------------

    def create(self, rt: ResourceType, namespace: str | None, body: Any, *, dry_run: bool = False,
               field_manager: str | None = None, warnings: list[str] | None = None) -> dict[str, Any]:
        """POST semantics (spec §4.3, §5.3). `body` is owned by the store afterwards.

        With `field_manager` the write is recorded in managedFields as that manager's Update;
        without (in-process controllers, apply-created objects) managedFields stay as given.
        Admission warnings are appended to `warnings` when given.
        """
        obj = rules.as_object(body)
        ns = self._create_namespace(rt, namespace, obj)
        m = rules.own_meta(obj)
        if m.get("resourceVersion"):
            raise bad_request("resourceVersion should not be set on objects to be created")
        for k in rules.SERVER_META:
            m.pop(k, None)
        obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
        if rt.namespaced:
            m["namespace"] = ns
        else:
            m.pop("namespace", None)
        requested_name = str(m.get("name") or m.get("generateName") or "")
        self._name_for_create(rt, ns, m)
        now = self._clock()
        m["uid"] = new_uid()
        m["creationTimestamp"] = rfc3339(now)
        if rt.generation:
            m["generation"] = 1
        obj = self._create_defaults(rt, obj, now)
        # ownership is recorded before mutating admission, as the real create handler does: what
        # admission adds (a token volume, a priority) is owned by no manager
        if field_manager is not None:
            managedfields.record_update(rt, None, obj, manager=field_manager, subresource=None,
                                        requested=obj["metadata"].get("managedFields"), now=now)
        if self.admission is not None:
            self.admission.mutate(rt, obj, None, name=requested_name)
            if rt.key == POD_KEY:  # the Priority and DefaultTolerationSeconds plugins
                admit_pod(obj)
        self._validate(rt, obj, None)
        if self.admission is not None:
            self.admission.validate(rt, obj, None, warnings=warnings)
        if (ns, m["name"]) in self._bucket(rt):
            raise already_exists(rt.resource, rt.group, m["name"])
        if dry_run:
            return obj
        self._allocate(rt, obj, None)
        stored = self._commit(rt, "ADDED", obj, None)
        if rt.key == CRD_KEY:
            return self._establish_crd(rt, stored)
        return stored

    def _create_namespace(self, rt: ResourceType, namespace: str | None, obj: dict[str, Any]) -> str:
        """The namespace a create goes to; 400 on mismatch, 404 when absent, 403 when terminating."""
        if not rt.namespaced:
            return ""
        body_ns = (obj.get("metadata") or {}).get("namespace") if isinstance(obj.get("metadata"), dict) else None
        if namespace and body_ns and body_ns != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        ns = namespace or body_ns or ""
        if not ns:
            raise bad_request("the namespace of the object is not set and none was given in the request")
        ns_obj = self._objects.get(NS_KEY, {}).get(("", ns))
        if ns_obj is None:
            raise not_found("namespaces", "", ns)
        if ns_obj["metadata"].get("deletionTimestamp"):  # the NamespaceLifecycle admission's refusal
            m = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
            raise forbidden_object(
                rt.resource, rt.group, str(m.get("name") or m.get("generateName") or ""),
                f"unable to create new content in namespace {ns} because it is being terminated",
                [{"reason": "NamespaceTerminating", "message": f"namespace {ns} is being terminated",
                  "field": "metadata.namespace"}])
        return ns

    def _name_for_create(self, rt: ResourceType, ns: str, m: dict[str, Any]) -> None:
        if m.get("name"):
            return
        prefix = m.get("generateName")
        if not prefix:
            raise invalid(rt.kind, rt.group, "", [FieldError(
                "metadata.name", "Required value", "name or generateName is required")])
        bucket = self._bucket(rt)
        for _ in range(16):
            name = generated_name(prefix, self._rng)
            if (ns, name) not in bucket:
                m["name"] = name
                return
        raise already_exists(rt.resource, rt.group, prefix)

    def _create_defaults(self, rt: ResourceType, obj: dict[str, Any], now: float) -> dict[str, Any]:
        if rt.crd:
            if rt.status:
                obj.pop("status", None)
            return crds.prepare_cr(rt, obj)
        apply_builtin_defaults(rt.key, obj)
        if rt.key == POD_KEY:
            sync_app_armor(obj)
        if rt.status:
            status = initial_status(rt.key, obj, obj.get("status"))
            if status is None:
                obj.pop("status", None)
            else:
                obj["status"] = status
        if rt.key == CRD_KEY:
            crds.default_crd(obj)
        return obj

    # -- update --------------------------------------------------------------------------------

    def update(self, rt: ResourceType, namespace: str | None, name: str, body: Any,
               subresource: str | None = None, *, dry_run: bool = False,
               field_manager: str | None = None, warnings: list[str] | None = None) -> dict[str, Any]:
        """PUT semantics (spec §4.4-§4.7, §5.4); subresource "status" or "scale" (returns a Scale)."""
        body = rules.as_object(body)
        ns = self._ns(rt, namespace)
        if subresource == "scale":
            return self._update_scale(rt, ns, name, body, dry_run, field_manager)
        self._check_subresource(rt, subresource)
        rules.check_coordinates(rt, ns, name, body)
        old = self._bucket(rt).get((ns, name))
        if old is None:
            if rt.key == EVENT_KEY and subresource is None:
                return self.create(rt, ns, body, dry_run=dry_run, field_manager=field_manager, warnings=warnings)
            raise not_found(rt.resource, rt.group, name)
        rv = (body.get("metadata") or {}).get("resourceVersion")
        if rt.crd and rv in (None, ""):
            raise invalid(rt.kind, rt.group, name, [FieldError(
                "metadata.resourceVersion", "Invalid value", "must be specified for an update", "0x0", True)])
        rules.check_rv_precondition(rt, old, rv)
        return self._apply_update(rt, old, body, subresource, dry_run, field_manager, warnings)

    def _apply_update(self, rt: ResourceType, old: dict[str, Any], body: dict[str, Any],
                      subresource: str | None, dry_run: bool, field_manager: str | None = None,
                      warnings: list[str] | None = None) -> dict[str, Any]:
        requested = (body.get("metadata") or {}).get("managedFields")
        if subresource == "status":
            new = rules.status_only(rt, old, body)
            if rt.crd:
                new = crds.prepare_cr(rt, new)
        else:
            new = self._prepare_main(rt, old, body)
        if field_manager is not None:
            managedfields.record_update(rt, old, new, manager=field_manager, subresource=subresource,
                                        requested=requested, now=self._clock())
        self._validate(rt, new, old)
        if self.admission is not None:
            self.admission.validate(rt, new, old, subresource=subresource, warnings=warnings)
        return self._write(rt, old, new, dry_run)

    def _prepare_main(self, rt: ResourceType, old: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        rules.carry_update_fields(rt, old, body)
        if rt.crd:
            body = crds.prepare_cr(rt, body)
        else:
            apply_builtin_defaults(rt.key, body)
        if rt.key == CRD_KEY:
            crds.default_crd(body)
            body["status"] = crds.crd_status(body, old.get("status"), self._clock())
        if rt.key == SERVICE_KEY:
            _keep_service_allocations(old, body)
        rules.check_new_finalizers(rt, old, body)
        rules.set_generation(rt, old, body)
        return body

    def _write(self, rt: ResourceType, old: dict[str, Any], new: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        """Commit an update: nothing for a no-op, removal when the last finalizer went (§4.7)."""
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if rules.same_content(old, new) and _same_ownership(old, new):
            return old
        if dry_run:
            return new
        if rt.key == SERVICE_KEY:
            self._allocate(rt, new, old)
        if self._removable(rt, new):
            return self._remove(rt, old, new)
        stored = self._commit(rt, "MODIFIED", new, old)
        if rt.key == CRD_KEY and not stored["metadata"].get("deletionTimestamp"):
            self.registry.register_crd(stored)
        return stored

    def _update_scale(self, rt: ResourceType, ns: str, name: str, body: dict[str, Any], dry_run: bool,
                      field_manager: str | None = None) -> dict[str, Any]:
        if not rt.scale:
            raise not_found(rt.resource, rt.group, name)
        old = self.get(rt, ns, name)
        rules.check_rv_precondition(rt, old, (body.get("metadata") or {}).get("resourceVersion"))
        replicas = rules.scale_replicas(rt, name, body)
        new = rules.with_replicas(rt, old, replicas)
        rules.set_generation(rt, old, new)
        if field_manager is not None:
            managedfields.record_update(rt, old, new, manager=field_manager, subresource="scale",
                                        requested=None, now=self._clock())
        self._validate(rt, new, old)
        return rules.to_scale(rt, self._write(rt, old, new, dry_run))

    def get_scale(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        if not rt.scale:
            raise not_found(rt.resource, rt.group, name)
        return rules.to_scale(rt, self.get(rt, namespace, name))

    def _check_subresource(self, rt: ResourceType, subresource: str | None) -> None:
        if subresource is None or (subresource == "status" and rt.status):
            return
        raise ApiError(404, "NotFound", "the server could not find the requested resource", {})

    # -- patch ---------------------------------------------------------------------------------

    def patch(self, rt: ResourceType, namespace: str | None, name: str, patch_type: str, patch_body: Any,
              subresource: str | None = None, field_manager: str | None = None, force: bool = False,
              *, dry_run: bool = False, warnings: list[str] | None = None) -> tuple[dict[str, Any], bool]:
        """PATCH semantics (spec §5.5): returns (result, created). Apply creates when absent.

        `field_manager` names the writer in managedFields (required for apply, where `force`
        takes over conflicting fields); None leaves managedFields as they are.
        """
        ns = self._ns(rt, namespace)
        fn = self._patch_fn(rt, patch_type, patch_body, field_manager)
        old = self._bucket(rt).get((ns, name))
        if old is None:
            if patch_type == "apply" and subresource is None:
                return self._apply_create(rt, ns, name, patch_body, field_manager or "", dry_run, warnings), True
            raise not_found(rt.resource, rt.group, name)
        if subresource == "scale":
            if not rt.scale:
                raise not_found(rt.resource, rt.group, name)
            scale = fn(rules.to_scale(rt, old), patch_body)
            return self._update_scale(rt, ns, name, _copy(scale), dry_run, field_manager), False
        self._check_subresource(rt, subresource)
        if patch_type == "apply":
            patched = _copy(server_side_apply(rt, old, _copy(patch_body), manager=field_manager or "", force=force,
                                              now=self._clock(), subresource=subresource))
            self._check_patched(rt, old, patched)
            return self._apply_update(rt, old, patched, subresource, dry_run, warnings=warnings), False
        patched = _copy(fn(old, patch_body))
        self._check_patched(rt, old, patched)
        return self._apply_update(rt, old, patched, subresource, dry_run, field_manager, warnings), False

    def _patch_fn(self, rt: ResourceType, patch_type: str, body: Any,
                  field_manager: str | None) -> Callable[[Any, Any], Any]:
        if patch_type == "merge":
            if not isinstance(body, dict):
                raise invalid_patch()
            return merge_patch
        if patch_type == "json":
            return json_patch
        if patch_type == "strategic":
            if rt.crd:
                raise unsupported_media(_STRATEGIC_415)
            if not isinstance(body, dict):
                raise invalid_patch()
            return strategic_merge_patch
        if patch_type == "apply":
            if not field_manager:
                raise invalid("PatchOptions", "meta.k8s.io", "", [FieldError(
                    "fieldManager", "Required value", "is required for apply patch")])
            if not isinstance(body, dict):
                raise invalid_patch()
            return merge_patch  # only for the Scale view; objects go through server_side_apply
        raise unsupported_media(_STRATEGIC_415)

    def _check_patched(self, rt: ResourceType, old: dict[str, Any], patched: Any) -> None:
        if not isinstance(patched, dict):
            raise invalid_patch()
        om, pm = old["metadata"], patched.get("metadata") or {}
        if pm.get("name", om["name"]) != om["name"]:
            raise bad_request(f"the name of the object ({pm.get('name')}) does not match the name on the URL ({om['name']})")
        if rt.namespaced and pm.get("namespace", om.get("namespace")) != om.get("namespace"):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        if pm.get("uid") not in (None, "", om["uid"]):
            raise conflict(rt.resource, rt.group, om["name"],
                           f"Precondition failed: UID in precondition: {pm.get('uid')}, UID in object meta: {om['uid']}")
        rules.check_rv_precondition(rt, old, pm.get("resourceVersion"))

    def _apply_create(self, rt: ResourceType, ns: str, name: str, body: Any, manager: str,
                      dry_run: bool, warnings: list[str] | None = None) -> dict[str, Any]:
        obj = _copy(rules.as_object(body))
        rules.check_coordinates(rt, ns, name, obj)
        rules.own_meta(obj)["name"] = name
        obj = _copy(server_side_apply(rt, None, obj, manager=manager, force=False, now=self._clock()))
        return self.create(rt, ns or None, obj, dry_run=dry_run, warnings=warnings)

    # -- delete --------------------------------------------------------------------------------

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

    # -- controller helpers --------------------------------------------------------------------

    def mutate(self, rt: ResourceType, namespace: str | None, name: str, fn: Callable[[dict[str, Any]], Any],
               subresource: str | None = None) -> dict[str, Any]:
        """Read-copy-modify-write without RV conflicts; a no-op edit writes nothing."""
        old = self.get(rt, namespace, name)
        copy = _copy(old)
        fn(copy)
        rules.own_meta(copy)["resourceVersion"] = old["metadata"]["resourceVersion"]
        return self.update(rt, namespace, name, copy, subresource)

    def bind(self, namespace: str, name: str, node_name: str, *, uid: str | None = None) -> dict[str, Any]:
        """pods/binding: set spec.nodeName once (409 when already bound) and PodScheduled=True."""
        rt = self.registry.for_resource(*POD_KEY)
        assert rt is not None
        old = self.get(rt, namespace, name)
        self._check_preconditions(rt, old, {"uid": uid} if uid else None)
        spec = old.get("spec") or {}
        if spec.get("nodeName"):
            raise conflict(rt.resource, rt.group, name, f"pod {name} is already assigned to node \"{spec['nodeName']}\"")
        if old["metadata"].get("deletionTimestamp"):
            raise conflict(rt.resource, rt.group, name, f"pod {name} is being deleted, cannot be assigned to a host")
        new = dict(old)
        new["metadata"] = dict(old["metadata"])
        new["spec"] = {**spec, "nodeName": node_name}
        status = dict(old.get("status") or {})
        conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                      "lastTransitionTime": rfc3339(self._clock())})
        status["conditions"] = conds
        new["status"] = status
        return self._write(rt, old, new, False)

    def record_event(self, involved: dict[str, Any], *, reason: str, message: str, type: str = "Normal",
                     component: str = "", action: str | None = None) -> dict[str, Any]:
        """Emit a core/v1 Event about `involved`; a repeat bumps count and lastTimestamp (spec §8)."""
        rt = self.registry.for_resource(*EVENT_KEY)
        assert rt is not None
        m = involved.get("metadata") or {}
        ns = m.get("namespace") or "default"
        index_key = (component, m.get("uid", ""), reason, message)
        now = self._clock()
        loc = self._event_index.get(index_key)
        if loc is not None and loc in self._bucket(rt):
            return self.mutate(rt, loc[0], loc[1], lambda ev: _repeat_event(ev, now))
        ev = _new_event(involved, ns, reason, message, type, component, action, now)
        stored = self.create(rt, ns, ev)
        if len(self._event_index) >= _MAX_EVENT_INDEX:
            self._event_index.clear()
        self._event_index[index_key] = (ns, stored["metadata"]["name"])
        return stored

    # -- watch, listeners, history -------------------------------------------------------------

    def add_listener(self, callback: Listener) -> Callable[[], None]:
        """Call `callback(event)` after every commit, synchronously; returns the unsubscribe."""
        self._listeners.append(callback)

        def unsubscribe() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)
        return unsubscribe

    def watch(self, rt: ResourceType, namespace: str | None = None, *, resource_version: str | None = None,
              label_selector: Any = None, field_selector: Any = None, send_initial_events: bool | None = None,
              allow_bookmarks: bool = False, timeout: float | None = None,
              bookmark_interval: float | None = None) -> Watch:
        """Open a watch (spec §6.2); snapshot and subscription happen in this one call."""
        rv = _parse_rv(resource_version)
        match = self._matcher(rt, namespace, label_selector, field_selector)
        w = Watch(rt=rt, matches=match, current_rv=lambda: self.rv, on_close=self._unwatch,
                  allow_bookmarks=allow_bookmarks, timeout=timeout,
                  bookmark_interval=bookmark_interval or self.bookmark_interval)
        initial = send_initial_events if send_initial_events is not None else rv is None
        if initial:
            for obj in self._scan(rt, namespace if rt.namespaced else None):
                if match(obj):
                    w.push(WatchEvent("ADDED", rt, obj, None, int(obj["metadata"]["resourceVersion"])))
            if send_initial_events:
                w.push(_initial_events_end(rt, self.rv))
        elif rv is not None:
            if self._history.too_old(rv):
                w.fail(too_old(rv, self._history.compacted + 1))
            else:
                for ev in self._history.since(rv):
                    if ev.rt.key == rt.key:
                        w.offer(ev)
        self._watchers.setdefault(rt.key, set()).add(w)
        return w

    def _unwatch(self, w: Watch) -> None:
        self._watchers.get(w.rt.key, set()).discard(w)

    def watcher_count(self, rt: ResourceType | None = None) -> int:
        if rt is None:
            return sum(len(s) for s in self._watchers.values())
        return len(self._watchers.get(rt.key, ()))

    def compact(self, rv: int | None = None) -> None:
        """Test hook: forget history up to `rv` (default: the current RV)."""
        self._history.compact(self.rv if rv is None else rv)

    @property
    def compacted(self) -> int:
        return self._history.compacted

    # -- state dump ----------------------------------------------------------------------------

    def dump(self) -> bytes:
        """The whole state as bytes (for `--state FILE`); history is not kept."""
        objects = [[g, r, list(bucket.values())] for (g, r), bucket in self._objects.items()]
        return orjson.dumps({"version": 1, "rv": self.rv, "objects": objects})

    def load(self, data: bytes) -> None:
        """Replace the whole state with a `dump()`; open watches end, listeners hear nothing."""
        try:
            state = orjson.loads(data)
            rv, groups = int(state["rv"]), state["objects"]
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not a devcluster state dump: {err}") from None
        for watchers in list(self._watchers.values()):
            for w in list(watchers):
                w.close()
        self._objects, self._sorted, self._encoded, self._event_index = {}, {}, {}, {}
        self._ns_counts, self._controlled = {}, {}
        for group, resource, items in groups:
            bucket = self._objects[(group, resource)] = {}
            for o in items:
                ns = o["metadata"].get("namespace", "")
                bucket[(ns, o["metadata"]["name"])] = o
                self._controlled.setdefault((group, resource, _controller_uid(o)), {})[
                    (ns, o["metadata"]["name"])] = None
                if ns:
                    self._ns_counts[ns] = self._ns_counts.get(ns, 0) + 1
        for crd in self._objects.get(CRD_KEY, {}).values():
            self.registry.register_crd(crd)
        self._services.rebuild(self._objects.get(SERVICE_KEY, {}).values())
        self.rv = rv
        self._history.reset(rv)

    # -- internals -----------------------------------------------------------------------------

    def _bucket(self, rt: ResourceType) -> dict[Key, dict[str, Any]]:
        bucket = self._objects.get(rt.key)
        if bucket is None:
            bucket = self._objects[rt.key] = {}
        return bucket

    def _ns(self, rt: ResourceType, namespace: str | None) -> str:
        if not rt.namespaced:
            return ""
        if not namespace:
            raise bad_request("a namespace is required for a namespaced resource")
        return namespace

    def _storage_types(self) -> list[ResourceType]:
        seen: dict[tuple[str, str], ResourceType] = {}
        for rt in self.registry.all():
            if rt.key not in seen or rt.storage:
                seen[rt.key] = rt
        return list(seen.values())

    def _matcher(self, rt: ResourceType, namespace: str | None, label_selector: Any,
                 field_selector: Any) -> Callable[[dict[str, Any]], bool]:
        labels = _label_selector(label_selector)
        fields = parse_field_selector(field_selector, rt) if isinstance(field_selector, str) else field_selector
        ns = namespace if namespace and rt.namespaced else None
        if fields is not None and fields.empty:
            fields = None

        def match(obj: dict[str, Any]) -> bool:
            m = obj["metadata"]
            if ns is not None and m.get("namespace") != ns:
                return False
            if labels is not None and not labels.matches(m.get("labels")):
                return False
            return fields is None or fields.matches(obj)
        return match

    def _validate(self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        errors = validate_object(rt, obj, old)
        if rt.crd:
            errors = errors + crds.validate_cr(rt, obj)
        elif rt.key == CRD_KEY:
            errors = errors + crds.validate_crd(obj)
        if errors:
            raise invalid(rt.kind, rt.group, obj["metadata"].get("name", ""), errors)

    def _allocate(self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """ClusterIP and NodePorts for Services; 422 when a requested one is taken."""
        if rt.key != SERVICE_KEY:
            return
        m, spec = obj["metadata"], obj.setdefault("spec", {})
        owner = f"{m.get('namespace', '')}/{m['name']}"
        try:
            if spec.get("type") != "ExternalName" and spec.get("clusterIP") != "None":
                spec["clusterIP"] = self._services.allocate_ip(owner, spec.get("clusterIP") or None)
                spec["clusterIPs"] = [spec["clusterIP"]]
                spec.setdefault("ipFamilies", ["IPv4"])
                spec.setdefault("ipFamilyPolicy", "SingleStack")
            if spec.get("type") in ("NodePort", "LoadBalancer"):
                for port in spec.get("ports") or []:
                    port["nodePort"] = self._services.allocate_port(owner, port.get("nodePort"))
        except AllocationError as err:
            raise invalid(rt.kind, rt.group, m["name"], [FieldError("spec.clusterIP", "Invalid value", str(err),
                                                                    spec.get("clusterIP"), True)]) from None

    def _establish_crd(self, rt: ResourceType, crd: dict[str, Any]) -> dict[str, Any]:
        """Register a new CRD's kinds and publish its status (a second write, as a real server does)."""
        self.registry.register_crd(crd)
        new = dict(crd)
        new["metadata"] = dict(crd["metadata"])
        new["status"] = crds.crd_status(crd, crd.get("status"), self._clock())
        return self._commit(rt, "MODIFIED", new, crd)

    def _commit(self, rt: ResourceType, type_: str, new: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        self.rv += 1
        m = new["metadata"]
        m["resourceVersion"] = str(self.rv)
        bucket = self._bucket(rt)
        key = (m.get("namespace", ""), m["name"])
        if old is None:
            self._index_add(rt, key)
        else:
            self._encoded.pop(id(old), None)
            self._control_remove(rt, key, old)
        self._control_add(rt, key, new)
        bucket[key] = new
        self._emit(WatchEvent(type_, rt, new, old, self.rv, self._clock()))
        return new

    def _index_add(self, rt: ResourceType, key: Key) -> None:
        keys = self._sorted.get(rt.key)
        if keys is not None:
            bisect.insort(keys, key)
        if rt.namespaced:
            self._ns_counts[key[0]] = self._ns_counts.get(key[0], 0) + 1

    def _index_remove(self, rt: ResourceType, key: Key) -> None:
        keys = self._sorted.get(rt.key)
        if keys is not None:
            i = bisect.bisect_left(keys, key)
            if i < len(keys) and keys[i] == key:
                del keys[i]
        if rt.namespaced:
            self._ns_counts[key[0]] -= 1

    def _control_add(self, rt: ResourceType, key: Key, obj: dict[str, Any]) -> None:
        self._controlled.setdefault((*rt.key, _controller_uid(obj)), {})[key] = None

    def _control_remove(self, rt: ResourceType, key: Key, obj: dict[str, Any]) -> None:
        keys = self._controlled.get((*rt.key, _controller_uid(obj)))
        if keys is not None:
            keys.pop(key, None)

    def _emit(self, ev: WatchEvent) -> None:
        self._history.append(ev, ev.time)
        for w in list(self._watchers.get(ev.rt.key, ())):
            w.offer(ev)
        for cb in list(self._listeners):
            try:
                cb(ev)
            except Exception:  # a listener bug must not fail the write that already happened
                log.exception("store listener failed event=%r", ev)


def _same_ownership(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """managedFields unchanged: a write that only hands fields over is still a write."""
    return old["metadata"].get("managedFields") == new["metadata"].get("managedFields")


def _controller_uid(obj: dict[str, Any]) -> str:
    for ref in obj["metadata"].get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") and ref.get("uid"):
            return str(ref["uid"])
    return ""


def invalid_patch() -> ApiError:
    return ApiError(422, "Invalid", "couldn't get version/kind; json parse error: "
                    "json: cannot unmarshal array into Go value of type struct "
                    "{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }")


def _parse_rv(value: Any) -> int | None:
    if value in (None, "", "0", 0):
        return None
    try:
        rv = int(value)
    except (TypeError, ValueError):
        raise bad_request(f'resourceVersion: Invalid value: "{value}": strconv.ParseUint: parsing '
                          f'"{value}": invalid syntax') from None
    if rv < 0:
        raise bad_request(f'resourceVersion: Invalid value: "{value}"')
    return rv


def _label_selector(sel: Any) -> LabelSelector | None:
    parsed = parse_label_selector(sel) if isinstance(sel, str) else sel
    if parsed is None or parsed.empty:
        return None
    return parsed


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


def _initial_events_end(rt: ResourceType, rv: int) -> WatchEvent:
    obj = {"kind": rt.kind, "apiVersion": rt.api_version,
           "metadata": {"resourceVersion": str(rv), "annotations": {"k8s.io/initial-events-end": "true"}}}
    return WatchEvent("BOOKMARK", rt, obj, None, rv)


def _keep_service_allocations(old: dict[str, Any], new: dict[str, Any]) -> None:
    """An update that omits clusterIP or nodePorts keeps the allocated ones."""
    ospec, spec = old.get("spec") or {}, new.get("spec")
    if not isinstance(spec, dict):
        return
    for k in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
        if not spec.get(k) and ospec.get(k):
            spec[k] = ospec[k]
    old_ports = {(p.get("port"), p.get("protocol", "TCP")): p.get("nodePort") for p in ospec.get("ports") or []}
    for p in spec.get("ports") or []:
        if isinstance(p, dict) and not p.get("nodePort"):
            node_port = old_ports.get((p.get("port"), p.get("protocol", "TCP")))
            if node_port and spec.get("type") in ("NodePort", "LoadBalancer"):
                p["nodePort"] = node_port


def _new_event(involved: dict[str, Any], ns: str, reason: str, message: str, type_: str,
               component: str, action: str | None, now: float) -> dict[str, Any]:
    m = involved.get("metadata") or {}
    ref = {k: v for k, v in (("apiVersion", involved.get("apiVersion")), ("kind", involved.get("kind")),
                             ("name", m.get("name")), ("namespace", m.get("namespace")),
                             ("uid", m.get("uid")), ("resourceVersion", m.get("resourceVersion"))) if v}
    ts = rfc3339(now)
    ev: dict[str, Any] = {
        "metadata": {"name": f"{m.get('name', 'unknown')}.{time.time_ns():x}", "namespace": ns},
        "involvedObject": ref, "reason": reason, "message": message, "type": type_,
        "source": {"component": component} if component else {},
        "firstTimestamp": ts, "lastTimestamp": ts, "count": 1, "eventTime": None,
        "reportingComponent": component, "reportingInstance": "",
    }
    if action:
        ev["action"] = action
    return ev


def _repeat_event(ev: dict[str, Any], now: float) -> None:
    ev["count"] = int(ev.get("count") or 1) + 1
    ev["lastTimestamp"] = rfc3339(now)


__all__ = ["Store", "WatchEvent", "Watch", "Page", "micro_time"]
