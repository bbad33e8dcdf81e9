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
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web
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
    def claims(self, head: RequestHead) -> bool:
        """Whether this lane serves the request (decided from its head alone)."""

    def take(self, head: RequestHead, rest: bytes, release: Callable[[], None]) -> None:
        """Serve the connection from now on; `rest` is what arrived after the head, and
        `release` must be called once when the connection is lost."""


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


class _Front(asyncio.Protocol):
    """A new connection until its first request head has told where it goes."""

    __slots__ = ("_server", "_lanes", "_idle", "_transport", "_buffer", "_timer", "_admitted", "_gone")

    def __init__(self, server: web.Server, lanes: Sequence[Lane], idle_timeout: float) -> None:
        self._server = server
        self._lanes = lanes
        self._transport: Any = None
        self._buffer = bytearray()
        self._timer: asyncio.TimerHandle | None = None
        self._admitted = False
        self._gone = False  # handed over or closed: nothing more is ours
        self._idle = idle_timeout

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        admit = getattr(self._server, "admit", None)
        if admit is not None:
            if not admit(self, transport):
                self._gone = True
                transport.close()
                return
            self._admitted = True
        self._timer = asyncio.get_running_loop().call_later(self._idle, self._idle_out)

    def _idle_out(self) -> None:
        self._timer = None
        if not self._gone:
            self._gone = True
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        if self._gone:
            return
        buffer = self._buffer
        buffer += data
        end = buffer.find(b"\r\n\r\n", max(0, len(buffer) - len(data) - 3))
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
        self._to_aiohttp()

    def _stop_timer(self) -> None:
        self._gone = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _to_lane(self, lane: Lane, head: RequestHead, rest: bytes) -> None:
        self._stop_timer()
        self._buffer = bytearray()
        lane.take(head, rest, self._release)

    def _to_aiohttp(self) -> None:
        """aiohttp serves the connection from its first byte, as if it had accepted it."""
        self._stop_timer()
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
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._gone:  # lost before anyone took it
            self._stop_timer()
            self._release()


class LaneSite(web.TCPSite):
    """aiohttp's TCP site for a GuardedAppRunner, with its connections starting on the front."""

    def __init__(self, runner: GuardedAppRunner, host: str | None, port: int, *, lanes: Iterable[Lane],
                 **kwargs: Any) -> None:
        super().__init__(runner, host, port, **kwargs)
        self._lanes = tuple(lanes)
        self._idle = runner.limits.idle_timeout

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        lanes, idle = self._lanes, self._idle
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Front(server, lanes, idle), self._host, self._port, ssl=self._ssl_context,
            backlog=self._backlog, reuse_address=self._reuse_address, reuse_port=self._reuse_port)
        sockets = getattr(self._server, "sockets", None) or []
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


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
    def path(self) -> str:
        return self.head.path

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
    lines = [f"HTTP/1.1 {response.status} {response.reason}"]
    for name, value in response.headers.items():
        if name.lower() not in ("content-length", "connection", "transfer-encoding"):
            lines.append(f"{name}: {value}")
    lines += [f"Content-Length: {len(body)}", "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


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
