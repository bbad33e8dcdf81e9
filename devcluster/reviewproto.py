"""Protobuf request bodies of the access-review kinds and TokenRequest, as JSON data.

kubectl's typed clients (`kubectl auth can-i`, `kubectl auth whoami`, `kubectl create token`)
send `application/vnd.kubernetes.protobuf`: the magic `k8s\\0`, then a `runtime.Unknown`
(typeMeta = 1 {apiVersion = 1, kind = 2}, raw = 2) whose `raw` is the object. These kinds
are small and never stored, so a field table per message (numbers and types are facts of the
wire format) and a minimal wire reader (varint and length-delimited fields only) are enough.
Fields the table does not name are skipped. Pure.
"""

from __future__ import annotations

from typing import Any

from devcluster.errors import bad_request

CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

Table = dict[int, tuple[str, Any]]  # field number -> (JSON name, "string" | "int" | "strings" | Table | ("map", Table))

_META: Table = {1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string")}
_RESOURCE_ATTRIBUTES: Table = {1: ("namespace", "string"), 2: ("verb", "string"), 3: ("group", "string"),
                               4: ("version", "string"), 5: ("resource", "string"), 6: ("subresource", "string"),
                               7: ("name", "string")}
_NON_RESOURCE_ATTRIBUTES: Table = {1: ("path", "string"), 2: ("verb", "string")}
_EXTRA_VALUE: Table = {1: ("items", "strings")}
_MAP_ENTRY: Table = {1: ("key", "string"), 2: ("value", _EXTRA_VALUE)}
_BOUND_OBJECT: Table = {1: ("kind", "string"), 2: ("apiVersion", "string"), 3: ("name", "string"),
                        4: ("uid", "string")}

MESSAGES: dict[str, Table] = {
    "SelfSubjectAccessReview": {1: ("metadata", _META), 2: ("spec", {
        1: ("resourceAttributes", _RESOURCE_ATTRIBUTES), 2: ("nonResourceAttributes", _NON_RESOURCE_ATTRIBUTES)})},
    "SubjectAccessReview": {1: ("metadata", _META), 2: ("spec", {
        1: ("resourceAttributes", _RESOURCE_ATTRIBUTES), 2: ("nonResourceAttributes", _NON_RESOURCE_ATTRIBUTES),
        3: ("user", "string"), 4: ("groups", "strings"), 5: ("extra", ("map", _MAP_ENTRY)), 6: ("uid", "string")})},
    "SelfSubjectRulesReview": {1: ("metadata", _META), 2: ("spec", {1: ("namespace", "string")})},
    "SelfSubjectReview": {1: ("metadata", _META)},
    "TokenRequest": {1: ("metadata", _META), 2: ("spec", {
        1: ("audiences", "strings"), 3: ("boundObjectRef", _BOUND_OBJECT), 4: ("expirationSeconds", "int")})},
}
_UNKNOWN: Table = {1: ("typeMeta", {1: ("apiVersion", "string"), 2: ("kind", "string")}), 2: ("raw", "bytes")}


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object of one of MESSAGES; 400 for anything else."""
    if not body.startswith(MAGIC):
        raise bad_request("the protobuf body does not start with the k8s magic prefix")
    envelope = _message(body[len(MAGIC):], _UNKNOWN)
    type_meta = envelope.get("typeMeta") or {}
    table = MESSAGES.get(type_meta.get("kind", ""))
    if table is None:
        raise bad_request(f"cannot decode a protobuf body of kind {type_meta.get('kind')!r} here")
    obj = _message(envelope.get("raw", b""), table)
    return {"apiVersion": type_meta.get("apiVersion", ""), "kind": type_meta["kind"], **obj}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise bad_request("truncated protobuf varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs: ints for varints, bytes for length-delimited fields."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise bad_request("truncated protobuf field")
            out.append((number, data[pos:pos + size]))
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise bad_request(f"unsupported protobuf wire type {wire}")
    return out


def _message(data: bytes, table: Table) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(data):
        if number not in table:
            continue
        name, kind = table[number]
        if kind == "int":
            obj[name] = value if isinstance(value, int) else 0
        elif isinstance(value, int):
            continue  # a wire type the table does not expect: skipped like an unknown field
        elif kind == "bytes":
            obj[name] = value
        elif kind == "string":
            obj[name] = value.decode("utf-8", "replace")
        elif kind == "strings":
            obj.setdefault(name, []).append(value.decode("utf-8", "replace"))
        elif isinstance(kind, tuple):
            entry = _message(value, kind[1])
            obj.setdefault(name, {})[entry.get("key", "")] = (entry.get("value") or {}).get("items", [])
        else:
            obj[name] = _message(value, kind)
    return obj
