"""proto/limits.py is the one definition of what a frame may hold: the GM's decoders refuse
exactly what these checks refuse, so the LC, which runs the same checks at its door,
never accepts a report the GM will not decode."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proto import InvalidFrame, Message, Op, decode_native, encode_native
from proto.limits import MAX_DEPTH, check_json_like, check_name, check_object_names


def nested(depth: int) -> Any:
    """A body whose innermost list sits `depth` levels below the body (level 0)."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return {"x": value}


def _gm_decodes(body: dict[str, Any], *, name: str = "n", namespace: str = "default") -> bool:
    frame = encode_native(Message(Op.STATUS, 1, "Model", namespace, name, body))
    try:
        decode_native(frame)
    except InvalidFrame:
        return False
    return True


def _lc_accepts(body: dict[str, Any], *, name: str = "n", namespace: str = "default") -> bool:
    try:
        check_object_names("Model", namespace, name)
        check_json_like(body, "body")
    except InvalidFrame:
        return False
    return True


@pytest.mark.parametrize(("depth", "ok"), [(MAX_DEPTH, True), (MAX_DEPTH + 1, False), (251, False)])
def test_depth_boundary_is_the_same_on_both_sides(depth: int, ok: bool) -> None:
    body = nested(depth)
    assert _lc_accepts(body) is ok
    assert _gm_decodes(body) is ok


@pytest.mark.parametrize(("field", "limit"), [("namespace", 63), ("name", 253)])
def test_name_limits(field: str, limit: int) -> None:
    check_name(field, "a" * limit, limit)
    with pytest.raises(InvalidFrame, match=f"{field} is {limit + 1} characters long, the limit is {limit}"):
        check_name(field, "a" * (limit + 1), limit)
    with pytest.raises(InvalidFrame):
        Message(Op.STATUS, 1, "Model", **{"namespace": "ns", "name": "n", field: "a" * (limit + 1)})


@pytest.mark.parametrize("text", ["\ud800", "a\udfffb", "\udbff\udbff"])
def test_lone_surrogates_are_refused_in_values_keys_and_names(text: str) -> None:
    with pytest.raises(InvalidFrame, match="lone surrogate"):
        check_json_like({"v": text}, "body")
    with pytest.raises(InvalidFrame, match="lone surrogate"):
        check_json_like({text: 1}, "body")
    with pytest.raises(InvalidFrame, match="lone surrogate"):
        check_name("ownerName", text, 253)
    check_json_like({"v": "\U0001f600 \u00e9"}, "body")  # real non-ASCII text is fine


def test_deep_paths_are_shortened_in_messages() -> None:
    with pytest.raises(InvalidFrame) as info:
        check_json_like(nested(500), "body")
    assert len(str(info.value)) < 200 and "nested deeper than 100 levels" in str(info.value)


_leaves = st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats(
    allow_nan=False) | st.text(max_size=8)
_bodies = st.dictionaries(st.text(max_size=5), st.recursive(
    _leaves, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(
        st.text(max_size=4), inner, max_size=2), max_leaves=8), max_size=3)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(body=_bodies, depth=st.integers(0, 130),
       namespace=st.sampled_from(["default", "n" * 63, "n" * 64]),
       name=st.sampled_from(["n", "m" * 253, "m" * 254]))
def test_the_lc_check_and_the_gm_decoder_agree(body: dict[str, Any], depth: int, namespace: str,
                                               name: str) -> None:
    if depth:
        body = {**body, "deep": nested(depth)}
    lc_ok = _lc_accepts(body, name=name, namespace=namespace)
    try:
        gm_ok = _gm_decodes(body, name=name, namespace=namespace)
    except InvalidFrame:  # Message() refused the names while the frame was being built
        gm_ok = False
    assert lc_ok == gm_ok
