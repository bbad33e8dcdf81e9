"""Worker reports on the LC's request lane (lc/lane.py, shared/lanes.py), on a real LC over
raw sockets: what the lane takes, what it leaves to aiohttp on the same connection, and
that its answers are the route's."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lc.app import LocalController
from shared.metrics import render
from tests.conftest import eventually
from tests.scrape import value
from tests.unit.test_lc_api import JI_STATS, OK
from tests.unit.test_lc_support import running_lc

BODY = json.dumps(JI_STATS).encode()
PATH = f"/sedna/workers/{JI_STATS['name']}/info"


def post(body: bytes = BODY, *, path: str = PATH, extra: str = "", length: int | None = None) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body) if length is None else length}\r\n\r\n").encode() + body


async def answer(reader: asyncio.StreamReader) -> tuple[bytes, dict[str, str], bytes]:
    """One response: status line, headers (lower-case names), body."""
    async with asyncio.timeout(10):
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return head[0].encode(), headers, body


@pytest.fixture
async def lc(tmp_path: Path) -> AsyncIterator[tuple[LocalController, int]]:
    async with running_lc(tmp_path, LC_HTTP_BODY_TIMEOUT="0.5", LC_DB_SYNCHRONOUS="NORMAL") as (controller, _):
        yield controller, controller.port


def taken(controller: LocalController) -> int:
    assert controller._lane is not None
    return controller._lane.taken


async def test_reports_on_a_keep_alive_connection_ride_the_lane_until_a_request_it_does_not_take(
        lc: tuple[LocalController, int]) -> None:
    controller, port = lc
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(3):
        writer.write(post())
        status, headers, body = await answer(reader)
        assert (status, body, headers["content-type"]) == (b"HTTP/1.1 200 OK", OK, "application/json")
        assert "date" in headers and headers["server"].startswith("Python/")
    assert taken(controller) == 3
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # aiohttp's from here on
    status, _, body = await answer(reader)
    assert status == b"HTTP/1.1 200 OK" and json.loads(body) == {"status": "ok"}
    writer.write(post())
    status, _, body = await answer(reader)
    assert (status, body) == (b"HTTP/1.1 200 OK", OK)
    assert taken(controller) == 3  # the route answered it
    writer.close()
    stored = await controller.store.worker_page(limit=10, after=None, item_bytes=1 << 16, page_bytes=1 << 20)
    assert [w.name for w in stored.items] == [JI_STATS["name"]]


async def test_pipelined_reports_are_answered_in_order(lc: tuple[LocalController, int]) -> None:
    controller, port = lc
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    other = json.dumps({**JI_STATS, "name": "other"}).encode()
    writer.write(post() + post(other) + post(other, path="/sedna/workers/other/info"))
    assert [(await answer(reader))[0] for _ in range(3)] == [b"HTTP/1.1 200 OK", b"HTTP/1.1 400 Bad Request",
                                                             b"HTTP/1.1 200 OK"]
    assert taken(controller) == 3
    writer.close()


async def test_the_lanes_refusals_are_the_routes(lc: tuple[LocalController, int]) -> None:
    """The same bad report through the lane and through aiohttp (gzip makes it aiohttp's)."""
    controller, port = lc
    mismatch = json.dumps({**JI_STATS, "name": "someone-else"}).encode()
    answers = []
    for body, extra in ((mismatch, ""), (gzip.compress(mismatch), "Content-Encoding: gzip\r\n")):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(post(body, extra=extra))
        status, headers, reply = await answer(reader)
        answers.append((status, headers["content-type"], reply))
        writer.close()
    assert taken(controller) == 1
    assert answers[0] == answers[1]
    assert answers[0][0] == b"HTTP/1.1 400 Bad Request"
    assert b"in the api is different" in answers[0][2]


async def test_what_it_does_not_take_is_answered_by_the_route(lc: tuple[LocalController, int]) -> None:
    controller, port = lc
    cases = [
        post(extra="Expect: 100-continue\r\n"),
        post(path=PATH + "?x=1"),
        post().replace(b"application/json", b"text/plain"),  # the route's 415
        post(extra="Transfer-Encoding: chunked\r\n"),  # beside a Content-Length: aiohttp refuses it
        b"POST " + PATH.encode() + b" HTTP/1.0\r\nContent-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY,
        post(b"x" * (1 << 20 | 1)),  # over the body limit: the route's 413
    ]
    statuses = []
    for request in cases:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        if b"100-continue" in request:
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 100")
        statuses.append((await answer(reader))[0].split()[1])
        writer.close()
    assert taken(controller) == 0
    assert statuses == [b"200", b"200", b"415", b"400", b"200", b"413"]  # TE with CL: malformed


async def test_a_body_that_does_not_arrive_in_time_is_408_and_closes(lc: tuple[LocalController, int]) -> None:
    controller, port = lc
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post(length=len(BODY) + 10))  # ten bytes never come
    status, headers, body = await answer(reader)
    assert status == b"HTTP/1.1 408 Request Timeout" and headers["connection"] == "close"
    assert b"body not received within 0.5s" in body
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert controller._lane is not None and controller._lane.budget.used == 0


async def test_a_client_gone_mid_body_is_counted_and_gives_its_budget_back(lc: tuple[LocalController, int]) -> None:
    controller, port = lc
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post(length=len(BODY) + 10))
    await writer.drain()
    lane = controller._lane
    assert lane is not None
    await eventually(lambda: lane.budget.used == len(BODY) + 10, "the declared length taken from the budget")
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset, not a FIN
    writer.transport.abort()
    await eventually(lambda: lane.budget.used == 0, "the budget given back")
    assert value(render(controller.metrics.registry).decode(), "sedna_lc_clients_gone_total") == 1


async def test_connection_close_is_honoured(lc: tuple[LocalController, int]) -> None:
    controller, port = lc
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post(extra="Connection: close\r\n"))
    status, headers, _ = await answer(reader)
    assert status == b"HTTP/1.1 200 OK" and headers["connection"] == "close"
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert taken(controller) == 1


async def test_a_budget_without_room_leaves_the_report_to_the_route(tmp_path: Path) -> None:
    """A report that would wait for room is aiohttp's, which waits (here: not at all) and
    answers 503; the one holding the budget meanwhile is the lane's."""
    async with running_lc(tmp_path, LC_BODY_BUDGET_BYTES=str(1 << 20), LC_BODY_BUDGET_WAIT="0") as (controller, _):
        _, holder = await asyncio.open_connection("127.0.0.1", controller.port)
        holder.write(post(length=(1 << 20) - 10))  # the rest of its body is still to come
        await holder.drain()
        lane = controller._lane
        assert lane is not None
        await eventually(lambda: lane.budget.used, "the holder's length taken from the budget")
        reader, writer = await asyncio.open_connection("127.0.0.1", controller.port)
        writer.write(post())
        status, headers, _ = await answer(reader)
        assert status == b"HTTP/1.1 503 Service Unavailable" and headers["retry-after"] == "1"
        assert taken(controller) == 1
