"""What a frame may cost: the report limit, entries per map or list, maps and lists per body,
and a body check that stays linear (paths are spelled only for the error raised).

Each rule is exercised through the decoders the GM runs and through check_json_like, which
the LC runs before it accepts a report, so both sides refuse the same frames."""

from __future__ import annotations

import base64
import struct
import tracemalloc
from typing import Any

import msgpack
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proto import (
    MAX_REPORT_BYTES,
    MAX_REPORT_ENVELOPE_BYTES,
    FrameTooLarge,
    InvalidFrame,
    Message,
    Op,
    decode_native,
    decode_upstream,
    encode_native,
    encode_upstream,
)
from proto.limits import MAX_CONTAINERS, MAX_DEPTH, MAX_ITEMS, check_json_like


def status_frame(body_bytes: bytes) -> bytes:
    """A native status frame around a body packed by hand (so it can lie about lengths)."""
    head = msgpack.packb({"op": "status", "seq": 1, "kind": "Dataset", "name": "d"})
    return b"\x85" + head[1:] + msgpack.packb("body") + body_bytes  # the same map, one key more


def envelope(content: bytes) -> str:
    header = {"namespace": "default", "resourceKind": "Dataset", "resourceName": "d", "operation": "status"}
    return orjson.dumps({"header": header, "content": base64.b64encode(content).decode()}).decode() + "\n"


def chunked(item: Any, total: int, chunk: int = 50_000) -> dict[str, Any]:
    """{"x": [[item] * chunk, ...]}: `total` items in lists under MAX_ITEMS."""
    return {"x": [[item] * min(chunk, total - i) for i in range(0, total, chunk)]}


def refusal(body: Any) -> str:
    with pytest.raises(InvalidFrame) as info:
        check_json_like(body, "body")
    return str(info.value)


# --- check_json_like ------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "message"), [
    pytest.param({"x": [0] * (MAX_ITEMS + 1)}, f"body.x holds {MAX_ITEMS + 1} items, the limit is {MAX_ITEMS}",
                 id="long-list"),
    pytest.param({"m": {str(i): 0 for i in range(MAX_ITEMS + 1)}},
                 f"body.m holds {MAX_ITEMS + 1} items, the limit is {MAX_ITEMS}", id="big-map"),
    pytest.param(chunked({}, MAX_CONTAINERS), f"body holds more than {MAX_CONTAINERS} maps and lists",
                 id="many-small-maps"),
    pytest.param({"a": {"b": [1, "x", {"c": b"\x00"}]}}, "body.a.b[2].c holds a bytes, which JSON cannot carry",
                 id="bytes"),
    pytest.param({"a": [(1, 2)]}, "body.a[0] holds a tuple, which JSON cannot carry", id="tuple"),
    pytest.param({"a": {1: "x"}}, "body.a has a non-string key 1", id="int-key"),
    pytest.param({"a": {"ok": 1, "b\ud800": 2}}, "a key of body.a holds '\\ud800', a lone surrogate", id="surrogate-key"),
    pytest.param({"x": ["a"] * 777 + ["\udfff"] + ["b"] * 50}, "body.x[777] holds '\\udfff', a lone surrogate",
                 id="surrogate-in-long-list"),
    pytest.param({"x": [1, "é", None, 2.5, "a\ud800"]}, "body.x[4] holds '\\ud800', a lone surrogate",
                 id="surrogate-in-mixed-list"),
    pytest.param({"m": {"a": "é", "b": "\udbff"}}, "body.m.b holds '\\udbff', a lone surrogate", id="surrogate-value"),
])
def test_each_rule_names_what_broke_it(body: Any, message: str) -> None:
    assert message in refusal(body)


def test_what_json_can_carry_passes_subclasses_included() -> None:
    import enum

    class Color(enum.StrEnum):
        RED = "red"

    class Level(enum.IntEnum):
        HIGH = 3

    check_json_like({"a": [Color.RED, Level.HIGH, True, None, 1.5, -2**70, "\U0001f600 é"],
                     Color.RED: {"n": Level.HIGH}}, "body")
    check_json_like({"x": [0] * MAX_ITEMS}, "body")
    check_json_like(chunked({}, MAX_CONTAINERS - 4), "body")  # the body, "x" and its two lists count too


