"""Discovery (aggregated v2 and legacy) and the OpenAPI v3 index, rendered from the registry.

Pure: each function turns the registry into a JSON-ready dict (spec §3.2, §3.3, §3.5).
The server caches the encoded results per `registry.generation`. The OpenAPI documents
themselves, with their schemas, are `openapi.py`'s.
"""

from __future__ import annotations

from typing import Any

from devcluster.machinery.resource import ResourceType
from devcluster.storage.registry import SUBRESOURCE_VERBS, VERBS, Registry

AGGREGATED_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

VERSION_INFO = {
    "major": "1", "minor": "32", "emulationMajor": "1", "emulationMinor": "32", "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "31", "gitVersion": "v1.32.0", "gitCommit": "emulator", "gitTreeState": "clean",
    "buildDate": "2024-12-11T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc", "platform": "linux/amd64",
}


def _kind_ref(group: str, version: str, kind: str) -> dict[str, str]:
    return {"group": group, "version": version, "kind": kind}


def _subresources(rt: ResourceType) -> list[dict[str, Any]]:
    subs = []
    if rt.status:
        subs.append({"subresource": "status", "responseKind": _kind_ref(rt.group, rt.version, rt.kind),
                     "verbs": list(SUBRESOURCE_VERBS)})
    if rt.scale:
        subs.append({"subresource": "scale", "responseKind": _kind_ref("autoscaling", "v1", "Scale"),
                     "verbs": list(SUBRESOURCE_VERBS)})
    for name, verbs in rt.extra_subresources:
        kind = _kind_ref(rt.group, rt.version, "Binding" if name == "binding" else rt.kind)
        if name == "token":
            kind = _kind_ref("authentication.k8s.io", "v1", "TokenRequest")
        subs.append({"subresource": name, "responseKind": kind, "verbs": list(verbs)})
    return subs


def aggregated_resource(rt: ResourceType) -> dict[str, Any]:
    out: dict[str, Any] = {
        "resource": rt.resource,
        "responseKind": _kind_ref(rt.group, rt.version, rt.kind),
        "scope": "Namespaced" if rt.namespaced else "Cluster",
        "singularResource": rt.singular,
        "verbs": verbs_of(rt),
    }
    if rt.short_names:
        out["shortNames"] = list(rt.short_names)
    if rt.categories:
        out["categories"] = list(rt.categories)
    subs = _subresources(rt)
    if subs:
        out["subresources"] = subs
    return out


def aggregated(registry: Registry, *, core: bool) -> dict[str, Any]:
    """`GET /api` (core only) or `GET /apis` (every other group) as APIGroupDiscoveryList."""
    items = []
    for group in registry.groups():
        if (group == "") != core:
            continue
        versions = [{"version": v, "freshness": "Current",
                     "resources": [aggregated_resource(rt) for rt in registry.resources_of(group, v)]}
                    for v in registry.versions(group)]
        meta: dict[str, Any] = {"creationTimestamp": None}
        if group:
            meta["name"] = group
        items.append({"metadata": meta, "versions": versions})
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items}


def legacy_versions(server_address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def api_group(registry: Registry, group: str) -> dict[str, Any]:
    versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in registry.versions(group)]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions,
            "preferredVersion": versions[0] if versions else {}}


def legacy_groups(registry: Registry) -> dict[str, Any]:
    groups = []
    for g in registry.groups():
        if g:
            grp = api_group(registry, g)
            del grp["kind"], grp["apiVersion"]
            groups.append(grp)
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def resource_list(registry: Registry, group: str, version: str) -> dict[str, Any]:
    """Legacy per-GV `APIResourceList` (spec §3.3)."""
    resources = []
    for rt in registry.resources_of(group, version):
        entry: dict[str, Any] = {"name": rt.resource, "singularName": rt.singular, "namespaced": rt.namespaced,
                                 "kind": rt.kind, "verbs": verbs_of(rt)}
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        resources.append(entry)
        for sub in _subresources(rt):
            ref = sub["responseKind"]
            item: dict[str, Any] = {"name": f"{rt.resource}/{sub['subresource']}", "singularName": "",
                                    "namespaced": rt.namespaced, "kind": ref["kind"], "verbs": sub["verbs"]}
            if (ref["group"], ref["version"]) != (rt.group, rt.version):
                item["group"], item["version"] = ref["group"], ref["version"]
            resources.append(item)
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


# -- OpenAPI v3 --------------------------------------------------------------------------------------

def gv_key(group: str, version: str) -> str:
    """The OpenAPI v3 index key: `api/v1` or `apis/<group>/<version>`, no leading slash."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_index(registry: Registry) -> dict[str, Any]:
    paths = {}
    for group in registry.groups():
        for version in registry.versions(group):
            key = gv_key(group, version)
            paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={registry.gv_hash(group, version)}"}
    return {"paths": paths}


def verbs_of(rt: ResourceType) -> list[str]:
    """The verbs a resource serves: all of them, except that namespaces have no collection delete."""
    if rt.key == ("", "namespaces"):
        return [v for v in VERBS if v != "deletecollection"]
    return list(VERBS)
