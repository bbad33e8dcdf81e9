"""A server side websocket (RFC 6455) on an asyncio protocol: one object per connection.

What a GM holds per LC session matters at tens of thousands of sessions, and so does what a
reconnect storm costs per handshake. aiohttp's websocket is built on its HTTP server: a
request handler protocol, a request, a response, a reader, a writer and their buffers per
connection (~16 KB), and ~0.4-0.6 ms of CPU per handshake here. `ServerWebSocket` is the
connection's protocol itself, with its state in slots, no task of its own and no buffer while
idle; `shared/lanes.py` hands it the connections whose request head asks for it.

It speaks the part of aiohttp's `WebSocketResponse` interface a hub uses (`receive` with a
timeout returning aiohttp's `WSMessage`, `send_bytes`, `send_str`, `ping`, `pong`, `close`,
`close_code`, `ws_protocol` and `prepare`; the upgrade itself is checked by the lane that
reads it), so a session does not care which
of the two carries it. What it does not do: extensions (permessage-deflate is not offered),
and it is a server only (it requires masked frames and sends unmasked ones).

The protocol rules it enforces, each a close with the code RFC 6455 names: a frame from the
client must be masked and use no reserved bit or opcode (1002), a control frame must be whole
and at most 125 bytes (1002), fragments must continue a message (1002), a message is at most
`max_msg_size` bytes, counted as its frames' headers announce them, before any of it is
buffered (1009), and a text message must be valid UTF-8 (1007). Reading pauses while more
than `READ_LIMIT` bytes of messages wait for `receive`, so a peer that sends faster than the
reader takes is held by TCP, not by memory.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
from collections import deque
from collections.abc import Iterable
from typing import Any

from aiohttp import WSCloseCode, WSMessage, WSMsgType

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 section 1.3
READ_LIMIT = 1 << 16  # bytes of received messages waiting for `receive` before reading pauses
MAX_CONTROL = 125

# opcodes
CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_DATA = {TEXT: WSMsgType.TEXT, BINARY: WSMsgType.BINARY}

# states
HANDSHAKE, OPEN, CLOSING, CLOSED = range(4)

_CLOSED_MESSAGE = WSMessage(WSMsgType.CLOSED, None, None)
_CLOSING_MESSAGE = WSMessage(WSMsgType.CLOSING, None, None)
# close codes a peer may send (RFC 6455 section 7.4): the defined ones and 3000-4999
_PEER_CODES = frozenset((1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014))


def accept_key(key: str) -> str:
    """Sec-WebSocket-Accept for a Sec-WebSocket-Key."""
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + GUID).digest()).decode("ascii")


def valid_key(key: str) -> bool:
    """A Sec-WebSocket-Key is the base64 of 16 bytes."""
    try:
        return len(base64.b64decode(key.encode("ascii"), validate=True)) == 16
    except (ValueError, UnicodeEncodeError):
        return False


def frame_header(opcode: int, length: int) -> bytes:
    """An unmasked, final frame's header (what a server sends)."""
    if length < 126:
        return bytes((0x80 | opcode, length))
    if length < 1 << 16:
        return struct.pack("!BBH", 0x80 | opcode, 126, length)
    return struct.pack("!BBQ", 0x80 | opcode, 127, length)


def unmask(payload: bytes | bytearray | memoryview, mask: bytes) -> bytes:
    """XOR with the 4-byte mask, in one pass over big integers (linear in the length)."""
    n = len(payload)
    if not n:
        return b""
    repeated = (mask * ((n >> 2) + 1))[:n]
    value = int.from_bytes(payload, "little") ^ int.from_bytes(repeated, "little")
    return value.to_bytes(n, "little")


