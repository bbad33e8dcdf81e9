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
import math
import re
from collections import OrderedDict, deque
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from aiohttp import WSMsgType, hdrs, web

from gm.edge.auth import AuthError, NodeAuth
from gm.edge.encoded import DEFAULT_MAX_BYTES as DEFAULT_ENCODED_BYTES
from gm.edge.encoded import EncodedVersions
from gm.edge.heartbeat import HeartbeatWheel
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
from shared.logs import Throttle, event
from shared.text import clip

log = logging.getLogger("sedna.gm.edge.hub")

CLOSE_INTERNAL_ERROR = 1011
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_MAX_REASON_BYTES = 123  # RFC 6455: a close frame's reason fits in 123 bytes
WEBSOCKET_VERSION = "13"  # RFC 6455's, the only one the hub speaks
MAX_REFUSALS = 100  # refused reports a session may send within REFUSAL_WINDOW seconds
HELLO_TIMEOUT = 10.0  # the LC's own (lc/link/dialer.py): by then it has given up and gone
MAX_HANDSHAKES = 256  # upgrades between their answer and the session's registration, at once
REFUSAL_WINDOW = 10.0
PLACEMENT_GRACE = 10.0  # how long the GM lets a report wait for its object to reach its caches
PLACEMENT_POLL = 0.05
MAX_AWAITING = 64  # such reports of one node at once (an LC's window); more are refused at once


class ObjectSource(Protocol):
    """What the GM tells the hub about which objects each node needs.

    An object version is one mapping, never mutated, handed out (here and to `notify_changed`)
    for as long as that version lasts: the hub shares its encodings by that identity."""

    def objects_for_node(self, node: str) -> Iterable[tuple[str, str, str, Mapping[str, Any]]]:
        """Every (kind, namespace, name, object) the node needs right now."""
        ...

    def is_assigned(self, node: str, kind: str, namespace: str, name: str) -> bool:
        """Whether the node may report status for this object."""
        ...

    def lacks(self, kind: str, namespace: str, name: str) -> bool:
        """Whether the object is of a kind the GM places and is not in its caches (yet)."""
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
    handshakes_busy: int = 0  # refused with 503: `max_handshakes` upgrades were in progress
    placement_waits: int = 0  # reports that waited for the caches to hold their object


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

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: OrderedDict[ObjKey, Mapping[str, Any] | None] = OrderedDict()

    def put(self, key: ObjKey, obj: Mapping[str, Any] | None) -> None:
        self._items[key] = obj

    def pop(self) -> tuple[ObjKey, Mapping[str, Any] | None]:
        return self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

    def keys(self) -> list[ObjKey]:
        return list(self._items)


