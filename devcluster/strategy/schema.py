"""CRD `openAPIV3Schema` support: validation with field paths, defaulting, pruning.

Custom resources are checked the way the real server checks them, with its field paths
(`spec.workers[0].name`) and message wording, so a client sees the same 422 here as on a
cluster. Defaulting and pruning are copy-on-write: they return the input itself when
nothing changes, and copy only the containers on the path of a change otherwise.
"""

from __future__ import annotations

import copy
import re
from datetime import datetime
from functools import lru_cache
from typing import Any

from devcluster.machinery.errors import FieldError

__all__ = ["validate", "apply_defaults", "prune", "structural_errors", "structural_field_errors"]

_PRESERVE = "x-kubernetes-preserve-unknown-fields"
_INT_OR_STRING = "x-kubernetes-int-or-string"
_EMBEDDED = "x-kubernetes-embedded-resource"
_ROOT_META = ("apiVersion", "kind", "metadata")
_TYPES = ("object", "array", "string", "integer", "number", "boolean")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_ok(declared: str, value: Any) -> bool:
    actual = _json_type(value)
    return actual == declared or (declared == "number" and actual == "integer")


class _GoNumber:
    """Renders a number the way Go's %v does (1.0 -> 1), for messages."""

    __slots__ = ("n",)

    def __init__(self, n: float):
        self.n = n

    def __str__(self) -> str:
        return _num(self.n)


def _num(n: Any) -> str:
    if isinstance(n, float) and n.is_integer():
        return str(int(n))
    return str(n)


def _shown(value: Any) -> Any:
    return _GoNumber(value) if isinstance(value, float) else value


# --------------------------------------------------------------------------- validation


def validate(schema: dict | None, obj: Any) -> list[FieldError]:
    """All schema violations of `obj`, with Kubernetes field paths and messages."""
    if not schema:
        return []
    errors: list[FieldError] = []
    if isinstance(obj, dict) and schema.get("type", "object") == "object":
        meta = obj.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            errors.append(_type_error("metadata", "object", meta))
        rest = {k: v for k, v in obj.items() if k != "metadata"}
        root = {**schema,
                "properties": {k: v for k, v in (schema.get("properties") or {}).items() if k != "metadata"},
                "required": [k for k in schema.get("required") or () if k != "metadata"]}
        _check(root, rest, "", errors)
    else:
        _check(schema, obj, "", errors)
    return errors


def _type_error(path: str, declared: str, value: Any) -> FieldError:
    actual = _json_type(value)
    where = path or "body"
    return FieldError(path or "<root>", "Invalid value", f'{where} in body must be of type {declared}: "{actual}"',
                      actual, True)


def _check(schema: dict, value: Any, path: str, errors: list[FieldError]) -> None:
    if value is None:
        if not schema.get("nullable") and "type" in schema:
            errors.append(_type_error(path, schema["type"], None))
        return
    if schema.get(_INT_OR_STRING):
        if _json_type(value) not in ("integer", "string"):
            errors.append(_type_error(path, "integer,string", value))
            return
    elif "type" in schema and not _type_ok(schema["type"], value):
        errors.append(_type_error(path, schema["type"], value))
        return
    _check_enum(schema, value, path, errors)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(schema, value, path, errors)
    elif isinstance(value, str):
        _check_string(schema, value, path, errors)
    elif isinstance(value, list):
        _check_array(schema, value, path, errors)
    elif isinstance(value, dict):
        _check_object(schema, value, path, errors)
    _check_combinators(schema, value, path, errors)


def _check_enum(schema: dict, value: Any, path: str, errors: list[FieldError]) -> None:
    enum = schema.get("enum")
    if enum is None or any(_json_equal(value, e) for e in enum):
        return
    supported = ", ".join(f'"{_go_text(e)}"' for e in enum)
    errors.append(FieldError(path, "Unsupported value", f"supported values: {supported}", _shown(value), True))


def _go_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return _num(value) if isinstance(value, float) else str(value)


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _check_number(schema: dict, value: float, path: str, errors: list[FieldError]) -> None:
    where = path or "body"
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None:
        if schema.get("exclusiveMinimum") and value <= low:
            errors.append(_invalid(path, value, f"{where} in body should be greater than {_num(low)}"))
        elif value < low:
            errors.append(_invalid(path, value, f"{where} in body should be greater than or equal to {_num(low)}"))
    if high is not None:
        if schema.get("exclusiveMaximum") and value >= high:
            errors.append(_invalid(path, value, f"{where} in body should be less than {_num(high)}"))
        elif value > high:
            errors.append(_invalid(path, value, f"{where} in body should be less than or equal to {_num(high)}"))
    multiple = schema.get("multipleOf")
    if multiple and (value / multiple) != int(value / multiple):
        errors.append(_invalid(path, value, f"{where} in body should be a multiple of {_num(multiple)}"))
    fmt = schema.get("format")
    if fmt in _INT_RANGES and isinstance(value, int):
        lo, hi = _INT_RANGES[fmt]
        if not lo <= value <= hi:
            errors.append(_invalid(path, value, f"{where} in body must be of type {fmt}: \"{value}\""))


