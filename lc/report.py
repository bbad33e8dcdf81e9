"""Decoding a worker report body the way upstream's LC does, with clearer errors.

Upstream decodes with Go's encoding/json into a fixed struct, and the workers in the field
rely on its leniencies: object keys match field names case-insensitively (last duplicate
wins), unknown keys are ignored, `null` leaves a string field empty, and bytes after the
first JSON value are ignored. We keep all of that, so every body upstream accepts is
accepted here, and refuse what upstream refuses (wrong types, a body that is not an
object) with a message that names the field. Pure functions, no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson

from lc.errors import ReportError
from shared.text import clip

# JSON key (upstream spelling) -> expected type; see shared/spec/upstream-lc.md section 2.2.
_STRING_FIELDS = ("name", "namespace", "ownerName", "ownerKind", "kind", "status")
_FIELDS = frozenset((*_STRING_FIELDS, "ownerInfo", "results"))
_FOLDED = {key.casefold(): key for key in _FIELDS}
_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {clip(text, 40)} is out of range")
    return value


def _parse_int(text: str) -> int | float:
    # Same rule as orjson, the fast path: integers beyond 64 bits become floats.
    value = int(text)
    return value if _INT64_MIN <= value <= _UINT64_MAX else _parse_float(text)


_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=_parse_float, parse_int=_parse_int)


@dataclass(frozen=True, slots=True)
class WorkerReport:
    """One decoded `POST /sedna/workers/{name}/info` body."""

    name: str = ""
    namespace: str = ""
    owner_name: str = ""
    owner_kind: str = ""
    kind: str = ""
    status: str = ""
    owner_info: dict[str, Any] | None = None
    results: list[dict[str, Any] | None] | None = None

    def to_json(self) -> dict[str, Any]:
        """The report with upstream's key names, as stored and shown by GET /sedna/workers."""
        return {
            "name": self.name, "namespace": self.namespace, "ownerName": self.owner_name,
            "ownerKind": self.owner_kind, "kind": self.kind, "status": self.status,
            "ownerInfo": self.owner_info, "results": self.results,
        }


def parse_json(body: bytes) -> Any:
    """Parse the first JSON value of `body`; trailing bytes are ignored like upstream."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass  # fall back to the lenient decoder: trailing data, or a real error to explain
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReportError(f"body is not valid UTF-8 (byte {exc.start})", reason="bad_json") from None
    start = len(text) - len(text.lstrip(" \t\r\n"))
    if start == len(text):
        raise ReportError("body is empty; expected a JSON object", reason="bad_json")
    try:
        value, _ = _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError) as exc:
        raise ReportError(f"body is not valid JSON: {clip(str(exc))}", reason="bad_json") from None
    return value


def decode_report(value: Any) -> WorkerReport:
    """Build a WorkerReport from a parsed body, raising ReportError on wrong types."""
    if value is None:
        return WorkerReport()  # upstream: `null` decodes to the zero struct
    if not isinstance(value, dict):
        raise ReportError(f"body must be a JSON object, got {_type_name(value)}", reason="bad_type")
    fields: dict[str, Any] = {}
    problems: list[str] = []
    for key, item in value.items():
        field = key if key in _FIELDS else _FOLDED.get(key.casefold())
        if field is None:
            continue  # unknown keys are ignored, as upstream does
        problem = _assign(fields, field, item)
        if problem:
            problems.append(problem)
    if problems:
        raise ReportError("; ".join(problems), reason="bad_type")
    return WorkerReport(
        name=fields.get("name", ""), namespace=fields.get("namespace", ""),
        owner_name=fields.get("ownerName", ""), owner_kind=fields.get("ownerKind", ""),
        kind=fields.get("kind", ""), status=fields.get("status", ""),
        owner_info=fields.get("ownerInfo"), results=fields.get("results"),
    )


def _assign(fields: dict[str, Any], field: str, item: Any) -> str | None:
    """Store `item` under `field` if its type fits; return a message when it does not."""
    if field in _STRING_FIELDS:
        if item is None:
            return None  # Go leaves a string untouched on null
        if not isinstance(item, str):
            return f'field "{field}" must be a string, got {_type_name(item)}'
        fields[field] = item
    elif field == "ownerInfo":
        if item is not None and not isinstance(item, dict):
            return f'field "ownerInfo" must be an object, got {_type_name(item)}'
        fields[field] = item
    else:
        if item is not None and not isinstance(item, list):
            return f'field "results" must be an array of objects, got {_type_name(item)}'
        for i, entry in enumerate(item or ()):
            if entry is not None and not isinstance(entry, dict):
                return f'field "results[{i}]" must be an object, got {_type_name(entry)}'
        fields[field] = item
    return None


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
