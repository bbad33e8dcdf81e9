"""Server-side field validation: unknown and duplicate fields under `fieldValidation=Strict|Warn|Ignore`.

A real server decodes every body into its typed object, so a field the type does not
declare never survives: under `Strict` the request fails (400 for create/update, 422 on a
patch), under `Warn` (the default when the parameter is absent) each one comes back as a
`Warning: 299 - "unknown field \\"spec.foo\\""` header, under `Ignore` it vanishes
silently. Custom resources get the same treatment from their structural schema (pruning,
`x-kubernetes-preserve-unknown-fields` honoured). Quantities are parsed on the same walk:
a bad one makes the body undecodable whatever the directive, a good one is canonicalised.

Pure: the server hands in the parsed body, the raw bytes (for duplicate keys) and the
schema view of the kind; this module returns the body to store and the warnings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from devcluster.machinery import quantity
from devcluster.machinery.errors import ApiError, FieldError, bad_request, internal, invalid

__all__ = ["Directive", "SchemaView", "Outcome", "directive", "duplicate_fields", "check_object",
           "check_patch", "warning_header"]

Directive = str  # "Strict" | "Warn" | "Ignore"
_SUPPORTED = ("", "Ignore", "Strict", "Warn")
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
# Types whose JSON the typed decoder keeps as raw bytes, never decoding it into fields: a
# managedFields entry's `fieldsV1` (`{"f:spec": {...}}`) and embedded RawExtensions. Nothing
# inside them is a field to check or prune, for built-ins and custom resources alike.
OPAQUE = ("io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1", "io.k8s.apimachinery.pkg.runtime.RawExtension")
_PRESERVE = "x-kubernetes-preserve-unknown-fields"
_EMBEDDED = "x-kubernetes-embedded-resource"
_ROOT_META = ("apiVersion", "kind", "metadata")
_JSON_PATCH_KEYS = ("op", "path", "from", "value")


@dataclass(frozen=True, slots=True)
class SchemaView:
    """How to read one kind's schema.

    `resolve` turns a `$ref` (or a one-element `allOf` wrapper) into the schema it names.
    `structural` selects CRD semantics: an object schema without properties prunes
    everything unless it preserves unknown fields; for built-ins it is a free-form map.
    `meta` is the ObjectMeta schema, checked for custom resources (whose own schema
    leaves metadata to the server).
    """

    root: dict[str, Any]
    resolve: Callable[[dict[str, Any]], dict[str, Any]]
    structural: bool = False
    meta: dict[str, Any] | None = None


@dataclass(slots=True)
class Outcome:
    """What a walk found: the cleaned value, unknown-field paths and the first bad quantity."""

    value: Any
    unknown: list[str] = field(default_factory=list)
    bad_quantity: str | None = None
    patch: bool = False  # a null in a patch deletes: an undeclared field set to null adds nothing


def directive(value: str | None, *, options_kind: str) -> Directive:
    """The `fieldValidation` query parameter; absent means Warn, as on a real server."""
    if value is None or value == "":
        return "Warn"
    if value not in _SUPPORTED:
        supported = ", ".join(f'"{v}"' for v in _SUPPORTED)
        err = FieldError("fieldValidation", "Unsupported value", f"supported values: {supported}", value, True)
        raise invalid(options_kind, "meta.k8s.io", "", [err])
    return value


# --------------------------------------------------------------------------- duplicates


class _Dups(dict):
    """A JSON object that repeated some of its keys (the last value wins, as in Go)."""

    __slots__ = ("dups",)


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    seen: set[str] = set()
    dups = []
    for k, _ in pairs:
        if k in seen and k not in dups:
            dups.append(k)
        seen.add(k)
    marked = _Dups(out)
    marked.dups = dups
    return marked


def duplicate_fields(raw: bytes) -> list[str]:
    """Paths of the keys a JSON document repeats (`spec.paused`, `spec.containers[0].image`)."""
    try:
        doc = json.loads(raw, object_pairs_hook=_pairs)
    except ValueError:
        return []  # the caller's own decoder reports malformed JSON
    found: list[str] = []
    _collect_dups(doc, "", found)
    return found


def _collect_dups(value: Any, path: str, found: list[str]) -> None:
    if isinstance(value, dict):
        dups = getattr(value, "dups", ())
        for key, item in value.items():
            child = _join(path, key)
            if key in dups:
                found.append(child)
            _collect_dups(item, child, found)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _collect_dups(item, f"{path}[{i}]", found)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# --------------------------------------------------------------------------- the walk


def _walk(view: SchemaView, schema: dict | None, value: Any, path: str, out: Outcome) -> Any:
    """`value` without the fields `schema` does not declare; records what it drops."""
    if schema is None or value is None:
        return value
    if is_quantity(schema):
        return _quantity(value, out)
    if is_opaque(schema):
        return value
    schema = view.resolve(schema)
    if isinstance(value, dict):
        return _walk_object(view, schema, value, path, out)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        items = schema["items"]
        new = [_walk(view, items, v, f"{path}[{i}]", out) for i, v in enumerate(value)]
        return value if all(a is b for a, b in zip(new, value, strict=True)) else new
    return value


def _ref(schema: dict) -> str:
    """The `$ref` of a schema, bare or wrapped in a one-element `allOf`; "" without one."""
    ref = schema.get("$ref")
    if ref is None and len(schema.get("allOf") or ()) == 1:
        ref = schema["allOf"][0].get("$ref")
    return ref if isinstance(ref, str) else ""


def is_quantity(schema: dict) -> bool:
    """True for a `$ref` to Quantity."""
    return _ref(schema).endswith(QUANTITY)


def is_opaque(schema: dict) -> bool:
    """True for a `$ref` to a type kept as raw JSON (FieldsV1, RawExtension)."""
    return _ref(schema).endswith(OPAQUE)


def _quantity(value: Any, out: Outcome) -> Any:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return value  # a wrong JSON type is the schema validator's to report
    try:
        text = quantity.canonical(value)
    except quantity.QuantityError as err:
        out.bad_quantity = out.bad_quantity or str(err)
        return value
    return value if text == value else text


def _walk_object(view: SchemaView, schema: dict, value: dict, path: str, out: Outcome) -> dict:
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    free = bool(schema.get(_PRESERVE)) or extra is True or (not props and extra is None and not view.structural)
    keep = _ROOT_META if (not path or schema.get(_EMBEDDED)) else ()
    result = value
    for key, item in value.items():
        child = _child_schema(view, props, extra, key, keep)
        if child is _UNKNOWN:
            if free or (item is None and out.patch):
                continue
            if not key.startswith("$"):  # strategic-merge directives are not fields
                out.unknown.append(_join(path, key))
                result = _without(result, value, key)
            continue
        new = _walk(view, child, item, _join(path, key), out)
        if new is not item:
            result = dict(value) if result is value else result
            result[key] = new
    return result


_UNKNOWN: Any = object()


def _child_schema(view: SchemaView, props: dict | None, extra: Any, key: str,
                  keep: tuple[str, ...]) -> Any:
    if key in keep and view.structural:  # a CR's metadata is ObjectMeta whatever its schema says
        return view.meta if key == "metadata" else (props or {}).get(key)
    if props and key in props:
        return props[key]
    if isinstance(extra, dict):
        return extra
    return None if key in keep else _UNKNOWN


def _without(result: dict, original: dict, key: str) -> dict:
    if result is original:
        result = dict(original)
    result.pop(key, None)
    return result


def _walk_root(view: SchemaView, value: Any, out: Outcome) -> Any:
    if not isinstance(value, dict):
        return value
    return _walk(view, view.root, value, "", out)


# --------------------------------------------------------------------------- create / update


def check_object(view: SchemaView | None, body: Any, *, kind: str, version: str, mode: Directive,
                 duplicates: list[str]) -> tuple[Any, list[str]]:
    """The body to store and the warnings to send, for a create or an update; ApiError(400) under Strict."""
    out = Outcome(body)
    if view is not None:
        out.value = _walk_root(view, body, out)
    prefix = f'{kind} in version "{version}" cannot be handled as a {kind}'
    if out.bad_quantity:
        raise bad_request(f"{prefix}: {out.bad_quantity}")
    problems = _problems(duplicates, out.unknown, typed=view is not None and not view.structural)
    if problems and mode == "Strict":
        raise bad_request(f"{prefix}: strict decoding error: {', '.join(problems)}")
    return out.value, problems if mode == "Warn" else []


def _problems(duplicates: list[str], unknown: list[str], *, typed: bool) -> list[str]:
    """Typed kinds report a field that is both duplicated and unknown only as unknown, in document
    order; custom resources list every duplicate first, then what pruning dropped."""
    if not typed:
        return [f'duplicate field "{d}"' for d in duplicates] + [f'unknown field "{u}"' for u in unknown]
    unknown_set = set(unknown)
    marks = [(d, "duplicate") for d in duplicates if d not in unknown_set] + [(u, "unknown") for u in unknown]
    order = {p: i for i, p in enumerate(_document_order(duplicates + unknown))}
    marks.sort(key=lambda m: order[m[0]])
    return [f'{what} field "{p}"' for p, what in marks]


def _document_order(paths: list[str]) -> list[str]:
    return list(dict.fromkeys(paths))


# --------------------------------------------------------------------------- patches


def check_patch(view: SchemaView | None, patch_type: str, body: Any, *, mode: Directive, duplicates: list[str],
                target: tuple[str, str, str, str]) -> tuple[Any, list[str]]:
    """The patch to apply and the warnings; ApiError under Strict (422 on field `patch`, as a real server).

    Every path a merge or strategic patch names is a path of the patched object, so checking
    the patch is checking what it adds; JSON patch values are checked at their target path.
    `target` is (namespace, name, apiVersion, kind), for the server-side apply message.
    """
    out = Outcome(body, patch=True)
    extra: list[str] = []
    if view is not None:
        if patch_type == "json":
            out.value = _walk_json_patch(view, body, out, extra)
        elif isinstance(body, dict):
            out.value = _walk_root(view, body, out)
    if out.bad_quantity:
        raise _patch_invalid(body, out.bad_quantity)
    if patch_type == "apply":
        return _check_apply(out, target)
    problems = extra + _patch_duplicates(patch_type, duplicates) + [f'unknown field "{u}"'
                                                                    for u in sorted(out.unknown)]
    if problems and mode == "Strict":
        raise _patch_invalid(body, "strict decoding error: " + ", ".join(problems))
    return out.value, problems if mode == "Warn" else []


_OP_FIELD = re.compile(r"^\[\d+\]\.[^.\[]+$")


def _patch_duplicates(patch_type: str, duplicates: list[str]) -> list[str]:
    """JSON patch: only repeated keys of an operation itself count (inside a value the last one wins)."""
    if patch_type == "json":
        return [f'json patch duplicate field "{d}"' for d in duplicates if _OP_FIELD.match(d)]
    return [f'duplicate field "{d}"' for d in duplicates]


def _patch_invalid(body: Any, detail: str) -> ApiError:
    shown = json.dumps(body, separators=(",", ":"), sort_keys=True)
    return invalid("", "", "", [FieldError("patch", "Invalid value", detail, shown, True)])


def _check_apply(out: Outcome, target: tuple[str, str, str, str]) -> tuple[Any, list[str]]:
    """Server-side apply builds a typed object from the patch: an undeclared field fails it outright."""
    if not out.unknown:
        return out.value, []
    ns, name, api_version, kind = target
    group, _, version = api_version.rpartition("/")
    where = f"{ns}/{name}" if ns else f"/{name}"
    fields = [f".{u}: field not declared in schema" for u in out.unknown]
    detail = fields[0] if len(fields) == 1 else "errors:\n  " + "\n  ".join(fields)
    raise internal(f"failed to create typed patch object ({where}; {group}/{version}, Kind={kind}): {detail}")


def _walk_json_patch(view: SchemaView, ops: Any, out: Outcome, extra: list[str]) -> Any:
    if not isinstance(ops, list):
        return ops
    kept = []
    for i, op in enumerate(ops):
        if not isinstance(op, dict):
            kept.append(op)
            continue
        extra += [f'json patch unknown field "[{i}].{k}"' for k in op if k not in _JSON_PATCH_KEYS]
        if op.get("op") in ("add", "replace") and isinstance(op.get("path"), str):
            op = _json_patch_op(view, op, out)
            if op is None:
                continue
        kept.append(op)
    return kept


def _json_patch_op(view: SchemaView, op: dict, out: Outcome) -> dict | None:
    """The op with its value cleaned, or None when its path names an undeclared field."""
    schema: Any = view.root
    path = ""
    for raw in op["path"].split("/")[1:]:
        seg = raw.replace("~1", "/").replace("~0", "~")
        schema, path = _step(view, schema, seg, path)
        if schema is _UNKNOWN:
            out.unknown.append(path)
            return None
    value = op.get("value")
    cleaned = _walk(view, schema, value, path, out)
    return op if cleaned is value else {**op, "value": cleaned}


def _step(view: SchemaView, schema: Any, seg: str, path: str) -> tuple[Any, str]:
    """The schema one JSON-pointer segment down, and the field path there."""
    if schema is None or is_quantity(schema) or is_opaque(schema):
        return None, _join(path, seg)
    schema = view.resolve(schema)
    if isinstance(schema.get("items"), dict):
        return schema["items"], f"{path}[{seg}]"
    props, extra = schema.get("properties"), schema.get("additionalProperties")
    child = _child_schema(view, props, extra, seg, () if path else _ROOT_META)
    free = bool(schema.get(_PRESERVE)) or extra is True or (not props and extra is None and not view.structural)
    if child is _UNKNOWN and free:
        child = None
    return child, _join(path, seg)


# --------------------------------------------------------------------------- warnings


def warning_header(text: str) -> str:
    """One `Warning` header value: code 299, agent `-`, the text as a quoted string."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{escaped}"'
