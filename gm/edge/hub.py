"""The GM's websocket hub: one session per LC, downstream state push, upstream status intake.

Why it looks the way it does (each point fixes an upstream weakness, see the GM spec §5/§6):

- Downstream is *state*, not a message log. On every (re)connect a node gets a snapshot of
  everything it needs, then deltas. Deltas go through a per-session queue that holds at
  most one pending version per object, so a slow or stuck node costs one entry per
  object, never a growing backlog, and a newer version can never be lost behind an older
  one being written. Offline nodes cost nothing: their next snapshot covers the gap.
- A node has one session. A new connection for the node replaces (and closes) the old one
  instead of splitting the queue between them.
- Liveness is explicit: the hub pings every `ping_interval` and ends a session after
  `dead_after` seconds without any frame from the peer (pongs included). That bound also
  caps how long a write can stay blocked on a peer that stopped reading.
- Upstream reports are authorized (the object must be assigned to the reporting node) and
  handed to the status handler in the order they arrive; it queues them at once on the status
  pipeline (gm/edge/pipeline.py), which writes and retries them. Each report is acked by its
  sequence number as soon as the write carrying it committed, independently of the session's
  other reports: a slow object never holds another object's acks. The handler is given the
  LC's outbox epoch with each report so it can order them across sessions (gm/edge/order.py).
- A frame that does not decode ends that session only, and so does a session that keeps
  sending reports the GM refuses (`max_refusals` within `refusal_window` seconds): a client
  that only produces refusals is made to back off instead of costing the GM its CPU.
- A handshake it refuses (no or an invalid Node-Name, a credential that does not prove it,
  another origin, not a websocket upgrade, a websocket version other than 13) is answered
  with the GM's JSON Status body (gm/http_errors.py) and the connection closed; upstream's
  Go LC reads only the status of a failed handshake.
- Peers that do not offer the native subprotocol get upstream's JSON envelope exactly
  as upstream LCs expect it: inserts and deletes, no snapshot markers, no acks, and only
  the kinds upstream's GM sends (an upstream LC has no manager for the others).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict, deque
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from aiohttp import WSMsgType, hdrs, web

from gm.edge.auth import AuthError, NodeAuth
from gm.edge.reports import ReportDeferred, ReportRefused
from gm.http_errors import refusal
from proto import (
    CLOSE_DEAD,
    CLOSE_GOING_AWAY,
    CLOSE_HELLO_TIMEOUT,
    CLOSE_NORMAL,
    CLOSE_POLICY_VIOLATION,
    CLOSE_PROTOCOL_ERROR,
    CLOSE_REPLACED,
    MAX_FRAME_BYTES,
    MAX_REPORT_BYTES,
    MAX_REPORT_ENVELOPE_BYTES,
    SUBPROTOCOL,
    Message,
    ObjKey,
    Op,
    ProtocolError,
    UnknownOp,
    ack,
    decode_native,
    decode_upstream,
    encode_native,
    encode_upstream,
    hello,
    negotiate,
    snapshot_begin,
    snapshot_end,
)
from shared import apis
from shared.logs import event
from shared.tasks import until_first_done
from shared.text import clip

log = logging.getLogger("sedna.gm.edge.hub")

CLOSE_INTERNAL_ERROR = 1011
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_MAX_REASON_BYTES = 123  # RFC 6455: a close frame's reason fits in 123 bytes
WEBSOCKET_VERSION = "13"  # RFC 6455's, the only one the hub speaks
MAX_REFUSALS = 100  # refused reports a session may send within REFUSAL_WINDOW seconds
REFUSAL_WINDOW = 10.0


class ObjectSource(Protocol):
    """What the GM tells the hub about which objects each node needs."""

    def objects_for_node(self, node: str) -> Iterable[tuple[str, str, str, Mapping[str, Any]]]:
        """Every (kind, namespace, name, object) the node needs right now."""
        ...

    def is_assigned(self, node: str, kind: str, namespace: str, name: str) -> bool:
        """Whether the node may report status for this object."""
        ...


class StatusHandler(Protocol):
    """Takes status reports in arrival order.

    `submit` queues one report before it returns (raising ReportRefused when it is refused at
    once); the awaitable it returns completes when the report's effect is committed, or raises
    ReportRefused (never applicable), or ReportDeferred or another error (not acked: the LC
    resends). `epoch` is the reporting LC's outbox epoch ("" when it sent none):
    `message.seq` is ordered only within it."""

    def submit(self, node: str, message: Message, *, epoch: str = "") -> Awaitable[None]: ...


@dataclass(slots=True)
class HubStats:
    """Counters for the GM's /metrics; monotonic except where noted."""

    sessions_opened: int = 0
    sessions_replaced: int = 0
    sessions_dead: int = 0
    sessions_broken: int = 0
    handshakes_rejected: int = 0
    frames_in: int = 0
    frames_out: int = 0
    pings_out: int = 0
    status_applied: int = 0
    refused: int = 0
    deferred: int = 0
    handler_errors: int = 0
    sessions_refusing: int = 0  # sessions closed for sending too many refused reports
    acks_out: int = 0
    skipped_out: int = 0
    handshakes_abandoned: int = 0  # the client went away before its upgrade was answered
    handshakes_over_capacity: int = 0  # refused with 503: the GM holds `max_sessions` already


