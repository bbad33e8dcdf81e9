"""Read timeouts, idle limits and per-client connection caps for both services' HTTP servers.

aiohttp's defaults suit a web site behind a proxy, not a service exposed to any client on
the network: an idle keep-alive connection (or one that never sends a request) is kept
for an hour, a request whose headers never finish is kept as long, and one client may
hold any number of connections, each a file descriptor. Both the LC's worker API and the
GM's websocket endpoint run through `guarded_runner`, which sets:

- `idle_timeout`: aiohttp's keep-alive timer. It starts when a connection is accepted and
  again after every response, and closes a connection still waiting for (the rest of) a
  request's headers when it fires; so it bounds idle connections and slow headers alike.
  A request being handled (a websocket session included) is never cut by it.
- `max_connections_per_client`: connections beyond this many from one peer address are
  closed as soon as they are accepted.
- `body_timeout`: how long a handler may wait for a request body; handlers that read
  bodies apply it (the LC's report route answers 408).

Requests that fail before routing (an unknown method, malformed headers, a
Content-Encoding aiohttp cannot decode) are answered 405 with `Allow`, 415, or 400, and
those whose framing the server does not take (shared/http_screen.py: an HTTP version other
than 1.0 and 1.1, a transfer coding besides `chunked`, an unknown expectation, a
`100-continue` for a body over the limit) 505, 501, 417 or 413, before any `100 Continue`
and without reading the body. All of them are answered in the service's own format when it
passes `error_response` (plain text otherwise), on an HTTP/1.1 status line (aiohttp answers
a request its parser refused as HTTP/1.0, and one it took in the request's own version, as
`HTTP/2.0 505`), with the connection closed, and logged at debug level, not as errors with
a traceback: any client on the network can send them, and an error log per bad request is
a way to flood the logs.

A request that expects `100-continue` on a route that refuses it anyway (404, 405) is
routed without the expectation, so the refusal comes with no `100 Continue` before it.

A client that shuts its sending side down (half-close) before its body is complete gets an
answer rather than a dropped connection: the body's reader fails (aiohttp's
`RequestPayloadError`, which the LC answers 400, and any handler that lets it through gets a
400 here), the answer goes out on the still-open write side, and the connection closes.
aiohttp itself closes the transport at EOF, so the handler's answer had nowhere to go.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http import HttpVersion11, RawRequestMessage
from aiohttp.http_exceptions import BadHttpMethod, ContentEncodingError, HttpProcessingError
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import ERROR, RequestHandler, RequestPayloadError
from multidict import CIMultiDict

from shared.http_screen import VERSION_NOT_SUPPORTED, Refusal, screen, unsupported_version
from shared.logs import event
from shared.text import clip

log = logging.getLogger(__name__)

ErrorResponse = Callable[[int, str, dict[str, str]], web.Response]
"""Builds a service's error reply from (status, message, extra headers)."""


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Per-server connection limits; the defaults are the services' defaults."""

    idle_timeout: float = 15.0
    body_timeout: float = 30.0
    max_connections_per_client: int = 512

    def __post_init__(self) -> None:
        if not self.idle_timeout > 0 or not self.body_timeout > 0:
            raise ValueError("idle_timeout and body_timeout must be > 0")
        if self.max_connections_per_client < 1:
            raise ValueError("max_connections_per_client must be >= 1")


_REFUSAL = web.RequestKey("refusal", Refusal)  # set by the request factory, answered by the handler
_ERROR_11 = ERROR._replace(version=HttpVersion11)  # what aiohttp builds for a request its parser refused