def test_deep_nesting_is_refused_without_recursion() -> None:
    body: Any = []
    for _ in range(50_000):  # far past Python's recursion limit
        body = [body]
    message = refusal({"x": body})
    assert f"nested deeper than {MAX_DEPTH} levels" in message and len(message) < 200


def test_long_keys_cost_their_size_not_size_times_depth() -> None:
    """100 nested maps with 80 KB keys: the old check built a path string per level (400 MB
    for an 8 MB body); now no path is spelled unless an error names it."""
    body: Any = {}
    for i in range(100):
        body = {chr(65 + i % 26) * 80_000: body}
    tracemalloc.start()
    try:
        check_json_like(body, "body")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000
    inner = body
    for _ in range(99):
        inner = next(iter(inner.values()))
    inner[next(iter(inner))] = b""  # level 100, the deepest a value may sit
    message = refusal(body)
    assert message.startswith("body.VVVV") and message.endswith("AAAA holds a bytes, which JSON cannot carry")
    assert len(message) < 200


def _recursive_reference(value: Any, depth: int = 0) -> bool:
    """The check as it was written before it had to be linear: recursive, a path per level."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, str):
        return _text_ok(value)
    if value is None or isinstance(value, bool | int | float):
        return True
    if isinstance(value, list):
        return all(_recursive_reference(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _text_ok(k) and _recursive_reference(v, depth + 1)
                   for k, v in value.items())
    return False


def _text_ok(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_odd_leaves = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3)
               | st.sampled_from(["\ud800", "é\udfff", b"", (1,), 1j]))
_odd_bodies = st.recursive(_odd_leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=3) | st.sampled_from(["\udc00", 1]), inner, max_size=4), max_leaves=30)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(body=_odd_bodies, depth=st.integers(0, 105))
def test_the_linear_check_refuses_what_the_recursive_one_refused(body: Any, depth: int) -> None:
    for _ in range(depth):
        body = [body]
    try:
        check_json_like(body, "body")
        ok = True
    except InvalidFrame:
        ok = False
    assert ok == _recursive_reference(body)


# --- native: what the GM decodes --------------------------------------------------------------


def test_a_large_valid_report_decodes_under_the_report_limit() -> None:
    body = {"metrics": [{"name": f"m{i}", "value": i * 0.5, "labels": {"node": "edge-1", "ok": True}}
                        for i in range(30_000)], "message": "é" * 1000}
    msg = Message(Op.STATUS, 7, "Model", "default", "m1", body)
    frame = encode_native(msg, max_bytes=MAX_REPORT_BYTES)
    assert len(frame) > MAX_REPORT_BYTES // 2
    assert decode_native(frame, max_bytes=MAX_REPORT_BYTES) == msg


def test_a_report_over_the_report_limit_is_refused_before_it_is_unpacked() -> None:
    frame = encode_native(Message(Op.STATUS, 1, "Model", "default", "m1", {"blob": "x" * MAX_REPORT_BYTES}))
    with pytest.raises(FrameTooLarge, match=f"exceeds the limit of {MAX_REPORT_BYTES} bytes"):
        decode_native(frame, max_bytes=MAX_REPORT_BYTES)
    assert decode_native(frame).body == {"blob": "x" * MAX_REPORT_BYTES}  # an object may be that big


@pytest.mark.parametrize(("header", "message"), [
    pytest.param(b"\xdd" + struct.pack(">I", 2**32 - 1), f"a list holds {2**32 - 1} items", id="list-header"),
    pytest.param(b"\xdf" + struct.pack(">I", MAX_ITEMS + 1), f"a map holds {MAX_ITEMS + 1} items", id="map-header"),
])
def test_a_header_claiming_too_many_items_is_refused_before_any_is_built(header: bytes, message: str) -> None:
    frame = status_frame(b"\x81\xa1x" + header * 1000)
    with pytest.raises(InvalidFrame, match=f"{message}, the limit is {MAX_ITEMS}"):
        decode_native(frame)


def test_many_small_maps_stop_the_unpacking_early() -> None:
    chunk = b"\xdd" + struct.pack(">I", 50_000) + b"\x80" * 50_000
    frame = status_frame(b"\x81\xa1x\xdd" + struct.pack(">I", 40) + chunk * 40)  # 2M empty maps
    tracemalloc.start()
    try:
        with pytest.raises(InvalidFrame, match=f"the frame holds more than {MAX_CONTAINERS} maps and lists"):
            decode_native(frame, max_bytes=MAX_REPORT_BYTES)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20_000_000  # ~72 bytes for each of 100,000 maps, not for 2 million


@pytest.mark.parametrize("containers", [MAX_CONTAINERS, MAX_CONTAINERS + 1])
def test_the_gm_and_the_lc_count_maps_and_lists_alike(containers: int) -> None:
    body = chunked({}, containers - 4)  # the body, "x" and its two lists count too
    frame = encode_native(Message(Op.STATUS, 1, "Model", "default", "m", body))
    if containers <= MAX_CONTAINERS:
        check_json_like(body, "body")
        assert decode_native(frame).body == body
        return
    refusal(body)
    with pytest.raises(InvalidFrame, match="maps and lists"):
        decode_native(frame)


# --- upstream: the JSON envelope ---------------------------------------------------------------


def test_the_envelope_limit_fits_a_report_of_the_report_limit() -> None:
    name, ns = "n" * 253, "s" * 63
    pad = MAX_REPORT_BYTES - len(orjson.dumps({"blob": ""}))
    msg = Message(Op.STATUS, 0, "K" * 63, ns, name, {"blob": "x" * pad})
    assert len(orjson.dumps(msg.body)) == MAX_REPORT_BYTES
    frame = encode_upstream(msg, max_bytes=MAX_REPORT_ENVELOPE_BYTES)
    assert decode_upstream(frame, max_bytes=MAX_REPORT_ENVELOPE_BYTES) == msg
    over = encode_upstream(Message(Op.STATUS, 0, "K", ns, name, {"blob": "x" * (pad + 4096)}))
    with pytest.raises(FrameTooLarge, match=f"exceeds the limit of {MAX_REPORT_ENVELOPE_BYTES} bytes"):
        decode_upstream(over, max_bytes=MAX_REPORT_ENVELOPE_BYTES)


def test_a_text_frame_is_measured_in_utf8_bytes() -> None:
    frame = envelope(orjson.dumps({"m": "é" * 100}))
    frame = frame.replace('"operation":"status"', '"operation":"status","note":"' + "é" * 300 + '"')
    assert len(frame) < 1000 < len(frame.encode())
    with pytest.raises(FrameTooLarge, match=f"frame of {len(frame.encode())} bytes exceeds the limit of 1000"):
        decode_upstream(frame, max_bytes=1000)
    assert decode_upstream(frame, max_bytes=len(frame.encode())).body == {"m": "é" * 100}


@pytest.mark.parametrize(("frame", "message"), [
    pytest.param(envelope(b"[" + b",".join([b"{}"] * (MAX_CONTAINERS + 1)) + b"]"),
                 f"content opens {MAX_CONTAINERS + 2} maps and lists, the limit is {MAX_CONTAINERS}", id="content"),
    pytest.param(envelope(b"{}").replace("}\n", ',"x":[' + ",".join(["[]"] * MAX_CONTAINERS) + "]}\n"),
                 f"the frame opens {MAX_CONTAINERS + 3} maps and lists", id="envelope"),
])
def test_upstream_maps_and_lists_are_counted_before_parsing(frame: str, message: str) -> None:
    with pytest.raises(InvalidFrame, match=message):
        decode_upstream(frame, max_bytes=MAX_REPORT_ENVELOPE_BYTES)