def _upstream_lc_takes(kind: str) -> bool:
    """Whether upstream's LC has a manager for the kind (the ones upstream's GM sends it);
    it would log and drop any other, so an upstream-mode session is not sent those."""
    api = apis.by_kind(kind)
    return api is not None and api.synced_to_edge


class _SessionEnd(Exception):
    """Raised inside a session's tasks to end it with a websocket close code."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code} {reason}")
        self.code = code
        self.reason = reason


class _Pending:
    """Downstream queue of one session: at most one pending version per object key.

    Invariant: each key is in `_items` at most once. A newer version replaces the pending
    one in place, keeping its position, so a hot object cannot starve the others; the
    writer pops from the front. `None` as the value means "delete".
    """

    __slots__ = ("_items", "_ready")

    def __init__(self) -> None:
        self._items: OrderedDict[ObjKey, Mapping[str, Any] | None] = OrderedDict()
        self._ready = asyncio.Event()

    def put(self, key: ObjKey, obj: Mapping[str, Any] | None) -> None:
        self._items[key] = obj
        self._ready.set()

    def pop(self) -> tuple[ObjKey, Mapping[str, Any] | None]:
        return self._items.popitem(last=False)

    async def get(self) -> tuple[ObjKey, Mapping[str, Any] | None]:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        return self.pop()

    def __len__(self) -> int:
        return len(self._items)

    def keys(self) -> list[ObjKey]:
        return list(self._items)


class _Session:
    """One connected node. The hub's `_sessions[node]` points at the current one."""

    __slots__ = ("node", "ws", "native", "epoch", "pending", "acks", "refusals", "snapshot_count", "seq",
                 "stopped", "stop_code", "stop_reason")

    def __init__(self, node: str, ws: web.WebSocketResponse, *, native: bool, epoch: str = "") -> None:
        self.node = node
        self.ws = ws
        self.native = native
        self.epoch = epoch  # the LC's outbox epoch from its hello ("" in upstream mode)
        self.pending = _Pending()
        self.acks: asyncio.Queue[tuple[int, str | None]] = asyncio.Queue()  # (seq, refusal) to send
        self.refusals: deque[float] = deque()  # loop times of recent refusals
        self.snapshot_count = 0
        self.seq = 0  # last downstream seq sent in this session
        self.stopped = asyncio.Event()
        self.stop_code = CLOSE_NORMAL
        self.stop_reason = ""

    def stop(self, code: int, reason: str) -> None:
        """Ask the session to end; the first request wins."""
        if not self.stopped.is_set():
            self.stop_code, self.stop_reason = code, reason
            self.stopped.set()

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    @property
    def mode(self) -> str:
        return "native" if self.native else "upstream"


