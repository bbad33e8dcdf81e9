"""Upstream JSON envelope: exact frames from the upstream specs, both directions."""

from __future__ import annotations

import base64

import orjson
import pytest

from proto import (
    BARE_HEADER,
    DecodeError,
    EncodeError,
    FrameTooLarge,
    InvalidFrame,
    Message,
    Op,
    ProtocolError,
    UnknownOp,
    ack,
    encode_upstream,
    hello,
    snapshot_begin,
)
from proto import decode_upstream as decode_as_sent
from shared import apis


def decode_upstream(data, **kwargs):
    """The codec as the services call it: kinds spelled by the registry."""
    return decode_as_sent(data, canonical_kind=apis.canonical_kind, **kwargs)

# upstream-lc.md §3.9: LC -> GM dataset sample count.
DATASET_STATUS = (
    '{"header":{"namespace":"default","resourceKind":"Dataset","resourceName":"incremental-dataset",'
    '"operation":"status"},"content":"eyJudW1iZXJPZlNhbXBsZXMiOjUwMH0="}\n'
)
# upstream-lc.md §3.2: GM -> LC dataset insert.
DATASET_INSERT = (
    '{"header":{"namespace":"default","resourceKind":"dataset","resourceName":"incremental-dataset",'
    '"operation":"insert"},"content":"eyJraW5kIjoiRGF0YXNldCIsIm1ldGFkYXRhIjp7Im5hbWUiOiJpbmNyZW1lbnRhbC1kYXRhc2V0In19"}\n'
)
# upstream-lc.md §3.9: decoded content of an IL train trigger, key order as upstream sends it.
IL_TRIGGER = (
    b'{"phase":"Train","status":"Ready","input":{"models":[{"format":"pb","url":"/models/initial/model.pb",'
    b'"classes":null}],"dataURL":"/output/data/train/1/data.txt","outputDir":"/output/train/1"},"output":null}'
)


def envelope(header: object, content: object = None) -> str:
    return orjson.dumps({"header": header, "content": content}).decode()


def b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


def test_dataset_status_from_upstream_lc() -> None:
    msg = decode_upstream(DATASET_STATUS)
    assert msg == Message(Op.STATUS, 0, "Dataset", "default", "incremental-dataset", {"numberOfSamples": 500})
    assert encode_upstream(msg) == DATASET_STATUS


def test_dataset_insert_matches_upstream_gm_byte_for_byte() -> None:
    body = {"kind": "Dataset", "metadata": {"name": "incremental-dataset"}}
    msg = Message(Op.UPSERT, 5, "Dataset", "default", "incremental-dataset", body)
    assert encode_upstream(msg) == DATASET_INSERT
    assert decode_upstream(DATASET_INSERT) == Message(Op.UPSERT, 0, "Dataset", "default", "incremental-dataset", body)
    assert decode_as_sent(DATASET_INSERT).kind == "dataset"  # without the registry: as sent


def test_il_trigger_content_keeps_key_order_and_nulls() -> None:
    body = orjson.loads(IL_TRIGGER)
    frame = encode_upstream(Message(Op.STATUS, 9, "IncrementalLearningJob", "default", "helmet", body))
    assert frame.endswith("}\n")
    envelope_ = orjson.loads(frame)
    assert list(envelope_) == ["header", "content"]
    assert envelope_["header"] == {"namespace": "default", "resourceKind": "IncrementalLearningJob",
                                   "resourceName": "helmet", "operation": "status"}
    assert list(envelope_["header"]) == ["namespace", "resourceKind", "resourceName", "operation"]
    assert base64.b64decode(envelope_["content"]) == IL_TRIGGER


def test_bare_header_first_frame_is_tolerated() -> None:
    assert decode_upstream(BARE_HEADER) is None
    assert decode_upstream(BARE_HEADER.encode()) is None
    assert encode_upstream(hello("edge-1")) == BARE_HEADER


def test_empty_operation_envelope_is_ignored() -> None:
    assert decode_upstream(envelope({"namespace": "", "resourceKind": "", "resourceName": "", "operation": ""})) is None


def test_keys_match_case_insensitively_like_go() -> None:
    frame = orjson.dumps({"Header": {"NAMESPACE": "default", "ResourceKind": "jointinferenceservice",
                                     "resourcename": "ji", "Operation": "status"},
                          "CONTENT": b64(b'{"phase":"Inference","status":"Running","output":null}')})
    msg = decode_upstream(frame)
    assert msg == Message(Op.STATUS, 0, "JointInferenceService", "default", "ji",
                          {"phase": "Inference", "status": "Running", "output": None})


