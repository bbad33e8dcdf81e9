"""Property test of the worker API, with an oracle: whatever a client sends, the LC either
refuses it with a 4xx and a JSON `{"Status", "Message"}` body, or answers 200 with a
report the GM can take: every outbox entry it produced encodes, and the GM-side decoders
(native and upstream) accept the frame. Nothing gets a 5xx.

The LC is a real one on a loopback port, run on its own event loop in a thread so that
Hypothesis drives it with plain blocking HTTP requests (http.client), one per example.
"""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lc.app import LocalController
from lc.config import load
from lc.managers.forward import status_body
from lc.report import WorkerReport
from proto import Message, Op, decode_native, decode_upstream, encode_native, encode_upstream

JOB = {"kind": "JointInferenceService", "metadata": {"name": "ji", "namespace": "default",
                                                      "uid": "u1"}, "spec": {}}


@dataclass
class Served:
    lc: LocalController
    loop: asyncio.AbstractEventLoop

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=10)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    (tmp / "rootfs").mkdir()
    config = load({"ROOTFS_MOUNT_DIR": str(tmp / "rootfs"), "LC_DB_PATH": str(tmp / "lc.db"),
                   "BIND_PORT": "0", "BIND_ADDRESS": "127.0.0.1", "LC_DB_SYNCHRONOUS": "NORMAL"})
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fuzz-lc", daemon=True)
    thread.start()
    server = Served(LocalController(config), loop)
    server.call(server.lc.start())
    server.call(server.lc.apply_upsert("JointInferenceService", "default", "ji", JOB))
    try:
        yield server
    finally:
        server.call(server.lc.stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


# ---- what a client may send ----------------------------------------------------------------

_scalars = (st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=12)


@st.composite
def _deep_object(draw: st.DrawFn) -> str:
    """An object nested 1..1500 levels (through maps or lists), as JSON text."""
    depth = draw(st.integers(1, 1500))
    if draw(st.booleans()):
        return '{"a":' * depth + "1" + "}" * depth
    return '{"a":' + "[" * depth + "]" * depth + "}"


# JSON text per field, biased to the right type so most reports get past the basic checks
# and reach the limits; every list holds values a real client could send.
_STRING_TEXT = st.one_of(
    st.text(max_size=30).map(json.dumps),
    st.sampled_from(['"\\ud800"', '"a\\udfffb"', '"\\ud83d\\ude00"', json.dumps("x" * 64),
                     json.dumps("y" * 254), json.dumps("z" * 253), '""', "null", "12", "[]"]))
_OBJECT_TEXT = st.one_of(
    st.dictionaries(st.text(max_size=6), _values, max_size=4).map(json.dumps), _deep_object(),
    st.sampled_from(['{"k": "\\ud800"}', '{"\\udfff": 1}', '{"n": 1e400}', '{"n": NaN}',
                     '{"n": 123456789012345678901234567890}', "null", "[]", '"s"']))
_RESULTS_TEXT = st.one_of(
    st.lists(st.dictionaries(st.text(max_size=6), _values, max_size=3), max_size=3).map(json.dumps),
    _deep_object().map(lambda obj: f"[{obj}]"),
    st.sampled_from(["null", "[]", "[null]", "[1]", "{}", '[{"\\ud800": 0}]']))
_FIELD_TEXT = {"namespace": _STRING_TEXT, "ownerName": _STRING_TEXT, "ownerKind": _STRING_TEXT,
               "kind": _STRING_TEXT, "status": _STRING_TEXT, "ownerInfo": _OBJECT_TEXT,
               "results": _RESULTS_TEXT, "NAME": _STRING_TEXT, "extra": _OBJECT_TEXT}
_OWNED = {"namespace": '"default"', "ownerName": '"ji"', "ownerKind": '"jointinferenceservice"'}


@st.composite
def _report_text(draw: st.DrawFn) -> tuple[str, str]:
    """(path name, body text): a mostly well-formed report with fuzzed fields."""
    # Hypothesis favours small draws: 0 is the ordinary case, rare cases are the high ones.
    fields: dict[str, str] = dict(_OWNED) if draw(st.integers(0, 4)) < 4 else {}
    for key in draw(st.lists(st.sampled_from(sorted(_FIELD_TEXT)), max_size=4)):
        fields[key] = draw(_FIELD_TEXT[key])
    worker = draw(st.sampled_from(["w1", "w2", "x" * 254, "w\u00e9"]))
    if draw(st.integers(0, 9)) < 9:
        fields = {"name": json.dumps(worker), **fields}
    body = "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in fields.items()) + "}"
    mangle = draw(st.integers(0, 19))
    if mangle == 19:
        body = body[:draw(st.integers(0, len(body)))]
    elif mangle == 18:
        body = body + draw(st.sampled_from([" trailing", "]", "\x00"]))
    return worker, body


_ENCODINGS = st.sampled_from(["identity", None, "gzip", "deflate", "corrupt-gzip", "br",
                              "compress", "gzip, identity"])


def _encode(body: bytes, encoding: str | None) -> tuple[bytes, dict[str, str]]:
    if encoding is None:
        return body, {}
    if encoding == "gzip":
        return gzip.compress(body), {"Content-Encoding": "gzip"}
    if encoding == "deflate":
        return zlib.compress(body), {"Content-Encoding": "deflate"}
    if encoding == "corrupt-gzip":
        return b"\x1f\x8b\x08\x00" + body, {"Content-Encoding": "gzip"}
    return body, {"Content-Encoding": encoding}


def _post(port: int, worker: str, body: bytes, headers: dict[str, str]) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", f"/sedna/workers/{quote(worker, safe='')}/info", body=body,
                     headers={"Content-Type": "application/json", **headers})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type", ""), resp.read()
    finally:
        conn.close()


# ---- the oracle ----------------------------------------------------------------------------

def _gm_accepts(msg: Message) -> None:
    """What the GM does with a status frame before it applies it: decode it, both ways."""
    assert decode_native(encode_native(msg)) == msg
    decoded = decode_upstream(encode_upstream(msg))
    assert decoded is not None and decoded.body == msg.body


def _check_relayable(served: Served, after: int) -> None:
    entries = served.call(served.lc.store.pending(after, 100))
    for e in entries:
        _gm_accepts(Message(Op.STATUS, e.seq, e.kind, e.namespace, e.name, e.body))
    for record in served.call(served.lc.store.workers()):
        if record.routed_kind is None:  # kept until its job is known: it must relay then too
            r = record.report
            report = WorkerReport(name=r["name"], namespace=r["namespace"],
                                  owner_name=r["ownerName"], owner_kind=r["ownerKind"],
                                  kind=r["kind"], status=r["status"],
                                  owner_info=r["ownerInfo"], results=r["results"])
            body = status_body(report, include_models=True)
            _gm_accepts(Message(Op.STATUS, 1, "JointInferenceService", report.namespace,
                                report.owner_name, body))


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(report=_report_text(), encoding=_ENCODINGS)
def test_every_body_is_refused_with_json_4xx_or_accepted_and_relayable(
        served: Served, report: tuple[str, str], encoding: str | None) -> None:
    worker, text = report
    raw = text.encode("utf-8", "surrogatepass")
    body, headers = _encode(raw, encoding)
    after = served.lc.store.last_seq
    status, ctype, reply = _post(served.lc.port, worker, body, headers)
    assert status < 500, (status, reply)
    assert ctype.startswith("application/json")
    doc = json.loads(reply)
    assert doc["Status"] == status and isinstance(doc["Message"], str)
    if status == 200:
        assert doc["Message"] == "OK"
        _check_relayable(served, after)
    else:
        assert 400 <= status < 500
