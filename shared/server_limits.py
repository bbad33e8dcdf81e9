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
Content-Encoding aiohttp cannot decode) are answered 405 with `Allow`, 415, or 400, in
the service's own format when it passes `error_response` (plain text otherwise), and
logged at debug level, not as errors with a traceback: any client on the network can
send them, and an error log per bad request is a way to flood the logs.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMethod, ContentEncodingError
from aiohttp.web_protocol import RequestHandler

from shared.logs import event

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


class _GuardedHandler(RequestHandler):
    """aiohttp's per-connection protocol, answering pre-routing errors in the service's format."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # No isinstance check on the transport: uvloop's are not asyncio.Transport subclasses.
        manager = self._manager
        if isinstance(manager, _LimitedServer) and not manager.admit(self, transport):
            transport.close()  # refused before aiohttp starts serving it: nothing to clean up
            return
        super().connection_made(transport)

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None, message: str | None = None) -> web.StreamResponse:
        manager = self._manager
        if not isinstance(manager, _LimitedServer) or status >= 500:
            return super().handle_error(request, status, exc, message)
        render = manager.error_response or _plain_text
        if request.writer.output_size > 0:
            raise ConnectionError("response already started, cannot send the error")
        headers: dict[str, str] = {}
        if isinstance(exc, BadHttpMethod):
            status, message = 405, "the request method is not one this server implements"
            headers["Allow"] = manager.allow
        elif isinstance(exc, ContentEncodingError):
            status = 415
        log.debug("request refused before routing status=%d error=%s", status, message)
        resp = render(status, (message or "bad request").strip(), headers)
        resp.force_close()
        return resp


class _LimitedServer(web.Server):
    """aiohttp's connection manager, counting connections per peer address.

    Invariant: `_peers[peer]` is the number of admitted connections from `peer` not yet
    lost; a peer with none has no entry. Refused connections are never counted.
    """

    def __init__(self, *args: Any, max_per_client: int, error_response: ErrorResponse | None,
                 allow: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.error_response = error_response
        self.allow = allow
        self._max_per_client = max_per_client
        self._peers: Counter[str] = Counter()
        self._peer_of: dict[RequestHandler, str] = {}
        self.refused = 0

    def __call__(self) -> RequestHandler:
        return _GuardedHandler(self, loop=self._loop, **self._kwargs)

    def admit(self, handler: RequestHandler, transport: asyncio.BaseTransport) -> bool:
        """Count a new connection; False (not counted) when its peer is at the cap."""
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

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        super().connection_lost(handler, exc)
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
                              error_response=self.error_response,
                              allow=_methods(self.app), **kwargs)


def guarded_runner(app: web.Application, *, limits: ServerLimits | None = None,
                   error_response: ErrorResponse | None = None, **kwargs: Any) -> GuardedAppRunner:
    """`web.AppRunner(app, **kwargs)` with read timeouts and per-client connection caps."""
    return GuardedAppRunner(app, limits=limits, error_response=error_response, **kwargs)


def _plain_text(status: int, message: str, headers: dict[str, str]) -> web.Response:
    """aiohttp's own format, for services that pass no error_response."""
    return web.Response(status=status, text=message + "\n", headers=headers)


def _methods(app: web.Application) -> str:
    """Every method some route of `app` answers, for the Allow header of an unknown method."""
    methods = {route.method for route in app.router.routes() if route.method != "*"}
    return ", ".join(sorted(methods))


def _peer(transport: asyncio.BaseTransport) -> str:
    name = transport.get_extra_info("peername")
    if isinstance(name, tuple) and name:
        return str(name[0])
    return str(name or "unix")
