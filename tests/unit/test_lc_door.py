"""What the LC refuses at the door, and how: bad input is a JSON 4xx, never a 5xx.

Against a real LocalController on a loopback port: reports the GM would refuse later
(proto/limits.py), bodies that do not decode, methods and encodings the server does not
speak, connections that idle or trickle, one client holding too many connections. Also
the places where what cannot be relayed ends up (dead letters), the lifetime and the byte
bounds of the worker records, refusals that stop reading, and clients that go away.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import socket
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from shared.metrics import sample
from tests.conftest import eventually
from tests.scrape import labelled, value
from tests.unit.test_lc_support import running_lc, session

REPORT = {"name": "w1", "namespace": "default", "ownerName": "ji",
          "ownerKind": "jointinferenceservice", "kind": "inference", "status": "running",
          "ownerInfo": {"inferenceNumber": 1}}


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _json_text(depth: int) -> str:
    return "[" * depth + "]" * depth


async def _post(base: str, data: bytes | str, headers: dict[str, str] | None = None,
                worker: str = "w1") -> tuple[int, dict[str, Any], Any]:
    async with session() as http, http.post(
            f"{base}/sedna/workers/{worker}/info", data=data,
            headers={"Content-Type": "application/json", **(headers or {})}) as resp:
        return resp.status, json.loads(await resp.read()), resp.headers


async def _raw(port: int, data: bytes, *, within: float = 5.0) -> bytes:
    """Send raw bytes, return everything the server sends until it closes (or `within`)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(within):
            return await reader.read()
    finally:
        writer.close()


def _report(**fields: Any) -> str:
    return json.dumps({**REPORT, **fields})


# ---- what the GM would refuse is refused here --------------------------------------------

@pytest.mark.parametrize(("body", "message"), [
    pytest.param(_report(ownerInfo={"x": nested(99)}), "is nested deeper than 100 levels",
                 id="depth-99"),
    pytest.param(_report(ownerInfo={"x": nested(251)}), "is nested deeper than 100 levels",
                 id="depth-251"),
    pytest.param(_report(results=[{"m": nested(120)}]), "is nested deeper than 100 levels",
                 id="results-depth"),
    pytest.param(_report(namespace="n" * 64), "namespace is 64 characters long, the limit is 63",
                 id="namespace-64"),
    pytest.param(_report(ownerName="o" * 254), "ownerName is 254 characters long, the limit is 253",
                 id="owner-name-254"),
    pytest.param(_report(ownerKind="k" * 64), "ownerKind is 64 characters long, the limit is 63",
                 id="owner-kind-64"),
    pytest.param('{"name": "w1", "namespace": "default", "ownerName": "ji", "status": "\\ud800"}',
                 "status holds '\\ud800', a lone surrogate", id="lone-surrogate-status"),
    pytest.param('{"name": "w1", "namespace": "default", "ownerName": "j\\ud800"}',
                 "ownerName holds '\\ud800', a lone surrogate", id="lone-surrogate-owner-no-kind"),
    pytest.param(_report()[:-1] + ', "ownerInfo": {"\\udfff": 1}}',
                 "a key of report.output.ownerInfo holds '\\udfff'", id="lone-surrogate-key"),
])
async def test_reports_the_gm_would_refuse_are_400(tmp_path: Path, body: str, message: str) -> None:
    async with running_lc(tmp_path) as (lc, base):
        status, reply, _ = await _post(base, body)
        assert (status, reply["Status"]) == (400, 400)
        assert "cannot be relayed to the GM" in reply["Message"] and message in reply["Message"]
        assert await lc.store.pending() == [] and await lc.store.workers() == []
        assert sample(lc.metrics.registry, "sedna_lc_reports_rejected_total", reason="limits") == 1


