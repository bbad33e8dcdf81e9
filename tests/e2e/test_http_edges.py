"""HTTP edge cases both services answer alike: the LC's worker API and the GM's websocket port.

Every case writes raw bytes to a real socket and reads the status line and what follows; a
refusal must also end the connection (the server closes it, sending nothing more). Each runs
on aiohttp's C parser (the default) and on its pure-Python one, which accept different things
(HTTP/1.2, `chunked, chunked`, unknown methods): the answer must not depend on which one a
deployment happens to load. The GM runs against the dev cluster; its error bodies are
Kubernetes `Status` objects, the LC's `{"Status", "Message"}`.

One dev cluster and GM serve every GM case of the module (the cases change nothing on it, and
aiohttp makes a request parser per connection, so the parser a case picks is the one its
connections get); the LC, as cheap to start as a connection, is started per case.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import http_parser, web_protocol
from multidict import CIMultiDict

from gm.app import GlobalManager
from gm.config import parse_config
from tests.conftest import served_cluster
from tests.e2e.conftest import gm_config, install_crds
from tests.unit.test_lc_support import running_lc

# the module's GM (shared_gm) lives on a loop of the module's
pytestmark = pytest.mark.asyncio(loop_scope="module")

REPORT = json.dumps({"name": "w1", "namespace": "default", "ownerName": "ji",
                     "ownerKind": "jointinferenceservice", "status": "running"}).encode()
WS_KEY = "dGhlIHNhbXBsZSBub25jZQ=="
TOKEN = "edge-shared-token-0123456789"


@dataclass(frozen=True)
class Target:
    """A running service: where to send, and a route of it that takes a body."""

    name: str  # "lc" or "gm"
    port: int
    post: str  # "<method> <path>" of a route that reads a body (the LC's) or, on the GM, of any


@dataclass(frozen=True)
class Reply:
    raw: bytes
    status_line: bytes
    headers: CIMultiDict[str]
    body: bytes

    @property
    def status(self) -> int:
        return int(self.status_line.split(b" ")[1])


# ---- fixtures ------------------------------------------------------------------------------

@pytest.fixture(params=["c", "python"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which of aiohttp's request parsers the servers started by this test use."""
    if request.param == "c":
        if http_parser.HttpRequestParser is http_parser.HttpRequestParserPy:
            pytest.skip("aiohttp's C extension is not in use here")
        assert web_protocol.HttpRequestParser is http_parser.HttpRequestParserC
    else:
        monkeypatch.setattr(web_protocol, "HttpRequestParser", http_parser.HttpRequestParserPy)
    return request.param