class _GuardedHandler(RequestHandler):
    """aiohttp's per-connection protocol, answering pre-routing errors in the service's format."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._filling: StreamReader | None = None  # the body the parser fills now, if any
        self.half_closed = False  # the client shut its sending side; no request follows
        self.admitted = False  # counted already by the front that accepted it (shared/lanes.py)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # No isinstance check on the transport: uvloop's are not asyncio.Transport subclasses.
        manager = self._manager
        if isinstance(manager, _LimitedServer) and not self.admitted and not manager.admit(self, transport):
            transport.close()  # refused before aiohttp starts serving it: nothing to clean up
            return
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # The parser hands over a message once its head is parsed, then fills its body: only
        # the newest message's body can still be incomplete.
        if self._messages:
            self._filling = self._messages[-1][1]

    def eof_received(self) -> bool:
        """The client shut its sending side. Requests it sent are still answered on the open
        write side, a body it left incomplete failing its reader; the connection closes after
        the last answer. An idle connection (or a request head that cannot complete) closes now."""
        if self._parser is None or self._payload_parser is not None:
            return False  # gone, or a websocket: its reader ends the session at EOF, as before
        self._fail_incomplete_body(self._parser)
        # Between requests aiohttp waits on `_waiter`; otherwise one is queued or in hand.
        busy = bool(self._messages) or (self._waiter is None and self._request_count > 0)
        if not busy:
            return False
        self.half_closed = True
        if not self._messages:
            self.close()  # the request in hand is the last one
        return True

    def last_request(self) -> bool:
        """Whether the request being handled is the last this connection will carry."""
        return self.half_closed and not self._messages

    def _fail_incomplete_body(self, parser: Any) -> None:
        body = self._filling
        if body is None or body.is_eof():
            return
        try:
            parser.feed_eof()  # raises when the body is incomplete, without telling the body
        except HttpProcessingError as exc:
            body.set_exception(RequestPayloadError(exc.message), exc)
            body.feed_eof()  # so aiohttp does not linger after the answer, reading what cannot come

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None, message: str | None = None) -> web.StreamResponse:
        manager = self._manager
        refusal = None
        if isinstance(manager, _LimitedServer):
            refusal = _parser_refusal(status, exc, message, unknown_method=manager.unknown_method)
        if refusal is None:
            return super().handle_error(request, status, exc, message)
        if request.writer.output_size > 0:
            raise ConnectionError("response already started, cannot send the error")
        assert isinstance(manager, _LimitedServer)
        return manager.refuse(refusal)


def _parser_refusal(status: int, exc: BaseException | None, message: str | None, *,
                    unknown_method: Refusal) -> Refusal | None:
    """The refusal for an error aiohttp met before the app or that a handler let through;
    None for a server error, which aiohttp's own handling logs and answers."""
    if isinstance(exc, BadHttpMethod):
        return unknown_method
    if unsupported_version(exc):
        return VERSION_NOT_SUPPORTED
    if isinstance(exc, RequestPayloadError):  # a handler that did not catch its body failing
        return Refusal(400, f"body cannot be read: {clip(str(exc))}")
    if status >= 500:
        return None
    if isinstance(exc, ContentEncodingError):
        status = 415
    return Refusal(status, clip((message or "bad request").strip()))


