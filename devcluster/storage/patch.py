"""Three PATCH flavours of the API (spec §5.5), as pure functions on parsed JSON (apply: apply.py).

None of them mutates its arguments. They copy only the containers on the path of a
change: the result is always a fresh top-level dict, but unchanged subtrees are shared
with `target` (and values may be shared with the patch). Stored objects are immutable,
so sharing is safe as long as callers copy a nested dict before editing it in place.
"""

from __future__ import annotations

import copy
from typing import Any

from devcluster.machinery.errors import ApiError, bad_request

__all__ = ["merge_patch", "json_patch", "strategic_merge_patch", "merge_key"]

_MISSING = object()

# --------------------------------------------------------------------------- merge patch


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` deletes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            result[key] = merge_patch(result.get(key), value)
        else:
            result[key] = value
    return result


# --------------------------------------------------------------------------- JSON patch


class _PatchFailure(Exception):
    """One RFC 6902 operation could not be applied; becomes a 422."""


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 (add/remove/replace/move/copy/test) applied in order, all or nothing."""
    if not isinstance(ops, list):
        kind = "object" if isinstance(ops, dict) else _json_kind(ops)
        raise bad_request(f"json: cannot unmarshal {kind} into Go value of type jsonpatch.Patch")
    for op in ops:
        if not isinstance(op, dict):
            raise bad_request(
                f"json: cannot unmarshal {_json_kind(op)} into Go value of type jsonpatch.Operation"
            )
    doc = _Doc(target)
    for index, op in enumerate(ops):
        try:
            _apply_op(doc, op)
        except _PatchFailure as exc:
            raise ApiError(422, "Invalid", f"json patch operation {index} ({_op_text(op)}): {exc}") from None
    return doc.root


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "null"
    return "object"


def _op_text(op: dict) -> str:
    return f"{op.get('op')} {op.get('path')}"


class _Doc:
    """A document under copy-on-write: containers copied once are owned and edited in place."""

    __slots__ = ("root", "_owned")

    def __init__(self, root: Any):
        self.root = root
        self._owned: set[int] = set()  # ids of containers this patch created (safe to mutate)

    def _own(self, value: Any) -> Any:
        if isinstance(value, (dict, list)) and id(value) not in self._owned:
            value = copy.copy(value)
            self._owned.add(id(value))
        return value

    def parent_of(self, tokens: list[str], path: str) -> Any:
        """Walk to the container holding the last token, copying every container on the way."""
        self.root = self._own(self.root)
        node = self.root
        for token in tokens[:-1]:
            if isinstance(node, dict):
                if token not in node:
                    raise _PatchFailure(f"doc is missing path: {path}: missing value")
                node[token] = child = self._own(node[token])
            elif isinstance(node, list):
                i = _index(token, len(node), path, allow_end=False)
                node[i] = child = self._own(node[i])
            else:
                raise _PatchFailure(f"doc is missing path: {path}: missing value")
            node = child
        if not isinstance(node, (dict, list)):
            raise _PatchFailure(f"doc is missing path: {path}: missing value")
        return node


def _pointer(op: dict, field: str) -> tuple[str, list[str]]:
    path = op.get(field, _MISSING)
    if path is _MISSING:
        raise _PatchFailure(f"operation missing {field!r} field")
    if not isinstance(path, str):
        raise _PatchFailure(f"{field!r} must be a string, got {_json_kind(path)}")
    if path == "":
        return path, []
    if not path.startswith("/"):
        raise _PatchFailure(f"JSON pointer must be empty or start with '/': {path!r}")
    return path, [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _index(token: str, length: int, path: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return length
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise _PatchFailure(f"invalid array index {token!r} in {path}")
    i = int(token)
    if i > length or (i == length and not allow_end):
        raise _PatchFailure(f"index {i} out of bounds (length {length}) in {path}")
    return i


def _get(root: Any, tokens: list[str], path: str) -> Any:
    node = root
    for token in tokens:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(token, len(node), path, allow_end=False)]
        else:
            raise _PatchFailure(f"doc is missing path: {path}: missing value")
    return node


def _add(doc: _Doc, tokens: list[str], path: str, value: Any) -> None:
    if not tokens:
        doc.root = value
        return
    parent = doc.parent_of(tokens, path)
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    else:
        parent.insert(_index(tokens[-1], len(parent), path, allow_end=True), value)


def _remove(doc: _Doc, tokens: list[str], path: str) -> Any:
    if not tokens:
        raise _PatchFailure("cannot remove the whole document")
    parent = doc.parent_of(tokens, path)
    if isinstance(parent, dict):
        if tokens[-1] not in parent:
            raise _PatchFailure(f"doc is missing path: {path}: missing value")
        return parent.pop(tokens[-1])
    return parent.pop(_index(tokens[-1], len(parent), path, allow_end=False))


def _replace(doc: _Doc, tokens: list[str], path: str, value: Any) -> None:
    if not tokens:
        doc.root = value
        return
    parent = doc.parent_of(tokens, path)
    if isinstance(parent, dict):
        if tokens[-1] not in parent:
            raise _PatchFailure(f"doc is missing key: {path}: missing value")
        parent[tokens[-1]] = value
    else:
        parent[_index(tokens[-1], len(parent), path, allow_end=False)] = value


def _value(op: dict) -> Any:
    if "value" not in op:
        raise _PatchFailure("operation missing 'value' field")
    return op["value"]


def _apply_op(doc: _Doc, op: dict) -> None:
    kind = op.get("op")
    path, tokens = _pointer(op, "path")
    if kind == "add":
        _add(doc, tokens, path, _value(op))
    elif kind == "remove":
        _remove(doc, tokens, path)
    elif kind == "replace":
        _replace(doc, tokens, path, _value(op))
    elif kind == "move":
        from_path, from_tokens = _pointer(op, "from")
        if tokens[: len(from_tokens)] == from_tokens and len(tokens) > len(from_tokens):
            raise _PatchFailure(f"cannot move {from_path} into its own child {path}")
        _add(doc, tokens, path, _remove(doc, from_tokens, from_path))
    elif kind == "copy":
        from_path, from_tokens = _pointer(op, "from")
        _add(doc, tokens, path, copy.deepcopy(_get(doc.root, from_tokens, from_path)))
    elif kind == "test":
        expected = _value(op)
        actual = _get(doc.root, tokens, path)
        if not _json_equal(actual, expected):
            raise _PatchFailure(f"testing value {path} failed: test failed")
    else:
        raise _PatchFailure(f"Unexpected kind: {kind}")


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0 but true != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


# --------------------------------------------------------------------------- strategic merge

# Field name -> merge key of its list items (spec §5.5). `ports` depends on where it sits.
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "volumes": "name",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "conditions": "type",
    "ownerReferences": "uid",
}
_CONTAINER_LISTS = frozenset({"containers", "initContainers", "ephemeralContainers"})
_SET_LISTS = frozenset({"finalizers"})

_PATCH = "$patch"
_RETAIN = "$retainKeys"
_ORDER = "$setElementOrder/"
_DELETE_FROM = "$deleteFromPrimitiveList/"


def merge_key(field: str, parent: str | None) -> str | None:
    """The key that identifies items of list `field` inside a map reached through `parent`."""
    if field == "ports":
        return "containerPort" if parent in _CONTAINER_LISTS else "port"
    return _MERGE_KEYS.get(field)


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Merge patch plus keyed-list merging and the `$patch`-family directives (spec §5.5)."""
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch body must be a JSON object")
    result = _smp_map(target if isinstance(target, dict) else {}, patch, None)
    return {} if result is _MISSING else result


def _smp_map(target: dict, patch: dict, parent: str | None) -> Any:
    """Merge one map; returns _MISSING when the patch deletes the map itself."""
    directive = patch.get(_PATCH)
    if directive == "delete":
        return _MISSING
    if directive == "replace":
        return _strip(patch, parent)
    if directive not in (None, "merge"):
        raise _smp_error(f"unknown patch type: {directive!r} in map")
    result = dict(target)
    orders = {key[len(_ORDER):]: _directive_list(key, value) for key, value in patch.items()
              if key.startswith(_ORDER)}
    deletions: dict[str, list] = {}
    for key, value in patch.items():
        if key == _PATCH or key == _RETAIN or key.startswith(_ORDER):
            continue
        if key.startswith(_DELETE_FROM):
            deletions[key[len(_DELETE_FROM):]] = _directive_list(key, value)
        else:
            _smp_field(result, key, value, parent, orders.get(key))
    for field, values in deletions.items():
        _delete_from_primitive_list(result, field, values)
    for field, order in orders.items():
        if field not in patch and isinstance(result.get(field), list):
            key = merge_key(field, parent)
            result[field] = _enforce_order(result[field], order, result[field], key)
    if _RETAIN in patch:
        keep = set(_directive_list(_RETAIN, patch[_RETAIN]))
        result = {k: v for k, v in result.items() if k in keep}
    return result


def _smp_field(result: dict, key: str, value: Any, parent: str | None, order: list | None = None) -> None:
    if value is None:
        result.pop(key, None)
    elif isinstance(value, dict):
        old = result.get(key)
        merged = _smp_map(old if isinstance(old, dict) else {}, value, key)
        if merged is _MISSING:
            result.pop(key, None)
        else:
            result[key] = merged
    elif isinstance(value, list):
        result[key] = _smp_list(result.get(key), value, key, parent, order)
    else:
        result[key] = value


def _smp_list(old: Any, patch: list, field: str, parent: str | None, order: list | None = None) -> list:
    old_list = old if isinstance(old, list) else []
    key = merge_key(field, parent)
    if any(isinstance(item, dict) and item.get(_PATCH) == "replace" for item in patch):
        return [_strip(i, field) for i in patch if not (isinstance(i, dict) and _PATCH in i)]
    if field in _SET_LISTS:
        merged = old_list + [v for v in patch if v not in old_list]
        return _enforce_order(merged, order if order is not None else patch, old_list, None)
    if key is None:
        return [_strip(item, field) for item in patch]
    merged = _merge_keyed(old_list, patch, key, field)
    return _enforce_order(merged, order if order is not None else patch, old_list, key)


def _merge_keyed(old: list, patch: list, key: str, field: str) -> list:
    result = list(old)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise _smp_error(f"{field}: every item must be an object with the merge key {key!r}")
        at = _find(result, key, item[key])
        if item.get(_PATCH) == "delete":
            if at is not None:
                del result[at]
        elif at is None:
            result.append(_strip(item, field))
        else:
            base = result[at] if isinstance(result[at], dict) else {}
            result[at] = _smp_map(base, item, field)
    return result


def _find(items: list, key: str, value: Any) -> int | None:
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get(key) == value:
            return i
    return None


def _strip(value: Any, parent: str | None) -> Any:
    """A new value taken from the patch: merged into nothing, so directives and nulls go."""
    if isinstance(value, dict):
        body = {k: v for k, v in value.items() if k != _PATCH}
        merged = _smp_map({}, body, parent)
        return {} if merged is _MISSING else merged
    if isinstance(value, list):
        return [_strip(v, parent) for v in value]
    return value


def _directive_list(name: str, value: Any) -> list:
    if not isinstance(value, list):
        raise _smp_error(f"{name} must be a list, got {_json_kind(value)}")
    return value


def _delete_from_primitive_list(result: dict, field: str, values: list) -> None:
    current = result.get(field)
    if isinstance(current, list):
        result[field] = [v for v in current if v not in values]


def _enforce_order(merged: list, order: list, original: list, key: str | None) -> list:
    """The order a real server gives a merged list.

    Items named by the patch (its own list, or `$setElementOrder` when sent) keep the patch's
    order; the others keep the original's; the two runs are then interleaved, taking an
    original-only item first only when it stood before the patch item in the original. So
    an item the original did not have goes before the original-only items that follow it:
    a container or env entry added by a patch comes first.
    """
    def ident(item: Any) -> Any:
        return _hashable(item.get(key) if key and isinstance(item, dict) else item)

    wanted = {ident(o): i for i, o in reversed(list(enumerate(order)))}
    seen = {ident(o): i for i, o in reversed(list(enumerate(original)))}
    named = sorted((it for it in merged if ident(it) in wanted), key=lambda it: wanted[ident(it)])
    rest = sorted((it for it in merged if ident(it) not in wanted), key=lambda it: seen.get(ident(it), -1))
    out, i, j = [], 0, 0
    while i < len(rest) or j < len(named):
        if j >= len(named):
            out.append(rest[i])
            i += 1
        elif i < len(rest) and ident(named[j]) in seen and seen[ident(rest[i])] < seen[ident(named[j])]:
            out.append(rest[i])
            i += 1
        else:
            out.append(named[j])
            j += 1
    return out


def _hashable(value: Any) -> Any:
    return repr(value) if isinstance(value, (dict, list)) else value


def _smp_error(message: str) -> ApiError:
    return ApiError(422, "Invalid", f"strategic merge patch: {message}")
