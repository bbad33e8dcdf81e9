"""OpenAPI documents with schemas: `/openapi/v2` (swagger 2.0) and `/openapi/v3/<group-version>`.

kubectl reads them for `explain` and to learn that the server validates fields itself;
Helm reads them to validate manifests. Definitions carry the names a real server gives
them (`io.k8s.api.core.v1.Pod`, `io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta`) and
`x-kubernetes-group-version-kind` on every kind. Built-in kinds come from the emulator's
one table of built-in types (`Definitions`); a CRD's kinds from its version's
`openAPIV3Schema`, named `<reversed group>.<version>.<Kind>` as a real server names them.

Pure: the server caches the encoded documents per registry generation. The same
`Definitions` give field validation its `SchemaView`, so what `explain` shows is what
the server enforces.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from devcluster.machinery.resource import ResourceType
from devcluster.server import apitypes
from devcluster.server.fieldvalidation import SchemaView
from devcluster.storage.registry import Registry

__all__ = ["Definitions", "OBJECT_META", "LIST_META", "v3_document", "v2_document", "crd_definition_name",
           "schema_view", "V2_PROTOBUF"]

V3_PREFIX = "#/components/schemas/"
V2_PREFIX = "#/definitions/"
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
OBJECT_META = META + "ObjectMeta"
LIST_META = META + "ListMeta"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
INFO = {"title": "Kubernetes", "version": "v1.32.0"}

# The special types' own schemas: their JSON form is not their Go/proto structure.
SPECIAL_V3: dict[str, dict[str, Any]] = {
    QUANTITY: {"oneOf": [{"type": "string"}, {"type": "number"}]},
    INT_OR_STRING: {"format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]},
    META + "Time": {"type": "string", "format": "date-time"},
    META + "MicroTime": {"type": "string", "format": "date-time"},
    META + "Duration": {"type": "string"},
    META + "FieldsV1": {"type": "object"},
    "io.k8s.apimachinery.pkg.runtime.RawExtension": {"type": "object"},
}
SPECIAL_V2: dict[str, dict[str, Any]] = {
    QUANTITY: {"type": "string"},
    INT_OR_STRING: {"type": "string", "format": "int-or-string"},
}


@dataclass(frozen=True)
class Definitions:
    """The built-in component schemas (v3 form, refs `#/components/schemas/<name>`) and which is which kind."""

    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    kinds: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (group, version, kind) -> name

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        """The schema a `$ref` (or a one-element `allOf` around one) names; others as they are."""
        ref = schema.get("$ref")
        if ref is None and len(schema.get("allOf") or ()) == 1 and not schema.get("properties"):
            ref = schema["allOf"][0].get("$ref")
        if not isinstance(ref, str):
            return schema
        return self.schemas.get(ref[len(V3_PREFIX):], {})

    def closure(self, names: list[str]) -> dict[str, dict[str, Any]]:
        """`names` and every definition they reference, transitively."""
        out: dict[str, dict[str, Any]] = {}
        todo = list(names)
        while todo:
            name = todo.pop()
            if name in out or name not in self.schemas:
                continue
            out[name] = self.schemas[name]
            todo.extend(_refs(self.schemas[name]))
        return dict(sorted(out.items()))


def _refs(schema: Any) -> list[str]:
    if isinstance(schema, dict):
        found = [schema["$ref"][len(V3_PREFIX):]] if isinstance(schema.get("$ref"), str) else []
        for value in schema.values():
            found += _refs(value)
        return found
    if isinstance(schema, list):
        return [r for item in schema for r in _refs(item)]
    return []


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": V3_PREFIX + name}


def _gvk(group: str, version: str, kind: str) -> list[dict[str, str]]:
    return [{"group": group, "kind": kind, "version": version}]


# -- custom resources --------------------------------------------------------------------------------


def crd_definition_name(group: str, version: str, kind: str) -> str:
    """`sedna.io`, `v1alpha1`, `Model` -> `io.sedna.v1alpha1.Model` (the real server's REST-friendly name)."""
    return ".".join(reversed(group.split("."))) + f".{version}.{kind}"


_API_VERSION_DOC = "The group/version this object is written in; the server converts the versions it knows."
_KIND_DOC = "The kind of this object (CamelCase), naming the REST resource it belongs to."
_META_DOC = "The object's metadata: name, namespace, labels, owners..."


def crd_schemas(rt: ResourceType) -> dict[str, dict[str, Any]]:
    """The kind and its List for one served CRD version, metadata pointing at ObjectMeta/ListMeta."""
    name = crd_definition_name(rt.group, rt.version, rt.kind)
    kind = copy.deepcopy(rt.schema) if rt.schema else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    props = kind.setdefault("properties", {})
    props["apiVersion"] = {"description": _API_VERSION_DOC, "type": "string"}
    props["kind"] = {"description": _KIND_DOC, "type": "string"}
    props["metadata"] = {"allOf": [_ref(OBJECT_META)], "description": _META_DOC}
    kind["x-kubernetes-group-version-kind"] = _gvk(rt.group, rt.version, rt.kind)
    listing = {
        "description": f"{rt.kind}List is a list of {rt.kind}",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"description": _API_VERSION_DOC, "type": "string"},
            "items": {"description": f"List of {rt.resource}.", "type": "array", "items": _ref(name)},
            "kind": {"description": _KIND_DOC, "type": "string"},
            "metadata": {"allOf": [_ref(LIST_META)], "description": "Standard list metadata."},
        },
        "x-kubernetes-group-version-kind": _gvk(rt.group, rt.version, rt.list_kind),
    }
    return {name: kind, name + "List": listing}


