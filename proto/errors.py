"""Typed errors of the GM<->LC wire protocol.

Every way a frame can be wrong has its own class so a session can decide, in one place,
whether to close the connection (and with which websocket close code) or to skip one
frame. Each error carries the close code a peer should use when the error ends a
session; the message always says what was wrong, never just which key was missing.
"""

from __future__ import annotations

# Websocket close codes (RFC 6455 section 7.4 plus the private 4000-4999 range).
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_UNSUPPORTED_DATA = 1003
CLOSE_INVALID_PAYLOAD = 1007
CLOSE_POLICY_VIOLATION = 1008
CLOSE_MESSAGE_TOO_BIG = 1009
CLOSE_REPLACED = 4000
"""A newer connection for the same node took over this session."""
CLOSE_DEAD = 4001
"""Nothing (not even a pong) arrived within the dead-after window."""
CLOSE_UNSUPPORTED_VERSION = 4002
"""The peers share no protocol version."""
CLOSE_HELLO_TIMEOUT = 4003
"""A native client did not send its hello in time."""


class ProtocolError(Exception):
    """Base of every wire-protocol error."""

    close_code: int = CLOSE_PROTOCOL_ERROR


class DecodeError(ProtocolError):
    """The bytes are not a frame at all: not msgpack/JSON/base64, or not a map."""

    close_code = CLOSE_INVALID_PAYLOAD


class InvalidFrame(ProtocolError):
    """The frame decoded, but a field is missing, has the wrong type or an illegal value."""


class UnknownOp(ProtocolError):
    """The frame names an operation this protocol version does not define."""

    def __init__(self, op: object) -> None:
        super().__init__(f"unknown operation {op!r}")
        self.op = op


class FrameTooLarge(ProtocolError):
    """A frame exceeds the size limit (checked before decoding and after encoding)."""

    close_code = CLOSE_MESSAGE_TOO_BIG

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class UnsupportedVersion(ProtocolError):
    """The hello offered no protocol version this side speaks."""

    close_code = CLOSE_UNSUPPORTED_VERSION


class EncodeError(ProtocolError):
    """A message could not be encoded (a body holds something that is not JSON-like)."""