@pytest.mark.parametrize("depth", [255, 1024, 1025, 5000])
async def test_deep_json_is_a_400_at_any_depth(tmp_path: Path, depth: int) -> None:
    async with running_lc(tmp_path) as (_, base):
        body = _report()[:-1] + f', "ownerInfo": {{"x": {_json_text(depth)}}}}}'
        status, reply, headers = await _post(base, body)
        assert (status, reply["Status"]) == (400, 400), reply
        assert "Retry-After" not in headers


async def test_report_at_the_limits_is_accepted(tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, base):
        # body.output.ownerInfo is level 2, so ownerInfo may hold 98 more levels
        body = _report(namespace="n" * 63, ownerName="o" * 253, ownerInfo={"x": nested(97)},
                       status="ok \u00e9\U0001f600")
        status, reply, _ = await _post(base, body)
        assert (status, reply) == (200, {"Status": 200, "Message": "OK"})
        assert await lc.store.workers()


@pytest.mark.parametrize(("owner_info", "status"), [
    # 300 000 quotes: a 0.6 MB body, 1.2 MB once the GM quotes the content in the status
    pytest.param({"note": '"' * 300_000}, 413, id="quotes-double-when-quoted"),
    pytest.param({f"k{i}": {"v": '"' * 100} for i in range(3000)}, 413, id="many-values"),
    pytest.param({"note": "x" * 900_000}, 200, id="plain-text-under-the-bound"),
])
async def test_report_whose_status_would_exceed_the_object_size_is_413(
        tmp_path: Path, owner_info: dict[str, Any], status: int) -> None:
    async with running_lc(tmp_path) as (lc, base):
        body = _report(ownerInfo=owner_info)
        assert len(body) < 1 << 20  # under the body limit: the status size decides
        code, reply, _ = await _post(base, body)
        assert (code, reply["Status"]) == (status, status), reply["Message"][:200]
        if status == 413:
            assert reply["Message"].startswith("report of worker(name=w1) would put ")
            assert "bytes of JSON into the status" in reply["Message"]
            assert await lc.store.pending() == [] and await lc.store.workers() == []
            assert lc.store.outbox_size == 0
            assert sample(lc.metrics.registry, "sedna_lc_reports_rejected_total", reason="status_too_large") == 1
        else:
            assert [e.name for e in await lc.store.pending()] == ["ji"]


# ---- bodies and requests the server cannot read -------------------------------------------

async def test_corrupt_gzip_body_is_400(tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, base):
        status, reply, headers = await _post(base, b"\x1f\x8b\x08\x00garbage-not-deflate",
                                             {"Content-Encoding": "gzip"})
        assert (status, reply["Status"]) == (400, 400)
        assert reply["Message"].startswith("body cannot be decoded: Can not decode content-encoding")
        assert headers["Connection"] == "close"
        status, _, _ = await _post(base, gzip.compress(_report().encode()),
                                   {"Content-Encoding": "gzip"})
        assert status == 200  # the server itself is fine


@pytest.mark.parametrize("encoding", ["compress", "x-unknown", "gzip, gzip", "br"])
async def test_unknown_content_encoding_is_415(tmp_path: Path, encoding: str) -> None:
    async with running_lc(tmp_path) as (lc, base):
        status, reply, _ = await _post(base, _report(), {"Content-Encoding": encoding})
        assert (status, reply["Status"]) == (415, 415)
        assert await lc.store.pending() == []


@pytest.mark.parametrize("method", [b"FOO", b"BREW", b"QUERYX"])
async def test_unknown_method_is_json_405_with_allow(tmp_path: Path, method: bytes) -> None:
    async with running_lc(tmp_path) as (lc, _):
        raw = await _raw(lc.port, method + b" /sedna/workers/w1/info HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: 0\r\n\r\n")
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.split(b"\r\n")[0].endswith(b"405 Method Not Allowed")
        assert b"\r\nAllow: GET, HEAD, POST" in head
        assert b"Content-Type: application/json" in head
        assert json.loads(body) == {"Status": 405, "Message": "the request method is not one "
                                                              "this server implements"}


