"""Field ownership: `metadata.managedFields` as the real server keeps it (pure functions).

Every write through the API is made by a *manager* (the `fieldManager` query parameter, else
the first segment of the User-Agent) and records which fields that manager set, so that
server-side apply can tell whose a field is (conflicts) and which fields an applier stopped
sending (removal). A field is a path of elements written as in the wire format FieldsV1:
`f:<name>` for a map key, `k:{"name":"x"}` for an item of a keyed list, `v:<json>` for a
value of a set list, `i:<n>` for a list index; `.` marks a node that is itself owned.

Two ways of computing a set, as in the real server:
- an *applied* configuration owns what it names: leaves, keyed-list items, set values and
  empty maps, never a non-empty map as such (`field_set`);
- an *update* owns what it changed (`compare`): leaves that differ, and whole nodes it added,
  maps and list items included (hence the `.` on `f:labels` of an entry written by kubectl
  create), except the structs every object of the kind has anyway (`metadata`, `spec`, ...).

Which lists are keyed or sets comes from the type: for built-ins a table by field name (the
merge keys the API declares), for custom resources the CRD schema's `x-kubernetes-list-type`
and `x-kubernetes-list-map-keys` (other lists are atomic: owned as one value).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from devcluster.machinery.objmeta import rfc3339

Path = tuple[str, ...]

MAX_MANAGER_LENGTH = 128
# metadata a manager never owns: the server sets it.
STRIPPED_META = frozenset({"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
                           "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"})
# Struct fields every object of a built-in kind has even when empty, so an update adding
# content under them never owns the struct itself.
_ZERO_STRUCTS = frozenset({"metadata", "spec", "status", "template", "strategy", "updateStrategy"})
# ... and a core Event's top-level structs (its zero value writes `source: {}`)
_ZERO_TOP_STRUCTS = frozenset({"source", "deprecatedSource"})
# Lists a kind's zero value already holds (as null: not omitempty), so adding items never owns the list;
# every other list added by an update is owned itself too (FieldsV1 `.`).
_ZERO_LISTS = frozenset({"containers"})
# Top-level strings of an Event that are not omitempty: their zero value "" is never owned.
_ZERO_TOP_SCALARS = frozenset({"reportingComponent", "reportingInstance"})
_CONTAINER_LISTS = frozenset({"containers", "initContainers", "ephemeralContainers"})
# list field -> the keys of its items (built-ins); ports depend on where they sit.
_LIST_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",), "initContainers": ("name",), "ephemeralContainers": ("name",),
    "env": ("name",), "volumeMounts": ("mountPath",), "volumeDevices": ("devicePath",),
    "volumes": ("name",), "imagePullSecrets": ("name",), "hostAliases": ("ip",),
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"), "conditions": ("type",),
    "ownerReferences": ("uid",), "resourceClaims": ("name",), "ephemeralContainerStatuses": ("name",),
}
_SET_LISTS = frozenset({"finalizers"})
# Maps and structs owned and replaced as one value (`+mapType=atomic`, `+structType=atomic`): label
# and Service selectors, node selectors, object and key references.
_ATOMIC_MAPS = frozenset({"selector", "nodeSelector", "requiredDuringSchedulingIgnoredDuringExecution",
                          "fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef", "roleRef",
                          "involvedObject", "regarding", "related"})
# A key field the client may omit, filled with the default the API declares for it.
_KEY_DEFAULTS = {"protocol": "TCP"}


# --------------------------------------------------------------------------- managers


def manager_name(field_manager: str | None, user_agent: str | None) -> str:
    """The manager of a write: `fieldManager`, else the User-Agent up to its first `/`.

    Unprintable characters are dropped and the name is cut to 128 bytes, as the real server does.
    """
    if field_manager:
        return field_manager
    out, size = [], 0
    for ch in (user_agent or "").split("/", 1)[0]:
        if not ch.isprintable():  # the same set as Go's unicode.IsPrint
            continue
        size += len(ch.encode())
        if size > MAX_MANAGER_LENGTH:
            break
        out.append(ch)
    return "".join(out)


# --------------------------------------------------------------------------- shapes


class Shape:
    """Where a value sits in its type: answers which lists are keyed or sets (built-ins)."""

    __slots__ = ("name", "parent")

    def __init__(self, name: str | None = None, parent: str | None = None):
        self.name, self.parent = name, parent

    def child(self, key: str) -> Shape:
        return Shape(key, self.name)

    def item(self) -> Shape:
        return Shape(self.name, self.parent)

    def list_kind(self) -> tuple[str, tuple[str, ...]]:
        """("map", keys) | ("set", ()) | ("atomic", ())."""
        if self.name in _SET_LISTS:
            return "set", ()
        if self.name == "ports":
            first = "containerPort" if self.parent in _CONTAINER_LISTS else "port"
            return "map", (first, "protocol")
        keys = _LIST_KEYS.get(self.name or "")
        return ("map", keys) if keys else ("atomic", ())

    def zero_struct(self) -> bool:
        return self.name in _ZERO_STRUCTS or (self.parent is None and self.name in _ZERO_TOP_STRUCTS)

    def zero_list(self) -> bool:
        return self.name in _ZERO_LISTS

    def zero_scalar(self, value: Any) -> bool:
        return value == "" and self.parent is None and self.name in _ZERO_TOP_SCALARS

    def atomic_map(self) -> bool:
        return self.name in _ATOMIC_MAPS


class SchemaShape(Shape):
    """A custom resource's place in its CRD schema; `metadata` falls back to the built-in table."""

    __slots__ = ("schema",)

    def __init__(self, schema: dict[str, Any] | None, name: str | None = None, root: bool = False):
        super().__init__(name, None)
        self.schema = schema if isinstance(schema, dict) else {}
        self.parent = "<root>" if root else None

    def child(self, key: str) -> Shape:
        if self.parent == "<root>" and key == "metadata":
            return Shape("metadata")
        props = self.schema.get("properties") or {}
        sub = props.get(key)
        if sub is None and isinstance(self.schema.get("additionalProperties"), dict):
            sub = self.schema["additionalProperties"]
        return SchemaShape(sub, key)

    def item(self) -> Shape:
        return SchemaShape(self.schema.get("items"), self.name)

    def list_kind(self) -> tuple[str, tuple[str, ...]]:
        kind = self.schema.get("x-kubernetes-list-type")
        if kind == "map":
            return "map", tuple(self.schema.get("x-kubernetes-list-map-keys") or ())
        if kind == "set":
            return "set", ()
        return "atomic", ()

    def zero_struct(self) -> bool:
        return False

    def zero_list(self) -> bool:
        return False

    def zero_scalar(self, value: Any) -> bool:
        return False

    def atomic_map(self) -> bool:
        return self.schema.get("x-kubernetes-map-type") == "atomic"