class _LimitedServer(web.Server):
    """aiohttp's connection manager, counting connections per peer address and screening
    requests (shared/http_screen.py) before they reach the app.

    Invariant: `_peers[peer]` is the number of admitted connections from `peer` not yet
    lost; a peer with none has no entry. Refused connections are never counted.
    """

    def __init__(self, *args: Any, app: web.Application, max_per_client: int,
                 error_response: ErrorResponse | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.error_response = error_response
        # The C parser refuses methods llhttp does not know, the Python one takes any token:
        # a method no route answers is refused alike whichever read it (None: a route takes any).
        self._methods = _methods(app)
        allow = {hdrs.ALLOW: ", ".join(sorted(self._methods))} if self._methods else {}
        self.unknown_method = Refusal(405, "the request method is not one this server implements", allow)
        self._router = app.router
        # aiohttp's own body limit for the app (client_max_size): what a handler may read
        self._max_body: int = getattr(app, "_client_max_size", 1024**2)
        self._app_handler = self.request_handler
        self._app_request = self.request_factory
        self.request_handler = self._screened
        self.request_factory = self._make_screened_request
        self._max_per_client = max_per_client
        self._peers: Counter[str] = Counter()
        self._peer_of: dict[object, str] = {}  # whatever serves a counted connection -> its peer
        self.refused = 0

    def __call__(self) -> RequestHandler:
        return _GuardedHandler(self, loop=self._loop, **self._kwargs)

    def _make_screened_request(self, message: RawRequestMessage, payload: StreamReader,
                               protocol: RequestHandler, writer: AbstractStreamWriter,
                               task: asyncio.Task[None]) -> web.BaseRequest:
        """The app's request, marked with its refusal if it has one. A refused request (and
        one the parser refused) is built as HTTP/1.1 so that its answer's status line is."""
        refusal = None
        if message is ERROR:
            message = _ERROR_11
        else:
            if self._methods is not None and message.method not in self._methods:
                refusal = self.unknown_method
            else:
                refusal = screen(message.version, message.headers, max_body=self._max_body)
            if refusal is not None:
                message = message._replace(version=HttpVersion11, should_close=True)
        request = self._app_request(message, payload, protocol, writer, task)
        if refusal is not None:
            request[_REFUSAL] = refusal
        return request

    async def _screened(self, request: web.BaseRequest) -> web.StreamResponse:
        """The app's handler, for requests the screen let through."""
        refusal = request.get(_REFUSAL)
        if refusal is not None:
            if hdrs.EXPECT in request.headers:
                _abandon_body(request)
            return self.refuse(refusal)
        if request.version == HttpVersion11 and hdrs.EXPECT in request.headers:
            match = await self._router.resolve(request)  # type: ignore[arg-type]
            if match.http_exception is not None:
                return await self._without_continue(request)
        return await _closing_if_last(request, self._app_handler(request))

    async def _without_continue(self, request: web.BaseRequest) -> web.StreamResponse:
        """Route a request the app will refuse without its expectation, so no `100 Continue`
        comes before the refusal; the connection closes after it, the body never read."""
        headers = CIMultiDict(request.headers)
        del headers[hdrs.EXPECT]
        _abandon_body(request)
        try:
            response = await self._app_handler(request.clone(headers=headers))
        except web.HTTPException as exc:
            exc.force_close()
            raise
        response.force_close()
        return response

    def refuse(self, refusal: Refusal) -> web.StreamResponse:
        """The service's error reply for a refusal made before the app; closes the connection."""
        log.debug("request refused before routing status=%d error=%s", refusal.status, refusal.message)
        render = self.error_response or _plain_text
        response = render(refusal.status, refusal.message, dict(refusal.headers))
        response.force_close()
        return response

    def admit(self, handler: object, transport: asyncio.BaseTransport) -> bool:
        """Count a new connection (`handler` is whatever serves it now); False (not counted)
        when its peer is at the cap."""
        peer = _peer(transport)
        if self._peers[peer] >= self._max_per_client:
            self.refused += 1
            if self.refused == 1 or self.refused % 1000 == 0:
                event(log, "connection refused: too many from one client", level=logging.WARNING,
                      peer=peer, limit=self._max_per_client, refused=self.refused)
            return False
        self._peer_of[handler] = peer
        self._peers[peer] += 1
        return True

    def transfer(self, before: object, after: object) -> None:
        """The counted connection of `before` is served by `after` from now on."""
        peer = self._peer_of.pop(before, None)
        if peer is not None:
            self._peer_of[after] = peer

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        super().connection_lost(handler, exc)
        self.release(handler)

    def release(self, handler: object) -> None:
        """A counted connection is gone."""
        peer = self._peer_of.pop(handler, None)
        if peer is not None:
            self._peers[peer] -= 1
            if self._peers[peer] <= 0:
                del self._peers[peer]

    def connections_from(self, peer: str) -> int:
        return self._peers.get(peer, 0)


class GuardedAppRunner(web.AppRunner):
    """An AppRunner whose server applies `ServerLimits` (see the module docstring)."""

    def __init__(self, app: web.Application, *, limits: ServerLimits | None = None,
                 error_response: ErrorResponse | None = None, **kwargs: Any) -> None:
        self.limits = limits or ServerLimits()
        self.error_response = error_response
        kwargs.setdefault("keepalive_timeout", self.limits.idle_timeout)
        super().__init__(app, **kwargs)

    async def _make_server(self) -> web.Server:
        base = await super()._make_server()  # runs the app's startup and freezes it
        kwargs = {k: v for k, v in self._kwargs.items() if k != "handler_cancellation"}
        return _LimitedServer(base.request_handler, request_factory=base.request_factory,
                              handler_cancellation=base.handler_cancellation,
                              max_per_client=self.limits.max_connections_per_client,
                              app=self.app, error_response=self.error_response, **kwargs)


def guarded_runner(app: web.Application, *, limits: ServerLimits | None = None,
                   error_response: ErrorResponse | None = None, **kwargs: Any) -> GuardedAppRunner:
    """`web.AppRunner(app, **kwargs)` with read timeouts and per-client connection caps."""
    return GuardedAppRunner(app, limits=limits, error_response=error_response, **kwargs)


async def _closing_if_last(request: web.BaseRequest,
                           answer: Awaitable[web.StreamResponse]) -> web.StreamResponse:
    """The answer, closing the connection when the client half-closed after this request."""
    try:
        response = await answer
    except web.HTTPException as exc:
        if _is_last(request):
            exc.force_close()
        raise
    if _is_last(request):
        response.force_close()
    return response


def _is_last(request: web.BaseRequest) -> bool:
    protocol = request.protocol
    return isinstance(protocol, _GuardedHandler) and protocol.last_request()


def _abandon_body(request: web.BaseRequest) -> None:
    """End the connection after the answer without waiting for the body: a client that sent
    `Expect` holds its body back until it has one, so aiohttp's lingering read after the
    answer (which drains a body already in flight) would only wait."""
    request.protocol.close()  # also drops whatever arrives from now on, unparsed
    request.content.feed_eof()


def _plain_text(status: int, message: str, headers: dict[str, str]) -> web.Response:
    """aiohttp's own format, for services that pass no error_response."""
    return web.Response(status=status, text=message + "\n", headers=headers)


def _methods(app: web.Application) -> frozenset[str] | None:
    """Every method some route of `app` answers; None when a route answers any."""
    methods = {route.method for route in app.router.routes()}
    return None if hdrs.METH_ANY in methods else frozenset(methods)


def _peer(transport: asyncio.BaseTransport) -> str:
    name = transport.get_extra_info("peername")
    if isinstance(name, tuple) and name:
        return str(name[0])
    return str(name or "unix")