@pytest_asyncio.fixture(loop_scope="module")
async def lc(parser: str, tmp_path: Path) -> AsyncIterator[Target]:
    async with running_lc(tmp_path) as (controller, _):
        yield Target("lc", controller.port, "POST /sedna/workers/w1/info")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_gm(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[GlobalManager]:
    """The dev cluster with the Sedna CRDs and a GM on it, for every GM case of the module."""
    home = tmp_path_factory.mktemp("http-edges-gm")
    async with served_cluster(home, image_map={}, restart_backoff=0.05) as dc:
        install_crds(dc)
        gm = GlobalManager(parse_config(gm_config(home / "kubeconfig")))
        await gm.start()
        try:
            yield gm
        finally:
            await gm.stop()


@pytest.fixture
def gm_target(parser: str, shared_gm: GlobalManager) -> Target:
    return Target("gm", shared_gm.port, "GET /healthz")


@pytest.fixture(params=["lc", "gm"])
def target(request: pytest.FixtureRequest, parser: str) -> Target:
    """Each service in turn (only the GM's cases start the dev cluster)."""
    return request.getfixturevalue("lc" if request.param == "lc" else "gm_target")


# ---- helpers -------------------------------------------------------------------------------

async def exchange(port: int, data: bytes, *, half_close: bool = False, until_close: bool = True,
                   within: float = 10.0) -> Reply:
    """Write `data` (then shut the write side down when `half_close`) and read one response;
    with `until_close`, the server must then close the connection, sending nothing more."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        if half_close:
            writer.write_eof()
        await writer.drain()
        try:
            async with asyncio.timeout(within):
                head = await reader.readuntil(b"\r\n\r\n")
                reply = parse(head)
                body = await reader.readexactly(int(reply.headers.get("Content-Length", 0)))
                rest = await reader.read() if until_close else b""
        except asyncio.IncompleteReadError as exc:
            pytest.fail(f"the server closed the connection without a full response: {exc.partial[:300]!r}")
        except TimeoutError:
            pytest.fail(f"no full response and close within {within}s")
    finally:
        writer.close()
    assert rest == b"", f"more after the response: {rest[:300]!r}"
    return Reply(head + body, reply.status_line, reply.headers, body)


def parse(head: bytes) -> Reply:
    status_line, *lines = head.rstrip(b"\r\n").split(b"\r\n")
    headers: CIMultiDict[str] = CIMultiDict()
    for line in lines:
        name, _, value = line.decode("latin-1").partition(":")
        headers.add(name.strip(), value.strip())
    return Reply(head, status_line, headers, b"")


def error_of(target: Target, reply: Reply) -> str:
    """The message of a service's JSON error body, after checking its shape and code."""
    assert reply.headers.get("Content-Type", "").startswith("application/json"), reply.raw[:300]
    doc = json.loads(reply.body)
    if target.name == "lc":
        assert set(doc) == {"Status", "Message"} and doc["Status"] == reply.status
        return doc["Message"]
    assert set(doc) == {"kind", "apiVersion", "metadata", "status", "message", "reason", "code"}, doc
    assert (doc["kind"], doc["apiVersion"], doc["metadata"], doc["status"], doc["code"]) == (
        "Status", "v1", {}, "Failure", reply.status)
    assert doc["reason"] == GM_REASONS[reply.status]
    return doc["message"]


GM_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
              405: "MethodNotAllowed", 413: "RequestEntityTooLarge", 417: "ExpectationFailed",
              426: "UpgradeRequired", 501: "NotImplemented", 503: "ServiceUnavailable",
              505: "HTTPVersionNotSupported"}


def refused(target: Target, reply: Reply, status: int) -> str:
    """Check a refusal: the status on an HTTP/1.1 line, the connection closed, a JSON error."""
    assert reply.status_line.startswith(f"HTTP/1.1 {status} ".encode()), reply.raw[:300]
    assert reply.headers.get("Connection") == "close", reply.raw[:300]
    return error_of(target, reply)


def chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


# ---- Expect: 100-continue ------------------------------------------------------------------

async def test_expect_100_continue_with_a_body_over_the_limit_is_413_at_once(target: Target) -> None:
    reply = await exchange(target.port, f"{target.post} HTTP/1.1\r\nHost: x\r\nContent-Type: "
                           "application/json\r\nExpect: 100-continue\r\nContent-Length: 10000000\r\n\r\n"
                           .encode())
    assert b"100 Continue" not in reply.raw
    assert refused(target, reply, 413) == "body of 10000000 bytes is larger than the limit of 1048576 bytes"


async def test_an_unknown_expectation_is_417_at_once(target: Target) -> None:
    reply = await exchange(target.port, f"{target.post} HTTP/1.1\r\nHost: x\r\nExpect: tea, "
                           "100-continue\r\nContent-Length: 5\r\n\r\n".encode())
    assert refused(target, reply, 417) == ("Expect 'tea, 100-continue' cannot be met: "
                                           "this server knows only 100-continue")


async def test_expect_100_continue_on_a_route_that_refuses_gets_no_100(target: Target) -> None:
    method = target.post.split()[0]
    reply = await exchange(target.port, f"{method} /no/such/route HTTP/1.1\r\nHost: x\r\n"
                           "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n".encode())
    assert b"100 Continue" not in reply.raw
    assert "/no/such/route" in refused(target, reply, 404)


async def test_expect_100_continue_within_the_limit_still_gets_its_100(lc: Target) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", lc.port)
    try:
        writer.write(f"{lc.post} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Expect: 100-continue\r\nContent-Length: {len(REPORT)}\r\n\r\n".encode())
        async with asyncio.timeout(10):
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(REPORT)
            assert (await reader.readline()).startswith(b"HTTP/1.1 200 OK")
    finally:
        writer.close()


