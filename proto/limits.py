"""What the protocol accepts: the one definition of every limit a frame or a report must meet.

The GM's decoders refuse a frame that breaks one of these rules, and a refusal there is
final: the session that carried it is closed. The LC therefore checks the same rules,
with these same functions, before it answers a worker 200 for a report, so a report it
accepts is one the GM can decode; a limit changed here changes both sides at once.

Rules: kind, namespace and name lengths (Kubernetes' own: a namespace is a DNS label,
a name a DNS subdomain), nesting depth of a body, JSON-like values only (maps with
string keys, lists, scalars) and text that is valid Unicode (no lone surrogates, which
no UTF-8 encoder can write). Pure functions, no I/O; violations raise InvalidFrame.
"""

from __future__ import annotations

from typing import Any

from proto.errors import InvalidFrame

MAX_FRAME_BYTES = 8 * 1024 * 1024
"""Default frame limit. Kubernetes objects stop at ~1.5 MiB in etcd, reports are small."""

MAX_SEQ = 2**63 - 1
MAX_EPOCH = 64
"""Longest outbox epoch an LC may name in its hello."""
MAX_KIND = 63
MAX_NAMESPACE = 63
MAX_NAME = 253
MAX_DEPTH = 100
"""Deepest nesting of maps and lists in a body; the body itself is level 0."""


def check_text(value: str, path: str) -> None:
    """Raise InvalidFrame unless `value` can be written as UTF-8 (no lone surrogates)."""
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidFrame(f"{path} holds {value[exc.start]!a}, a lone surrogate that is not "
                           "valid Unicode text") from None


def check_name(field: str, value: object, limit: int) -> None:
    """Raise InvalidFrame unless `value` is valid text of at most `limit` characters."""
    if not isinstance(value, str):
        raise InvalidFrame(f"{field} must be a string, got {type(value).__name__}")
    if len(value) > limit:
        raise InvalidFrame(f"{field} is {len(value)} characters long, the limit is {limit}")
    check_text(value, field)


def check_object_names(kind: object, namespace: object, name: object) -> None:
    """The identity of an object on the wire: kind, namespace and name within their limits."""
    check_name("kind", kind, MAX_KIND)
    check_name("namespace", namespace, MAX_NAMESPACE)
    check_name("name", name, MAX_NAME)


def check_json_like(value: Any, path: str, depth: int = 0) -> None:
    """Raise InvalidFrame unless `value` is made of maps with string keys, lists and scalars,
    nested at most MAX_DEPTH levels, with valid text in every string."""
    if depth > MAX_DEPTH:
        raise InvalidFrame(f"{_short(path)} is nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        check_text(value, _short(path))
        return
    if value is None or isinstance(value, bool | int | float):
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            check_json_like(item, f"{path}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                raise InvalidFrame(f"{_short(path)} has a non-string key {k!r}")
            check_text(k, f"a key of {_short(path)}")
            check_json_like(item, f"{path}.{k}", depth + 1)
        return
    raise InvalidFrame(f"{_short(path)} holds a {type(value).__name__}, which JSON cannot carry")


def _short(path: str, limit: int = 120) -> str:
    """A path fit for an error message: deep paths keep their start and their end."""
    return path if len(path) <= limit else f"{path[:60]}...{path[-50:]}"