class FrameError(Exception):
    """A frame breaking the protocol; the connection closes with `code`."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class ServerWebSocket(asyncio.Protocol):
    """One websocket connection, server side. Created in the HANDSHAKE state by the lane that
    read its upgrade request; `prepare` answers 101 and opens it."""

    __slots__ = ("_transport", "_protocols", "_max_msg_size", "_timeout", "_state", "_buffer",
                 "_messages", "_queued", "_waiter", "_paused", "_drain", "_writing_paused",
                 "_fragments", "_fragment_op", "_fragment_size", "_close_code", "_close_sent",
                 "_peer_closed", "_closed", "ws_protocol", "_key", "_on_lost", "_out")

    def __init__(self, transport: asyncio.BaseTransport, key: str, offered: Iterable[str], *,
                 protocols: Iterable[str] = (), max_msg_size: int = 4 << 20, timeout: float = 10.0,
                 on_lost: Any = None) -> None:
        self._transport: Any = transport
        self._key = key
        offered_set = set(offered)
        self.ws_protocol: str | None = next((p for p in protocols if p in offered_set), None)
        self._max_msg_size = max_msg_size
        self._timeout = timeout
        self._state = HANDSHAKE
        self._buffer = bytearray()
        self._messages: deque[WSMessage] | None = None
        self._queued = 0  # bytes of data messages in `_messages`
        self._waiter: asyncio.Future[None] | None = None  # `receive` waiting for a message
        self._paused = False  # reading paused: too much waits in `_messages`
        self._drain: asyncio.Future[None] | None = None  # a send waiting for the buffer to drain
        self._writing_paused = False
        self._fragments: list[bytes] | None = None  # a fragmented message's frames so far
        self._fragment_op = 0
        self._fragment_size = 0
        self._close_code: int | None = None
        self._close_sent = False
        self._peer_closed = False
        self._closed: asyncio.Future[None] | None = None  # `close` waiting for the peer's close
        self._on_lost = on_lost  # called once when the connection is lost
        self._out: list[bytes] | None = None  # frames sent in this turn of the loop, written at its end

    # ---- what the hub uses (aiohttp's WebSocketResponse interface) ----------------------

    @property
    def close_code(self) -> int | None:
        return self._close_code

    async def prepare(self, request: Any) -> None:
        """Answer the upgrade with 101 and start reading frames."""
        if self._state == OPEN or self._state == CLOSING:
            raise RuntimeError("websocket already prepared")
        # one turn of the loop first, so that a client which dialled and gave up at once (a
        # reconnect storm's timed-out dials) is seen gone rather than sent a 101
        await asyncio.sleep(0)
        if self._state == CLOSED or self._transport.is_closing():
            raise ConnectionResetError("the client went away before the upgrade was answered")
        head = ["HTTP/1.1 101 Switching Protocols", "Upgrade: websocket", "Connection: Upgrade",
                f"Sec-WebSocket-Accept: {accept_key(self._key)}"]
        if self.ws_protocol:
            head.append(f"Sec-WebSocket-Protocol: {self.ws_protocol}")
        self._transport.write(("\r\n".join(head) + "\r\n\r\n").encode("ascii"))
        self._state = OPEN
        if self._buffer:
            self._parse()

    async def receive(self, timeout: float | None = None) -> WSMessage:  # noqa: ASYNC109 (aiohttp's signature)
        """The next message: data, ping, pong, close (the peer's), or CLOSING/CLOSED/ERROR once
        the connection ends. Raises TimeoutError after `timeout` seconds without one."""
        while True:
            messages = self._messages
            if messages:
                msg = messages.popleft()
                if not messages:
                    self._messages = None  # an idle session holds no queue (a deque is ~600 bytes)
                if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    self._queued -= len(msg.data)
                    if self._paused and self._queued <= READ_LIMIT // 2:
                        self._paused = False
                        self._transport.resume_reading()
                return msg
            if self._state == CLOSED:
                return _CLOSED_MESSAGE
            if self._state == CLOSING and self._peer_closed:
                return _CLOSING_MESSAGE
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                if timeout is None:
                    await waiter
                else:
                    async with asyncio.timeout(timeout):
                        await waiter
            finally:
                self._waiter = None

    async def send_bytes(self, data: bytes) -> None:
        await self._send(BINARY, data)

    async def send_str(self, data: str) -> None:
        await self._send(TEXT, data.encode("utf-8"))

    async def ping(self, message: bytes = b"") -> None:
        await self._send(PING, message[:MAX_CONTROL])

    async def pong(self, message: bytes = b"") -> None:
        await self._send(PONG, message[:MAX_CONTROL])

    async def close(self, *, code: int = WSCloseCode.OK, message: bytes = b"") -> bool:
        """Send a close frame (unless one was sent), wait up to `timeout` for the peer's, then
        close the connection; False when it was closed already."""
        if self._state == CLOSED:
            return False
        if self._close_code is None:
            self._close_code = code
        self._send_close(code, message)
        if not self._peer_closed and self._state != CLOSED:
            closed = self._closed = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(self._timeout):
                    await closed
            except TimeoutError:
                self._transport.abort()
                return True
            finally:
                self._closed = None
        self._transport.close()
        return True

    # ---- writing ------------------------------------------------------------------------

    async def _send(self, opcode: int, payload: bytes) -> None:
        """Queue a frame for the end of this turn of the loop (`_flush`); wait while the
        transport's buffer is over its high-water mark."""
        if self._state != OPEN or self._transport.is_closing():
            raise ConnectionResetError("cannot write to a closing websocket")
        out = self._out
        if out is None:
            out = self._out = []
            asyncio.get_running_loop().call_soon(self._flush)
        out += (frame_header(opcode, len(payload)), payload)
        if self._writing_paused:
            drain = self._drain
            if drain is None:
                drain = self._drain = asyncio.get_running_loop().create_future()
            await asyncio.shield(drain)

    def _send_close(self, code: int, message: bytes = b"") -> None:
        if self._close_sent or self._state in (HANDSHAKE, CLOSED) or self._transport.is_closing():
            return
        self._close_sent = True
        payload = struct.pack("!H", code) + message[:MAX_CONTROL - 2]
        out = self._out or []
        self._out = None
        self._transport.write(b"".join((*out, frame_header(CLOSE, len(payload)), payload)))
        if self._state == OPEN:
            self._state = CLOSING

    def _flush(self) -> None:
        """Write what this turn of the loop sent, at once: a snapshot (begin, its objects, end)
        or a batch of acks is one write, not one per frame."""
        out, self._out = self._out, None
        if out and not self._transport.is_closing():
            self._transport.write(b"".join(out))

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    # ---- reading ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # set by the lane
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self._state != HANDSHAKE:
            self._parse()

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost ends the session

    def connection_lost(self, exc: BaseException | None) -> None:
        self._state = CLOSED
        if self._close_code is None:
            self._close_code = WSCloseCode.ABNORMAL_CLOSURE
        self._buffer = bytearray()
        self._fragments = None
        self._wake()
        for future in (self._drain, self._closed):
            if future is not None and not future.done():
                if future is self._drain:
                    future.set_exception(ConnectionResetError("connection lost"))
                    future.exception()  # retrieved: nobody may be waiting on it
                else:
                    future.set_result(None)
        self._drain = None
        on_lost, self._on_lost = self._on_lost, None
        if on_lost is not None:
            on_lost()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _deliver(self, msg: WSMessage) -> None:
        if self._messages is None:
            self._messages = deque()
        self._messages.append(msg)
        if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
            self._queued += len(msg.data)
            if not self._paused and self._queued > READ_LIMIT:
                self._paused = True
                self._transport.pause_reading()
        self._wake()

    def _parse(self) -> None:
        buf = self._buffer
        pos = 0
        try:
            while self._state != CLOSED:
                end = self._frame(buf, pos)
                if end < 0:
                    break
                pos = end
        except FrameError as exc:
            self._fail(exc.code, str(exc))
            return
        if pos:
            del buf[:pos]

    def _frame(self, buf: bytearray, pos: int) -> int:
        """Take one whole frame at `pos`; where it ends, or -1 while it is incomplete."""
        available = len(buf) - pos
        if available < 2:
            return -1
        b0, b1 = buf[pos], buf[pos + 1]
        if b0 & 0x70:
            raise FrameError(WSCloseCode.PROTOCOL_ERROR, "reserved bits set: no extension was negotiated")
        if not b1 & 0x80:
            raise FrameError(WSCloseCode.PROTOCOL_ERROR, "a client's frame must be masked")
        fin, opcode, length = b0 & 0x80, b0 & 0x0F, b1 & 0x7F
        head = 2
        if length == 126:
            if available < 4:
                return -1
            (length,) = struct.unpack_from("!H", buf, pos + 2)
            head = 4
        elif length == 127:
            if available < 10:
                return -1
            (length,) = struct.unpack_from("!Q", buf, pos + 2)
            head = 10
        if opcode >= CLOSE:
            if opcode not in (CLOSE, PING, PONG):
                raise FrameError(WSCloseCode.PROTOCOL_ERROR, f"unknown control opcode {opcode:#x}")
            if not fin or length > MAX_CONTROL:
                raise FrameError(WSCloseCode.PROTOCOL_ERROR, "a control frame must be whole and <= 125 bytes")
        elif opcode not in (CONTINUATION, TEXT, BINARY):
            raise FrameError(WSCloseCode.PROTOCOL_ERROR, f"unknown opcode {opcode:#x}")
        else:
            # refused as announced, before any of it is buffered
            size = (self._fragment_size if opcode == CONTINUATION else 0) + length
            if size > self._max_msg_size:
                raise FrameError(WSCloseCode.MESSAGE_TOO_BIG,
                                 f"message of {size} bytes exceeds limit of {self._max_msg_size}")
        end = pos + head + 4 + length
        if len(buf) < end:
            return -1
        mask = bytes(buf[pos + head:pos + head + 4])
        payload = unmask(memoryview(buf)[pos + head + 4:end], mask)
        if opcode >= CLOSE:
            self._control(opcode, payload)
        else:
            self._data(opcode, bool(fin), payload)
        return end

    def _data(self, opcode: int, fin: bool, payload: bytes) -> None:
        if opcode == CONTINUATION:
            if self._fragments is None:
                raise FrameError(WSCloseCode.PROTOCOL_ERROR, "a continuation frame without a message to continue")
            self._fragments.append(payload)
            self._fragment_size += len(payload)
            if not fin:
                return
            opcode, data = self._fragment_op, b"".join(self._fragments)
            self._fragments, self._fragment_size = None, 0
        elif self._fragments is not None:
            raise FrameError(WSCloseCode.PROTOCOL_ERROR, "a new message before the last one ended")
        elif not fin:
            self._fragments, self._fragment_op, self._fragment_size = [payload], opcode, len(payload)
            return
        else:
            data = payload
        if self._state != OPEN:
            return  # closing: data after our close frame is dropped
        if opcode == TEXT:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise FrameError(WSCloseCode.INVALID_TEXT, f"text message is not UTF-8: {exc.reason}") from None
            self._deliver(WSMessage(WSMsgType.TEXT, text, None))
        else:
            self._deliver(WSMessage(WSMsgType.BINARY, data, None))

    def _control(self, opcode: int, payload: bytes) -> None:
        if opcode == PING:
            if self._state == OPEN:
                self._deliver(WSMessage(WSMsgType.PING, payload, None))
            return
        if opcode == PONG:
            if self._state == OPEN:
                self._deliver(WSMessage(WSMsgType.PONG, payload, None))
            return
        code, reason = WSCloseCode.OK, ""
        if len(payload) == 1:
            raise FrameError(WSCloseCode.PROTOCOL_ERROR, "a close frame's code needs two bytes")
        if len(payload) >= 2:
            (code,) = struct.unpack_from("!H", payload)
            if code not in _PEER_CODES and not 3000 <= code <= 4999:
                raise FrameError(WSCloseCode.PROTOCOL_ERROR, f"close code {code} is not one a peer may send")
            try:
                reason = payload[2:].decode("utf-8")
            except UnicodeDecodeError:
                raise FrameError(WSCloseCode.INVALID_TEXT, "close reason is not UTF-8") from None
        self._peer_closed = True
        was_open = self._state == OPEN
        if self._close_code is None:
            self._close_code = code
        self._send_close(code)  # the echo, unless we closed first
        self._state = CLOSING
        if was_open:
            self._deliver(WSMessage(WSMsgType.CLOSE, code, reason))
        closed = self._closed
        if closed is not None and not closed.done():
            closed.set_result(None)
        self._wake()

    def _fail(self, code: int, reason: str) -> None:
        """A protocol error: close with `code`, and tell the reader."""
        if self._close_code is None:
            self._close_code = code
        if self._state == OPEN:
            self._deliver(WSMessage(WSMsgType.ERROR, FrameError(code, reason), None))
        self._send_close(code, reason.encode()[:MAX_CONTROL - 2])
        self._state = CLOSING
        self._peer_closed = True  # nothing more is read from it
        self._buffer = bytearray()
        self._transport.pause_reading()
        closed = self._closed
        if closed is not None and not closed.done():
            closed.set_result(None)
        self._wake()