@pytest.mark.parametrize(("operation", "op"), [("insert", Op.UPSERT), ("update", Op.UPSERT), ("delete", Op.DELETE)])
def test_downstream_operations_decode(operation: str, op: Op) -> None:
    frame = envelope({"namespace": "ns", "resourceKind": "model", "resourceName": "m", "operation": operation},
                     b64(b'{"kind":"Model","spec":{"url":"s3://m"}}'))
    msg = decode_upstream(frame)
    assert (msg.op, msg.kind, msg.namespace, msg.name) == (op, "Model", "ns", "m")
    assert msg.body == {"kind": "Model", "spec": {"url": "s3://m"}}


def test_delete_encodes_a_stub_object_when_there_is_no_body() -> None:
    frame = orjson.loads(encode_upstream(Message(Op.DELETE, 1, "FederatedLearningJob", "ns", "fl")))
    assert frame["header"] == {"namespace": "ns", "resourceKind": "federatedlearningjob",
                               "resourceName": "fl", "operation": "delete"}
    assert orjson.loads(base64.b64decode(frame["content"])) == {
        "kind": "FederatedLearningJob", "metadata": {"name": "fl", "namespace": "ns"}}


def test_delete_without_content_decodes() -> None:
    frame = envelope({"namespace": "ns", "resourceKind": "dataset", "resourceName": "d", "operation": "delete"})
    assert decode_upstream(frame) == Message(Op.DELETE, 0, "Dataset", "ns", "d")


def test_upsert_content_gets_the_kind_without_touching_the_caller_object() -> None:
    obj = {"metadata": {"name": "d", "namespace": "ns"}, "spec": {}}
    frame = orjson.loads(encode_upstream(Message(Op.UPSERT, 1, "Dataset", "ns", "d", obj)))
    assert orjson.loads(base64.b64decode(frame["content"])) == {"kind": "Dataset", **obj}
    assert "kind" not in obj


@pytest.mark.parametrize("msg", [snapshot_begin(1), ack(3)])
def test_ops_without_upstream_form(msg: Message) -> None:
    with pytest.raises(EncodeError, match="has no upstream form"):
        encode_upstream(msg)


HDR = {"namespace": "ns", "resourceKind": "dataset", "resourceName": "d", "operation": "status"}


@pytest.mark.parametrize(
    ("frame", "error", "text"),
    [
        pytest.param("{not json", DecodeError, "frame is not JSON", id="not-json"),
        pytest.param("[1,2]", DecodeError, "must be a JSON object, got list", id="array"),
        pytest.param(envelope(HDR, "!!!notbase64"), DecodeError, "content is not valid base64", id="bad-base64"),
        pytest.param(envelope(HDR, b64(b"{oops")), DecodeError, "content is not JSON", id="content-not-json"),
        pytest.param(envelope(HDR, 42), DecodeError, "content must be a base64 string, got int", id="content-int"),
        pytest.param(envelope(HDR, {"numberOfSamples": 1}), DecodeError, "content must be a base64 string, got dict",
                     id="content-embedded-object"),
        pytest.param(envelope("status"), InvalidFrame, "header must be an object, got str", id="header-str"),
        pytest.param(envelope({**HDR, "namespace": 3}), InvalidFrame, "header.namespace must be a string, got int",
                     id="namespace-int"),
        pytest.param(envelope({**HDR, "operation": "patch"}), UnknownOp, "unknown operation 'patch'", id="unknown-op"),
        pytest.param(envelope({**HDR, "operation": "Status"}), UnknownOp, "unknown operation 'Status'", id="op-case"),
        pytest.param(envelope(HDR), InvalidFrame, "status content must be a JSON object, got nothing", id="status-empty"),
        pytest.param(envelope(HDR, b64(b"[1]")), InvalidFrame, "status content must be a JSON object, got list",
                     id="status-list"),
        pytest.param(envelope({**HDR, "resourceName": ""}, b64(b"{}")), InvalidFrame, "status needs a kind and a name",
                     id="no-name"),
        pytest.param('{"content":"e30="}', InvalidFrame, "content but no header", id="content-no-header"),
        pytest.param('{"namespace":1}', InvalidFrame, "header.namespace must be a string", id="bare-header-bad"),
    ],
)
def test_upstream_decode_errors(frame: str, error: type[ProtocolError], text: str) -> None:
    with pytest.raises(error) as info:
        decode_upstream(frame)
    assert text in str(info.value)
    assert type(info.value) is error


def test_upstream_size_limit() -> None:
    with pytest.raises(FrameTooLarge):
        decode_upstream(DATASET_STATUS, max_bytes=50)
    with pytest.raises(FrameTooLarge):
        encode_upstream(Message(Op.UPSERT, 1, "Dataset", "ns", "d", {"x": "y" * 100}), max_bytes=100)


def test_upstream_encode_error_names_the_object() -> None:
    with pytest.raises(EncodeError, match="cannot encode upsert Dataset ns/d"):
        encode_upstream(Message(Op.UPSERT, 1, "Dataset", "ns", "d", {"x": {1, 2}}))