# ---- bodies cut short ----------------------------------------------------------------------

async def test_a_body_cut_short_by_a_half_close_is_400(lc: Target) -> None:
    reply = await exchange(lc.port, f"{lc.post} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "Content-Length: 100\r\n\r\n{\"na".encode(), half_close=True)
    assert reply.status_line.startswith(b"HTTP/1.1 400 ")
    assert "Not enough data to satisfy content length header" in error_of(lc, reply)


async def test_a_chunked_body_cut_short_by_a_half_close_is_400(lc: Target) -> None:
    reply = await exchange(lc.port, f"{lc.post} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n10\r\n{\"na".encode(), half_close=True)
    assert reply.status_line.startswith(b"HTTP/1.1 400 ")
    assert "Not enough data to satisfy transfer length header" in error_of(lc, reply)


async def test_a_request_whose_body_is_cut_short_is_answered_by_the_gm(gm_target: Target) -> None:
    """The GM's routes read no body: the route answers, then the connection closes."""
    reply = await exchange(gm_target.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc",
                           half_close=True)
    assert (reply.status_line, reply.body) == (b"HTTP/1.1 200 OK", b"ok")


async def test_a_complete_request_then_a_half_close_is_answered(target: Target) -> None:
    reply = await exchange(target.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", half_close=True)
    assert reply.status_line == b"HTTP/1.1 200 OK"


async def test_pipelined_requests_then_a_half_close_are_all_answered(target: Target) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", target.port)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 3)
        writer.write_eof()
        async with asyncio.timeout(10):
            raw = await reader.read()  # until the server closes, after the third answer
    finally:
        writer.close()
    assert raw.count(b"HTTP/1.1 200 OK\r\n") == 3, raw


# ---- transfer codings ----------------------------------------------------------------------

@pytest.mark.parametrize(("coding", "status"), [
    pytest.param("gzip, chunked", 501, id="gzip-chunked"),
    pytest.param("x-custom,chunked", 501, id="unknown-then-chunked"),
    pytest.param("chunked, chunked", 400, id="chunked-twice"),
])
async def test_a_transfer_coding_besides_chunked_is_refused(target: Target, coding: str, status: int) -> None:
    reply = await exchange(target.port, f"{target.post} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           f"Transfer-Encoding: {coding}\r\n\r\n".encode() + chunked(REPORT))
    message = refused(target, reply, status)
    if status == 501:  # the C parser refuses `chunked, chunked` itself, in its own words
        assert message.startswith(f"Transfer-Encoding {coding!r} is not implemented")


async def test_transfer_encoding_in_an_http_1_0_request_is_400(target: Target) -> None:
    reply = await exchange(target.port, f"{target.post} HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n".encode() + chunked(REPORT))
    assert refused(target, reply, 400) == "Transfer-Encoding is not allowed in an HTTP/1.0 request"


# ---- methods -------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["FOO", "QUERYX", "PUT"])
async def test_a_method_no_route_answers_is_405_with_allow(target: Target, method: str) -> None:
    """The C parser refuses methods llhttp does not know, the Python one routes any token."""
    reply = await exchange(target.port, f"{method} /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
                           .encode())
    assert refused(target, reply, 405) == "the request method is not one this server implements"
    assert reply.headers["Allow"] == {"lc": "GET, HEAD, POST", "gm": "GET, HEAD"}[target.name]


# ---- versions ------------------------------------------------------------------------------

@pytest.mark.parametrize("version", ["2.0", "0.9", "1.2", "3.0", "9.9"])
async def test_versions_other_than_1_0_and_1_1_are_505(target: Target, version: str) -> None:
    reply = await exchange(target.port, f"GET /healthz HTTP/{version}\r\nHost: x\r\n\r\n".encode())
    assert reply.status_line == b"HTTP/1.1 505 HTTP Version Not Supported"
    assert refused(target, reply, 505) == "HTTP version not supported: this server speaks HTTP/1.1 and HTTP/1.0"


async def test_a_malformed_version_is_400(target: Target) -> None:
    reply = await exchange(target.port, b"GET /healthz HTTP/10.1\r\nHost: x\r\n\r\n")
    refused(target, reply, 400)


@pytest.mark.parametrize("version", ["1.0", "1.1"])
async def test_http_1_0_and_1_1_are_served(target: Target, version: str) -> None:
    reply = await exchange(target.port, f"GET /healthz HTTP/{version}\r\nHost: x\r\nConnection: close\r\n\r\n"
                           .encode())
    assert reply.status_line == f"HTTP/{version} 200 OK".encode()


# ---- the GM's error bodies -----------------------------------------------------------------

def upgrade(node: str | None = "edge-1", version: str = "13", **headers: str) -> bytes:
    lines = ["GET / HTTP/1.1", "Host: x", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {WS_KEY}", f"Sec-WebSocket-Version: {version}"]
    lines += [f"Node-Name: {node}"] if node is not None else []
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.mark.parametrize("version", ["8", "7", "14", ""])
async def test_a_websocket_version_other_than_13_is_426(gm_target: Target, version: str) -> None:
    reply = await exchange(gm_target.port, upgrade(version=version))
    assert reply.headers["Sec-WebSocket-Version"] == "13"
    assert reply.headers["Upgrade"] == "websocket"
    assert refused(gm_target, reply, 426) == (
        f"Sec-WebSocket-Version {version!r} is not supported; this server speaks version 13")


async def test_a_websocket_session_ends_when_its_client_half_closes(gm_target: Target) -> None:
    """Half-closing keeps a plain request's answer coming; a websocket session ends, as before."""
    reader, writer = await asyncio.open_connection("127.0.0.1", gm_target.port)
    try:
        writer.write(upgrade())
        async with asyncio.timeout(10):
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 101 Switching Protocols")
            writer.write_eof()
            while await reader.read(65536):  # frames until the GM closes the connection
                pass
    finally:
        writer.close()


LONG = "n" * 5000  # within the parsers' 8190-byte header limit


@pytest.mark.parametrize(("request_bytes", "status", "message"), [
    pytest.param(b"GET /no/such/route HTTP/1.1\r\nHost: x\r\n\r\n", 404, "no route for /no/such/route",
                 id="no-route"),
    pytest.param(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405,
                 "the request method is not one this server implements", id="method"),
    pytest.param(b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n", 400, None, id="malformed"),
    pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\nNode-Name: edge-1\r\n\r\n", 400, "websocket upgrade required",
                 id="not-an-upgrade"),
    pytest.param(upgrade(node=None), 400, "Node-Name header required", id="no-node-name"),
    pytest.param(upgrade(node="Edge_1!"), 400, "Node-Name 'Edge_1!' is not a valid node name",
                 id="invalid-node-name"),
    pytest.param(upgrade(node=LONG), 400, f"Node-Name '{'n' * 200}... (5000 characters)' is not a valid "
                 "node name", id="long-node-name-clipped"),
    pytest.param(upgrade(Origin="http://evil.example"), 403,
                 "origin 'http://evil.example' does not match host", id="cross-origin"),
])
async def test_gm_errors_are_json_status(gm_target: Target, request_bytes: bytes, status: int,
                                         message: str | None) -> None:
    reply = await exchange(gm_target.port, request_bytes, until_close=False)
    assert reply.status == status, reply.raw[:300]
    got = error_of(gm_target, reply)
    if message is not None:
        assert got == message


@pytest.mark.asyncio(loop_scope="function")  # a GM of its own, with a token
async def test_gm_auth_refusal_is_json_status(start_gm: Any) -> None:
    gm = await start_gm(websocket=f"{{address: 127.0.0.1, port: 0, token: {TOKEN}}}")
    target = Target("gm", gm.port, "GET /healthz")
    reply = await exchange(target.port, upgrade(Authorization="Bearer wrong-token-wrong-token"),
                           until_close=False)
    assert reply.status == 401 and reply.headers["WWW-Authenticate"] == "Bearer"
    assert error_of(target, reply) == "bearer token not recognized"
