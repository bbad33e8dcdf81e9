"""The websocket lane (shared/lanes.py) and its server websocket (shared/websocket.py), on a real
socket: what it takes, what it leaves to aiohttp, and the RFC 6455 rules it enforces."""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType, web

from shared.lanes import MAX_HEAD, LaneSite, Upgrade, WebSocketLane
from shared.server_limits import ServerLimits, guarded_runner
from shared.websocket import READ_LIMIT, ServerWebSocket, accept_key
from tests.conftest import eventually

KEY = "dGhlIHNhbXBsZSBub25jZQ=="
UPGRADE = (f"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           f"Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()

Handler = Callable[[Upgrade], Awaitable[Any]]


class Rig:
    """A guarded aiohttp app (GET /ws and /healthz routes) behind a LaneSite with one lane on
    /ws, whose handler each test sets."""

    def __init__(self) -> None:
        self.handler: Handler = self.echo
        self.sockets: list[ServerWebSocket] = []
        self.received: list[Any] = []
        self.port = 0
        self.server: Any = None  # the guarded aiohttp server: its per-client counts

    async def echo(self, upgrade: Upgrade) -> None:
        assert upgrade.upgradable()
        ws = upgrade.websocket(protocols=("p1",), max_msg_size=1000, timeout=1.0)
        self.sockets.append(ws)
        await ws.prepare(upgrade)
        while True:
            msg = await ws.receive()
            self.received.append(msg)
            if msg.type is WSMsgType.TEXT:
                await ws.send_str(msg.data)
            elif msg.type is WSMsgType.BINARY:
                await ws.send_bytes(msg.data)
            elif msg.type is WSMsgType.PING:
                await ws.pong(msg.data)
            else:
                break
        await ws.close(code=1000, message=b"done")

    async def dispatch(self, upgrade: Upgrade) -> Any:
        return await self.handler(upgrade)

    async def raw(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    async def upgraded(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await self.raw()
        writer.write(UPGRADE)
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 ")
        assert f"Sec-WebSocket-Accept: {accept_key(KEY)}".encode() in head
        return reader, writer


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    rig = Rig()
    app = web.Application()

    async def routed(request: web.Request) -> web.Response:
        return web.Response(text=f"aiohttp {request.path}")

    app.router.add_get("/ws", routed)
    app.router.add_get("/healthz", routed)
    runner = guarded_runner(app, limits=ServerLimits(idle_timeout=0.5, max_connections_per_client=4),
                            shutdown_timeout=0.5)
    await runner.setup()
    lane = WebSocketLane("/ws", rig.dispatch)
    site = LaneSite(runner, "127.0.0.1", 0, lanes=[lane])
    await site.start()
    rig.port = runner.addresses[0][1]
    rig.server = runner.server
    yield rig
    await lane.close()
    await runner.cleanup()


def frame(opcode: int, payload: bytes, *, fin: bool = True, masked: bool = True, rsv: int = 0) -> bytes:
    """A client's frame (masked unless told otherwise)."""
    first = (0x80 if fin else 0) | rsv | opcode
    n = len(payload)
    mask_bit = 0x80 if masked else 0
    if n < 126:
        head = bytes((first, mask_bit | n))
    elif n < 1 << 16:
        head = struct.pack("!BBH", first, mask_bit | 126, n)
    else:
        head = struct.pack("!BBQ", first, mask_bit | 127, n)
    if not masked:
        return head + payload
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """A server's frame: (opcode, payload); servers do not mask."""
    b0, b1 = await reader.readexactly(2)
    assert not b1 & 0x80, "a server's frame is not masked"
    n = b1 & 0x7F
    if n == 126:
        (n,) = struct.unpack("!H", await reader.readexactly(2))
    elif n == 127:
        (n,) = struct.unpack("!Q", await reader.readexactly(8))
    return b0 & 0x0F, await reader.readexactly(n)


async def close_code(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """The close frame the server sends (skipping data frames before it)."""
    async with asyncio.timeout(5):
        while True:
            opcode, payload = await read_frame(reader)
            if opcode == 0x8:
                return struct.unpack("!H", payload[:2])[0], payload[2:]


async def test_the_lane_takes_upgrades_and_speaks_websocket_with_a_real_client(rig: Rig) -> None:
    async with aiohttp.ClientSession() as http, http.ws_connect(
            f"http://127.0.0.1:{rig.port}/ws", protocols=("p0", "p1"), autoping=True) as ws:
        assert ws.protocol == "p1"
        await ws.send_str("héllo")
        assert (await ws.receive(timeout=5)).data == "héllo"
        await ws.send_bytes(b"\x00" * 300)
        assert (await ws.receive(timeout=5)).data == b"\x00" * 300
        await ws.send_bytes(b"x" * 70000)  # over the limit of 1000: the server closes with 1009
        msg = await ws.receive(timeout=5)
        assert msg.type is WSMsgType.CLOSE and msg.data == 1009
    assert isinstance(rig.sockets[0], ServerWebSocket)
    assert rig.received[-1].type is WSMsgType.ERROR


async def test_requests_it_does_not_take_are_aiohttps_on_the_same_connection(rig: Rig) -> None:
    async with aiohttp.ClientSession() as http:
        for path in ("/healthz", "/ws", "/healthz"):  # one keep-alive connection, /ws without an upgrade
            async with http.get(f"http://127.0.0.1:{rig.port}{path}") as response:
                assert response.status == 200
                assert await response.text() == f"aiohttp {path}"
    assert rig.sockets == []
    reader, writer = await rig.raw()  # a head longer than the front reads is aiohttp's to answer
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * (MAX_HEAD + 10) + b"\r\n\r\n")
    status = await asyncio.wait_for(reader.readline(), 5)
    assert status.split()[1] in (b"400", b"431")
    writer.close()


async def test_a_refused_upgrade_gets_the_handlers_http_answer_and_the_connection_closes(rig: Rig) -> None:
    async def refuse(upgrade: Upgrade) -> None:
        raise web.HTTPForbidden(text="not you", headers={"Retry-After": "3"})

    rig.handler = refuse
    reader, writer = await rig.raw()
    writer.write(UPGRADE)
    answer = await asyncio.wait_for(reader.read(), 5)  # read to EOF: the server closes
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403 Forbidden") and b"Retry-After: 3" in head
    assert b"Connection: close" in head and body == b"not you"


@pytest.mark.expect_log_errors(r"websocket lane handler failed")
async def test_a_crashing_handler_is_a_500_and_a_log_line(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    async def crash(upgrade: Upgrade) -> None:
        raise RuntimeError("bug")

    rig.handler = crash
    reader, writer = await rig.raw()
    writer.write(UPGRADE)
    answer = await asyncio.wait_for(reader.read(), 5)
    assert answer.startswith(b"HTTP/1.1 500 ")
    assert "websocket lane handler failed" in caplog.text


async def test_fragments_are_one_message_and_control_frames_may_come_between(rig: Rig) -> None:
    reader, writer = await rig.upgraded()
    writer.write(frame(0x1, b"he", fin=False) + frame(0x9, b"p") + frame(0x0, b"ll", fin=False)
                 + frame(0x0, b"o"))
    assert await read_frame(reader) == (0xA, b"p")  # the handler's pong
    assert await read_frame(reader) == (0x1, b"hello")
    writer.write(frame(0x8, struct.pack("!H", 1000) + b"bye"))
    assert await close_code(reader) == (1000, b"")  # the echo of the peer's close
    close = rig.received[-1]
    assert close.type is WSMsgType.CLOSE and (close.data, close.extra) == (1000, "bye")
    assert await asyncio.wait_for(reader.read(), 5) == b""  # and the server closes TCP


@pytest.mark.parametrize(("frames", "code"), [
    (frame(0x2, b"abc", masked=False), 1002),  # a client must mask
    (frame(0x2, b"abc", rsv=0x40), 1002),  # no extension was negotiated
    (frame(0x3, b"abc"), 1002),  # reserved data opcode
    (frame(0xB, b""), 1002),  # reserved control opcode
    (frame(0x9, b"x" * 126), 1002),  # control frames are at most 125 bytes
    (frame(0x9, b"x", fin=False), 1002),  # and not fragmented
    (frame(0x0, b"x"), 1002),  # a continuation with nothing to continue
    (frame(0x1, b"a", fin=False) + frame(0x1, b"b"), 1002),  # a new message inside one
    (frame(0x1, b"\xff\xfe"), 1007),  # text that is not UTF-8
    (frame(0x8, b"\x03"), 1002),  # a close code needs two bytes
    (frame(0x8, struct.pack("!H", 1005)), 1002),  # 1005 is never sent
])
async def test_frames_breaking_the_protocol_close_with_rfc_6455s_code(rig: Rig, frames: bytes, code: int) -> None:
    reader, writer = await rig.upgraded()
    writer.write(frames)
    assert (await close_code(reader))[0] == code
    assert rig.sockets[0].close_code == code


async def test_a_message_over_the_limit_is_refused_as_its_header_announces_it(rig: Rig) -> None:
    reader, writer = await rig.upgraded()
    writer.write(struct.pack("!BBQ", 0x82, 0x80 | 127, 10**12))  # the header alone, no payload
    assert (await close_code(reader))[0] == 1009


async def test_fragments_count_towards_the_limit_together(rig: Rig) -> None:
    reader, writer = await rig.upgraded()
    writer.write(frame(0x2, b"a" * 600, fin=False) + frame(0x0, b"b" * 401))  # 1001 > 1000
    assert (await close_code(reader))[0] == 1009


async def test_reading_pauses_while_the_handler_does_not_take_messages(rig: Rig) -> None:
    taken = asyncio.Event()

    async def slow(upgrade: Upgrade) -> None:
        ws = upgrade.websocket(max_msg_size=1 << 20)
        rig.sockets.append(ws)
        await ws.prepare(upgrade)
        await taken.wait()
        while (await ws.receive(timeout=5)).type is WSMsgType.BINARY:
            pass

    rig.handler = slow
    reader, writer = await rig.upgraded()
    for _ in range(4):
        writer.write(frame(0x2, b"z" * (READ_LIMIT // 2)))
    await writer.drain()
    ws = rig.sockets[0]
    await eventually(lambda: ws._paused, "reading paused")
    assert ws._queued <= READ_LIMIT + READ_LIMIT // 2 + 64
    taken.set()
    await eventually(lambda: not ws._paused, "reading resumed")


async def test_a_client_gone_before_the_answer_is_a_connection_error_at_prepare(rig: Rig) -> None:
    outcome: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
    decided = asyncio.Event()
    taken: asyncio.Future[Upgrade] = asyncio.get_running_loop().create_future()

    async def late(upgrade: Upgrade) -> None:
        taken.set_result(upgrade)
        await decided.wait()
        ws = upgrade.websocket()
        try:
            await ws.prepare(upgrade)
        except ConnectionError as exc:
            outcome.set_result(exc)
            return
        outcome.set_result(None)

    rig.handler = late
    reader, writer = await rig.raw()
    writer.write(UPGRADE)
    upgrade = await asyncio.wait_for(taken, 5)
    writer.transport.abort()
    await eventually(lambda: upgrade._lost, "the client's leaving seen")
    decided.set()
    assert isinstance(await asyncio.wait_for(outcome, 5), ConnectionResetError)


async def test_a_connection_that_sends_no_whole_head_is_closed_after_the_idle_timeout(rig: Rig) -> None:
    reader, writer = await rig.raw()
    writer.write(b"GET /ws HTTP/1.1\r\nHost: x\r\n")  # never finished
    assert await asyncio.wait_for(reader.read(), 3) == b""


async def test_lane_connections_count_towards_the_per_client_cap(rig: Rig) -> None:
    held = [await rig.upgraded() for _ in range(4)]  # the cap is 4
    reader, writer = await rig.raw()
    assert await asyncio.wait_for(reader.read(), 3) == b""  # closed at accept
    _, first = held.pop()
    first.write(frame(0x8, struct.pack("!H", 1000)))
    await eventually(lambda: rig.server.connections_from("127.0.0.1") < 4, "a place again")
    await rig.upgraded()


class _Recording:
    """A transport that records what is written (the socket's calls)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


async def test_frames_sent_in_one_turn_of_the_loop_are_one_write_in_order() -> None:
    transport = _Recording()
    ws = ServerWebSocket(transport, KEY, ())
    await ws.prepare(None)
    assert len(transport.writes) == 1  # the 101
    for n in range(3):
        await ws.send_bytes(bytes([n]) * 3)
    await ws.ping(b"p")
    assert len(transport.writes) == 1  # nothing yet: written at the end of the turn
    await asyncio.sleep(0)
    assert transport.writes[1:] == [b"\x82\x03\x00\x00\x00\x82\x03\x01\x01\x01\x82\x03\x02\x02\x02\x89\x01p"]
    await ws.send_str("a")
    ws._send_close(1000)  # a close goes out at once, after what was queued before it
    assert transport.writes[2:] == [b"\x81\x01a\x88\x02\x03\xe8"]
    await asyncio.sleep(0)
    assert len(transport.writes) == 3


async def test_frames_sent_before_the_answer_wait_in_tcp_and_are_read_once_accepted(rig: Rig) -> None:
    decided = asyncio.Event()
    taken: asyncio.Future[Upgrade] = asyncio.get_running_loop().create_future()

    async def slow(upgrade: Upgrade) -> None:
        taken.set_result(upgrade)
        await decided.wait()
        await rig.echo(upgrade)

    rig.handler = slow
    reader, writer = await rig.raw()
    payload = b"y" * 900
    chunk = b"".join(frame(0x2, payload) for _ in range(20))  # ~18 KB
    writer.write(UPGRADE + chunk)  # held
    upgrade = await asyncio.wait_for(taken, 5)
    await eventually(lambda: len(upgrade._held) == len(chunk), "the first frames held")
    writer.write(chunk)  # held too, over MAX_HEAD: reading pauses
    await eventually(lambda: len(upgrade._held) == 2 * len(chunk), "the next frames held")
    writer.write(chunk)  # waits in TCP
    await writer.drain()
    decided.set()
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 101 ")
    for _ in range(60):
        assert await asyncio.wait_for(read_frame(reader), 5) == (0x2, payload)
