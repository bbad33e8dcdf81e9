"""The GM's websocket hub: one session per LC, downstream state push, upstream status intake.

Why it looks the way it does (each point fixes an upstream weakness, see the GM spec §5/§6):

- Downstream is *state*, not a message log. On every (re)connect a node gets a snapshot of
  everything it needs, then deltas. Deltas go through a per-session queue that holds at
  most one pending version per object, so a slow or stuck node costs one entry per
  object, never a growing backlog, and a newer version can never be lost behind an older
  one being written. Offline nodes cost nothing: their next snapshot covers the gap.
- A node has one session. A new connection for the node replaces (and closes) the old one
  instead of splitting the queue between them.
- Liveness is explicit: a session ends after `dead_after` seconds without any frame from the
  peer (pongs included), and a peer that does not ping on its own is pinged every
  `ping_interval`; one wheel does both for every session (gm/edge/heartbeat.py). That bound
  also caps how long a write can stay blocked on a peer that stopped reading.
- A session costs little, since a GM holds tens of thousands: its reader is the task aiohttp
  runs the handler in, a writer task exists only while frames are queued, and it holds no
  queue or event objects (a deque alone is 760 bytes). What an object version encodes to is
  built once and shared by every session it goes to (gm/edge/encoded.py), so a snapshot storm
  or a reconnect encodes each version once, not once per node. The hub does not offer
  permessage-deflate by default: no LC asks for it (ours does not, nor upstream's), and each
  session that negotiated it would keep zlib contexts of ~100 KB.
- Upstream reports are authorized (the object must be assigned to the reporting node) and
  handed to the status handler in the order they arrive; it queues them at once on the status
  pipeline (gm/edge/pipeline.py), which writes and retries them. Each report is acked by its
  sequence number as soon as the write carrying it committed, independently of the session's
  other reports: a slow object never holds another object's acks. The handler is given the
  LC's outbox epoch with each report so it can order them across sessions (gm/edge/order.py).
  A report for an object this GM's caches do not hold yet is not refused at once: with several
  replicas, the one that placed its worker (the leader) may have seen it first. It waits, up to
  `placement_grace` and without holding the session's other reports, for the caches to place it.
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
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from aiohttp import hdrs, web

from gm.edge.auth import AuthError, NodeAuth
from gm.edge.encoded import DEFAULT_MAX_BYTES as DEFAULT_ENCODED_BYTES
from gm.edge.encoded import EncodedVersions
from gm.edge.heartbeat import HeartbeatWheel
from gm.edge.intake import MAX_REFUSALS, REFUSAL_WINDOW, Intake
from gm.edge.ports import EdgeSocket, ObjectSource, StatusHandler, UpgradeRequest
from gm.edge.session import (
    CLOSE_INTERNAL_ERROR,
    HubStats,
    Session,
    SessionEnd,
    SessionView,
    wall_offset,
)
from gm.edge.writer import SessionWriter
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
    MAX_REPORT_ENVELOPE_BYTES,
    SUBPROTOCOL,
    Op,
    ProtocolError,
    encode_native,
    hello,
    negotiate,
)
from shared.lanes import Upgrade
from shared.logs import Throttle, event
from shared.text import clip

log = logging.getLogger("sedna.gm.edge.hub")

_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_MAX_REASON_BYTES = 123  # RFC 6455: a close frame's reason fits in 123 bytes
WEBSOCKET_VERSION = "13"  # RFC 6455's, the only one the hub speaks
HELLO_TIMEOUT = 10.0  # the LC's own (lc/link/dialer.py): by then it has given up and gone
MAX_HANDSHAKES = 256  # upgrades between their answer and the session's registration, at once
DEPARTED_RETENTION = 600.0  # how long a disconnected node stays on /metrics (connected 0)


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
        hello_timeout: float = HELLO_TIMEOUT,
        close_timeout: float = 5.0,
        max_refusals: int = MAX_REFUSALS,
        refusal_window: float = REFUSAL_WINDOW,
        placement_grace: float = 0.0,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        compress: bool = False,
        max_sessions: int | None = None,
        max_handshakes: int = MAX_HANDSHAKES,
        encoded_bytes: int = DEFAULT_ENCODED_BYTES,
        departed_retention: float = DEPARTED_RETENTION,
    ) -> None:
        if not 0 < ping_interval < dead_after:
            raise ValueError(f"need 0 < ping_interval ({ping_interval}) < dead_after ({dead_after})")
        self._source = source
        if token and auth is not None:
            raise ValueError("give either a shared token or an authenticator, not both")
        # Proves each connection's Node-Name before it can replace that node's session.
        self._auth = auth if auth is not None else NodeAuth.shared(token)
        self._dead_after = dead_after
        self._hello_timeout = hello_timeout
        self._close_timeout = close_timeout
        self._max_frame_bytes = max_frame_bytes
        self._compress = compress
        self._sessions: dict[str, Session] = {}
        # Nodes whose session ended, oldest first: node -> (unix time it ended, of its last frame).
        # Invariant: no node is here and in `_sessions`; an entry lives `departed_retention`
        # seconds or until the node is forgotten, so it holds at most the nodes that exist.
        self._departed: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._departed_retention = departed_retention
        # sessions this process can hold (its descriptor budget); None = no limit
        self.max_sessions = max_sessions
        self._upgrading = 0  # connections between admission and registration
        self.max_handshakes = max_handshakes
        self._serving = 0  # connections past their upgrade, until their handler returns
        self._drained: asyncio.Future[None] | None = None  # close() waits on it for `_serving` to reach 0
        self._wheel: HeartbeatWheel[Session] = HeartbeatWheel(
            ping_interval=ping_interval, dead_after=dead_after, ping=self._ping, expire=self._expire)
        self._beating: asyncio.Task[None] | None = None  # runs the wheel while sessions exist
        self._at_capacity = False  # logged once per time the capacity is reached
        self._closing = False
        self.stats = HubStats()
        # each object version's encoding, shared by every session it is sent to
        self.encoded = EncodedVersions(max_bytes=encoded_bytes, max_frame_bytes=max_frame_bytes)
        self.writer = SessionWriter(self.encoded, self.stats, max_frame_bytes=max_frame_bytes)
        self.intake = Intake(source, handler, self.writer, self.stats, self._sessions,
                             placement_grace=placement_grace, max_refusals=max_refusals,
                             refusal_window=refusal_window, max_frame_bytes=max_frame_bytes)
        # per-session lines: a few a second name their node, a storm's rest is a count
        self._lines = Throttle(log)

    # ---- public API -------------------------------------------------------------------

    def attach(self, app: web.Application, *, path: str = "/") -> None:
        """Serve the hub on `path` (upstream LCs dial `/`) and close sessions on app shutdown."""
        app.router.add_get(path, self.handle)
        app.on_shutdown.append(self._on_shutdown)

    def notify_changed(
        self, kind: str, namespace: str, name: str, obj: Mapping[str, Any] | None, nodes: Iterable[str]
    ) -> None:
        """Queue the latest version (None: deleted or no longer assigned) for each connected node.

        The hub keeps a reference to `obj` until it is sent, and its encodings while it is the
        latest version (gm/edge/encoded.py): the caller must not mutate it, and gives a new
        mapping for each new version.
        """
        key = (kind, namespace, name)
        self.encoded.forget(key, unless=obj)  # an older version's encodings are no use now
        for node in nodes:
            session = self._sessions.get(node)
            if session is not None:
                session.pending.put(key, obj)
                self.writer.kick(session)

    def connected_nodes(self) -> list[str]:
        return sorted(self._sessions)

    @property
    def sessions_active(self) -> int:
        return len(self._sessions)

    def pending(self, node: str) -> int:
        """How many object versions wait to be written to the node (0 when not connected)."""
        session = self._sessions.get(node)
        return len(session.pending) if session is not None else 0

    def sessions(self) -> list[SessionView]:
        """Every connected node's session, by node name (GET /sessions, the per-node series)."""
        offset = wall_offset()
        return [self._sessions[node].view(offset) for node in sorted(self._sessions)]

    def departed(self) -> dict[str, float]:
        """Nodes disconnected within `departed_retention` seconds: node -> unix time of the
        last frame heard from it."""
        self._prune_departed(time.time())
        return {node: last_frame for node, (_, last_frame) in self._departed.items()}

    def _prune_departed(self, now: float) -> None:
        while self._departed:
            node, (ended, _) = next(iter(self._departed.items()))
            if now - ended < self._departed_retention:
                return
            del self._departed[node]

    def forget_node(self, node: str) -> None:
        """Drop what the hub remembers about a node (call when the Node is deleted)."""
        self.writer.held.pop(node, None)
        self._departed.pop(node, None)
        session = self._sessions.pop(node, None)  # its end is not recorded as a departure
        if session is not None:
            session.stop(CLOSE_GOING_AWAY, "node removed")

    async def close(self) -> None:
        """Close every session (going away) and wait, bounded, for them to finish."""
        self._closing = True
        for task in list(self.intake.finishing):
            task.cancel()
        for session in list(self._sessions.values()):
            session.stop(CLOSE_GOING_AWAY, "GM shutting down")
        if self._serving:
            self._drained = asyncio.get_running_loop().create_future()
            await asyncio.wait([self._drained], timeout=self._close_timeout * 2)
        if self._beating is not None:
            self._beating.cancel()
            await asyncio.wait([self._beating])
        self._lines.flush()

    # ---- connection -------------------------------------------------------------------

    async def handle(self, request: UpgradeRequest) -> EdgeSocket:
        """Check the upgrade request, then run the session to its end: an aiohttp handler, and
        the handler of the GM's websocket lane (shared/lanes.py), which takes the upgrades
        before aiohttp would parse them."""
        self._check_busy()
        node = await self._admit(request)
        try:
            self._check_upgrade(request)
            self._check_capacity(node)
        except web.HTTPException:
            self.stats.handshakes_rejected += 1
            raise
        ws = self._socket(request)
        self._upgrading += 1
        try:
            await ws.prepare(request)  # type: ignore[arg-type]
        except (ConnectionError, asyncio.CancelledError) as exc:
            # the client went away while its upgrade was answered (a reconnect storm's
            # timed-out dials): counted, not a traceback
            self._upgrading -= 1
            self.stats.handshakes_abandoned += 1
            if isinstance(exc, asyncio.CancelledError):
                raise
            return ws
        self._serving += 1
        try:
            await self._serve(node, ws, request)
        finally:
            self._serving -= 1
            if not self._serving and self._drained is not None and not self._drained.done():
                self._drained.set_result(None)
        return ws

    @property
    def lean(self) -> bool:
        """Whether the websocket lane may carry the sessions: it offers no compression."""
        return not self._compress

    def _socket(self, request: UpgradeRequest) -> EdgeSocket:
        # an LC sends only hellos and status reports: nothing over the report limits
        max_msg_size = min(self._max_frame_bytes, MAX_REPORT_ENVELOPE_BYTES)
        if isinstance(request, Upgrade):
            return request.websocket(protocols=(SUBPROTOCOL,), max_msg_size=max_msg_size,
                                     timeout=self._close_timeout)
        return web.WebSocketResponse(protocols=(SUBPROTOCOL,), autoping=False, max_msg_size=max_msg_size,
                                     timeout=self._close_timeout, compress=self._compress)

    def _check_busy(self) -> None:
        """503 with Retry-After while `max_handshakes` upgrades are in progress, before any other
        work: when a whole fleet dials at once (a GM restart, a network cut), handshakes taken on
        all at once all progress slowly, past the LC's timeouts, and each one timed out is work
        lost and a redial more; a quick 503 costs less and the LC backs off."""
        if self._upgrading < self.max_handshakes:
            return
        self.stats.handshakes_busy += 1
        raise refusal(web.HTTPServiceUnavailable, f"this GM is opening {self._upgrading} LC sessions at once; "
                                                  "retry later", **{"Retry-After": "1"})

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

    async def _admit(self, request: UpgradeRequest) -> str:
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

    async def _check_token(self, request: UpgradeRequest, node: str) -> None:
        """Map the authenticators' verdict to HTTP: 401 unknown, 403 another node's, 503 unsure."""
        try:
            identity = await self._auth.admit(node, request.headers.get("Authorization", ""))
        except AuthError as exc:
            self._lines.event("hub auth refused", level=logging.WARNING, node=node, remote=request.remote,
                              status=exc.status, reason=str(exc))
            raise _auth_response(exc) from None
        event(log, "hub auth admitted", level=logging.DEBUG, node=node, user=identity.user,
              method=identity.method)

    @staticmethod
    def _check_origin(request: UpgradeRequest) -> None:
        """Browsers send Origin; refuse cross-origin upgrades (LCs send none)."""
        origin = request.headers.get("Origin")
        if origin and urlsplit(origin).netloc.lower() != request.host.lower():
            raise refusal(web.HTTPForbidden, f"origin {clip(origin)!r} does not match host")

    @staticmethod
    def _node_name(request: UpgradeRequest) -> str:
        node = request.headers.get("Node-Name", "").strip()
        if not node:
            raise refusal(web.HTTPBadRequest, "Node-Name header required")
        if len(node) > 253 or not _NODE_NAME.fullmatch(node):
            raise refusal(web.HTTPBadRequest, f"Node-Name {clip(node)!r} is not a valid node name")
        return node

    @staticmethod
    def _check_upgrade(request: UpgradeRequest) -> None:
        """A websocket upgrade in version 13; any other version is 426 naming ours (RFC 6455
        §4.4: aiohttp would also take the drafts' 7 and 8)."""
        upgrade = request.headers.get(hdrs.UPGRADE, "").strip().lower() == "websocket"
        version = request.headers.get(hdrs.SEC_WEBSOCKET_VERSION, "")
        if upgrade and version.strip() != WEBSOCKET_VERSION:
            raise refusal(web.HTTPUpgradeRequired, f"Sec-WebSocket-Version {clip(version)!r} is not supported; "
                                                   f"this server speaks version {WEBSOCKET_VERSION}",
                          **{hdrs.SEC_WEBSOCKET_VERSION: WEBSOCKET_VERSION, hdrs.UPGRADE: "websocket"})
        if isinstance(request, Upgrade):
            ok = request.upgradable()
        else:
            ok = web.WebSocketResponse().can_prepare(request).ok
        if not ok:
            raise refusal(web.HTTPBadRequest, "websocket upgrade required")

    async def _serve(self, node: str, ws: EdgeSocket, request: UpgradeRequest) -> None:
        native = ws.ws_protocol == SUBPROTOCOL
        session: Session | None = None
        code, reason = CLOSE_NORMAL, ""
        try:
            try:  # the hello's body is not kept in this frame for the session's life
                session = self._open(node, ws, request, native=native,
                                     hello_body=await self._handshake(node, ws) if native else {})
            finally:
                self._upgrading -= 1  # registered as a session now, or gone
            await self._run(session)
        except SessionEnd as end:
            code, reason = end.code, end.reason
        finally:
            if session is not None:
                code, reason = await self._deregister(session, code, reason)
            self._record_end(node, native, code, reason)
            await self._close_ws(ws, request, code, reason)

    async def _handshake(self, node: str, ws: EdgeSocket) -> Mapping[str, Any]:
        """Native mode: read the LC's hello, pick a version, answer with ours; the LC's hello body."""
        data = await self.intake.receive(ws, silence=self._hello_timeout, silence_code=CLOSE_HELLO_TIMEOUT)
        msg = self.intake.decode(data, native=True)
        if msg is None or msg.op is not Op.HELLO:
            raise SessionEnd(CLOSE_PROTOCOL_ERROR, f"first frame must be hello, got {msg.op if msg else None}")
        if msg.body["node"] != node:
            raise SessionEnd(CLOSE_POLICY_VIOLATION, f"hello names node {msg.body['node']!r}, Node-Name is {node!r}")
        try:
            version = negotiate(msg.body["versions"])
        except ProtocolError as exc:
            raise SessionEnd(exc.close_code, str(exc)) from exc
        await self.writer.send(ws, encode_native(hello(node, versions=(version,))))
        return {**msg.body, "versions": [version]}

    def _open(self, node: str, ws: EdgeSocket, request: UpgradeRequest, *, native: bool,
              hello_body: Mapping[str, Any]) -> Session:
        """Build the session's snapshot and make it the node's session, in one step.

        No await happens between reading the source and registering the session, so
        every change the GM reports afterwards lands in this session's queue.
        """
        if self._closing:
            raise SessionEnd(CLOSE_GOING_AWAY, "GM shutting down")
        session = Session(node, ws, request.transport, native=native, epoch=hello_body.get("epoch", ""))
        try:
            objects = list(self._source.objects_for_node(node))
        except Exception as exc:  # the GM's code: a bug there must not take the hub down
            event(log, "hub objects_for_node failed", level=logging.ERROR, exc_info=True, node=node)
            raise SessionEnd(CLOSE_INTERNAL_ERROR, "GM could not build the snapshot") from exc
        for kind, namespace, name, obj in objects:
            session.pending.put((kind, namespace, name), obj)
        if not native:
            for key in self.writer.held.get(node, set()) - set(session.pending.keys()):
                session.pending.put(key, None)
        session.snapshot_count = len(session.pending)
        old = self._sessions.get(node)
        if old is not None:
            old.stop(CLOSE_REPLACED, "replaced by a newer connection for this node")
            self.stats.sessions_replaced += 1
        self._sessions[node] = session
        self._departed.pop(node, None)
        self.stats.sessions_opened += 1
        if native:
            self._lines.event("hub session opened", node=node, mode=session.mode, objects=session.snapshot_count,
                              version=hello_body["versions"][0], acked=hello_body.get("acked", 0),
                              epoch=session.epoch)
        else:
            self._lines.event("hub session opened", node=node, mode=session.mode, objects=session.snapshot_count)
        return session

    async def _deregister(self, session: Session, code: int, reason: str) -> tuple[int, str]:
        """Take the session out of the hub and end its writer; the (code, reason) it ends with
        (a stop requested before the reader ended wins)."""
        session.stop(code, reason)
        if self._sessions.get(session.node) is session:
            del self._sessions[session.node]
            now = time.time()
            self._departed[session.node] = (now, session.last_frame(wall_offset()))
            self._prune_departed(now)
        self._wheel.remove(session)
        writer = session.writer
        if writer is not None:
            await asyncio.wait([writer])
        assert session.end is not None
        return session.end

    async def _run(self, session: Session) -> None:
        """Read the session's frames in this task until it ends; its writer sends the snapshot
        now and whatever is queued later. Raises SessionEnd."""
        session.reader = asyncio.current_task()
        self._beat(session)
        self.writer.kick(session)
        try:
            await self.intake.read_loop(session)
        except asyncio.CancelledError:
            # `stop` cancels the reader to end it; a cancellation from anyone else goes on
            if session.end is None or session.reader is None or session.reader.uncancel() > 0:
                raise
            raise SessionEnd(*session.end) from None
        finally:
            session.reader = None

    def _beat(self, session: Session) -> None:
        """File the session with the heartbeat wheel, whose task runs while the hub does."""
        self._wheel.add(session, asyncio.get_running_loop().time())
        if self._beating is None:
            self._beating = asyncio.create_task(self._wheel.run(), name="hub-heartbeat")
            self._beating.add_done_callback(self._wheel_ended)

    def _wheel_ended(self, task: asyncio.Task[None]) -> None:
        """A crashed wheel is logged and started again a second later; a cancelled one stays down."""
        self._beating = None
        if task.cancelled() or self._closing:
            return
        event(log, "hub heartbeat crashed", level=logging.ERROR, exc_info=task.exception())
        asyncio.get_running_loop().call_later(1.0, self._restart_wheel)

    def _restart_wheel(self) -> None:
        if self._beating is None and not self._closing:
            self._beating = asyncio.create_task(self._wheel.run(), name="hub-heartbeat")
            self._beating.add_done_callback(self._wheel_ended)

    async def _ping(self, session: Session) -> None:
        """The wheel's ping: none while the socket still holds unsent data (the peer is not
        reading; the ping would only queue, and waiting for it would hold every other beat)."""
        transport = session.transport
        if session.end is not None or transport is None or transport.get_write_buffer_size():
            return
        try:
            await session.ws.ping()
        except ConnectionError as exc:
            session.stop(CLOSE_GOING_AWAY, f"ping failed: {exc}")
            return
        self.stats.pings_out += 1

    def _expire(self, session: Session) -> None:
        session.stop(CLOSE_DEAD, f"no frame from the peer for {self._dead_after:g}s")

    async def _close_ws(self, ws: EdgeSocket, request: UpgradeRequest, code: int, reason: str) -> None:
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
        self._lines.event("hub session closed", node=node, mode="native" if native else "upstream", code=code,
                          reason=reason)

    async def _on_shutdown(self, app: web.Application) -> None:
        await self.close()


def _auth_response(exc: AuthError) -> web.HTTPException:
    if exc.status == 403:
        return refusal(web.HTTPForbidden, str(exc))
    if exc.status == 503:
        return refusal(web.HTTPServiceUnavailable, str(exc), **{"Retry-After": "5"})
    return refusal(web.HTTPUnauthorized, str(exc), **{"WWW-Authenticate": "Bearer"})
