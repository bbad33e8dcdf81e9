"""Message rules and the native msgpack codec."""

from __future__ import annotations

import msgpack
import pytest

import proto
from proto import (
    DecodeError,
    EncodeError,
    FrameTooLarge,
    InvalidFrame,
    Message,
    Op,
    ProtocolError,
    UnknownOp,
    UnsupportedVersion,
    decode_native,
    encode_native,
)
from shared import apis

DATASET = {"apiVersion": "sedna.io/v1alpha1", "kind": "Dataset", "metadata": {"name": "d1", "namespace": "default"},
           "spec": {"url": "/data/index.txt", "format": "txt", "nodeName": "edge-1"}}


def pack(frame: object) -> bytes:
    return msgpack.packb(frame, use_bin_type=True)


@pytest.mark.parametrize(
    "msg",
    [
        pytest.param(proto.hello("edge-1", versions=(1, 2), acked=41), id="hello"),
        pytest.param(proto.hello("edge-1", acked=41, epoch="9f2c01d4e5a6b7c8"), id="hello-epoch"),
        pytest.param(proto.snapshot_begin(1), id="snapshot-begin"),
        pytest.param(proto.snapshot_end(1200, 1202), id="snapshot-end"),
        pytest.param(Message(Op.UPSERT, 7, "Dataset", "default", "d1", DATASET), id="upsert"),
        pytest.param(Message(Op.DELETE, 8, "Dataset", "default", "d1"), id="delete"),
        pytest.param(Message(Op.STATUS, 3, "Dataset", "default", "d1", {"numberOfSamples": 500}), id="status"),
        pytest.param(proto.ack(3), id="ack"),
        pytest.param(proto.ack(4, error="not assigned"), id="ack-error"),
    ],
)
def test_native_round_trip(msg: Message) -> None:
    assert decode_native(encode_native(msg)) == msg


def test_native_layout_is_a_flat_map_without_empty_fields() -> None:
    frame = msgpack.unpackb(encode_native(Message(Op.UPSERT, 7, "Dataset", "default", "d1", DATASET)))
    assert frame == {"op": "upsert", "seq": 7, "kind": "Dataset", "namespace": "default", "name": "d1", "body": DATASET}
    assert msgpack.unpackb(encode_native(proto.ack(9))) == {"op": "ack", "seq": 9}


def test_native_body_floats_and_nulls_survive() -> None:
    body = {"phase": "Train", "status": "Ready", "output": None, "metrics": {"acc": 0.875, "n": -3}}
    msg = Message(Op.STATUS, 1, "IncrementalLearningJob", "default", "il", body)
    assert decode_native(encode_native(msg)).body == body


@pytest.mark.parametrize(
    ("data", "error", "text"),
    [
        pytest.param("{}", DecodeError, "text frame", id="text-frame"),
        pytest.param(b"\xc1\x00", DecodeError, "not a msgpack frame", id="garbage"),
        pytest.param(pack({"op": "ack", "seq": 1})[:-1], DecodeError, "not a msgpack frame", id="truncated"),
        pytest.param(pack({"op": "ack", "seq": 1}) + b"\x01", DecodeError, "not a msgpack frame", id="extra-data"),
        pytest.param(pack(["ack", 1]), DecodeError, "must be a msgpack map, got list", id="array"),
        pytest.param(pack({1: "ack"}), DecodeError, "not a msgpack frame", id="int-key"),
        pytest.param(b"\x81\xa2op\xa3\xff\xfe\xfd", DecodeError, "not a msgpack frame", id="bad-utf8"),
        pytest.param(pack({"op": "ack", "seq": 1, "extra": 1}), InvalidFrame, "unknown frame fields ['extra']", id="extra-field"),
        pytest.param(pack({"seq": 1}), InvalidFrame, "frame has no op", id="no-op"),
        pytest.param(pack({"op": "frobnicate", "seq": 1}), UnknownOp, "unknown operation 'frobnicate'", id="unknown-op"),
        pytest.param(pack({"op": 5}), UnknownOp, "unknown operation 5", id="op-not-string"),
        pytest.param(pack({"op": "ack", "seq": "1"}), InvalidFrame, "seq must be an integer, got str", id="seq-str"),
        pytest.param(pack({"op": "ack", "seq": True}), InvalidFrame, "seq must be an integer, got bool", id="seq-bool"),
        pytest.param(pack({"op": "ack", "seq": -1}), InvalidFrame, "seq -1 is out of range", id="seq-negative"),
        pytest.param(pack({"op": "delete", "seq": 1, "kind": 3, "name": "x"}), InvalidFrame, "kind must be a string, got int", id="kind-int"),
        pytest.param(pack({"op": "delete", "seq": 1, "kind": "Dataset", "name": "x" * 254}), InvalidFrame,
                     "name is 254 characters long, the limit is 253", id="name-too-long"),
        pytest.param(pack({"op": "upsert", "seq": 1, "kind": "Dataset", "name": "d", "body": [1]}), InvalidFrame,
                     "upsert body must be a map, got list", id="body-list"),
        pytest.param(pack({"op": "upsert", "seq": 1, "kind": "Dataset", "name": "d"}), InvalidFrame,
                     "upsert Dataset /d has no body", id="upsert-no-body"),
        pytest.param(pack({"op": "delete", "seq": 1, "kind": "Dataset"}), InvalidFrame,
                     "delete needs a kind and a name", id="delete-no-name"),
        pytest.param(pack({"op": "status", "seq": 1, "kind": "Dataset", "name": "d", "body": {"a": {"b": [b"\x00"]}}}),
                     InvalidFrame, "body.a.b[0] holds a bytes", id="body-bytes"),
        pytest.param(pack({"op": "status", "seq": 1, "kind": "Dataset", "name": "d", "body": {"t": msgpack.ExtType(5, b"x")}}),
                     DecodeError, "extension type 5", id="body-ext"),
        pytest.param(pack({"op": "status", "seq": 0, "kind": "Dataset", "name": "d", "body": {}}), InvalidFrame,
                     "needs a seq >= 1", id="status-unsequenced"),
        pytest.param(pack({"op": "hello", "body": {"node": "n"}}), InvalidFrame,
                     "hello body.versions must be a non-empty list", id="hello-no-versions"),
        pytest.param(pack({"op": "hello", "body": {"node": "", "versions": [1]}}), InvalidFrame,
                     "hello body.node must be a non-empty string", id="hello-empty-node"),
        pytest.param(pack({"op": "hello", "body": {"node": "n", "versions": [1], "acked": -2}}), InvalidFrame,
                     "hello body.acked must be a non-negative integer", id="hello-bad-acked"),
        pytest.param(pack({"op": "hello", "body": {"node": "n", "versions": [1], "epoch": 7}}), InvalidFrame,
                     "hello body.epoch must be a string of at most 64 characters", id="hello-epoch-int"),
        pytest.param(pack({"op": "hello", "body": {"node": "n", "versions": [1], "epoch": "e" * 65}}), InvalidFrame,
                     "hello body.epoch must be a string of at most 64 characters", id="hello-epoch-long"),
        pytest.param(pack({"op": "snapshot", "body": {"phase": "middle"}}), InvalidFrame,
                     "snapshot body.phase must be 'begin' or 'end', got 'middle'", id="snapshot-phase"),
        pytest.param(pack({"op": "snapshot", "body": {"phase": "end"}}), InvalidFrame,
                     "snapshot end body.count must be a non-negative integer, got None", id="snapshot-end-no-count"),
        pytest.param(pack({"op": "ack", "seq": 0}), InvalidFrame, "ack needs the seq (>= 1)", id="ack-seq-0"),
        pytest.param(pack({"op": "ack", "seq": 2, "body": {"error": 5}}), InvalidFrame, "ack body must be absent", id="ack-bad-error"),
    ],
)
def test_native_decode_errors(data: bytes | str, error: type[ProtocolError], text: str) -> None:
    with pytest.raises(error) as info:
        decode_native(data)
    assert text in str(info.value)
    assert type(info.value) is error


