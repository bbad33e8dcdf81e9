"""A listening socket whose connections start on a lean front and go on on aiohttp or a lane.

A service's port serves two very different loads: a few operator and probe requests
(`/metrics`, `/healthz`, a status page), and one long-lived, hot path at fleet scale (the
GM's LC sessions: tens of thousands held, thousands dialling at once after a restart).
aiohttp is right for the first and costs too much for the second (see shared/websocket.py).
So the front reads the first request head of each connection itself, up to MAX_HEAD bytes,
and gives the connection away once, at that request's first byte:

- to a lane (`Lane.claims`) that takes such requests whole, e.g. the hub's websocket upgrade
  (`WebSocketLane`), which answers it and keeps the connection;
- otherwise to the service's aiohttp server, exactly as if aiohttp had accepted it: the bytes
  read so far are fed to aiohttp's protocol, which then serves this request and every later
  one on the connection, with all of shared/server_limits.py's screening, limits and error
  formats. A head the front cannot parse, or one longer than MAX_HEAD, goes to aiohttp too,
  which answers it as it answers any malformed request.

The per-client connection cap of shared/server_limits.py counts a connection from its accept,
whoever serves it; an idle connection that has not sent a whole head within the server's
`idle_timeout` is closed, as aiohttp's keep-alive timer does.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Protocol

from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE
from multidict import CIMultiDict, CIMultiDictProxy

from shared.logs import event
from shared.server_limits import GuardedAppRunner
from shared.websocket import ServerWebSocket, valid_key

log = logging.getLogger(__name__)

MAX_HEAD = 16 << 10  # a lane's request head is small; anything longer is aiohttp's to answer


@dataclass(slots=True)
class RequestHead:
    """One parsed request head, as much of aiohttp's request as a lane's handler reads."""

    method: str
    path: str  # the target as sent, query included
    version: str  # "HTTP/1.1"
    headers: CIMultiDictProxy[str]
    transport: Any
    remote: str | None = None

    @property
    def host(self) -> str:
        return self.headers.get("Host", "")

    def tokens(self, name: str) -> set[str]:
        """A comma-separated header's tokens, lower-cased, over all its lines."""
        return {token.strip().lower() for value in self.headers.getall(name, ()) for token in value.split(",")}


class Lane(Protocol):
    """Takes whole connections (a websocket lane)."""

    def claims(self, head: RequestHead) -> bool:
        """Whether this lane serves the request (decided from its head alone)."""

    def take(self, head: RequestHead, rest: bytes, release: Callable[[], None]) -> None:
        """Serve the connection from now on; `rest` is what arrived after the head, and
        `release` must be called once when the connection is lost."""


Reply = tuple[bytes, bool]
"""A request lane's answer: the whole HTTP response, and whether the connection closes after it."""


class Call(Protocol):
    """One request a RequestLane took, from its head to its answer."""

    async def answer(self, body: bytes) -> Reply:
        """The response once the whole body arrived (a crash is a 500 and a closed connection)."""

    def timed_out(self) -> Reply:
        """The response when the body did not arrive within the server's body timeout."""

    def gone(self) -> None:
        """The client went away before its body arrived (`answer` is never called)."""

    def cut_short(self, arrived: int) -> Reply:
        """The response when the client shut its sending side before the whole body came."""


class RequestLane:
    """Serves single requests on connections the front keeps (keep-alive): `open` decides from
    the head, with the body's length, whether the lane takes it. The front reads the body
    (Content-Length only: chunked bodies, `Expect` and anything else unusual are aiohttp's),
    runs `answer` in a task the lane tracks, writes the reply and reads the next request."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def open(self, head: RequestHead, length: int) -> Call | None:
        raise NotImplementedError

    async def drain(self, within: float) -> None:
        """Wait (bounded) for the answers in progress, e.g. before the store they use closes."""
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=within)


def body_length(head: RequestHead) -> int | None:
    """The body length of a request a request lane may take: a keep-alive HTTP/1.1 request
    with at most one Content-Length, no Transfer-Encoding and no expectation; else None."""
    headers = head.headers
    if head.version != "HTTP/1.1" or "Transfer-Encoding" in headers or "Expect" in headers:
        return None
    values = headers.getall("Content-Length", ())
    if not values:
        return 0
    if len(values) > 1 or not values[0].isascii() or not values[0].isdigit() or len(values[0]) > 15:
        return None
    return int(values[0])


_date: tuple[int, str] = (0, "")


def http_date() -> str:
    """The Date header's value, formatted once a second."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, email.utils.formatdate(now, usegmt=True))
    return _date[1]