_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, "Invalid value", detail, _shown(value), True)


def _check_string(schema: dict, value: str, path: str, errors: list[FieldError]) -> None:
    where = path or "body"
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(FieldError(path, "Too long", f"may not be longer than {schema['maxLength']}"))
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(_invalid(path, value, f"{where} in body should be at least {schema['minLength']} chars long"))
    pattern = schema.get("pattern")
    if pattern is not None:
        compiled = _compiled(pattern)
        if compiled is not None and not compiled.search(value):
            errors.append(_invalid(path, value, f"{where} in body should match '{pattern}'"))
    fmt = schema.get("format")
    check = _FORMATS.get(fmt) if fmt else None
    if check is not None and not check(value):
        errors.append(_invalid(path, value, f'{where} in body must be of type {fmt}: "{value}"'))


@lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern | None:
    try:
        return re.compile(pattern)
    except re.error:
        return None  # structural_errors reports it when the CRD is registered


def _is_datetime(text: str) -> bool:
    try:
        datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        return False
    return "T" in text.upper() or " " in text


def _is_date(text: str) -> bool:
    return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", text)) and _is_datetime(text + "T00:00:00Z")


_FORMATS = {
    "date-time": _is_datetime,
    "date": _is_date,
    "uuid": lambda t: bool(re.fullmatch(r"[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}", t)),
    "byte": lambda t: bool(re.fullmatch(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?", t)),
}


def _check_array(schema: dict, value: list, path: str, errors: list[FieldError]) -> None:
    where = path or "body"
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(_invalid(path, len(value), f"{where} in body should have at least {schema['minItems']} items"))
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(FieldError(path, "Too many", f"must have at most {schema['maxItems']} items", len(value), True))
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            _check(items, item, f"{path}[{i}]", errors)
    if schema.get("x-kubernetes-list-type") == "set":
        _check_unique(value, path, errors)


def _check_unique(value: list, path: str, errors: list[FieldError]) -> None:
    seen: list[Any] = []
    for i, item in enumerate(value):
        if any(_json_equal(item, s) for s in seen):
            errors.append(FieldError(f"{path}[{i}]", "Duplicate value", "", _shown(item), True))
        seen.append(item)


def _check_object(schema: dict, value: dict, path: str, errors: list[FieldError]) -> None:
    for name in schema.get("required") or ():
        if name not in value:
            errors.append(FieldError(_join(path, name), "Required value"))
    if schema.get(_EMBEDDED):
        _check_embedded(value, path, errors)
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        child = props.get(key)
        if child is not None:
            _check(child, item, _join(path, key), errors)
        elif isinstance(extra, dict):
            _check(extra, item, _join(path, key), errors)
        elif extra is False and not (schema.get(_EMBEDDED) and key in _ROOT_META):
            child_path = _join(path, key)
            errors.append(FieldError(child_path, "Forbidden", f"{child_path} in body is a forbidden property"))
    _check_property_counts(schema, value, path, errors)


def _check_embedded(value: dict, path: str, errors: list[FieldError]) -> None:
    for name in ("apiVersion", "kind"):
        if not value.get(name):
            errors.append(FieldError(_join(path, name), "Required value", "must not be empty"))
    meta = value.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        errors.append(_type_error(_join(path, "metadata"), "object", meta))


def _check_property_counts(schema: dict, value: dict, path: str, errors: list[FieldError]) -> None:
    where = path or "body"
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        errors.append(_invalid(path, len(value),
                               f"{where} in body should have at least {schema['minProperties']} properties"))
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        errors.append(FieldError(path, "Too many", f"must have at most {schema['maxProperties']} items",
                                 len(value), True))


def _check_combinators(schema: dict, value: Any, path: str, errors: list[FieldError]) -> None:
    for sub in schema.get("allOf") or ():
        _check(sub, value, path, errors)
    any_of = schema.get("anyOf")
    if any_of and not any(_passes(sub, value) for sub in any_of):
        errors.append(_invalid(path, value, f"{path or 'body'} in body must validate at least one schema (anyOf)"))
    one_of = schema.get("oneOf")
    if one_of and sum(_passes(sub, value) for sub in one_of) != 1:
        errors.append(_invalid(path, value, f"{path or 'body'} in body must validate one and only one schema (oneOf)"))
    if "not" in schema and _passes(schema["not"], value):
        errors.append(_invalid(path, value, f"{path or 'body'} in body must not validate the schema (not)"))


def _passes(schema: dict, value: Any) -> bool:
    found: list[FieldError] = []
    _check(schema, value, "", found)
    return not found


# --------------------------------------------------------------------------- defaulting


def apply_defaults(schema: dict | None, obj: Any) -> Any:
    """Fill schema `default`s into absent fields; returns `obj` itself when nothing changes."""
    if not schema or not isinstance(obj, dict):
        return obj
    props = {k: v for k, v in (schema.get("properties") or {}).items() if k != "metadata"}
    return _default(dict(schema, properties=props), obj)


def _default(schema: dict, value: Any) -> Any:
    if isinstance(value, dict):
        return _default_object(schema, value)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        items = schema["items"]
        new = [_default(items, v) for v in value]
        return value if all(a is b for a, b in zip(new, value, strict=True)) else new
    return value


def _default_object(schema: dict, value: dict) -> dict:
    result = value
    props = schema.get("properties") or {}
    for key, child in props.items():
        current = value.get(key, _ABSENT)
        if "default" in child and (current is _ABSENT or (current is None and not child.get("nullable"))):
            new = _default(child, copy.deepcopy(child["default"]))
        elif current is _ABSENT:
            continue
        else:
            new = _default(child, current)
        if new is not current:
            result = _with(result, value, key, new)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for key, current in value.items():
            if key not in props:
                new = _default(extra, current)
                if new is not current:
                    result = _with(result, value, key, new)
    return result


_ABSENT = object()


def _with(result: dict, original: dict, key: str, new: Any) -> dict:
    """Set `key` on a copy of `original`, copying only on the first change."""
    if result is original:
        result = dict(original)
    result[key] = new
    return result


# --------------------------------------------------------------------------- pruning


def prune(schema: dict | None, obj: Any) -> Any:
    """Drop fields the schema does not declare; apiVersion/kind/metadata survive at the root."""
    if not schema or not isinstance(obj, dict):
        return obj
    return _prune_object(schema, obj, keep=_ROOT_META)


def _prune(schema: dict, value: Any) -> Any:
    if isinstance(value, dict):
        keep = _ROOT_META if schema.get(_EMBEDDED) else ()
        return _prune_object(schema, value, keep=keep)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        items = schema["items"]
        new = [_prune(items, v) for v in value]
        return value if all(a is b for a, b in zip(new, value, strict=True)) else new
    return value


def _prune_object(schema: dict, value: dict, *, keep: tuple[str, ...]) -> dict:
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    preserve = bool(schema.get(_PRESERVE)) or extra is True
    result = value
    for key, current in value.items():
        if key in keep:
            continue
        child = props.get(key)
        if child is None and isinstance(extra, dict):
            child = extra
        if child is None:
            if not preserve:
                result = dict(value) if result is value else result
                del result[key]
            continue
        new = _prune(child, current)
        if new is not current:
            result = _with(result, value, key, new)
    return result


# --------------------------------------------------------------------------- structural check


def structural_errors(schema: Any) -> list[str]:
    """Why a CRD schema is unusable (empty when it is fine), as `path: Type: detail` lines."""
    return [e.message() for e in structural_field_errors(schema, "")]


def structural_field_errors(schema: Any, path: str) -> list[FieldError]:
    """`structural_errors` as FieldErrors rooted at `path` (e.g. `spec.versions[0]...`)."""
    if not isinstance(schema, dict):
        return [FieldError(path or "<root>", "Invalid value", "must be an object", _json_type(schema), True)]
    errors: list[FieldError] = []
    root_type = schema.get("type")
    if root_type is None:
        errors.append(FieldError(_join(path, "type"), "Required value", "must not be empty at the root"))
    elif root_type != "object":
        errors.append(FieldError(_join(path, "type"), "Invalid value", "must be object at the root", root_type, True))
    _structural(schema, path, errors, at_root=True)
    return errors


def _structural(schema: dict, path: str, errors: list[FieldError], *, at_root: bool = False) -> None:
    typ = schema.get("type")
    if typ is not None and typ not in _TYPES:
        supported = ", ".join(f'"{t}"' for t in ("array", "boolean", "integer", "number", "object", "string"))
        errors.append(FieldError(_join(path, "type"), "Unsupported value", f"supported values: {supported}", typ, True))
    if typ == "array" and not isinstance(schema.get("items"), dict):
        errors.append(FieldError(_join(path, "items"), "Required value", "must be specified"))
    pattern = schema.get("pattern")
    if pattern is not None and (not isinstance(pattern, str) or _compiled(pattern) is None):
        errors.append(FieldError(_join(path, "pattern"), "Invalid value", "must be a valid regular expression",
                                 pattern, True))
    props = schema.get("properties")
    if props is not None and isinstance(schema.get("additionalProperties"), dict):
        errors.append(FieldError(_join(path, "additionalProperties"), "Forbidden",
                                 "additionalProperties and properties are mutual exclusive"))
    for key, child in (props or {}).items():
        _structural_child(child, f"{_join(path, 'properties')}[{key}]", errors)
    for field in ("items", "additionalProperties"):
        if isinstance(schema.get(field), dict):
            _structural_child(schema[field], _join(path, field), errors)


def _structural_child(schema: Any, path: str, errors: list[FieldError]) -> None:
    if not isinstance(schema, dict):
        errors.append(FieldError(path, "Invalid value", "must be a schema object", _json_type(schema), True))
        return
    untyped_ok = schema.get(_INT_OR_STRING) or schema.get(_PRESERVE)
    if "type" not in schema and not untyped_ok:
        errors.append(FieldError(_join(path, "type"), "Required value",
                                 "must not be empty for specified object fields"))
    _structural(schema, path, errors)
