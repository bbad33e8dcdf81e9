"""Which resources the dev cluster serves: built-ins (spec §3.4) and CRD-registered kinds.

The registry is the single answer to "what is at this URL" and "which resource serves this
kind". Discovery and OpenAPI are rendered from it, so a CRD registered here appears
everywhere at once; `generation` changes on every (un)registration so caches can tell.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from devcluster.machinery.errors import path_not_found
from devcluster.machinery.resource import ResourceType
from devcluster.strategy import rbac

VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
SUBRESOURCE_VERBS = ("get", "patch", "update")


def _rt(group: str, version: str, resource: str, kind: str, namespaced: bool = True, **kw: Any) -> ResourceType:
    singular = kw.pop("singular", kind.lower())
    return ResourceType(group, version, resource, kind, namespaced, singular=singular, **kw)


def builtin_types() -> list[ResourceType]:
    """The built-in resources of spec §3.4, with the names a real 1.32 server publishes."""
    return [
        _rt("", "v1", "namespaces", "Namespace", False, short_names=("ns",), status=True),
        _rt("", "v1", "nodes", "Node", False, short_names=("no",), status=True),
        _rt("", "v1", "pods", "Pod", short_names=("po",), categories=("all",), status=True, generation=True,
            extra_subresources=(("binding", ("create",)), ("log", ("get",)))),
        _rt("", "v1", "services", "Service", short_names=("svc",), categories=("all",), status=True),
        _rt("", "v1", "secrets", "Secret"),
        _rt("", "v1", "configmaps", "ConfigMap", short_names=("cm",)),
        _rt("", "v1", "events", "Event", short_names=("ev",)),
        _rt("", "v1", "serviceaccounts", "ServiceAccount", short_names=("sa",),
            extra_subresources=(("token", ("create",)),)),
        _rt("apps", "v1", "deployments", "Deployment", short_names=("deploy",), categories=("all",),
            status=True, scale=True, generation=True),
        _rt("apps", "v1", "replicasets", "ReplicaSet", short_names=("rs",), categories=("all",),
            status=True, scale=True, generation=True),
        _rt("apps", "v1", "daemonsets", "DaemonSet", short_names=("ds",), categories=("all",),
            status=True, generation=True),
        _rt("events.k8s.io", "v1", "events", "Event", short_names=("ev",), storage=False),
        _rt("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler",
            short_names=("hpa",), categories=("all",), status=True, generation=True),
        _rt("autoscaling", "v1", "horizontalpodautoscalers", "HorizontalPodAutoscaler",
            short_names=("hpa",), categories=("all",), status=True, generation=True, storage=False),
        _rt("batch", "v1", "jobs", "Job", categories=("all",), status=True, generation=True),
        _rt("batch", "v1", "cronjobs", "CronJob", short_names=("cj",), categories=("all",),
            status=True, generation=True),
        _rt("coordination.k8s.io", "v1", "leases", "Lease"),
        # stored and validated only: no quota accounting, disruption checks or ingress routing
        _rt("", "v1", "resourcequotas", "ResourceQuota", short_names=("quota",), status=True),
        _rt("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", short_names=("pdb",),
            status=True, generation=True),
        _rt("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, short_names=("pc",)),
        _rt("networking.k8s.io", "v1", "ingresses", "Ingress", short_names=("ing",), status=True,
            generation=True),
        _rt("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False,
            short_names=("crd", "crds"), categories=("api-extensions",), status=True, generation=True),
        *rbac.resource_types(),
    ]


_VERSION_RE = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key putting versions in Kubernetes preference order (v2 > v1 > v1beta1 > v1alpha1 > other)."""
    m = _VERSION_RE.match(version)
    if not m:
        return (3, 0, 0, version)
    major, stage, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -major, -minor, version)