def http_response(status: int, body: bytes, *, content_type: str = "application/json",
                  headers: Iterable[tuple[str, str]] = (), close: bool = False) -> bytes:
    """An HTTP/1.1 response with a Content-Length body, as aiohttp would write it."""
    reason = HTTPStatus(status).phrase if status in _STATUSES else ""
    lines = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {content_type}", f"Content-Length: {len(body)}",
             f"Date: {http_date()}", SERVER]
    lines += [f"{name}: {value}" for name, value in headers]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


_STATUSES = frozenset(s.value for s in HTTPStatus)
SERVER = f"Server: {SERVER_SOFTWARE}"  # what aiohttp's own responses say


def parse_head(data: bytes, transport: Any) -> RequestHead | None:
    """The head in `data` (request line and headers, without the blank line); None when it is
    not a plain HTTP/1.x request head a lane should look at."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        return None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        return None
    headers: CIMultiDict[str] = CIMultiDict()
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or line[0] in " \t":
            return None  # obs-fold, a space before the colon, no colon: aiohttp's to refuse
        headers.add(name, value.strip(" \t"))
    peer = transport.get_extra_info("peername")
    remote = str(peer[0]) if isinstance(peer, tuple) and peer else None
    return RequestHead(parts[0], parts[1], parts[2], CIMultiDictProxy(headers), transport, remote)


_HEAD, _BODY, _ANSWER = range(3)


class _Front(asyncio.Protocol):
    """A connection between requests: each request head tells where the request goes. A
    request lane answers it and the next one comes back here; a connection lane or aiohttp
    takes the connection for good."""

    __slots__ = ("_server", "_lanes", "_requests", "_idle", "_body_timeout", "_transport", "_buffer", "_timer",
                 "_admitted", "_gone", "_state", "_call", "_lane", "_head_end", "_need", "_closing", "_paused",
                 "_fronts", "_eof")

    def __init__(self, server: web.Server, lanes: Sequence[Lane], requests: Sequence[RequestLane],
                 idle_timeout: float, body_timeout: float, fronts: set[_Front]) -> None:
        self._fronts = fronts  # the site's: every connection the front holds
        self._server = server
        self._lanes = lanes
        self._requests = requests
        self._idle = idle_timeout
        self._body_timeout = body_timeout
        self._transport: Any = None
        self._buffer = bytearray()
        self._timer: asyncio.TimerHandle | None = None  # idle between requests, or the body's
        self._admitted = False
        self._gone = False  # handed over or closed: nothing more is ours
        self._state = _HEAD
        self._call: Call | None = None  # the request a lane took, until answered
        self._lane: RequestLane | None = None  # the lane that took it
        self._head_end = 0  # where its body starts in the buffer
        self._need = 0  # where it ends
        self._closing = False  # close after the answer (the client asked)
        self._paused = False
        self._eof = False  # the client shut its sending side: answer what it sent, then close

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        admit = getattr(self._server, "admit", None)
        if admit is not None:
            if not admit(self, transport):
                self._gone = True
                transport.close()
                return
            self._admitted = True
        self._fronts.add(self)
        self._arm(self._idle, self._idle_out)

    def shut(self) -> None:
        """The site stops: close now between requests, else after the answer in progress."""
        self._closing = True
        if self._state == _HEAD and not self._gone:
            self._gone = True
            self._disarm()
            self._transport.close()

    def _arm(self, delay: float, callback: Callable[[], None]) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(delay, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _idle_out(self) -> None:
        self._timer = None
        if not self._gone:
            self._gone = True
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        if self._gone:
            return
        self._buffer += data
        if self._state == _HEAD:
            self._next()
        elif self._state == _BODY:
            if len(self._buffer) >= self._need:
                self._answer()
        elif len(self._buffer) > MAX_HEAD and not self._paused:  # pipelined while answering
            self._paused = True
            self._transport.pause_reading()

    def _next(self) -> None:
        """Route the request whose head is (being) read."""
        buffer = self._buffer
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > MAX_HEAD:
                self._to_aiohttp()
            return
        head = parse_head(bytes(buffer[:end]), self._transport) if end <= MAX_HEAD else None
        if head is not None:
            for lane in self._lanes:
                if lane.claims(head):
                    self._to_lane(lane, head, bytes(buffer[end + 4:]))
                    return
            length = body_length(head) if self._requests else None
            if length is not None:
                for requests in self._requests:
                    call = requests.open(head, length)
                    if call is not None:
                        self._take(requests, call, head, end + 4, length)
                        return
        self._to_aiohttp()

    def _take(self, lane: RequestLane, call: Call, head: RequestHead, body_start: int, length: int) -> None:
        self._state, self._call = _BODY, call
        self._head_end, self._need = body_start, body_start + length
        self._closing = "close" in head.tokens("Connection")
        self._lane = lane
        if len(self._buffer) >= self._need:
            self._answer()
        elif self._eof:
            self._cut_short()
        else:
            self._arm(self._body_timeout, self._body_late)

    def _cut_short(self) -> None:
        call, self._call = self._call, None
        assert call is not None
        data, _ = call.cut_short(len(self._buffer) - self._head_end)
        self._finish(data)

    def _finish(self, data: bytes) -> None:
        """The last answer on this connection."""
        self._gone = True
        self._disarm()
        self._transport.write(data)
        self._transport.close()

    def _answer(self) -> None:
        self._disarm()
        buffer, call, lane = self._buffer, self._call, self._lane
        assert call is not None and lane is not None
        body = bytes(buffer[self._head_end:self._need])
        del buffer[:self._need]
        self._state = _ANSWER
        task = asyncio.get_running_loop().create_task(self._reply(call, body))
        lane.tasks.add(task)
        task.add_done_callback(lane.tasks.discard)

    async def _reply(self, call: Call, body: bytes) -> None:
        try:
            data, close = await call.answer(body)
        except Exception:
            event(log, "request lane failed", level=logging.ERROR, exc_info=True)
            data, close = http_response(500, b"internal error", content_type="text/plain", close=True), True
        self._call = None
        transport = self._transport
        if transport.is_closing():
            return
        if close or self._closing:
            self._finish(data)
            return
        transport.write(data)
        self._state = _HEAD
        self._arm(self._idle, self._idle_out)
        if self._paused:
            self._paused = False
            transport.resume_reading()
        if self._buffer:
            self._next()
        if self._eof and self._state == _HEAD and not self._gone:  # nothing more will come
            self._gone = True
            self._disarm()
            transport.close()

    def _body_late(self) -> None:
        self._timer = None
        call, self._call = self._call, None
        if self._gone or call is None or self._state != _BODY:
            return
        data, _ = call.timed_out()
        self._finish(data)

    def _to_lane(self, lane: Lane, head: RequestHead, rest: bytes) -> None:
        self._gone = True
        self._fronts.discard(self)
        self._disarm()
        self._buffer = bytearray()
        lane.take(head, rest, self._release)

    def _to_aiohttp(self) -> None:
        """aiohttp serves the connection from this request on, as if it had accepted it."""
        self._gone = True
        self._fronts.discard(self)
        self._disarm()
        data, self._buffer = bytes(self._buffer), bytearray()
        handler = self._server()
        if self._admitted:
            handler.admitted = True  # counted by the front: aiohttp's protocol must not count it again
            self._server.transfer(self, handler)
            self._admitted = False
        transport = self._transport
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if data:
            handler.data_received(data)

    def _release(self) -> None:
        if self._admitted:
            self._admitted = False
            self._server.release(self)

    def eof_received(self) -> bool:
        """The client shut its sending side: the request in progress is still answered on the
        open write side (a body left incomplete is the lane's `cut_short`), then it closes."""
        self._eof = True
        if self._gone or self._state == _HEAD:
            return False  # idle, or a head that cannot complete: close now
        if self._state == _BODY:
            self._cut_short()
        return True

    def connection_lost(self, exc: BaseException | None) -> None:
        """Only while the front is the connection's protocol (not after giving it away)."""
        self._gone = True
        self._fronts.discard(self)
        self._disarm()
        call, self._call = self._call, None
        if call is not None and self._state == _BODY:
            call.gone()  # an answer in progress goes on: its reply is simply not written
        self._release()


class LaneSite(web.TCPSite):
    """aiohttp's TCP site for a GuardedAppRunner, its connections starting on the front."""

    def __init__(self, runner: GuardedAppRunner, host: str | None, port: int, *, lanes: Iterable[Lane] = (),
                 requests: Iterable[RequestLane] = (), **kwargs: Any) -> None:
        super().__init__(runner, host, port, **kwargs)
        self._lanes = tuple(lanes)
        self._requests = tuple(requests)
        self._idle = runner.limits.idle_timeout
        self._body_timeout = runner.limits.body_timeout
        self._fronts: set[_Front] = set()

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        lanes, requests, idle, body, fronts = self._lanes, self._requests, self._idle, self._body_timeout, self._fronts
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Front(server, lanes, requests, idle, body, fronts), self._host, self._port, ssl=self._ssl_context,
            backlog=self._backlog, reuse_address=self._reuse_address, reuse_port=self._reuse_port)
        sockets = getattr(self._server, "sockets", None) or []
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port

    async def stop(self) -> None:
        """Stop listening (aiohttp's), and close the connections the front holds: idle ones now,
        the others after their answer. What a lane took is the lane's to end."""
        await super().stop()
        for front in list(self._fronts):
            front.shut()


