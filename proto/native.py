"""Native codec: one binary msgpack map per websocket frame.

Layout: `{"op": str, "seq": int, "kind": str, "namespace": str, "name": str, "body": map}`;
`op` and `seq` are always present, the other keys only when non-empty. Bodies are maps
of JSON-like values (no bytes, no extension types), so whatever crosses the wire can be
written to the Kubernetes API or SQLite as JSON without a second check.

A body sent in many frames (one object version to many nodes, each frame with its own
`seq`) can be encoded once with `pack_body` and given to `encode_native`: msgpack is a
concatenation format, so the frame is its head followed by those bytes, the same bytes
`encode_native` would have built from the body.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import msgpack

from proto.errors import DecodeError, EncodeError, FrameTooLarge, InvalidFrame, ProtocolError
from proto.limits import MAX_CONTAINERS, MAX_FRAME_BYTES, MAX_ITEMS, check_json_like
from proto.message import Message, Op, parse_op

_FIELDS = frozenset({"op", "seq", "kind", "namespace", "name", "body"})
_BODY_KEY = msgpack.packb("body")


def encode_native(msg: Message, *, max_bytes: int = MAX_FRAME_BYTES, packed_body: bytes | None = None) -> bytes:
    """The binary frame for `msg`; EncodeError or FrameTooLarge when it cannot be sent.

    `packed_body`: `pack_body(msg.body)`, made once for every frame carrying that body."""
    frame: dict[str, Any] = {"op": str(msg.op), "seq": msg.seq}
    for field in ("kind", "namespace", "name"):
        value = getattr(msg, field)
        if value:
            frame[field] = value
    if packed_body is not None:
        data = _with_body(msgpack.packb(frame, use_bin_type=True), packed_body)
    else:
        if msg.body is not None:
            frame["body"] = msg.body if isinstance(msg.body, dict) else dict(msg.body)
        data = _pack(frame, f"{msg.op} {msg.kind} {msg.namespace}/{msg.name}")
    if len(data) > max_bytes:
        raise FrameTooLarge(len(data), max_bytes)
    return data


def pack_body(body: Mapping[str, Any], *, what: str = "the body") -> bytes:
    """A frame's body encoded on its own, for `encode_native(..., packed_body=...)`; EncodeError
    (naming `what`) when it cannot be encoded."""
    return _pack(body if isinstance(body, dict) else dict(body), what)


def _pack(value: dict[str, Any], what: str) -> bytes:
    try:
        return msgpack.packb(value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"cannot encode {what}: {exc}") from exc


def _with_body(head: bytes, body: bytes) -> bytes:
    """The frame whose other fields `head` holds (a map of at most 5 entries: a fixmap, its
    count in the first byte), with `body` as one more entry."""
    assert head[0] & 0xF0 == 0x80 and head[0] & 0x0F < 15, "a frame head is a fixmap of <= 5 entries"
    return b"".join((bytes((head[0] + 1,)), memoryview(head)[1:], _BODY_KEY, body))


def decode_native(data: bytes | bytearray | memoryview | str, *, max_bytes: int = MAX_FRAME_BYTES) -> Message:
    """The Message in a binary frame; a typed ProtocolError says what is wrong otherwise.

    `max_bytes` is the frame limit: MAX_FRAME_BYTES for the objects the GM sends, and
    MAX_REPORT_BYTES where the GM decodes what an LC sends. Beyond it, what a frame may
    cost is bounded while it is unpacked (MAX_ITEMS, MAX_CONTAINERS), before the body is
    checked."""
    if isinstance(data, str):
        raise DecodeError("native frames are binary msgpack, got a text frame")
    if len(data) > max_bytes:
        raise FrameTooLarge(len(data), max_bytes)
    frame = _unpack(data)
    if not isinstance(frame, dict):
        raise DecodeError(f"a frame must be a msgpack map, got {type(frame).__name__}")
    extra = set(frame) - _FIELDS
    if extra:
        raise InvalidFrame(f"unknown frame fields {sorted(extra)}")
    if "op" not in frame:
        raise InvalidFrame("frame has no op")
    body = frame.get("body")
    if body is not None:
        check_json_like(body, "body")
    msg = Message(
        parse_op(frame["op"]),
        frame.get("seq", 0),
        frame.get("kind", ""),
        frame.get("namespace", ""),
        frame.get("name", ""),
        body,
    )
    if msg.op is Op.STATUS and msg.seq < 1:
        raise InvalidFrame("a native status needs a seq >= 1 so it can be acknowledged")
    return msg


def _reject_ext(code: int, data: bytes) -> Any:
    raise DecodeError(f"msgpack extension type {code} is not allowed")


# msgpack's words for a list or map whose header claims more entries than max_*_len.
_TOO_LONG = re.compile(r"(\d+) exceeds max_(array|map)_len")


def _unpack(data: bytes | bytearray | memoryview) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True, ext_hook=_reject_ext,
                               max_array_len=MAX_ITEMS, max_map_len=MAX_ITEMS,
                               list_hook=(count := _container_budget()), object_hook=count)
    except ProtocolError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        # ExtraData, FormatError, StackError and bad UTF-8 all derive from these.
        if too_long := _TOO_LONG.match(str(exc)):
            what = "list" if too_long[2] == "array" else "map"
            raise InvalidFrame(f"a {what} holds {too_long[1]} items, the limit is {MAX_ITEMS}") from None
        raise DecodeError(f"not a msgpack frame: {exc}") from exc


def _container_budget() -> Callable[[Any], Any]:
    """A hook msgpack calls with each map and list once it is built: it refuses the frame
    when they outnumber MAX_CONTAINERS (plus the frame's own map), so a frame of tiny maps
    stops early instead of being built whole and refused by check_json_like."""
    count = 0

    def hook(container: Any) -> Any:
        nonlocal count
        count += 1
        if count > MAX_CONTAINERS + 1:
            raise InvalidFrame(f"the frame holds more than {MAX_CONTAINERS} maps and lists")
        return container

    return hook