def shape_of(rt: Any) -> Shape:
    return SchemaShape(rt.schema, root=True) if rt.crd else Shape()


# --------------------------------------------------------------------------- path elements


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def key_element(item: Any, keys: tuple[str, ...]) -> str | None:
    """`k:{...}` of a keyed-list item (key fields sorted by name); None when it has no key field."""
    if not isinstance(item, dict):
        return None
    found = {k: item.get(k, _KEY_DEFAULTS.get(k)) for k in keys}
    found = {k: v for k, v in found.items() if v is not None}
    return "k:" + _json(found) if found else None


def _items(value: list, shape: Shape) -> Iterable[tuple[str, Any]]:
    """(element, item) of a non-atomic list; items without a usable key get `i:<n>`."""
    kind, keys = shape.list_kind()
    for i, item in enumerate(value):
        el = key_element(item, keys) if kind == "map" else "v:" + _json(item)
        yield el or f"i:{i}", item


def element_text(el: str) -> str:
    """A path element as the real server prints it in conflict messages."""
    kind, body = el[0], el[2:]
    if kind == "f":
        return "." + body
    if kind == "k":
        pairs = orjson.loads(body)
        return "[" + ",".join(f"{k}={_json(v)}" for k, v in pairs.items()) + "]"
    if kind == "v":
        return f"[={body}]"
    return f"[{body}]"


def path_text(path: Path) -> str:
    return "".join(element_text(el) for el in path)


# --------------------------------------------------------------------------- sets of fields


def field_set(value: Any, shape: Shape, path: Path = ()) -> set[Path]:
    """The fields an applied configuration names (see the module docstring)."""
    out: set[Path] = set()
    _walk_applied(value, shape, path, out)
    return out