# ---- the websocket lane ------------------------------------------------------------------

UpgradeHandler = Callable[["Upgrade"], Awaitable[Any]]
_NO_HEADERS: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())


class Upgrade(asyncio.Protocol):
    """A websocket upgrade request taken by a WebSocketLane, and its connection's protocol
    while the handler decides: it holds what arrives meanwhile and notes a loss.

    The handler reads what aiohttp's request would give it (headers, host, remote, transport)
    and either refuses (raising an aiohttp HTTPException) or accepts: `websocket(...)` makes
    the socket the connection's protocol, and its `prepare` answers 101. From `websocket(...)`
    on, `headers` is empty: a session holds its upgrade for its whole life, its headers no.
    """

    __slots__ = ("head", "_held", "_release", "_lost", "_socket")

    def __init__(self, head: RequestHead, rest: bytes, release: Callable[[], None]) -> None:
        self.head = head
        self._held = bytearray(rest)
        self._release = release
        self._lost = False
        self._socket: ServerWebSocket | None = None

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        return self.head.headers

    @property
    def host(self) -> str:
        return self.head.host

    @property
    def remote(self) -> str | None:
        return self.head.remote

    @property
    def transport(self) -> Any:
        return self.head.transport

    @property
    def answered(self) -> bool:
        return self._socket is not None

    def upgradable(self) -> bool:
        """A GET in HTTP/1.1 asking to upgrade to websocket with a valid key."""
        head = self.head
        return (head.method == "GET" and head.version == "HTTP/1.1" and "upgrade" in head.tokens("Connection")
                and "websocket" in head.tokens("Upgrade") and valid_key(head.headers.get("Sec-WebSocket-Key", "")))

    def websocket(self, *, protocols: Iterable[str] = (), max_msg_size: int = 4 << 20,
                  timeout: float = 10.0) -> ServerWebSocket:
        """The connection's socket, its protocol from now on; `prepare` it to accept."""
        if self._socket is not None:
            raise RuntimeError("the upgrade has its websocket already")
        head = self.head
        ws = self._socket = ServerWebSocket(
            head.transport, head.headers.get("Sec-WebSocket-Key", ""), sorted(head.tokens("Sec-WebSocket-Protocol")),
            protocols=protocols, max_msg_size=max_msg_size, timeout=timeout, on_lost=self._released)
        # a session lives for days and never reads its request's headers again: they go now
        self.head = RequestHead(head.method, head.path, head.version, _NO_HEADERS, head.transport, head.remote)
        if self._lost:
            ws.connection_lost(None)
            return ws
        head.transport.set_protocol(ws)
        held, self._held = bytes(self._held), bytearray()
        if len(held) > MAX_HEAD:
            head.transport.resume_reading()  # paused while held: the socket reads on
        if held:
            ws.data_received(held)
        return ws

    def refuse(self, response: web.Response) -> None:
        """Answer with an HTTP error response and close the connection."""
        transport = self.head.transport
        if not transport.is_closing():
            transport.write(raw_response(response))
            transport.close()

    # the protocol, until `websocket`
    def data_received(self, data: bytes) -> None:
        self._held += data
        if len(self._held) > MAX_HEAD:  # a client should wait for the 101: held by TCP now
            self.head.transport.pause_reading()

    def eof_received(self) -> bool:
        return False  # a client that stops sending before its 101 cannot hold a session: gone

    def connection_lost(self, exc: BaseException | None) -> None:
        self._lost = True
        self._released()

    def _released(self) -> None:
        release, self._release = self._release, _nothing
        release()