# -- documents -------------------------------------------------------------------------------------


def _patch_path(rt: ResourceType) -> tuple[str, dict[str, Any]]:
    """The PATCH operation kubectl looks for: GVK plus a `fieldValidation` parameter (spec §3.5).

    No `requestBody` naming strategic merge: with one, kubectl would compute its patches from
    these schemas, which carry no patch strategies; without, it uses its compiled-in types."""
    ns = "/namespaces/{namespace}" if rt.namespaced else ""
    group = "Core" if not rt.group else "".join(p.capitalize() for p in rt.group.split(".")[0].split("-"))
    scope = "Namespaced" if rt.namespaced else ""
    op = {
        "operationId": f"patch{group}{rt.version.capitalize()}{scope}{rt.kind}",
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
        "responses": {"200": {"description": "OK"}},
    }
    return f"{rt.gv_path}{ns}/{rt.resource}/{{name}}", {"patch": op}


def _gv_schemas(defs: Definitions, types: list[ResourceType]) -> dict[str, dict[str, Any]]:
    roots: list[str] = []
    crd: dict[str, dict[str, Any]] = {}
    for rt in types:
        if rt.crd:
            crd.update(crd_schemas(rt))
            roots += [OBJECT_META, LIST_META]
            continue
        for kind in (rt.kind, rt.list_kind):
            name = defs.kinds.get((rt.group, rt.version, kind))
            if name:
                roots.append(name)
    out = defs.closure(roots)
    for special in (OBJECT_META, LIST_META):
        if special in roots and special not in out:
            out[special] = {"type": "object"}  # no table entry: at least a resolvable reference
    out.update(crd)
    return dict(sorted(out.items()))


def v3_document(registry: Registry, defs: Definitions, group: str, version: str) -> dict[str, Any] | None:
    """`/openapi/v3/<gv>`: one PATCH path per kind and the components its kinds need; None if unknown."""
    types = registry.resources_of(group, version)
    if not types:
        return None
    paths = dict(_patch_path(rt) for rt in types)
    return {"openapi": "3.0.0", "info": INFO, "paths": paths,
            "components": {"schemas": _gv_schemas(defs, types)}}


def v2_document(registry: Registry, defs: Definitions) -> dict[str, Any]:
    """`/openapi/v2`: every group-version in one swagger 2.0 document."""
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for group in registry.groups():
        for version in registry.versions(group):
            types = registry.resources_of(group, version)
            for rt in types:
                path, item = _patch_path(rt)
                op = dict(item["patch"], parameters=[{"name": "fieldValidation", "in": "query", "type": "string",
                                                      "uniqueItems": True}])
                paths[path] = {"patch": op}
            schemas.update(_gv_schemas(defs, types))
    definitions = {name: _to_v2(name, schema) for name, schema in sorted(schemas.items())}
    return {"swagger": "2.0", "info": INFO, "paths": paths, "definitions": definitions}


def _to_v2(name: str, schema: dict[str, Any]) -> Any:
    if name in SPECIAL_V2:
        return dict(SPECIAL_V2[name], **({"description": schema["description"]} if "description" in schema else {}))
    return _v2_node(schema)


