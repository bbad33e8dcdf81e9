"""The protocol's one message type and the rules each operation obeys.

Both codecs (native msgpack, upstream JSON) translate to and from `Message`, so the hub
and the LC link reason about operations, never about frame layouts. A `Message` is
validated when it is built: whatever a decoder returns is already well-formed, and code
that builds a malformed message fails at the point of construction.

Operations and what they carry:

- `hello`: first frame each way in native mode. body `{"node", "versions", "acked"?, "epoch"?}`.
  The LC lists the versions it speaks, the highest status seq the GM has acked and the
  epoch of its outbox (status seqs are ordered only within one epoch: a new outbox starts
  again at 1 under a new epoch); the GM answers with the single version it chose.
- `snapshot`: body `{"phase": "begin"}` or `{"phase": "end", "count": N}`. Between the
  two markers the GM sends the node's whole desired state as ordinary `upsert` frames
  (so a snapshot of thousands of objects is thousands of small frames); at `end` the LC
  drops every object it holds that was not upserted since `begin`.
- `upsert` / `delete`: GM -> LC, one object identified by kind/namespace/name; upsert's
  body is the full object.
- `status`: LC -> GM, a report about one object; body is the report map. `seq` >= 1 in
  native mode (the LC's durable outbox sequence); 0 means unsequenced (upstream mode).
- `ack`: GM -> LC, `seq` is the status seq being acknowledged; body is absent when the
  report was applied, `{"error": reason}` when it was refused for good.

Size, length and depth limits live in proto/limits.py, shared with the LC's worker API.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proto.errors import InvalidFrame, UnknownOp, UnsupportedVersion
from proto.limits import MAX_EPOCH, MAX_SEQ, check_object_names
from proto.limits import MAX_FRAME_BYTES as MAX_FRAME_BYTES  # re-exported: older import path

SUBPROTOCOL = "sedna.msgpack.v1"
"""Websocket subprotocol a native LC offers; without it both sides speak upstream JSON."""

PROTOCOL_VERSIONS: tuple[int, ...] = (1,)
"""Versions of the native protocol this code speaks, oldest first."""


class Op(enum.StrEnum):
    HELLO = "hello"
    SNAPSHOT = "snapshot"
    UPSERT = "upsert"
    DELETE = "delete"
    STATUS = "status"
    ACK = "ack"


OBJECT_OPS = frozenset({Op.UPSERT, Op.DELETE, Op.STATUS})
"""Operations that name one object by kind/namespace/name."""

SNAPSHOT_BEGIN = "begin"
SNAPSHOT_END = "end"

ObjKey = tuple[str, str, str]
"""(kind, namespace, name): the identity of an object on the wire."""


@dataclass(frozen=True, slots=True)
class Message:
    """One protocol message; validated on construction (raises InvalidFrame)."""

    op: Op
    seq: int = 0
    kind: str = ""
    namespace: str = ""
    name: str = ""
    body: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.op, Op):
            raise InvalidFrame(f"op must be an Op, got {self.op!r}")
        _check_seq(self.seq)
        check_object_names(self.kind, self.namespace, self.name)
        if self.body is not None and not isinstance(self.body, Mapping):
            raise InvalidFrame(f"{self.op} body must be a map, got {type(self.body).__name__}")
        _RULES[self.op](self)

    @property
    def key(self) -> ObjKey:
        return (self.kind, self.namespace, self.name)


def _check_seq(seq: object) -> None:
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise InvalidFrame(f"seq must be an integer, got {type(seq).__name__}")
    if not 0 <= seq <= MAX_SEQ:
        raise InvalidFrame(f"seq {seq} is out of range 0..{MAX_SEQ}")


def _rule_object(m: Message) -> None:
    if not m.kind or not m.name:
        raise InvalidFrame(f"{m.op} needs a kind and a name (got kind={m.kind!r} name={m.name!r})")
    if m.op in (Op.UPSERT, Op.STATUS) and m.body is None:
        raise InvalidFrame(f"{m.op} {m.kind} {m.namespace}/{m.name} has no body")


def _rule_hello(m: Message) -> None:
    body = m.body
    if body is None:
        raise InvalidFrame("hello has no body")
    node = body.get("node")
    if not isinstance(node, str) or not node:
        raise InvalidFrame(f"hello body.node must be a non-empty string, got {node!r}")
    versions = body.get("versions")
    if not isinstance(versions, list | tuple) or not versions:
        raise InvalidFrame(f"hello body.versions must be a non-empty list, got {versions!r}")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in versions):
        raise InvalidFrame(f"hello body.versions must hold positive integers, got {versions!r}")
    acked = body.get("acked", 0)
    if isinstance(acked, bool) or not isinstance(acked, int) or not 0 <= acked <= MAX_SEQ:
        raise InvalidFrame(f"hello body.acked must be a non-negative integer, got {acked!r}")
    epoch = body.get("epoch", "")
    if not isinstance(epoch, str) or len(epoch) > MAX_EPOCH:
        raise InvalidFrame(f"hello body.epoch must be a string of at most {MAX_EPOCH} characters, got {epoch!r:.80}")


def _rule_snapshot(m: Message) -> None:
    phase = m.body.get("phase") if m.body is not None else None
    if phase == SNAPSHOT_BEGIN:
        return
    if phase != SNAPSHOT_END:
        raise InvalidFrame(f"snapshot body.phase must be 'begin' or 'end', got {phase!r}")
    count = m.body.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InvalidFrame(f"snapshot end body.count must be a non-negative integer, got {count!r}")


def _rule_ack(m: Message) -> None:
    if m.seq < 1:
        raise InvalidFrame("ack needs the seq (>= 1) of the status it acknowledges")
    if m.body is not None and not isinstance(m.body.get("error"), str):
        raise InvalidFrame(f"ack body must be absent or {{'error': <string>}}, got {dict(m.body)!r}")


_RULES = {
    Op.HELLO: _rule_hello,
    Op.SNAPSHOT: _rule_snapshot,
    Op.UPSERT: _rule_object,
    Op.DELETE: _rule_object,
    Op.STATUS: _rule_object,
    Op.ACK: _rule_ack,
}


def parse_op(value: object) -> Op:
    """The Op named by a wire value; UnknownOp otherwise."""
    try:
        return Op(value)
    except ValueError:
        raise UnknownOp(value) from None


def hello(node: str, *, versions: tuple[int, ...] = PROTOCOL_VERSIONS, acked: int | None = None,
          epoch: str | None = None) -> Message:
    """A hello: the LC lists every version it speaks, its acked seq and its outbox epoch; the GM
    the version it chose."""
    body: dict[str, Any] = {"node": node, "versions": list(versions)}
    if acked is not None:
        body["acked"] = acked
    if epoch is not None:
        body["epoch"] = epoch
    return Message(Op.HELLO, body=body)


def snapshot_begin(seq: int = 0) -> Message:
    return Message(Op.SNAPSHOT, seq, body={"phase": SNAPSHOT_BEGIN})


def snapshot_end(count: int, seq: int = 0) -> Message:
    """End of a snapshot of `count` objects: the LC now drops what was not upserted."""
    return Message(Op.SNAPSHOT, seq, body={"phase": SNAPSHOT_END, "count": count})


def ack(seq: int, *, error: str | None = None) -> Message:
    """Acknowledge status `seq`: applied (no error) or refused for good (error)."""
    return Message(Op.ACK, seq, body=None if error is None else {"error": error})


def negotiate(offered: object) -> int:
    """The highest version both sides speak; UnsupportedVersion when there is none."""
    common = set(PROTOCOL_VERSIONS).intersection(offered if isinstance(offered, list | tuple) else ())
    if not common:
        raise UnsupportedVersion(f"peer offers versions {offered!r}, this side speaks {list(PROTOCOL_VERSIONS)}")
    return max(common)
