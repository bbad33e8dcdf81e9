"""The LocalController's link to the GM: dial, keep one session up, redial with backoff.

What it fixes relative to upstream's LC (upstream-lc.md section 3 and B-9..B-15):

- Reports are durable: the sender reads the SQLite outbox, never an in-memory channel,
  and in native mode a report leaves the outbox only when the GM acked it (applied, or
  refused for good). After every reconnect the unacked reports are replayed in seq order.
- Downstream is state: the GM's snapshot on each connect replaces the LC's objects
  (what it left out is deleted), deltas follow, and one applier applies them in order,
  so a delete never overtakes an earlier upsert of the same object.
- Liveness is explicit: the link pings, and a session with no frame from the GM for
  `silence_timeout` is dead. Every wait has a timeout; redials back off exponentially
  with jitter instead of looping every 5 s or, after a failed hello, not waiting at all.
- Mode is negotiated: the link offers the native subprotocol and falls back to
  upstream's JSON envelope on the same connection when the GM does not pick it. Upstream
  mode has no acks (see lc/link/session.py for what that costs).

The LocalController owns the link through its seam (`link_factory(lc)`, then the LC runs
`run()` as its `lc-link` task and cancels it on shutdown). `start()`/`stop()` give the
same lifecycle to code that drives a link directly.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp
from prometheus_client import CollectorRegistry

from lc.errors import ConfigError
from lc.link.apply import DownstreamApplier, ObjectSink
from lc.link.backoff import Backoff
from lc.link.session import Session, SessionEnded, SessionParams
from lc.link.state import BACKOFF, CONNECTED, CONNECTING, STOPPED, LinkInfo, LinkMetrics
from lc.store.facade import Store
from proto import MAX_FRAME_BYTES, SUBPROTOCOL, ObjKey
from shared.logs import event
from shared.tls import TLSConfigError, client_context

if TYPE_CHECKING:
    from lc.app import LocalController

log = logging.getLogger(__name__)

_MAX_REASON_BYTES = 123  # RFC 6455: a close frame's reason fits in 123 bytes


class LinkError(Exception):
    """A dial that did not produce a websocket (unreachable GM, refused upgrade, timeout)."""


@dataclass(frozen=True, slots=True)
class LinkSettings:
    """Where and how to reach the GM. Timings match the GM hub's defaults (ping 10 s, dead 30 s)."""

    url: str
    node: str
    token: str | None = None
    token_file: str | None = None  # read at every dial (a projected ServiceAccount token rotates)
    ca_file: str | None = None  # wss: the GM's certificate must chain to this CA (None: system CAs)
    offer_native: bool = True  # False: speak upstream's envelope even to a native GM
    ping_interval: float = 10.0
    silence_timeout: float = 30.0  # no frame (pongs and GM pings included) for this long: dead
    hello_timeout: float = 10.0
    connect_timeout: float = 10.0
    close_timeout: float = 5.0
    window: int = 64  # reports in flight without an ack
    per_object: int = 4  # of which at most this many for one object (lc/link/backlog.py)
    read_ahead: int = 512  # outbox entries read ahead of the window, to fold and to skip past
    ack_timeout: float = 60.0  # resend a report not acked this long (GM handler timeout is 30 s)
    idle_poll: float = 5.0  # longest wait on the outbox before the sender looks around
    upstream_batch: int = 100
    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    stable_after: float = 10.0  # a session this long resets the backoff; shorter ones escalate it
    replaced_delay: float | None = None  # wait after "replaced by a newer connection"; None: cap
    max_frame_bytes: int = MAX_FRAME_BYTES
    ack_flush_timeout: float = 2.0

    def __post_init__(self) -> None:
        if not self.node:
            raise ValueError("the link needs a node name")
        if not self.url.startswith(("ws://", "wss://")):
            raise ValueError(f"GM url must be ws:// or wss://, got {self.url!r}")
        if not 0 < self.ping_interval < self.silence_timeout:
            raise ValueError(f"need 0 < ping_interval ({self.ping_interval}) < "
                             f"silence_timeout ({self.silence_timeout})")
        for name in ("hello_timeout", "connect_timeout", "close_timeout", "ack_timeout",
                     "idle_poll", "ack_flush_timeout", "stable_after"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if min(self.window, self.upstream_batch, self.per_object, self.read_ahead) < 1:
            raise ValueError("window, per_object, read_ahead and upstream_batch must be >= 1")
        if self.ca_file and not self.url.startswith("wss://"):
            raise ValueError("a CA file needs a wss:// GM url")

    def session_params(self) -> SessionParams:
        return SessionParams(
            node=self.node, ping_interval=self.ping_interval, silence_timeout=self.silence_timeout,
            hello_timeout=self.hello_timeout, window=self.window, per_object=self.per_object,
            read_ahead=self.read_ahead, ack_timeout=self.ack_timeout,
            idle_poll=self.idle_poll, upstream_batch=self.upstream_batch,
            max_frame_bytes=self.max_frame_bytes, ack_flush_timeout=self.ack_flush_timeout)


class GMLink:
    """The websocket client to the GM; satisfies lc.app.Link (`state`, `run()`)."""

    def __init__(self, settings: LinkSettings, *, store: Store, sink: ObjectSink,
                 registry: CollectorRegistry | None = None, rand: Callable[[], float] = random.random) -> None:
        self.settings = settings
        self.info = LinkInfo()
        self.session: Session | None = None
        self.metrics = LinkMetrics(self.info, registry, inflight=self._inflight)
        self.applier = DownstreamApplier(sink, self._stored_keys)
        self._store = store
        self._backoff = Backoff(base=settings.backoff_base, cap=settings.backoff_cap, rand=rand)
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._established_at: float | None = None  # loop time the current session came up
        self._ssl = _client_ssl(settings)

    # ---- state -----------------------------------------------------------------------

    @property
    def state(self) -> str:
        """idle, connecting, connected, backoff or stopped (for /readyz)."""
        return self.info.state

    async def wait_connected(self, within: float) -> None:
        """Wait until a session is established; TimeoutError after `within` seconds."""
        async with asyncio.timeout(within):
            await self._connected.wait()

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Run the link as a task this object owns (for callers other than the LC)."""
        if self._task is not None and not self._task.done():
            raise RuntimeError("link already started")
        self._task = asyncio.create_task(self.run(), name="lc-link")

    async def stop(self, within: float = 10.0) -> None:
        """Cancel the task from start() and wait for it, at most `within` seconds."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=within)
        if not done:
            event(log, "link did not stop in time", level=logging.ERROR, within=within)
        elif not task.cancelled() and task.exception() is not None:
            event(log, "link ended with an error", level=logging.ERROR, error=repr(task.exception()))

    async def run(self) -> None:
        """Keep a session with the GM up until cancelled; downstream work is applied meanwhile."""
        try:
            async with aiohttp.ClientSession() as http, asyncio.TaskGroup() as tg:
                tg.create_task(self.applier.run(), name="lc-link-apply")
                await self._dial_loop(http)
        finally:
            self._set_disconnected(STOPPED)

    # ---- dialing ---------------------------------------------------------------------

    async def _dial_loop(self, http: aiohttp.ClientSession) -> None:
        first = True
        while True:
            if not first:
                self.info.reconnects += 1
            first = False
            self.info.state = CONNECTING
            delay = await self._attempt(http)
            self._set_disconnected(BACKOFF)
            await asyncio.sleep(delay)

    async def _attempt(self, http: aiohttp.ClientSession) -> float:
        """One dial and, if it succeeds, one session; how long to wait before the next dial."""
        try:
            ws = await self._dial(http)
        except LinkError as exc:
            return self._failed(str(exc))
        native = ws.protocol == SUBPROTOCOL
        session = Session(ws, native=native, params=self.settings.session_params(), store=self._store,
                          applier=self.applier, info=self.info, metrics=self.metrics)
        end = SessionEnded("stopped")
        try:
            await session.run(self._established)
        except SessionEnded as exc:
            end = exc
        finally:
            self.session = None
            await self._close(ws, end.code, end.reason)
        self._reset_backoff_if_stable()
        delay = self._failed(end.reason)
        if end.replaced:
            delay = self.settings.replaced_delay or self.settings.backoff_cap
            event(log, "another connection for this node took over; is a second LC running "
                  "with the same NODENAME?", level=logging.ERROR, node=self.settings.node, wait=delay)
        return delay

    async def _dial(self, http: aiohttp.ClientSession) -> aiohttp.ClientWebSocketResponse:
        s = self.settings
        headers = {"Node-Name": s.node}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            async with asyncio.timeout(s.connect_timeout):
                return await http.ws_connect(
                    s.url, protocols=(SUBPROTOCOL,) if s.offer_native else (), headers=headers,
                    autoping=True, max_msg_size=s.max_frame_bytes, ssl=self._ssl,
                    timeout=aiohttp.ClientWSTimeout(ws_close=s.close_timeout))
        except aiohttp.WSServerHandshakeError as exc:
            raise LinkError(f"GM refused the websocket upgrade: {exc.status} {exc.message}") from exc
        except aiohttp.ClientConnectorCertificateError as exc:
            raise LinkError(f"GM certificate not trusted ({s.ca_file or 'system CAs'}): "
                            f"{exc.certificate_error}") from exc
        except TimeoutError as exc:
            raise LinkError(f"no websocket from the GM within {s.connect_timeout:g}s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise LinkError(f"cannot reach the GM at {s.url}: {exc}") from exc

    def _token(self) -> str | None:
        """The bearer token for this dial; a token file is read afresh every time."""
        path = self.settings.token_file
        if not path:
            return self.settings.token
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip() or None
        except OSError as exc:
            raise LinkError(f"cannot read the GM token file {path!r}: {exc.strerror}") from exc

    def _inflight(self) -> int:
        """Reports sent in the current session and not acked yet (for /metrics)."""
        session = self.session
        return session.inflight if session is not None and self.info.connected else 0

    def _established(self, session: Session) -> None:
        self.session = session
        self._established_at = asyncio.get_running_loop().time()
        self.info.state, self.info.mode = CONNECTED, session.mode
        self.info.sessions += 1
        self._connected.set()
        event(log, "connected to the GM", url=self.settings.url, node=self.settings.node,
              mode=session.mode, outbox=self._store.outbox_size)

    def _reset_backoff_if_stable(self) -> None:
        """A GM that accepts and then drops us at once must not be redialed at the base rate."""
        started, self._established_at = self._established_at, None
        if started is not None and asyncio.get_running_loop().time() - started >= self.settings.stable_after:
            self._backoff.reset()

    def _failed(self, error: str) -> float:
        self.info.failed(error)
        delay = self._backoff.next_delay()
        self.info.failures = self._backoff.failures
        event(log, "GM link down", level=logging.WARNING, error=error,
              failures=self._backoff.failures, retry_in=round(delay, 3))
        return delay

    def _set_disconnected(self, state: str) -> None:
        self.info.state, self.info.mode = state, ""
        self._connected.clear()

    async def _close(self, ws: aiohttp.ClientWebSocketResponse, code: int, reason: str) -> None:
        """Close the socket within close_timeout; a GM that does not answer is cut off."""
        if ws.closed:
            return
        message = reason.encode()[:_MAX_REASON_BYTES]
        try:
            async with asyncio.timeout(self.settings.close_timeout):
                await ws.close(code=code, message=message)
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
            event(log, "GM link close timed out", level=logging.WARNING, error=repr(exc))

    async def _stored_keys(self) -> Iterable[ObjKey]:
        return [(kind, ns, name) for kind, ns, name, _ in await self._store.list_resources()]


def _client_ssl(settings: LinkSettings) -> ssl.SSLContext | bool:
    """wss: verify the GM against the CA file (or the system CAs); ws: no TLS."""
    if not settings.url.startswith("wss://"):
        return True  # aiohttp's default; unused for ws://
    return client_context(settings.ca_file, setting="GM_CA_FILE")


def link_factory(lc: LocalController) -> GMLink:
    """The LC's seam: build the link from the LC's config, store and metrics registry."""
    cfg = lc.config
    if cfg.gm_url is None:
        raise ValueError("GM_ADDRESS is not set: there is no GM to link to")
    if lc.store is None:
        raise RuntimeError("the LocalController must open its store before the link is built")
    settings = LinkSettings(url=cfg.gm_url, node=cfg.node_name, token=cfg.gm_token,
                            token_file=cfg.gm_token_file, ca_file=cfg.gm_ca_file)
    try:
        return GMLink(settings, store=lc.store, sink=lc, registry=lc.metrics.registry)
    except TLSConfigError as exc:
        raise ConfigError(str(exc)) from exc


__all__ = ["GMLink", "LinkError", "LinkSettings", "link_factory"]