class Hub:
    """Websocket hub the GM mounts on its port-9000 aiohttp app."""

    def __init__(
        self,
        source: ObjectSource,
        handler: StatusHandler,
        *,
        token: str | None = None,
        auth: NodeAuth | None = None,
        ping_interval: float = 10.0,
        dead_after: float = 30.0,
        hello_timeout: float | None = None,
        close_timeout: float = 5.0,
        max_refusals: int = MAX_REFUSALS,
        refusal_window: float = REFUSAL_WINDOW,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        compress: bool = True,
        max_sessions: int | None = None,
    ) -> None:
        if not 0 < ping_interval < dead_after:
            raise ValueError(f"need 0 < ping_interval ({ping_interval}) < dead_after ({dead_after})")
        self._source = source
        self._handler = handler
        if token and auth is not None:
            raise ValueError("give either a shared token or an authenticator, not both")
        # Proves each connection's Node-Name before it can replace that node's session.
        self._auth = auth if auth is not None else NodeAuth.shared(token)
        self._ping_interval = ping_interval
        self._dead_after = dead_after
        self._hello_timeout = hello_timeout if hello_timeout is not None else dead_after
        self._max_refusals = max_refusals
        self._refusal_window = refusal_window
        self._finishing: set[asyncio.Task[None]] = set()  # reports waiting for their write
        self._close_timeout = close_timeout
        self._max_frame_bytes = max_frame_bytes
        self._compress = compress
        self._sessions: dict[str, _Session] = {}
        # sessions this process can hold (its descriptor budget); None = no limit
        self.max_sessions = max_sessions
        self._upgrading = 0  # connections between admission and registration
        self._at_capacity = False  # logged once per time the capacity is reached
        # Keys each node was last sent as present; lets an upstream LC, which has no
        # snapshot markers, be told about objects deleted while it was away.
        self._held: dict[str, set[ObjKey]] = {}
        self._running: set[asyncio.Event] = set()
        self._closing = False
        self.stats = HubStats()

    # ---- public API -------------------------------------------------------------------

    def attach(self, app: web.Application, *, path: str = "/") -> None:
        """Serve the hub on `path` (upstream LCs dial `/`) and close sessions on app shutdown."""
        app.router.add_get(path, self.handle)
        app.on_shutdown.append(self._on_shutdown)

    def notify_changed(
        self, kind: str, namespace: str, name: str, obj: Mapping[str, Any] | None, nodes: Iterable[str]
    ) -> None:
        """Queue the latest version (None: deleted or no longer assigned) for each connected node.

        The hub keeps a reference to `obj` until it is sent: the caller must not mutate it.
        """
        key = (kind, namespace, name)
        for node in nodes:
            session = self._sessions.get(node)
            if session is not None:
                session.pending.put(key, obj)

    def connected_nodes(self) -> list[str]:
        return sorted(self._sessions)

    @property
    def sessions_active(self) -> int:
        return len(self._sessions)

    def pending(self, node: str) -> int:
        """How many object versions wait to be written to the node (0 when not connected)."""
        session = self._sessions.get(node)
        return len(session.pending) if session is not None else 0

    def forget_node(self, node: str) -> None:
        """Drop what the hub remembers about a node (call when the Node is deleted)."""
        self._held.pop(node, None)
        session = self._sessions.get(node)
        if session is not None:
            session.stop(CLOSE_GOING_AWAY, "node removed")

    async def close(self) -> None:
        """Close every session (going away) and wait, bounded, for them to finish."""
        self._closing = True
        for task in list(self._finishing):
            task.cancel()
        for session in list(self._sessions.values()):
            session.stop(CLOSE_GOING_AWAY, "GM shutting down")
        waits = [asyncio.create_task(done.wait(), name="hub-close-wait") for done in self._running]
        if waits:
            _, still = await asyncio.wait(waits, timeout=self._close_timeout * 2)
            for task in still:
                task.cancel()

    # ---- connection -------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """aiohttp handler: check the upgrade request, then run the session to its end."""
        node = await self._admit(request)
        ws = web.WebSocketResponse(
            protocols=(SUBPROTOCOL,),
            autoping=False,
            # an LC sends only hellos and status reports: nothing over the report limits
            max_msg_size=min(self._max_frame_bytes, MAX_REPORT_ENVELOPE_BYTES),
            timeout=self._close_timeout,
            compress=self._compress,
        )
        try:
            self._check_upgrade(request, ws)
            self._check_capacity(node)
        except web.HTTPException:
            self.stats.handshakes_rejected += 1
            raise
        self._upgrading += 1
        try:
            await ws.prepare(request)
        except (ConnectionError, asyncio.CancelledError) as exc:
            # the client went away while its upgrade was answered (a reconnect storm's
            # timed-out dials): counted, not a traceback
            self._upgrading -= 1
            self.stats.handshakes_abandoned += 1
            if isinstance(exc, asyncio.CancelledError):
                raise
            return ws
        done = asyncio.Event()
        self._running.add(done)
        try:
            await self._serve(node, ws, request)
        finally:
            self._running.discard(done)
            done.set()
        return ws

    def _check_capacity(self, node: str) -> None:
        """503 with Retry-After once `max_sessions` are held or being opened, so the LC backs
        off (to another replica behind the Service) instead of being reset by the kernel when
        the process runs out of descriptors. A node that already has a session may always
        replace it."""
        if self.max_sessions is None or node in self._sessions:
            return
        held = len(self._sessions) + self._upgrading
        if held < self.max_sessions:
            if self._at_capacity and held < self.max_sessions * 0.95:
                self._at_capacity = False
                event(log, "hub below its session capacity again", sessions=held, capacity=self.max_sessions)
            return
        self.stats.handshakes_over_capacity += 1
        if not self._at_capacity:
            self._at_capacity = True
            event(log, "hub at its session capacity: refusing new sessions", level=logging.WARNING,
                  sessions=held, capacity=self.max_sessions)
        raise refusal(web.HTTPServiceUnavailable,
                      f"this GM holds its capacity of {self.max_sessions} LC sessions; retry later",
                      **{"Retry-After": "5"})

    async def _admit(self, request: web.Request) -> str:
        """The proven node name of an acceptable upgrade request; an HTTP error response otherwise.

        Nothing here touches the sessions: a refused claim never disturbs the real node's.
        """
        try:
            if self._closing:
                raise refusal(web.HTTPServiceUnavailable, "GM shutting down")
            self._check_origin(request)
            node = self._node_name(request)
            await self._check_token(request, node)
            return node
        except web.HTTPException:
            self.stats.handshakes_rejected += 1
            raise

    async def _check_token(self, request: web.Request, node: str) -> None:
        """Map the authenticators' verdict to HTTP: 401 unknown, 403 another node's, 503 unsure."""
        try:
            identity = await self._auth.admit(node, request.headers.get("Authorization", ""))
        except AuthError as exc:
            event(log, "hub auth refused", level=logging.WARNING, node=node, remote=request.remote,
                  status=exc.status, reason=str(exc))
            raise _auth_response(exc) from None
        event(log, "hub auth admitted", level=logging.DEBUG, node=node, user=identity.user,
              method=identity.method)

    @staticmethod
    def _check_origin(request: web.Request) -> None:
        """Browsers send Origin; refuse cross-origin upgrades (LCs send none)."""
        origin = request.headers.get("Origin")
        if origin and urlsplit(origin).netloc.lower() != request.host.lower():
            raise refusal(web.HTTPForbidden, f"origin {clip(origin)!r} does not match host")

    @staticmethod
    def _node_name(request: web.Request) -> str:
        node = request.headers.get("Node-Name", "").strip()
        if not node:
            raise refusal(web.HTTPBadRequest, "Node-Name header required")
        if len(node) > 253 or not _NODE_NAME.fullmatch(node):
            raise refusal(web.HTTPBadRequest, f"Node-Name {clip(node)!r} is not a valid node name")
        return node

    @staticmethod
    def _check_upgrade(request: web.Request, ws: web.WebSocketResponse) -> None:
        """A websocket upgrade in version 13; any other version is 426 naming ours (RFC 6455
        §4.4: aiohttp would also take the drafts' 7 and 8)."""
        upgrade = request.headers.get(hdrs.UPGRADE, "").strip().lower() == "websocket"
        version = request.headers.get(hdrs.SEC_WEBSOCKET_VERSION, "")
        if upgrade and version.strip() != WEBSOCKET_VERSION:
            raise refusal(web.HTTPUpgradeRequired, f"Sec-WebSocket-Version {clip(version)!r} is not supported; "
                                                   f"this server speaks version {WEBSOCKET_VERSION}",
                          **{hdrs.SEC_WEBSOCKET_VERSION: WEBSOCKET_VERSION, hdrs.UPGRADE: "websocket"})
        if not ws.can_prepare(request).ok:
            raise refusal(web.HTTPBadRequest, "websocket upgrade required")

    async def _serve(self, node: str, ws: web.WebSocketResponse, request: web.Request) -> None:
        native = ws.ws_protocol == SUBPROTOCOL
        session: _Session | None = None
        code, reason = CLOSE_NORMAL, ""
        try:
            try:
                epoch = await self._handshake(node, ws) if native else ""
                session = self._open(node, ws, native=native, epoch=epoch)
            finally:
                self._upgrading -= 1  # registered as a session now, or gone
            await self._run(session)
        except _SessionEnd as end:
            code, reason = end.code, end.reason
        finally:
            if session is not None:
                self._deregister(session)
            self._record_end(node, native, code, reason)
            await self._close_ws(ws, request, code, reason)

    async def _handshake(self, node: str, ws: web.WebSocketResponse) -> str:
        """Native mode: read the LC's hello, pick a version, answer with ours; the LC's outbox epoch."""
        data = await self._receive(ws, self._hello_timeout, CLOSE_HELLO_TIMEOUT)
        msg = self._decode(data, native=True)
        if msg is None or msg.op is not Op.HELLO:
            raise _SessionEnd(CLOSE_PROTOCOL_ERROR, f"first frame must be hello, got {msg.op if msg else None}")
        if msg.body["node"] != node:
            raise _SessionEnd(CLOSE_POLICY_VIOLATION, f"hello names node {msg.body['node']!r}, Node-Name is {node!r}")
        try:
            version = negotiate(msg.body["versions"])
        except ProtocolError as exc:
            raise _SessionEnd(exc.close_code, str(exc)) from exc
        epoch = msg.body.get("epoch", "")
        event(log, "hub hello", node=node, version=version, acked=msg.body.get("acked", 0), epoch=epoch)
        await self._send(ws, encode_native(hello(node, versions=(version,))))
        return epoch

    def _open(self, node: str, ws: web.WebSocketResponse, *, native: bool, epoch: str) -> _Session:
        """Build the session's snapshot and make it the node's session, in one step.

        No await happens between reading the source and registering the session, so
        every change the GM reports afterwards lands in this session's queue.
        """
        if self._closing:
            raise _SessionEnd(CLOSE_GOING_AWAY, "GM shutting down")
        session = _Session(node, ws, native=native, epoch=epoch)
        try:
            objects = list(self._source.objects_for_node(node))
        except Exception as exc:  # the GM's code: a bug there must not take the hub down
            event(log, "hub objects_for_node failed", level=logging.ERROR, exc_info=True, node=node)
            raise _SessionEnd(CLOSE_INTERNAL_ERROR, "GM could not build the snapshot") from exc
        for kind, namespace, name, obj in objects:
            session.pending.put((kind, namespace, name), obj)
        if not native:
            for key in self._held.get(node, set()) - set(session.pending.keys()):
                session.pending.put(key, None)
        session.snapshot_count = len(session.pending)
        old = self._sessions.get(node)
        if old is not None:
            old.stop(CLOSE_REPLACED, "replaced by a newer connection for this node")
            self.stats.sessions_replaced += 1
        self._sessions[node] = session
        self.stats.sessions_opened += 1
        event(log, "hub session opened", node=node, mode=session.mode, objects=session.snapshot_count)
        return session

    def _deregister(self, session: _Session) -> None:
        if self._sessions.get(session.node) is session:
            del self._sessions[session.node]

    async def _run(self, session: _Session) -> None:
        """Run reader, writer, pinger and stop-watcher; the first to end ends them all."""
        node = session.node
        tasks = [
            asyncio.create_task(self._read_loop(session), name=f"hub-read-{node}"),
            asyncio.create_task(self._write_loop(session), name=f"hub-write-{node}"),
            asyncio.create_task(self._ping_loop(session), name=f"hub-ping-{node}"),
            asyncio.create_task(self._ack_loop(session), name=f"hub-ack-{node}"),
            asyncio.create_task(self._watch_stop(session), name=f"hub-stop-{node}"),
        ]
        done = await until_first_done(tasks)
        errors = [t.exception() for t in done if not t.cancelled() and t.exception() is not None]
        if not errors:
            raise _SessionEnd(CLOSE_INTERNAL_ERROR, "a session task ended unexpectedly")
        raise _first_end(node, BaseExceptionGroup("session ended", errors))

    @staticmethod
    async def _watch_stop(session: _Session) -> None:
        await session.stopped.wait()
        raise _SessionEnd(session.stop_code, session.stop_reason)

    async def _close_ws(self, ws: web.WebSocketResponse, request: web.Request, code: int, reason: str) -> None:
        """Close with code and reason; abort the transport if the peer does not take it in time."""
        message = reason.encode()[:_MAX_REASON_BYTES]
        try:
            async with asyncio.timeout(self._close_timeout):
                await ws.close(code=code, message=message)
        except (TimeoutError, ConnectionError):
            if request.transport is not None:
                request.transport.abort()

    def _record_end(self, node: str, native: bool, code: int, reason: str) -> None:
        if code == CLOSE_DEAD:
            self.stats.sessions_dead += 1
        elif code not in (CLOSE_NORMAL, CLOSE_GOING_AWAY, CLOSE_REPLACED):
            self.stats.sessions_broken += 1
        event(log, "hub session closed", node=node, mode="native" if native else "upstream", code=code,
              reason=reason)

    # ---- reading ----------------------------------------------------------------------

    async def _receive(self, ws: web.WebSocketResponse, silence: float, silence_code: int) -> str | bytes:
        """The next data frame; answers pings, ends the session on close, error or silence."""
        while True:
            try:
                msg = await ws.receive(timeout=silence)
            except TimeoutError:
                raise _SessionEnd(silence_code, f"no frame from the peer for {silence:g}s") from None
            if msg.type in (WSMsgType.BINARY, WSMsgType.TEXT):
                self.stats.frames_in += 1
                return msg.data
            if msg.type is WSMsgType.PING:
                try:
                    await ws.pong(msg.data)
                except ConnectionError as exc:
                    raise _SessionEnd(CLOSE_GOING_AWAY, f"pong failed: {exc}") from exc
            elif msg.type is WSMsgType.PONG:
                continue
            elif msg.type is WSMsgType.ERROR:
                raise _SessionEnd(ws.close_code or CLOSE_PROTOCOL_ERROR, f"websocket error: {msg.data}")
            else:  # CLOSE, CLOSING, CLOSED: the peer went away
                raise _SessionEnd(ws.close_code or CLOSE_NORMAL, "closed by peer")

    async def _read_loop(self, session: _Session) -> None:
        while True:
            data = await self._receive(session.ws, self._dead_after, CLOSE_DEAD)
            msg = self._decode(data, native=session.native)
            if msg is None:
                continue
            if msg.op is Op.STATUS:
                await self._on_status(session, msg)
            elif session.native:
                raise _SessionEnd(CLOSE_PROTOCOL_ERROR, f"{msg.op} is not accepted from an LC")
            else:
                event(log, "hub ignored upstream op", level=logging.WARNING, node=session.node, op=str(msg.op),
                      kind=msg.kind, key=f"{msg.namespace}/{msg.name}")

    def _decode(self, data: str | bytes, *, native: bool) -> Message | None:
        """Decode one frame; protocol errors end the session (upstream's unknown ops are skipped)."""
        try:
            if native:
                return decode_native(data, max_bytes=min(self._max_frame_bytes, MAX_REPORT_BYTES))
            return decode_upstream(data, max_bytes=min(self._max_frame_bytes, MAX_REPORT_ENVELOPE_BYTES),
                                   canonical_kind=apis.canonical_kind)
        except UnknownOp as exc:
            if native:
                raise _SessionEnd(exc.close_code, str(exc)) from exc
            event(log, "hub ignored upstream frame", level=logging.WARNING, error=str(exc))
            return None
        except ProtocolError as exc:
            raise _SessionEnd(exc.close_code, str(exc)) from exc

    async def _on_status(self, session: _Session, msg: Message) -> None:
        """Authorize and queue one report; native reports are acked when their write committed
        (or at once when refused), upstream ones are awaited here (no acks: backpressure)."""
        node = session.node
        try:
            if not self._source.is_assigned(node, msg.kind, msg.namespace, msg.name):
                raise ReportRefused(f"{msg.kind} {msg.namespace}/{msg.name} is not assigned to node {node}")
            pending = self._handler.submit(node, msg, epoch=session.epoch)
        except ReportRefused as exc:
            self._refused(session, msg, exc)
            return
        except Exception:  # the GM's handler: log and let the LC resend, keep the session
            self.stats.handler_errors += 1
            event(log, "hub status handler failed", level=logging.ERROR, exc_info=True, **_where(node, msg))
            return
        if not session.native:
            await self._finish(session, msg, pending)
            return
        task = asyncio.ensure_future(self._finish(session, msg, pending))
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    async def _finish(self, session: _Session, msg: Message, pending: Awaitable[None]) -> None:
        """Wait for one report's write; queue its ack (native) unless it is to be resent."""
        try:
            await pending
        except ReportRefused as exc:
            self._refused(session, msg, exc)
            return
        except ReportDeferred as exc:
            self.stats.deferred += 1
            event(log, "hub status deferred", level=logging.WARNING, **_where(session.node, msg), reason=str(exc))
            return
        except Exception:
            self.stats.handler_errors += 1
            event(log, "hub status handler failed", level=logging.ERROR, exc_info=True, **_where(session.node, msg))
            return
        self.stats.status_applied += 1
        if session.native:
            session.acks.put_nowait((msg.seq, None))

    def _refused(self, session: _Session, msg: Message, exc: ReportRefused) -> None:
        """Ack a refused report with the reason; a session that keeps sending them is closed."""
        self.stats.refused += 1
        reason = str(exc) or type(exc).__name__
        event(log, "hub status refused", level=logging.WARNING, **_where(session.node, msg), reason=reason)
        if session.native:
            session.acks.put_nowait((msg.seq, reason))
        now = asyncio.get_running_loop().time()
        session.refusals.append(now)
        while session.refusals and now - session.refusals[0] > self._refusal_window:
            session.refusals.popleft()
        if len(session.refusals) > self._max_refusals:
            self.stats.sessions_refusing += 1
            session.stop(CLOSE_POLICY_VIOLATION, f"more than {self._max_refusals} refused reports within "
                                                 f"{self._refusal_window:g}s")

    async def _ack_loop(self, session: _Session) -> None:
        """Send acks as the reports' writes commit, in the order they commit."""
        while True:
            seq, error = await session.acks.get()
            await self._send(session.ws, encode_native(ack(seq, error=error)))
            self.stats.acks_out += 1

    # ---- writing ----------------------------------------------------------------------

    async def _write_loop(self, session: _Session) -> None:
        if session.native:
            await self._write_snapshot(session)
        while True:
            key, obj = await session.pending.get()
            await self._send_object(session, key, obj)

    async def _write_snapshot(self, session: _Session) -> None:
        """begin, the snapshot's objects (the first entries of the queue), end."""
        count = session.snapshot_count
        await self._send(session.ws, encode_native(snapshot_begin(session.next_seq())))
        for _ in range(count):
            key, obj = session.pending.pop()
            await self._send_object(session, key, obj)
        await self._send(session.ws, encode_native(snapshot_end(count, session.next_seq())))

    async def _send_object(self, session: _Session, key: ObjKey, obj: Mapping[str, Any] | None) -> None:
        kind, namespace, name = key
        if not session.native and not _upstream_lc_takes(kind):
            return  # assigned all the same: the node's reports for it are accepted
        op = Op.DELETE if obj is None else Op.UPSERT
        try:
            msg = Message(op, session.next_seq(), kind, namespace, name, obj)
            if session.native:
                data: str | bytes = encode_native(msg, max_bytes=self._max_frame_bytes)
            else:
                data = encode_upstream(msg, max_bytes=self._max_frame_bytes)
        except ProtocolError as exc:
            self.stats.skipped_out += 1
            event(log, "hub cannot send", level=logging.ERROR, node=session.node, kind=kind,
                  key=f"{namespace}/{name}", error=str(exc))
            return
        await self._send(session.ws, data)
        held = self._held.setdefault(session.node, set())
        if obj is None:
            held.discard(key)
        else:
            held.add(key)

    async def _send(self, ws: web.WebSocketResponse, data: str | bytes) -> None:
        try:
            if isinstance(data, bytes):
                await ws.send_bytes(data)
            else:
                await ws.send_str(data)
        except ConnectionError as exc:
            raise _SessionEnd(CLOSE_GOING_AWAY, f"write failed: {exc}") from exc
        self.stats.frames_out += 1

    async def _ping_loop(self, session: _Session) -> None:
        while True:
            await asyncio.sleep(self._ping_interval)
            try:
                await session.ws.ping()
            except ConnectionError as exc:
                raise _SessionEnd(CLOSE_GOING_AWAY, f"ping failed: {exc}") from exc
            self.stats.pings_out += 1

    async def _on_shutdown(self, app: web.Application) -> None:
        await self.close()


def _where(node: str, msg: Message) -> dict[str, Any]:
    return {"node": node, "kind": msg.kind, "key": f"{msg.namespace}/{msg.name}", "seq": msg.seq}


def _auth_response(exc: AuthError) -> web.HTTPException:
    if exc.status == 403:
        return refusal(web.HTTPForbidden, str(exc))
    if exc.status == 503:
        return refusal(web.HTTPServiceUnavailable, str(exc), **{"Retry-After": "5"})
    return refusal(web.HTTPUnauthorized, str(exc), **{"WWW-Authenticate": "Bearer"})


def _first_end(node: str, group: BaseExceptionGroup) -> _SessionEnd:
    """The _SessionEnd that ended a session's task group; crashes are logged and become 1011."""
    ends, others = group.split(_SessionEnd)
    if others is not None:
        for exc in others.exceptions:
            event(log, "hub session task crashed", level=logging.ERROR, exc_info=exc, node=node)
    if ends is not None:
        return ends.exceptions[0]
    return _SessionEnd(CLOSE_INTERNAL_ERROR, "internal error")