class _Session:
    """One connected node. The hub's `_sessions[node]` points at the current one.

    Its reader is the task that runs the hub's handler for the connection; its writer is a
    task only while something is queued (`Hub._kick`). `end` is set once, by whatever ends the
    session first; `stop` then cancels both tasks, and the reader turns that cancellation
    into the end.
    """

    __slots__ = ("node", "ws", "transport", "native", "epoch", "pending", "acks", "refusals", "snapshot_count",
                 "snapshot_due", "seq", "end", "reader", "writer", "heard", "peer_pinged", "pinged", "beat_slot")

    def __init__(self, node: str, ws: web.WebSocketResponse, transport: asyncio.BaseTransport | None, *,
                 native: bool, epoch: str = "") -> None:
        self.node = node
        self.ws = ws
        self.transport = transport  # no ping while its write buffer holds data
        self.native = native
        self.epoch = epoch  # the LC's outbox epoch from its hello ("" in upstream mode)
        self.pending = _Pending()
        self.acks: list[tuple[int, str | None]] | None = None  # (seq, refusal) to send, oldest first
        self.refusals: deque[float] | None = None  # loop times of recent refusals
        self.snapshot_count = 0
        self.snapshot_due = native  # the writer's first run sends the snapshot
        self.seq = 0  # last downstream seq sent in this session
        self.end: tuple[int, str] | None = None  # (close code, reason): the session is ending
        self.reader: asyncio.Task[Any] | None = None  # while it reads
        self.writer: asyncio.Task[None] | None = None  # while it writes
        self.heard = 0.0  # loop time of the last frame from the peer
        self.peer_pinged = -math.inf  # loop time of the peer's last ping
        self.pinged = 0.0  # loop time the heartbeat wheel last pinged (or chose not to)
        self.beat_slot = -1  # the wheel's slot for it

    def stop(self, code: int, reason: str) -> None:
        """Ask the session to end with this close code; the first request wins. A task never
        cancels itself here: the reader checks `end` after every frame it handled."""
        if self.end is not None:
            return
        self.end = (code, reason)
        current = asyncio.current_task()
        for task in (self.writer, self.reader):
            if task is not None and task is not current:
                task.cancel()

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
    ) -> None:
        if not 0 < ping_interval < dead_after:
            raise ValueError(f"need 0 < ping_interval ({ping_interval}) < dead_after ({dead_after})")
        self._source = source
        self._handler = handler
        if token and auth is not None:
            raise ValueError("give either a shared token or an authenticator, not both")
        # Proves each connection's Node-Name before it can replace that node's session.
        self._auth = auth if auth is not None else NodeAuth.shared(token)
        self._dead_after = dead_after
        self._hello_timeout = hello_timeout
        self._max_refusals = max_refusals
        self._refusal_window = refusal_window
        self._placement_grace = placement_grace  # 0: a report for an object not placed is refused at once
        self._awaiting: dict[str, int] = {}  # node -> its reports waiting for their object's placement
        self._finishing: set[asyncio.Task[None]] = set()  # reports waiting for their write
        self._close_timeout = close_timeout
        self._max_frame_bytes = max_frame_bytes
        # each object version's encoding, shared by every session it is sent to
        self.encoded = EncodedVersions(max_bytes=encoded_bytes, max_frame_bytes=max_frame_bytes)
        self._compress = compress
        self._sessions: dict[str, _Session] = {}
        # sessions this process can hold (its descriptor budget); None = no limit
        self.max_sessions = max_sessions
        self._upgrading = 0  # connections between admission and registration
        self.max_handshakes = max_handshakes
        self._serving = 0  # connections past their upgrade, until their handler returns
        self._drained: asyncio.Future[None] | None = None  # close() waits on it for `_serving` to reach 0
        self._wheel: HeartbeatWheel[_Session] = HeartbeatWheel(
            ping_interval=ping_interval, dead_after=dead_after, ping=self._ping, expire=self._expire)
        self._beating: asyncio.Task[None] | None = None  # runs the wheel while sessions exist
        self._at_capacity = False  # logged once per time the capacity is reached
        # Keys each upstream-mode node was last sent as present; lets an upstream LC, which
        # has no snapshot markers, be told about objects deleted while it was away.
        self._held: dict[str, set[ObjKey]] = {}
        self._closing = False
        self.stats = HubStats()
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
                self._kick(session)

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
        if self._serving:
            self._drained = asyncio.get_running_loop().create_future()
            await asyncio.wait([self._drained], timeout=self._close_timeout * 2)
        if self._beating is not None:
            self._beating.cancel()
            await asyncio.wait([self._beating])
        self._lines.flush()

    # ---- connection -------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """aiohttp handler: check the upgrade request, then run the session to its end."""
        self._check_busy()
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
        self._serving += 1
        try:
            await self._serve(node, ws, request)
        finally:
            self._serving -= 1
            if not self._serving and self._drained is not None and not self._drained.done():
                self._drained.set_result(None)
        return ws

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
            self._lines.event("hub auth refused", level=logging.WARNING, node=node, remote=request.remote,
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
            try:  # the hello's body is not kept in this frame for the session's life
                session = self._open(node, ws, request, native=native,
                                     hello_body=await self._handshake(node, ws) if native else {})
            finally:
                self._upgrading -= 1  # registered as a session now, or gone
            await self._run(session)
        except _SessionEnd as end:
            code, reason = end.code, end.reason
        finally:
            if session is not None:
                code, reason = await self._deregister(session, code, reason)
            self._record_end(node, native, code, reason)
            await self._close_ws(ws, request, code, reason)

    async def _handshake(self, node: str, ws: web.WebSocketResponse) -> Mapping[str, Any]:
        """Native mode: read the LC's hello, pick a version, answer with ours; the LC's hello body."""
        data = await self._receive(ws, silence=self._hello_timeout, silence_code=CLOSE_HELLO_TIMEOUT)
        msg = self._decode(data, native=True)
        if msg is None or msg.op is not Op.HELLO:
            raise _SessionEnd(CLOSE_PROTOCOL_ERROR, f"first frame must be hello, got {msg.op if msg else None}")
        if msg.body["node"] != node:
            raise _SessionEnd(CLOSE_POLICY_VIOLATION, f"hello names node {msg.body['node']!r}, Node-Name is {node!r}")
        try:
            version = negotiate(msg.body["versions"])
        except ProtocolError as exc:
            raise _SessionEnd(exc.close_code, str(exc)) from exc
        await self._send(ws, encode_native(hello(node, versions=(version,))))
        return {**msg.body, "versions": [version]}

    def _open(self, node: str, ws: web.WebSocketResponse, request: web.Request, *, native: bool,
              hello_body: Mapping[str, Any]) -> _Session:
        """Build the session's snapshot and make it the node's session, in one step.

        No await happens between reading the source and registering the session, so
        every change the GM reports afterwards lands in this session's queue.
        """
        if self._closing:
            raise _SessionEnd(CLOSE_GOING_AWAY, "GM shutting down")
        session = _Session(node, ws, request.transport, native=native, epoch=hello_body.get("epoch", ""))
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
        if native:
            self._lines.event("hub session opened", node=node, mode=session.mode, objects=session.snapshot_count,
                  version=hello_body["versions"][0], acked=hello_body.get("acked", 0), epoch=session.epoch)
        else:
            self._lines.event("hub session opened", node=node, mode=session.mode, objects=session.snapshot_count)
        return session

    async def _deregister(self, session: _Session, code: int, reason: str) -> tuple[int, str]:
        """Take the session out of the hub and end its writer; the (code, reason) it ends with
        (a stop requested before the reader ended wins)."""
        session.stop(code, reason)
        if self._sessions.get(session.node) is session:
            del self._sessions[session.node]
        self._wheel.remove(session)
        writer = session.writer
        if writer is not None:
            await asyncio.wait([writer])
        assert session.end is not None
        return session.end

    async def _run(self, session: _Session) -> None:
        """Read the session's frames in this task until it ends; its writer sends the snapshot
        now and whatever is queued later. Raises _SessionEnd."""
        session.reader = asyncio.current_task()
        self._beat(session)
        self._kick(session)
        try:
            await self._read_loop(session)
        except asyncio.CancelledError:
            # `stop` cancels the reader to end it; a cancellation from anyone else goes on
            if session.end is None or session.reader is None or session.reader.uncancel() > 0:
                raise
            raise _SessionEnd(*session.end) from None
        finally:
            session.reader = None

    def _beat(self, session: _Session) -> None:
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

    async def _ping(self, session: _Session) -> None:
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

    def _expire(self, session: _Session) -> None:
        session.stop(CLOSE_DEAD, f"no frame from the peer for {self._dead_after:g}s")

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
        self._lines.event("hub session closed", node=node, mode="native" if native else "upstream", code=code,
              reason=reason)

    # ---- reading ----------------------------------------------------------------------

    async def _receive(self, ws: web.WebSocketResponse, *, session: _Session | None = None,
                       silence: float | None = None, silence_code: int = CLOSE_DEAD) -> str | bytes:
        """The next data frame; answers pings, ends the session on close, error or `silence`
        seconds without a frame (the handshake's bound; a session's is the wheel's)."""
        while True:
            try:
                msg = await ws.receive(timeout=silence)
            except TimeoutError:
                raise _SessionEnd(silence_code, f"no frame from the peer for {silence:g}s") from None
            if session is not None:
                session.heard = asyncio.get_running_loop().time()
            if msg.type in (WSMsgType.BINARY, WSMsgType.TEXT):
                self.stats.frames_in += 1
                return msg.data
            if msg.type is WSMsgType.PING:
                if session is not None:
                    session.peer_pinged = session.heard
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
        while session.end is None:
            data = await self._receive(session.ws, session=session)
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
        raise _SessionEnd(*session.end)  # stopped by a report this task handled

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
        """Take one report, after waiting for its object to be placed when the caches lack it
        (upstream sessions wait here, in order; native ones go on reading meanwhile)."""
        node = session.node
        if not self._awaits_placement(node, msg):
            await self._take(session, msg)
            return
        self._awaiting[node] = self._awaiting.get(node, 0) + 1  # released when the wait ends
        waiting = self._placed_then_taken(session, msg)
        if not session.native:
            await waiting
            return
        task = asyncio.ensure_future(waiting)
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    def _awaits_placement(self, node: str, msg: Message) -> bool:
        return (self._placement_grace > 0 and self._awaiting.get(node, 0) < MAX_AWAITING
                and not self._source.is_assigned(node, msg.kind, msg.namespace, msg.name)
                and self._source.lacks(msg.kind, msg.namespace, msg.name))

    async def _placed_then_taken(self, session: _Session, msg: Message) -> None:
        """Wait up to `placement_grace` for the object to be placed on the node, then take the
        report (refused if it still is not); left unacked if the session ends meanwhile."""
        node, loop = session.node, asyncio.get_running_loop()
        self.stats.placement_waits += 1
        started = loop.time()
        try:
            while not self._source.is_assigned(node, msg.kind, msg.namespace, msg.name):
                if loop.time() - started >= self._placement_grace or self._sessions.get(node) is not session:
                    break
                await asyncio.sleep(PLACEMENT_POLL)
        finally:
            if left := self._awaiting.pop(node) - 1:
                self._awaiting[node] = left
        if self._sessions.get(node) is session:
            event(log, "hub status waited for placement", **_where(node, msg), waited=round(loop.time() - started, 3))
            await self._take(session, msg)

    async def _take(self, session: _Session, msg: Message) -> None:
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
            self._queue_ack(session, msg.seq, None)

    def _refused(self, session: _Session, msg: Message, exc: ReportRefused) -> None:
        """Ack a refused report with the reason; a session that keeps sending them is closed."""
        self.stats.refused += 1
        reason = str(exc) or type(exc).__name__
        event(log, "hub status refused", level=logging.WARNING, **_where(session.node, msg), reason=reason)
        if session.native:
            self._queue_ack(session, msg.seq, reason)
        now = asyncio.get_running_loop().time()
        if session.refusals is None:
            session.refusals = deque()
        session.refusals.append(now)
        while session.refusals and now - session.refusals[0] > self._refusal_window:
            session.refusals.popleft()
        if len(session.refusals) > self._max_refusals:
            self.stats.sessions_refusing += 1
            session.stop(CLOSE_POLICY_VIOLATION, f"more than {self._max_refusals} refused reports within "
                                                 f"{self._refusal_window:g}s")

    def _queue_ack(self, session: _Session, seq: int, error: str | None) -> None:
        """Acks go out as the reports' writes commit, in the order they commit."""
        if session.acks is None:
            session.acks = []
        session.acks.append((seq, error))
        self._kick(session)

    # ---- writing ----------------------------------------------------------------------

    def _kick(self, session: _Session) -> None:
        """Start the session's writer unless it runs or the session is ending: it sends what is
        queued (acks first, then objects) and ends when nothing is left."""
        if session.end is not None or (session.writer is not None and not session.writer.done()):
            return
        writer = asyncio.create_task(self._write(session), name=f"hub-write-{session.node}")
        writer.add_done_callback(lambda task: self._written(session, task))
        session.writer = writer

    def _written(self, session: _Session, task: asyncio.Task[None]) -> None:
        """A writer's end: a failed write ends the session, a crash too (logged)."""
        if session.writer is task:
            session.writer = None
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, _SessionEnd):
            session.stop(exc.code, exc.reason)
        elif exc is not None:
            event(log, "hub session task crashed", level=logging.ERROR, exc_info=exc, node=session.node)
            session.stop(CLOSE_INTERNAL_ERROR, "internal error")

    async def _write(self, session: _Session) -> None:
        if session.snapshot_due:
            session.snapshot_due = False
            await self._write_snapshot(session)
        while session.acks or session.pending:
            if session.acks:
                seq, error = session.acks.pop(0)
                await self._send(session.ws, encode_native(ack(seq, error=error)))
                self.stats.acks_out += 1
            else:
                key, obj = session.pending.pop()
                await self._send_object(session, key, obj)
        session.acks = None

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
            data: str | bytes
            if obj is None:
                data = (encode_native if session.native else encode_upstream)(msg, max_bytes=self._max_frame_bytes)
            elif session.native:
                data = encode_native(msg, max_bytes=self._max_frame_bytes,
                                     packed_body=self.encoded.native_body(key, obj))
            else:
                data = self.encoded.upstream_frame(key, msg)
        except ProtocolError as exc:
            self.stats.skipped_out += 1
            event(log, "hub cannot send", level=logging.ERROR, node=session.node, kind=kind,
                  key=f"{namespace}/{name}", error=str(exc))
            return
        await self._send(session.ws, data)
        if not session.native:
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
