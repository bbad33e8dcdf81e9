"""The in-memory store's write verbs: create, update, patch (apply included), scale, and the
helpers in-process controllers write through (mutate, bind, record_event).

Every verb runs the API semantics of spec §4-§6 synchronously, then commits: one commit =
one RV bump = one event, delivered to watchers and listeners inside the write. The state,
commits and reads are `ObjectStore`'s (objects.py), the delete verbs `DeleteVerbs`'
(deletion.py); `Store` is the whole.
"""

from __future__ import annotations

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
    forbidden_object,
    invalid,
    not_found,
    unsupported_media,
)
from devcluster.machinery.objmeta import generated_name, new_uid, rfc3339
from devcluster.machinery.resource import ResourceType
from devcluster.storage import managedfields
from devcluster.storage.allocator import AllocationError
from devcluster.storage.apply import server_side_apply
from devcluster.storage.deletion import DeleteVerbs
from devcluster.storage.objects import CRD_KEY, EVENT_KEY, NS_KEY, POD_KEY, SERVICE_KEY
from devcluster.storage.patch import json_patch, merge_patch, strategic_merge_patch
from devcluster.storage.registry import Registry
from devcluster.strategy import crds, rules
from devcluster.strategy.defaults import admit_pod, sync_app_armor
from devcluster.strategy.dispatch import apply_builtin_defaults, initial_status, validate_object

INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_STRATEGIC_415 = ("the body of the request was in an unknown format - accepted media types include: "
                  "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml")
_MAX_EVENT_INDEX = 50_000


class Store(DeleteVerbs):
    """All objects of the dev cluster and the API verbs over them (see devcluster/README.md)."""

    def __init__(self, registry: Registry | None = None, **options: Any) -> None:
        """`options` as `ObjectStore` takes them; the store starts with the initial namespaces."""
        super().__init__(registry, **options)
        ns_rt = self.registry.for_resource(*NS_KEY)
        assert ns_rt is not None
        for name in INITIAL_NAMESPACES:
            self.create(ns_rt, None, {"metadata": {"name": name}})

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

    # -- write steps ---------------------------------------------------------------------------

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


def _copy(obj: Any) -> Any:
    """A deep copy of JSON data (orjson round trip: faster than copy.deepcopy)."""
    return orjson.loads(orjson.dumps(obj))

def _same_ownership(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """managedFields unchanged: a write that only hands fields over is still a write."""
    return old["metadata"].get("managedFields") == new["metadata"].get("managedFields")

def invalid_patch() -> ApiError:
    return ApiError(422, "Invalid", "couldn't get version/kind; json parse error: "
                    "json: cannot unmarshal array into Go value of type struct "
                    "{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }")

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