def _walk_applied(value: Any, shape: Shape, path: Path, out: set[Path]) -> None:
    if isinstance(value, dict) and not shape.atomic_map():
        if not value and path:
            out.add(path)
        for k, v in value.items():
            _walk_applied(v, shape.child(k), (*path, "f:" + k), out)
    elif isinstance(value, list) and shape.list_kind()[0] != "atomic":
        for el, item in _items(value, shape):
            out.add((*path, el))
            if isinstance(item, dict):
                for k, v in item.items():
                    _walk_applied(v, shape.item().child(k), (*path, el, "f:" + k), out)
    elif path:
        out.add(path)


def _walk_added(value: Any, shape: Shape, path: Path, out: set[Path]) -> None:
    """Every node of a value an update added (the node itself too, but for what a kind's zero value
    holds already); a null is no value (Go's zero Time)."""
    if value is None or shape.zero_scalar(value):
        return
    if isinstance(value, dict) and not shape.atomic_map():
        if not value or not shape.zero_struct():
            out.add(path)
        for k, v in value.items():
            _walk_added(v, shape.child(k), (*path, "f:" + k), out)
    elif isinstance(value, list) and shape.list_kind()[0] != "atomic":
        if not shape.zero_list():
            out.add(path)
        for el, item in _items(value, shape):
            out.add((*path, el))
            if isinstance(item, dict):
                for k, v in item.items():
                    _walk_added(v, shape.item().child(k), (*path, el, "f:" + k), out)
    else:
        out.add(path)


@dataclass(slots=True)
class Comparison:
    """What changed between two versions of an object, as sets of paths."""

    added: set[Path] = field(default_factory=set)
    removed: set[Path] = field(default_factory=set)
    modified: set[Path] = field(default_factory=set)

    def empty(self) -> bool:
        return not (self.added or self.removed or self.modified)


def compare(old: Any, new: Any, shape: Shape) -> Comparison:
    out = Comparison()
    _compare(old, new, shape, (), out)
    return out


def _compare(old: Any, new: Any, shape: Shape, path: Path, out: Comparison) -> None:
    if old is new or (type(old) is type(new) and isinstance(old, (dict, list)) and old == new):
        return  # the common case: most of an object is untouched by a write
    if isinstance(old, dict) and isinstance(new, dict) and (old or new) and not shape.atomic_map():
        for k in (*old.keys(), *(k for k in new if k not in old)):
            p, child = (*path, "f:" + k), shape.child(k)
            if k not in old:
                _walk_added(new[k], child, p, out.added)
            elif k not in new:
                _walk_added(old[k], child, p, out.removed)
            else:
                _compare(old[k], new[k], child, p, out)
    elif isinstance(old, list) and isinstance(new, list) and shape.list_kind()[0] != "atomic":
        _compare_lists(old, new, shape, path, out)
    elif not _same(old, new):
        out.modified.add(path)


def _compare_lists(old: list, new: list, shape: Shape, path: Path, out: Comparison) -> None:
    before, after = dict(_items(old, shape)), dict(_items(new, shape))
    item_shape = shape.item()
    for el, item in after.items():
        p = (*path, el)
        if el not in before:
            out.added.add(p)
            _walk_added_children(item, item_shape, p, out.added)
        elif isinstance(item, dict) and isinstance(before[el], dict) and item != before[el]:
            for k in (*before[el].keys(), *(k for k in item if k not in before[el])):
                sub = (*p, "f:" + k)
                if k not in before[el]:
                    _walk_added(item[k], item_shape.child(k), sub, out.added)
                elif k not in item:
                    _walk_added(before[el][k], item_shape.child(k), sub, out.removed)
                else:
                    _compare(before[el][k], item[k], item_shape.child(k), sub, out)
    for el, item in before.items():
        if el not in after:
            out.removed.add((*path, el))
            _walk_added_children(item, item_shape, (*path, el), out.removed)


def _walk_added_children(item: Any, shape: Shape, path: Path, out: set[Path]) -> None:
    if isinstance(item, dict):
        for k, v in item.items():
            _walk_added(v, shape.child(k), (*path, "f:" + k), out)