# ---- timeouts and connection caps ---------------------------------------------------------

async def test_idle_and_half_sent_connections_are_closed(tmp_path: Path) -> None:
    async with running_lc(tmp_path, LC_HTTP_IDLE_TIMEOUT="0.3") as (lc, _):
        assert await _raw(lc.port, b"") == b""  # never sends a request
        assert await _raw(lc.port, b"POST /sedna/workers/w1/info HTTP/1.1\r\nHo") == b""
        # after a response, an idle keep-alive connection goes the same way
        reply = await _raw(lc.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 200 OK") and reply.endswith(b'{"status": "ok"}')


async def test_body_that_does_not_arrive_is_408(tmp_path: Path) -> None:
    async with running_lc(tmp_path, LC_HTTP_BODY_TIMEOUT="0.3") as (lc, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", lc.port)
        try:
            writer.write(b"POST /sedna/workers/w1/info HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 100\r\n\r\n{\"na")
            async with asyncio.timeout(5):
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                body = await reader.readexactly(length)
        finally:
            writer.close()
        assert head.startswith(b"HTTP/1.1 408") and b"Connection: close" in head
        assert json.loads(body) == {"Status": 408, "Message": "body not received within 0.3s"}
        assert await lc.store.workers() == []


async def test_connections_beyond_the_per_client_cap_are_closed(tmp_path: Path) -> None:
    async with running_lc(tmp_path, LC_HTTP_MAX_CONNS_PER_CLIENT="2") as (lc, base):
        held = [await asyncio.open_connection("127.0.0.1", lc.port) for _ in range(2)]
        try:
            assert await _raw(lc.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") == b""
            reader, writer = held[0]
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            async with asyncio.timeout(5):
                assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        finally:
            for _, writer in held:
                writer.close()
        # the cap counts live connections only: once they are gone, new ones are served
        async def served() -> bool:
            async with session() as http, http.get(base + "/healthz") as resp:
                return resp.status == 200
        await eventually(served, message="a new connection served")


# ---- dead letters -------------------------------------------------------------------------

async def test_dead_letters_endpoint_and_metrics(tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, base):
        first = await lc.store.append_report("Model", "default", "m", {"n": 1})
        second = await lc.store.append_report("Model", "default", "m", {"n": 2})
        kept = await lc.store.append_report("Model", "default", "m", {"n": 3})
        assert await lc.store.dead_letter(first, reason="refused", error="not assigned")
        assert await lc.store.dead_letter(second, reason="unsendable", error="too deep")
        assert not await lc.store.dead_letter(first, reason="refused", error="again")
        assert [e.seq for e in await lc.store.pending()] == [kept]
        assert lc.store.outbox_size == 1
        async with session() as http:
            async with http.get(base + "/sedna/deadletters") as resp:
                doc = await resp.json()
            async with http.get(base + "/sedna/deadletters?limit=1") as resp:
                one = await resp.json()
            async with http.get(base + "/sedna/deadletters?limit=0") as resp:
                bad = (resp.status, await resp.json())
            async with http.get(base + "/metrics") as resp:
                text = await resp.text()
        assert doc["counts"] == {"refused": 1, "unsendable": 1}
        assert [(d["seq"], d["reason"], d["error"], d["body"]) for d in doc["deadLetters"]] == [
            (second, "unsendable", "too deep", {"n": 2}), (first, "refused", "not assigned", {"n": 1})]
        assert [d["seq"] for d in one["deadLetters"]] == [second]
        assert bad[0] == 400 and bad[1]["Status"] == 400
        assert labelled(text, "sedna_lc_dead_letters", "reason") == {
            "refused": 1, "unsendable": 1, "protocol": 0}


async def test_dead_letters_survive_a_restart(tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, _):
        seq = await lc.store.append_report("Model", "default", "m", {"n": 1})
        await lc.store.dead_letter(seq, reason="protocol", error="GM closed (1002)")
    async with running_lc(tmp_path) as (lc, _):
        assert lc.store.dead_letter_counts == {"protocol": 1}
        assert lc.store.outbox_size == 0


# ---- worker records go with their job ------------------------------------------------------

def _job(uid: str) -> dict[str, Any]:
    return {"kind": "JointInferenceService",
            "metadata": {"name": "ji", "namespace": "default", "uid": uid}, "spec": {}}


async def _workers(base: str) -> list[str]:
    async with session() as http, http.get(base + "/sedna/workers") as resp:
        return [w["name"] for w in (await resp.json())["workers"]]


async def test_worker_records_go_when_their_job_is_deleted(tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, base):
        await lc.apply_upsert("JointInferenceService", "default", "ji", _job("u1"))
        assert (await _post(base, _report()))[0] == 200
        assert (await _post(base, _report(name="w2", ownerName="other"), worker="w2"))[0] == 200
        assert await _workers(base) == ["w1", "w2"]
        await lc.apply_delete("JointInferenceService", "default", "ji")
        assert await _workers(base) == ["w2"]  # a report of an unknown job stays (TTL)


async def test_worker_records_go_when_their_job_is_replaced(tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, base):
        await lc.apply_upsert("JointInferenceService", "default", "ji", _job("u1"))
        assert (await _post(base, _report()))[0] == 200
        await lc.apply_upsert("JointInferenceService", "default", "ji", _job("u1"))  # same job
        assert await _workers(base) == ["w1"]
        await lc.apply_upsert("JointInferenceService", "default", "ji", _job("u2"))
        assert await _workers(base) == []


async def test_worker_records_expire(tmp_path: Path) -> None:
    async with running_lc(tmp_path, LC_WORKER_TTL="0.2") as (lc, base):
        assert (await _post(base, _report()))[0] == 200
        await eventually(lambda: _no_workers(base), message="stale worker record expired")
        assert (await _post(base, _report(name="w2"), worker="w2"))[0] == 200
        rows = await lc.store._read(lambda c: c.execute("SELECT name FROM lc_workers").fetchall())
        assert rows == [("w2",)]  # the stale row was deleted, not only hidden


async def _no_workers(base: str) -> bool:
    return await _workers(base) == []


async def test_http_settings_are_validated(tmp_path: Path) -> None:
    from lc.config import load
    from lc.errors import ConfigError

    with pytest.raises(ConfigError, match="LC_HTTP_MAX_CONNS_PER_CLIENT must be at least 1"):
        load({"LC_HTTP_MAX_CONNS_PER_CLIENT": "0"})
    with pytest.raises(ConfigError, match="LC_HTTP_IDLE_TIMEOUT must be a positive"):
        load({"LC_HTTP_IDLE_TIMEOUT": "-1"})
    cfg = load({"LC_HTTP_IDLE_TIMEOUT": "2", "LC_HTTP_BODY_TIMEOUT": "3",
                "LC_HTTP_MAX_CONNS_PER_CLIENT": "4", "LC_WORKER_TTL": "60"})
    limits = cfg.server_limits
    assert (limits.idle_timeout, limits.body_timeout, limits.max_connections_per_client,
            cfg.worker_ttl) == (2.0, 3.0, 4, 60.0)


# ---- storage is bounded in bytes ------------------------------------------------------------

async def _metrics(base: str) -> str:
    async with session() as http, http.get(base + "/metrics") as resp:
        return await resp.text()


async def test_reports_of_unknown_owners_are_capped_in_bytes(tmp_path: Path) -> None:
    async with running_lc(tmp_path, LC_UNKNOWN_OWNER_BYTES="1048576") as (lc, base):
        for i in range(5):  # 400 kB each: two fit under 1 MiB
            body = _report(name=f"w{i}", ownerName=f"nobody-{i}", ownerKind="default",
                           ownerInfo={"pad": "x" * 400_000})
            assert (await _post(base, body, worker=f"w{i}"))[0] == 200
        assert await _workers(base) == ["w3", "w4"]
        assert value(await _metrics(base), "sedna_lc_store_dropped_total", record="unknown_owner") == 3


def test_storage_bounds_are_configured() -> None:
    from lc.config import load
    from lc.errors import ConfigError

    cfg = load({})
    bounds = cfg.store_bounds
    assert (bounds.worker_ttl, bounds.unknown_owner_ttl, bounds.unknown_owner_bytes,
            bounds.workers_bytes, bounds.dead_letters_bytes) == (
        7 * 86400.0, 600.0, 16 << 20, 64 << 20, 16 << 20)
    cfg = load({"LC_UNKNOWN_OWNER_TTL": "60", "LC_UNKNOWN_OWNER_BYTES": "2097152",
                "LC_WORKERS_BYTES": "3145728", "LC_DEAD_LETTERS_BYTES": "4194304",
                "LC_WORKER_TTL": "120"})
    bounds = cfg.store_bounds
    assert (bounds.worker_ttl, bounds.unknown_owner_ttl, bounds.unknown_owner_bytes,
            bounds.workers_bytes, bounds.dead_letters_bytes) == (
        120.0, 60.0, 2 << 20, 3 << 20, 4 << 20)
    for key in ("LC_UNKNOWN_OWNER_BYTES", "LC_WORKERS_BYTES", "LC_DEAD_LETTERS_BYTES"):
        with pytest.raises(ConfigError, match=f"{key} must be at least 1048576"):
            load({key: "1000"})
    with pytest.raises(ConfigError, match="LC_UNKNOWN_OWNER_TTL must be a positive"):
        load({"LC_UNKNOWN_OWNER_TTL": "0"})


# ---- a refusal stops the work it refuses ----------------------------------------------------

def _gzip_zeros(mib: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    return b"".join(packer.compress(zeros) for _ in range(mib)) + packer.flush()


def _head(length: int | None, path: str = "/sedna/workers/w1/info", **headers: str) -> bytes:
    headers = {"Content_Type": "application/json", **headers}
    lines = [f"POST {path} HTTP/1.1", "Host: x",
             *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items())]
    lines.append(f"Content-Length: {length}" if length is not None
                 else "Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _chunked(data: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(data[i:i + 65536]), data[i:i + 65536])
                    for i in range(0, len(data), 65536))


BOMB = _gzip_zeros(64)  # 64 KiB of gzip that inflates to 64 MiB


TOO_LARGE = (413, "body larger than 1048576 bytes")


@pytest.mark.parametrize(("head", "sent", "refusal"), [
    pytest.param(_head(2 << 20), b"{" * 65536, TOO_LARGE, id="declared-too-large"),
    pytest.param(_head(None), _chunked(b" " * ((1 << 20) + 65536)), TOO_LARGE,
                 id="chunked-too-large"),
    pytest.param(_head(len(BOMB) * 2, Content_Encoding="gzip"), BOMB[:len(BOMB) // 2],
                 TOO_LARGE, id="gzip-inflates-too-large"),
    pytest.param(_head(None, Content_Encoding="gzip"), _chunked(BOMB[:len(BOMB) // 2]),
                 TOO_LARGE, id="chunked-gzip-inflates-too-large"),
    pytest.param(_head(len(BOMB) * 2, Content_Encoding="gzip", Content_Type="text/plain"),
                 BOMB[:len(BOMB) // 2], (415, "Content-Type text/plain is not supported; send "
                                             "application/json"), id="gzip-wrong-media-type"),
    pytest.param(_head(len(BOMB) * 2, "/elsewhere", Content_Encoding="gzip"),
                 BOMB[:len(BOMB) // 2], (404, "no route for /elsewhere"), id="gzip-no-route"),
])
async def test_a_refused_body_is_not_read_further(tmp_path: Path, head: bytes, sent: bytes,
                                                  refusal: tuple[int, str]) -> None:
    async with running_lc(tmp_path) as (lc, base):
        reader, writer = await asyncio.open_connection("127.0.0.1", lc.port)
        try:
            writer.write(head + sent)  # and never the rest of the body
            async with asyncio.timeout(5):
                reply = await reader.readuntil(b"\r\n\r\n")
                length = int(reply.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                body = json.loads(await reader.readexactly(length))
                closed = await _closed(reader)
        finally:
            writer.close()
        assert reply.startswith(b"HTTP/1.1 %d" % refusal[0]) and b"Connection: close" in reply
        assert body == {"Status": refusal[0], "Message": refusal[1]}
        assert closed  # by the LC, though the client still had body to send
        assert await lc.store.workers() == []


async def _closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await reader.read() == b""
    except ConnectionResetError:  # closed with what the client sent unread
        return True


# ---- a client that goes away ----------------------------------------------------------------

PARTIAL_BODIES = [
    pytest.param(_head(100_000), b'{"name": "w1", "pad": "', id="content-length"),
    pytest.param(_head(None), _chunked(b'{"name": "w1", "pad": "'), id="chunked"),
    pytest.param(_head(len(BOMB), Content_Encoding="gzip"), BOMB[:100], id="gzip"),
]


async def _leave_mid_body(port: int, lc: Any, data: bytes, *, reset: bool) -> None:
    """Send `data` (a request without the end of its body), wait until the report's handler
    reads the body, then close: with a reset (RST) or by shutting down (FIN)."""
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    await eventually(lambda: sample(lc.metrics.registry, "sedna_lc_reports_in_flight") == 1,
                     message="the report's handler reading the body")
    if reset:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()


def _no_alarm(caplog) -> None:
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]


@pytest.mark.parametrize(("head", "sent"), PARTIAL_BODIES)
async def test_a_client_gone_mid_body_is_one_info_line(tmp_path: Path, caplog, head: bytes,
                                                       sent: bytes) -> None:
    caplog.set_level("DEBUG")  # aiohttp's own loggers included
    async with running_lc(tmp_path) as (lc, base):
        await _leave_mid_body(lc.port, lc, head + sent, reset=True)
        await eventually(lambda: sample(lc.metrics.registry, "sedna_lc_clients_gone_total") == 1,
                         message="the client's departure counted")
        assert (await _post(base, _report()))[0] == 200  # the next client is served
    gone = [r for r in caplog.records if r.getMessage() == "client went away"]
    assert [(r.name, r.levelname) for r in gone] == [("lc.api", "INFO")]
    _no_alarm(caplog)


@pytest.mark.parametrize(("head", "sent"), PARTIAL_BODIES)
async def test_a_client_that_stops_sending_mid_body_is_one_info_line(
        tmp_path: Path, caplog, head: bytes, sent: bytes) -> None:
    # A half-close: whether the server answers on the still-open side (a 400 for the body
    # cut short) or aiohttp closes the connection (the client went away) is the server's
    # (shared/server_limits.py); either way it is one INFO line, never an error.
    caplog.set_level("DEBUG")
    async with running_lc(tmp_path) as (lc, base):
        await _leave_mid_body(lc.port, lc, head + sent, reset=False)
        await eventually(lambda: sample(lc.metrics.registry, "sedna_lc_clients_gone_total")
                         + sample(lc.metrics.registry, "sedna_lc_reports_rejected_total", reason="bad_encoding") == 1,
                         message="the unfinished body counted")
        assert (await _post(base, _report()))[0] == 200
    lines = [(r.name, r.levelname, r.getMessage()) for r in caplog.records
             if r.getMessage() in ("client went away", "report refused")]
    assert lines in ([("lc.api", "INFO", "client went away")],
                     [("lc.api", "INFO", "report refused")])
    _no_alarm(caplog)
