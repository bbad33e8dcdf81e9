"""Upstream codec: Sedna's JSON text envelope, for peers that did not offer the subprotocol.

Frame: `{"header": {"namespace", "resourceKind", "resourceName", "operation"},
"content": <standard padded base64 of a JSON document>}` followed by a newline, in this
key order (what upstream's Go `json.Encoder` writes). Upstream peers decode keys case-
insensitively, so this decoder does too. Operations map onto `Message` as:

    insert, update -> upsert        delete -> delete        status -> status

Going down, `upsert` is always written as `insert`: upstream LCs reject `update`.
Upstream has no hello, snapshot markers, sequence numbers or acks. Its LC opens every
connection with a bare header object (no envelope) and that, like any frame with an empty
operation, decodes to None: a frame to tolerate and ignore.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import orjson

from proto.errors import DecodeError, EncodeError, FrameTooLarge, InvalidFrame, UnknownOp
from proto.kinds import Canonicalize, as_sent, upstream_kind
from proto.limits import MAX_CONTAINERS
from proto.message import MAX_FRAME_BYTES, Message, Op

_HEADER_FIELDS = ("namespace", "resourceKind", "resourceName", "operation")
_DECODE_OPS = {"insert": Op.UPSERT, "update": Op.UPSERT, "delete": Op.DELETE, "status": Op.STATUS}
_ENCODE_OPS = {Op.UPSERT: "insert", Op.DELETE: "delete", Op.STATUS: "status"}

BARE_HEADER = '{"namespace":"","resourceKind":"","resourceName":"","operation":""}\n'
"""The frame an upstream LC sends right after dialing, and ours sends in upstream mode."""


def decode_upstream(data: str | bytes | bytearray | memoryview, *, max_bytes: int = MAX_FRAME_BYTES,
                    canonical_kind: Canonicalize = as_sent) -> Message | None:
    """The Message in an upstream frame, or None for a frame that carries nothing; the kind is
    spelled by `canonical_kind` (see proto/kinds.py).

    `max_bytes` is the frame limit: MAX_FRAME_BYTES for objects, MAX_REPORT_ENVELOPE_BYTES
    where the GM decodes what an LC sends. It is checked first, so the base64 content is at
    most that long and its JSON at most 3/4 of it before either is decoded; maps and lists
    are counted in the text before each parse."""
    _check_size(data, max_bytes)
    _check_containers(data, "the frame")
    envelope = _loads(data, "frame")
    if not isinstance(envelope, dict):
        raise DecodeError(f"an upstream frame must be a JSON object, got {type(envelope).__name__}")
    header = _get_ci(envelope, "header")
    if header is None:
        return _bare_header(envelope)
    if not isinstance(header, dict):
        raise InvalidFrame(f"header must be an object, got {type(header).__name__}")
    fields = {f: _header_str(header, f) for f in _HEADER_FIELDS}
    if not fields["operation"]:
        return None
    op = _DECODE_OPS.get(fields["operation"])
    if op is None:
        raise UnknownOp(fields["operation"])
    body = _content(_get_ci(envelope, "content"))
    if op is not Op.DELETE and not isinstance(body, dict):
        raise InvalidFrame(f"{fields['operation']} content must be a JSON object, got {_kind_of(body)}")
    return Message(
        op,
        kind=canonical_kind(fields["resourceKind"]),
        namespace=fields["namespace"],
        name=fields["resourceName"],
        body=body if isinstance(body, dict) else None,
    )


def encode_upstream(msg: Message, *, max_bytes: int = MAX_FRAME_BYTES) -> str:
    """The text frame for `msg`; EncodeError for operations upstream cannot express."""
    if msg.op is Op.HELLO:
        return BARE_HEADER
    operation = _ENCODE_OPS.get(msg.op)
    if operation is None:
        raise EncodeError(f"{msg.op} has no upstream form")
    kind = upstream_kind(msg.kind) if msg.op is not Op.STATUS else msg.kind
    header = {"namespace": msg.namespace, "resourceKind": kind, "resourceName": msg.name, "operation": operation}
    content = base64.b64encode(_dumps(_content_of(msg), msg)).decode("ascii")
    frame = _dumps({"header": header, "content": content}, msg) + b"\n"
    if len(frame) > max_bytes:
        raise FrameTooLarge(len(frame), max_bytes)
    return frame.decode("utf-8")


def _content_of(msg: Message) -> Mapping[str, Any]:
    """What upstream puts in `content`: the object (with its kind), a stub for deletes, the report."""
    if msg.op is Op.STATUS:
        return msg.body or {}
    if msg.body is None:
        return {"kind": msg.kind, "metadata": {"name": msg.name, "namespace": msg.namespace}}
    if msg.body.get("kind") == msg.kind:
        return msg.body
    return {"kind": msg.kind, **msg.body}


def _dumps(value: Any, msg: Message) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        raise EncodeError(f"cannot encode {msg.op} {msg.kind} {msg.namespace}/{msg.name}: {exc}") from exc


def _check_size(data: str | bytes | bytearray | memoryview, max_bytes: int) -> None:
    """FrameTooLarge unless `data` is at most `max_bytes` of UTF-8; a text frame is measured
    without being copied when it is ASCII (as envelopes are: the content is base64)."""
    if isinstance(data, str):
        if len(data) > max_bytes:  # a character is at least one byte
            raise FrameTooLarge(len(data), max_bytes)
        size = len(data) if data.isascii() else len(data.encode("utf-8", "surrogatepass"))
    else:
        size = memoryview(data).nbytes
    if size > max_bytes:
        raise FrameTooLarge(size, max_bytes)


def _check_containers(text: str | bytes | bytearray | memoryview, what: str) -> None:
    """InvalidFrame when `text` opens more than MAX_CONTAINERS maps and lists, counted before
    parsing (orjson has no hook to stop early, as msgpack has). A bracket inside a string
    counts too, so this can only over-count: a real envelope has two (its content is base64)."""
    if isinstance(text, memoryview):
        text = text.tobytes()
    opened = text.count("{") + text.count("[") if isinstance(text, str) else text.count(b"{") + text.count(b"[")
    if opened > MAX_CONTAINERS:
        raise InvalidFrame(f"{what} opens {opened} maps and lists, the limit is {MAX_CONTAINERS}")


def _loads(raw: str | bytes | bytearray | memoryview, what: str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"{what} is not JSON: {exc}") from exc


def _get_ci(obj: dict[str, Any], key: str) -> Any:
    """obj[key], matching the key case-insensitively when there is no exact match (as Go does)."""
    if key in obj:
        return obj[key]
    folded = key.lower()
    return next((v for k, v in obj.items() if k.lower() == folded), None)


def _header_str(header: dict[str, Any], field: str) -> str:
    value = _get_ci(header, field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidFrame(f"header.{field} must be a string, got {type(value).__name__}")
    return value


def _bare_header(obj: dict[str, Any]) -> None:
    """Accept the header object upstream LCs send un-enveloped as their first frame."""
    if _get_ci(obj, "content") is not None:
        raise InvalidFrame("frame has content but no header")
    for field in _HEADER_FIELDS:
        _header_str(obj, field)
    return None


def _content(value: Any) -> Any:
    """Decode `content`: base64 (standard, padded) of JSON; null or empty means no content."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise DecodeError(f"content must be a base64 string, got {type(value).__name__}")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise DecodeError(f"content is not valid base64: {exc}") from exc
    _check_containers(raw, "content")
    return _loads(raw, "content") if raw else None


def _kind_of(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__
