"""Stored values as JSON text, and JSON text cut to a bound (a marker that keeps its start and
its length)."""

from __future__ import annotations

from typing import Any

import orjson

from lc.errors import StoreError


def encode(value: Any) -> str:
    """JSON text for a stored value (orjson; non-string keys and big ints via json)."""
    return encode_sized(value)[0]


def encode_sized(value: Any) -> tuple[str, int]:
    """JSON text for a stored value and its length in bytes."""
    try:
        raw = orjson.dumps(value)
    except TypeError as exc:
        raise StoreError(f"value cannot be stored as JSON: {exc}") from None
    return raw.decode(), len(raw)


def head_chars(limit: int) -> int:
    """How much of a long JSON text its marker keeps (bytes; characters are at least as
    many): quoting at most doubles it, and the rest of the marker fits in 128 bytes."""
    return max(0, (limit - 128) // 2)


def truncated_json(head: str, size: int, limit: int) -> str:
    """The marker that stands for JSON text of `size` bytes longer than `limit`: its start
    (from `head`, the text or its first `head_chars(limit)` characters) and its length, in
    at most `limit` bytes."""
    start = head.encode()[:head_chars(limit)].decode("utf-8", "ignore")
    return orjson.dumps({"truncated": True, "bytes": size, "head": start}).decode()


def bounded_json(text: str, limit: int) -> str:
    """`text` when it fits in `limit` bytes, else its truncation marker."""
    size = len(text.encode())
    return text if size <= limit else truncated_json(text, size, limit)