def _v2_node(node: Any) -> Any:
    """v3 -> v2: refs under `#/definitions/`, `allOf: [$ref]` collapsed to the `$ref`, no `default` beside one."""
    if isinstance(node, list):
        return [_v2_node(n) for n in node]
    if not isinstance(node, dict):
        return node
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0] and not node.get("properties"):
        out = {k: _v2_node(v) for k, v in node.items() if k not in ("allOf", "default")}
        out["$ref"] = V2_PREFIX + all_of[0]["$ref"][len(V3_PREFIX):]
        return out
    out = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str):
            out[key] = V2_PREFIX + value[len(V3_PREFIX):]
        else:
            out[key] = _v2_node(value)
    return out


@cache
def builtin_definitions() -> Definitions:
    """The built-in kinds' definitions, derived from the emulator's one table of built-in types."""
    schemas = {_def_name(name): _message_schema(apitypes.message(name)) for name in apitypes.message_names()}
    kinds: dict[tuple[str, str, str], str] = {}
    for api_version, kind, mt in apitypes.kinds():
        group, _, version = api_version.rpartition("/")
        name = _def_name(mt.name)
        kinds[(group, version, kind)] = name
        top = schemas[name]
        top.setdefault("properties", {}).update({"apiVersion": {"description": _API_VERSION_DOC, "type": "string"},
                                                 "kind": {"description": _KIND_DOC, "type": "string"}})
        top["properties"] = dict(sorted(top["properties"].items()))
        top.setdefault("x-kubernetes-group-version-kind", []).extend(_gvk(group, version, kind))
    return Definitions(schemas=schemas, kinds=kinds)


def _def_name(proto_name: str) -> str:
    """`k8s.io.api.core.v1.Pod` -> `io.k8s.api.core.v1.Pod`, the real server's definition name."""
    return "io.k8s." + proto_name[len("k8s.io."):] if proto_name.startswith("k8s.io.") else proto_name


_SPECIAL_BY_FORM: dict[str, dict[str, Any]] = {
    "quantity": SPECIAL_V3[QUANTITY],
    "intorstring": SPECIAL_V3[INT_OR_STRING],
    "time": {"type": "string", "format": "date-time"},
    "microtime": {"type": "string", "format": "date-time"},
    "duration": {"type": "string"},
    "rawjson": {"type": "object"},
    "stringlist": {"type": "array", "items": {"type": "string"}},
}
_SCALARS: dict[str, dict[str, Any]] = {
    "string": {"type": "string"}, "bytes": {"type": "string", "format": "byte"}, "bool": {"type": "boolean"},
    "int32": {"type": "integer", "format": "int32"}, "int64": {"type": "integer", "format": "int64"},
    "uint32": {"type": "integer", "format": "int32"}, "uint64": {"type": "integer", "format": "int64"},
    "sint32": {"type": "integer", "format": "int32"}, "sint64": {"type": "integer", "format": "int64"},
    "fixed32": {"type": "integer", "format": "int32"}, "fixed64": {"type": "integer", "format": "int64"},
    "double": {"type": "number", "format": "double"}, "float": {"type": "number", "format": "float"},
}


def _message_schema(mt: Any) -> dict[str, Any]:
    if mt.special:
        return copy.deepcopy(_SPECIAL_BY_FORM.get(mt.special, {"type": "object"}))
    props = {name: _field_schema(f) for name, f in sorted(mt.json_fields().items())}
    return {"type": "object", "properties": props}


def _field_schema(f: Any) -> dict[str, Any]:
    if f.kind == "message":
        value: dict[str, Any] = _ref(_def_name(f.type_name))
    else:
        value = dict(_SCALARS.get(f.kind, {"type": "string"}))
    if f.is_map:
        return {"type": "object", "additionalProperties": value}
    if f.repeated:
        return {"type": "array", "items": value}
    return {"allOf": [value]} if f.kind == "message" else value


# -- field validation ------------------------------------------------------------------------------


def schema_view(defs: Definitions, rt: ResourceType) -> SchemaView | None:
    """How field validation reads `rt`: the CRD's structural schema, or the built-in definition."""
    meta = defs.schemas.get(OBJECT_META)
    if rt.crd:
        if not rt.schema:
            return None
        return SchemaView(root=rt.schema, resolve=defs.resolve, structural=True, meta=_ref(OBJECT_META) if meta
                          else None)
    name = defs.kinds.get((rt.group, rt.version, rt.kind))
    if name is None:
        return None
    return SchemaView(root=defs.schemas[name], resolve=defs.resolve)