def _same(a: Any, b: Any) -> bool:
    """JSON equality (1 == 1.0, true != 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


# --------------------------------------------------------------------------- FieldsV1


def _element_rank(el: str) -> tuple[int, str]:
    return ("fkvi".find(el[0]) if el != "." else -1, el)


# Plain string order puts "." first and `f:` before `k:`/`v:`, which is the real order for every
# node but one mixing `i:` with `k:`/`v:` items (a keyed list with items lacking their key).


def encode_fields(paths: Iterable[Path]) -> dict[str, Any]:
    """A set of paths as a FieldsV1 tree: members with children carry `.`; leaves are `{}`."""
    root: dict[str, Any] = {}
    for path in paths:
        node = root
        for el in path:
            node = node.setdefault(el, {})
        node["."] = {}
    return _finish(root)


def _finish(node: dict[str, Any]) -> dict[str, Any]:
    if set(node) == {"."}:
        return {}
    return {k: ({} if k == "." else _finish(node[k])) for k in sorted(node)}


def decode_fields(tree: Any, path: Path = ()) -> set[Path]:
    """The set of paths of a FieldsV1 tree; ValueError when it is not one."""
    if not isinstance(tree, dict):
        raise ValueError(f"FieldsV1 node at {path_text(path) or '.'} is not an object")
    if not tree:
        return {path} if path else set()
    out: set[Path] = set()
    for el, sub in tree.items():
        if el == ".":
            if path:
                out.add(path)
            continue
        if len(el) < 3 or el[1] != ":" or el[0] not in "fkvi":
            raise ValueError(f"invalid FieldsV1 element {el!r}")
        out |= decode_fields(sub, (*path, el))
    return out


# --------------------------------------------------------------------------- entries


@dataclass(slots=True)
class Entry:
    """One managedFields entry: a manager's fields for one operation (and subresource)."""

    manager: str
    operation: str  # "Apply" | "Update"
    api_version: str
    time: str | None
    fields: set[Path]
    subresource: str = ""
    raw: dict[str, Any] | None = None  # the JSON this entry was decoded from, while unchanged

    @property
    def ident(self) -> tuple[str, str, str, str]:
        """Who the entry belongs to; appliers are one manager whatever version they applied."""
        return (self.manager, self.operation, "" if self.operation == "Apply" else self.api_version,
                self.subresource)

    def label(self) -> str:
        """The manager as conflict messages name it."""
        text = _json(self.manager)
        if self.subresource:
            text += f" with subresource {_json(self.subresource)}"
        if self.operation == "Update":
            text += f" using {self.api_version}"
        return text

    def take(self, paths: set[Path]) -> None:
        """Lose ownership of `paths`."""
        if not self.fields.isdisjoint(paths):
            self.fields = self.fields - paths
            self.raw = None

    def to_json(self) -> dict[str, Any]:
        if self.raw is not None:
            return self.raw
        out: dict[str, Any] = {"manager": self.manager, "operation": self.operation, "apiVersion": self.api_version}
        if self.time:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = encode_fields(self.fields)
        if self.subresource:
            out["subresource"] = self.subresource
        return out


def decode_entries(raw: Any, *, keep_raw: bool = True) -> list[Entry]:
    """Entries of a stored or requested managedFields list; ValueError when one is malformed.

    The real decoder's checks: `operation` Apply or Update, a non-empty `apiVersion`,
    `fieldsType` FieldsV1 and a FieldsV1 tree that parses. Two entries for one manager: the
    last wins. `keep_raw=False` re-encodes every entry (a request's JSON is never stored as sent).
    """
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError("managedFields must be a list")
    out: dict[tuple[str, str, str, str], Entry] = {}
    for i, e in enumerate(raw):
        if not isinstance(e, dict) or e.get("operation") not in ("Apply", "Update"):
            raise ValueError("operation must be `Apply` or `Update`")
        if not e.get("apiVersion") or not isinstance(e["apiVersion"], str):
            raise ValueError("apiVersion must not be empty")
        if e.get("fieldsType") != "FieldsV1":
            raise ValueError(f"missing or invalid fieldsType in managed fields entry {i}")
        fields = e.get("fieldsV1")
        entry = Entry(str(e.get("manager") or ""), e["operation"], e["apiVersion"], e.get("time"),
                      decode_fields({} if fields is None else fields), str(e.get("subresource") or ""),
                      e if keep_raw else None)
        out.pop(entry.ident, None)
        out[entry.ident] = entry
    return list(out.values())