class Registry:
    """All served resource types, indexed by URL coordinates and by kind."""

    def __init__(self, types: list[ResourceType] | None = None) -> None:
        # (group, version, resource) -> type; the one index everything else derives from.
        self._by_gvr: dict[tuple[str, str, str], ResourceType] = {}
        self._builtin_groups: list[str] = []
        self._hash_cache: dict[tuple[str, str], str] = {}
        self.generation = 0  # bumped on every change; caches of discovery/OpenAPI key on it
        for rt in types or []:
            self.add(rt)

    @classmethod
    def with_builtins(cls) -> Registry:
        reg = cls(builtin_types())
        reg._builtin_groups = list(dict.fromkeys(rt.group for rt in reg._by_gvr.values()))
        return reg

    # -- changes -----------------------------------------------------------------------------

    def add(self, rt: ResourceType) -> None:
        self._by_gvr[(rt.group, rt.version, rt.resource)] = rt
        self._changed()

    def remove(self, group: str, resource: str) -> None:
        for key in [k for k in self._by_gvr if k[0] == group and k[2] == resource]:
            del self._by_gvr[key]
        self._changed()

    def _changed(self) -> None:
        self.generation += 1
        self._hash_cache.clear()

    def register_crd(self, crd: dict[str, Any]) -> list[ResourceType]:
        """Serve every `served` version of a CRD; replaces an earlier registration."""
        types = types_from_crd(crd)
        spec = crd.get("spec") or {}
        self.remove(spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
        for rt in types:
            self._by_gvr[(rt.group, rt.version, rt.resource)] = rt
        self._changed()
        return types

    def unregister_crd(self, crd: dict[str, Any]) -> None:
        spec = crd.get("spec") or {}
        self.remove(spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))

    # -- lookups -----------------------------------------------------------------------------

    def lookup(self, *, group: str, version: str, resource: str) -> ResourceType:
        """The type served at these URL coordinates; ApiError 404 if none."""
        rt = self._by_gvr.get((group, version, resource))
        if rt is None:
            raise path_not_found()
        return rt

    def find(self, group: str, version: str, resource: str) -> ResourceType | None:
        return self._by_gvr.get((group, version, resource))

    def for_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rt in self._by_gvr.values():
            if rt.kind == kind and rt.group == group and rt.version == version:
                return rt
        return None

    def for_resource(self, group: str, resource: str) -> ResourceType | None:
        """The storage-version type of `resource.group` (any version), or None."""
        found = [rt for rt in self._by_gvr.values() if rt.group == group and rt.resource == resource]
        if not found:
            return None
        return next((rt for rt in found if rt.storage), found[0])

    def all(self) -> list[ResourceType]:
        return list(self._by_gvr.values())

    def groups(self) -> list[str]:
        """Groups in discovery order: built-in groups first (core first), then CRD groups sorted."""
        present = {rt.group for rt in self._by_gvr.values()}
        builtin = [g for g in self._builtin_groups if g in present]
        return builtin + sorted(present - set(builtin))

    def versions(self, group: str) -> list[str]:
        """The group's versions in preference order (first = preferred)."""
        found = {rt.version for rt in self._by_gvr.values() if rt.group == group}
        return sorted(found, key=version_priority)

    def resources_of(self, group: str, version: str) -> list[ResourceType]:
        items = [rt for rt in self._by_gvr.values() if rt.group == group and rt.version == version]
        return sorted(items, key=lambda rt: rt.resource)

    def gv_hash(self, group: str, version: str) -> str:
        """Content hash of a group-version's kinds, for OpenAPI v3 `?hash=` URLs."""
        key = (group, version)
        cached = self._hash_cache.get(key)
        if cached is None:
            parts = [
                f"{rt.resource}|{rt.kind}|{rt.namespaced}|{rt.status}|{rt.scale}|{_schema_digest(rt)}"
                for rt in self.resources_of(group, version)
            ]
            cached = hashlib.sha512("\n".join(parts).encode()).hexdigest()[:128].upper()
            self._hash_cache[key] = cached
        return cached


def _schema_digest(rt: ResourceType) -> str:
    if rt.schema is None:
        return ""
    return hashlib.sha1(repr(sorted(_flatten(rt.schema))).encode()).hexdigest()


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict):
        out: list[tuple[str, str]] = []
        for k, v in value.items():
            out.extend(_flatten(v, f"{prefix}/{k}"))
        return out
    if isinstance(value, list):
        return [item for i, v in enumerate(value) for item in _flatten(v, f"{prefix}/{i}")]
    return [(prefix, repr(value))]


def types_from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """One ResourceType per served version of a CRD (spec §4.9)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out = []
    for ver in spec.get("versions") or []:
        if not ver.get("served", True):
            continue
        subs = ver.get("subresources") or {}
        scale = subs.get("scale")
        schema = (ver.get("schema") or {}).get("openAPIV3Schema")
        out.append(ResourceType(
            group=spec.get("group", ""),
            version=ver.get("name", ""),
            resource=names.get("plural", ""),
            kind=names.get("kind", ""),
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            singular=names.get("singular") or names.get("kind", "").lower(),
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            status="status" in subs,
            scale=scale is not None,
            generation=True,
            crd=True,
            schema=schema,
            printer_columns=tuple(ver.get("additionalPrinterColumns") or ()),
            scale_spec_path=(scale or {}).get("specReplicasPath", ".spec.replicas"),
            scale_status_path=(scale or {}).get("statusReplicasPath", ".status.replicas"),
            scale_selector_path=(scale or {}).get("labelSelectorPath", ""),
            storage=bool(ver.get("storage", False)),
        ))
    return out