def _nothing() -> None:
    return None


def raw_response(response: web.Response) -> bytes:
    """A small aiohttp response's bytes on the wire (an HTTPException is one), closing the
    connection after it."""
    body = response.body if isinstance(response.body, bytes) else b""
    headers = [(name, value) for name, value in response.headers.items()
               if name.lower() not in ("content-type", "content-length", "connection", "transfer-encoding")]
    return http_response(response.status, body, headers=headers, close=True,
                         content_type=response.headers.get("Content-Type", "text/plain; charset=utf-8"))


class WebSocketLane:
    """Takes `GET path` requests that ask for a websocket upgrade and runs `handler(upgrade)`
    in a task for each, until the session it serves ends; the connection closes then. An
    HTTPException the handler raises before it accepted is the answer (a crash is a 500)."""

    def __init__(self, path: str, handler: UpgradeHandler, *, when: Callable[[], bool] = lambda: True) -> None:
        self.path = path
        self._handler = handler
        self._when = when  # False: leave every upgrade to aiohttp (e.g. while compression is on)
        self._tasks: set[asyncio.Task[Any]] = set()

    def claims(self, head: RequestHead) -> bool:
        return head.path == self.path and "websocket" in head.tokens("Upgrade") and self._when()

    def take(self, head: RequestHead, rest: bytes, release: Callable[[], None]) -> None:
        upgrade = Upgrade(head, rest, release)
        head.transport.set_protocol(upgrade)
        task = asyncio.get_running_loop().create_task(self._run(upgrade))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, upgrade: Upgrade) -> None:
        try:
            await self._handler(upgrade)
        except web.HTTPException as exc:
            if not upgrade.answered:
                upgrade.refuse(exc)
        except Exception:
            event(log, "websocket lane handler failed", level=logging.ERROR, exc_info=True, path=self.path)
            if not upgrade.answered:
                upgrade.refuse(web.HTTPInternalServerError(text="internal error"))
        finally:
            transport = upgrade.transport
            if not transport.is_closing():
                transport.close()

    async def close(self) -> None:
        """Cancel every handler still running (the service is stopping)."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks))