def is_reset(requested: Any) -> bool:
    """`[]` or `[{}]`: the client asks for managedFields to be cleared (absent or null is not)."""
    return isinstance(requested, list) and (requested == [] or requested == [{}])


def base_entries(requested: Any, stored: Any, *, subresource: str | None = None) -> list[Entry]:
    """The ownership a write starts from, by the real field manager's rules (its `decodeManagedFields`).

    - A write through a subresource never takes managedFields from its body: the stored ones.
    - `[]` or `[{}]` resets them (fields written in the same request then go to the writer).
    - Otherwise entries that decode replace the stored ones (a client may hand ownership over,
      as kubectl does when it moves client-side apply to server-side apply, and a read-modify-write
      of a whole object sends them back unchanged).
    - Absent, null or malformed (one bad entry spoils the list): the stored ones, so clients unaware
      of managedFields never wipe them. Stored entries that do not decode count as none.
    """
    if subresource is None:
        if is_reset(requested):
            return []
        try:
            entries = decode_entries(requested, keep_raw=False)
        except ValueError:
            entries = []
        if entries:
            return entries
    try:
        return decode_entries(stored)
    except ValueError:
        return []


def _sort_key(e: Entry) -> tuple[Any, ...]:
    return (e.operation, e.time or "", e.manager, e.api_version, e.subresource)


def encode_entries(entries: Iterable[Entry]) -> list[dict[str, Any]]:
    """Non-empty entries in the real server's order: Apply before Update, then oldest first."""
    return [e.to_json() for e in sorted((e for e in entries if e.fields), key=_sort_key)]


# --------------------------------------------------------------------------- the tracked view


def tracked(rt: Any, obj: dict[str, Any] | None, subresource: str | None) -> dict[str, Any]:
    """The part of an object a write through `subresource` may own (status only for /status)."""
    if not obj:
        return {}
    if subresource == "status":
        return {"status": obj["status"]} if "status" in obj else {}
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    if rt.status:
        out.pop("status", None)
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in STRIPPED_META}
    if meta:
        out["metadata"] = meta
    return out


def _updated_view(rt: Any, view: dict[str, Any]) -> dict[str, Any]:
    """What an update may own of a tracked view: a namespace's `spec.finalizers` are set by the server
    after ownership is recorded (its strategy), so an update never owns them, nor the spec they leave
    empty (the zero value's)."""
    if rt.key != ("", "namespaces") or not isinstance(view.get("spec"), dict):
        return view
    out = dict(view)
    spec = {k: v for k, v in out.pop("spec").items() if k != "finalizers"}
    if spec:
        out["spec"] = spec
    return out


def record_update(rt: Any, old: dict[str, Any] | None, new: dict[str, Any], *, manager: str,
                  subresource: str | None, requested: Any, now: float) -> None:
    """Give `new` the managedFields after an Update by `manager` (in place on new's metadata).

    The manager takes every field it changed, from whoever owned it (an update never
    conflicts); a field it removed leaves every manager's set. An update (not a create) that
    starts from no ownership at all, after a reset or on an object nobody owns anything of,
    records none: the real server stops tracking such an object until the next apply.
    """
    entries = base_entries(requested, (old or {}).get("metadata", {}).get("managedFields"),
                           subresource=subresource)
    if old is not None and not entries:
        new["metadata"].pop("managedFields", None)
        return
    shape = shape_of(rt)
    diff = compare(_updated_view(rt, tracked(rt, old, subresource)), _updated_view(rt, tracked(rt, new, subresource)),
                   shape)
    mine = Entry(manager, "Update", rt.api_version, None, set(), subresource or "")
    if not diff.empty():
        taken = diff.added | diff.modified
        lost = taken | diff.removed
        for e in entries:
            if e.ident != mine.ident:
                e.take(lost)
        current = next((e for e in entries if e.ident == mine.ident), None)
        if current is None:
            entries.append(mine)
            current = mine
        current.fields = (current.fields - diff.removed) | taken
        # the real server's /scale handler converts entries without their time
        current.time = None if subresource == "scale" else rfc3339(now)
        current.api_version = rt.api_version
        current.raw = None
    new["metadata"]["managedFields"] = encode_entries(entries)
    if not new["metadata"]["managedFields"]:
        del new["metadata"]["managedFields"]
