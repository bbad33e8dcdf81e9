"""Object versions encoded once and shared (gm/edge/encoded.py) and the codec's seam for it."""

from __future__ import annotations

from typing import Any

import pytest

from gm.edge.encoded import EncodedVersions
from proto import (
    EncodeError,
    FrameTooLarge,
    Message,
    Op,
    decode_native,
    encode_native,
    encode_upstream,
    pack_body,
)

KEY = ("Model", "default", "m1")


def model(version: int, *, size: int = 10) -> dict[str, Any]:
    return {"kind": "Model", "metadata": {"name": "m1", "namespace": "default", "resourceVersion": f"{version:04d}"},
            "spec": {"url": "s3://models/" + "x" * size, "format": "pb"}}


@pytest.mark.parametrize("body", [
    pytest.param({}, id="empty"),
    pytest.param(model(1), id="object"),
    pytest.param(model(1, size=70_000), id="large"),
    pytest.param({"n": 2**63 - 1, "f": 0.5, "u": "\u00e9", "l": [None, True, {"a": []}]}, id="values"),
])
@pytest.mark.parametrize("seq", [0, 7, 2**40])
def test_a_frame_with_a_packed_body_is_the_same_bytes(body: dict[str, Any], seq: int) -> None:
    msg = Message(Op.UPSERT, seq, "Model", "default", "m1", body)
    frame = encode_native(msg, packed_body=pack_body(body))
    assert frame == encode_native(msg)
    assert decode_native(frame) == msg


def test_a_frame_with_a_packed_body_is_held_to_the_frame_limit() -> None:
    body = model(1, size=5000)
    with pytest.raises(FrameTooLarge):
        encode_native(Message(Op.UPSERT, 1, "Model", "default", "m1", body), max_bytes=4096,
                      packed_body=pack_body(body))


def test_a_body_that_cannot_be_encoded_names_its_object() -> None:
    with pytest.raises(EncodeError, match="cannot encode Model default/m1"):
        EncodedVersions().native_body(KEY, {"spec": {1, 2}})


def test_a_version_is_encoded_once_for_every_use() -> None:
    encoded, obj = EncodedVersions(), model(1)
    first = encoded.native_body(KEY, obj)
    assert encoded.native_body(KEY, obj) is first
    msg = Message(Op.UPSERT, 0, *KEY, obj)
    frame = encoded.upstream_frame(KEY, msg)
    assert frame == encode_upstream(msg) and encoded.upstream_frame(KEY, msg) is frame
    assert (encoded.stats.built, encoded.stats.shared) == (2, 2)
    assert encoded.bytes == len(first) + len(frame) and len(encoded) == 1


def test_a_new_version_is_encoded_again_and_replaces_the_old_one() -> None:
    encoded, old, new = EncodedVersions(), model(1), model(2)
    encoded.native_body(KEY, old)
    assert pack_body(new) == encoded.native_body(KEY, new)
    encoded.native_body(KEY, new)
    assert (encoded.stats.built, encoded.stats.shared, len(encoded)) == (2, 1, 1)
    assert encoded.bytes == len(pack_body(new))


def test_an_equal_but_other_mapping_is_another_version() -> None:
    """Identity is the version: a source that built a new mapping has a new version."""
    encoded = EncodedVersions()
    encoded.native_body(KEY, model(1))
    encoded.native_body(KEY, model(1))
    assert encoded.stats.built == 2


def test_forget_drops_all_but_the_version_named() -> None:
    encoded, obj = EncodedVersions(), model(1)
    encoded.native_body(KEY, obj)
    encoded.forget(KEY, unless=obj)
    assert len(encoded) == 1
    encoded.forget(KEY)
    assert len(encoded) == 0 and encoded.bytes == 0


def test_the_store_stays_within_its_bytes_least_recently_used_out() -> None:
    size = len(pack_body(model(1)))
    encoded = EncodedVersions(max_bytes=16 * size)  # room for 16, each at most 1/16 of it
    objs = {f"m{i}": model(i) for i in range(17)}
    keys = {name: ("Model", "default", name) for name in objs}
    for i in range(16):
        encoded.native_body(keys[f"m{i}"], objs[f"m{i}"])
    encoded.native_body(keys["m0"], objs["m0"])  # m0 used again: m1 is now the least recent
    encoded.native_body(keys["m16"], objs["m16"])
    assert (len(encoded), encoded.bytes, encoded.stats.evicted) == (16, 16 * size, 1)
    built = encoded.stats.built
    encoded.native_body(keys["m0"], objs["m0"])
    assert encoded.stats.built == built  # kept
    encoded.native_body(keys["m1"], objs["m1"])
    assert encoded.stats.built == built + 1  # it went


def test_a_version_too_large_to_keep_is_encoded_each_time() -> None:
    encoded, obj = EncodedVersions(max_bytes=16 * 1024), model(1, size=2000)
    assert encoded.native_body(KEY, obj) == encoded.native_body(KEY, obj)
    assert (encoded.stats.built, len(encoded), encoded.bytes) == (2, 0, 0)


def test_a_zero_bound_keeps_nothing() -> None:
    encoded, obj = EncodedVersions(max_bytes=0), model(1)
    encoded.native_body(KEY, obj)
    encoded.native_body(KEY, obj)
    assert (encoded.stats.built, len(encoded)) == (2, 0)