def test_native_nesting_limit() -> None:
    body: dict = {}
    inner = body
    for _ in range(150):
        inner["x"] = {}
        inner = inner["x"]
    with pytest.raises(InvalidFrame, match="nested deeper than 100 levels"):
        decode_native(pack({"op": "status", "seq": 1, "kind": "Dataset", "name": "d", "body": body}))


def test_native_size_limit_applies_both_ways() -> None:
    msg = Message(Op.UPSERT, 1, "Dataset", "default", "d1", {"blob": "x" * 2000})
    with pytest.raises(FrameTooLarge, match="exceeds the limit of 1000 bytes") as info:
        encode_native(msg, max_bytes=1000)
    assert info.value.limit == 1000 and info.value.size > 2000
    data = encode_native(msg)
    with pytest.raises(FrameTooLarge):
        decode_native(data, max_bytes=len(data) - 1)
    assert decode_native(data, max_bytes=len(data)) == msg


def test_native_encode_error_names_the_object() -> None:
    msg = Message(Op.UPSERT, 1, "Dataset", "default", "d1", {"bad": {1, 2}})
    with pytest.raises(EncodeError, match="cannot encode upsert Dataset default/d1"):
        encode_native(msg)


def test_message_is_validated_on_construction() -> None:
    with pytest.raises(InvalidFrame, match="op must be an Op"):
        Message("upsert", 1, "Dataset", "ns", "n", {})  # type: ignore[arg-type]
    with pytest.raises(InvalidFrame, match="status Dataset ns/n has no body"):
        Message(Op.STATUS, 1, "Dataset", "ns", "n")
    assert Message(Op.DELETE, 1, "Dataset", "ns", "n").key == ("Dataset", "ns", "n")


@pytest.mark.parametrize(
    ("offered", "chosen"),
    [pytest.param([1], 1, id="one"), pytest.param([3, 1, 2], 1, id="several"), pytest.param((1,), 1, id="tuple")],
)
def test_negotiate_picks_highest_common(offered: list[int], chosen: int) -> None:
    assert proto.negotiate(offered) == chosen


@pytest.mark.parametrize("offered", [[2, 3], [], "1", None])
def test_negotiate_without_common_version(offered: object) -> None:
    with pytest.raises(UnsupportedVersion, match="this side speaks \\[1\\]") as info:
        proto.negotiate(offered)
    assert info.value.close_code == proto.CLOSE_UNSUPPORTED_VERSION


def test_error_hierarchy_and_close_codes() -> None:
    for cls in (DecodeError, InvalidFrame, UnknownOp, FrameTooLarge, UnsupportedVersion, EncodeError):
        assert issubclass(cls, ProtocolError)
    assert DecodeError("x").close_code == 1007
    assert InvalidFrame("x").close_code == 1002
    assert FrameTooLarge(2, 1).close_code == 1009


@pytest.mark.parametrize(
    ("given", "canonical"),
    [("dataset", "Dataset"), ("JOINTINFERENCESERVICE", "JointInferenceService"), ("lifelonglearningjob",
     "LifelongLearningJob"), ("Widget", "Widget")],
)
def test_canonical_kind(given: str, canonical: str) -> None:
    assert apis.canonical_kind(given) == canonical
    assert proto.as_sent(given) == given
