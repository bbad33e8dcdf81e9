"""The hub's reading side: a session's frames, and the status reports in them.

A frame that does not decode ends that session only. A report is authorized (its object must
be assigned to the reporting node) and handed to the status handler in the order it arrives;
a native report is acked by its sequence number once the write carrying it committed,
independently of the session's other reports, so a slow object never holds another's acks;
an upstream session's reports are awaited one by one (upstream LCs take no acks: that is
their backpressure). A report for an object this GM's caches do not hold yet waits up to
`placement_grace` for the caches to place it (another replica, the leader, may have placed
its worker first), without holding the session's other reports. A session that keeps
sending reports the GM refuses (`max_refusals` within `refusal_window` seconds) is closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Mapping
from typing import Any

from aiohttp import WSMsgType

from gm.edge.ports import EdgeSocket, ObjectSource, StatusHandler
from gm.edge.session import HubStats, Session, SessionEnd
from gm.edge.writer import SessionWriter
from gm.reports import ReportDeferred, ReportRefused
from proto import (
    CLOSE_DEAD,
    CLOSE_GOING_AWAY,
    CLOSE_NORMAL,
    CLOSE_POLICY_VIOLATION,
    CLOSE_PROTOCOL_ERROR,
    MAX_REPORT_BYTES,
    MAX_REPORT_ENVELOPE_BYTES,
    Message,
    Op,
    ProtocolError,
    UnknownOp,
    decode_native,
    decode_upstream,
)
from shared import apis
from shared.logs import event

log = logging.getLogger("sedna.gm.edge.hub")

MAX_REFUSALS = 100  # refused reports a session may send within REFUSAL_WINDOW seconds
REFUSAL_WINDOW = 10.0
PLACEMENT_POLL = 0.05
MAX_AWAITING = 64  # such reports of one node at once (an LC's window); more are refused at once


class Intake:
    """Reads every session's frames and takes the reports in them."""

    def __init__(self, source: ObjectSource, handler: StatusHandler, writer: SessionWriter, stats: HubStats,
                 sessions: Mapping[str, Session], *, placement_grace: float, max_refusals: int,
                 refusal_window: float, max_frame_bytes: int) -> None:
        self._source = source
        self._handler = handler
        self._writer = writer
        self.stats = stats
        self._sessions = sessions  # the hub's: which session is each node's current one
        self.placement_grace = placement_grace  # 0: a report for an object not placed is refused at once
        self._max_refusals = max_refusals
        self._refusal_window = refusal_window
        self.max_frame_bytes = max_frame_bytes
        self._awaiting: dict[str, int] = {}  # node -> its reports waiting for their object's placement
        self.finishing: set[asyncio.Task[None]] = set()  # reports waiting for their write

    async def receive(self, ws: EdgeSocket, *, session: Session | None = None,
                       silence: float | None = None, silence_code: int = CLOSE_DEAD) -> str | bytes:
        """The next data frame; answers pings, ends the session on close, error or `silence`
        seconds without a frame (the handshake's bound; a session's is the wheel's)."""
        while True:
            try:
                msg = await ws.receive(timeout=silence)
            except TimeoutError:
                raise SessionEnd(silence_code, f"no frame from the peer for {silence:g}s") from None
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
                    raise SessionEnd(CLOSE_GOING_AWAY, f"pong failed: {exc}") from exc
            elif msg.type is WSMsgType.PONG:
                continue
            elif msg.type is WSMsgType.ERROR:
                raise SessionEnd(ws.close_code or CLOSE_PROTOCOL_ERROR, f"websocket error: {msg.data}")
            else:  # CLOSE, CLOSING, CLOSED: the peer went away
                raise SessionEnd(ws.close_code or CLOSE_NORMAL, "closed by peer")

    async def read_loop(self, session: Session) -> None:
        while session.end is None:
            data = await self.receive(session.ws, session=session)
            msg = self.decode(data, native=session.native)
            if msg is None:
                continue
            if msg.op is Op.STATUS:
                await self._on_status(session, msg)
            elif session.native:
                raise SessionEnd(CLOSE_PROTOCOL_ERROR, f"{msg.op} is not accepted from an LC")
            else:
                event(log, "hub ignored upstream op", level=logging.WARNING, node=session.node, op=str(msg.op),
                      kind=msg.kind, key=f"{msg.namespace}/{msg.name}")
        raise SessionEnd(*session.end)  # stopped by a report this task handled

    def decode(self, data: str | bytes, *, native: bool) -> Message | None:
        """Decode one frame; protocol errors end the session (upstream's unknown ops are skipped)."""
        try:
            if native:
                return decode_native(data, max_bytes=min(self.max_frame_bytes, MAX_REPORT_BYTES))
            return decode_upstream(data, max_bytes=min(self.max_frame_bytes, MAX_REPORT_ENVELOPE_BYTES),
                                   canonical_kind=apis.canonical_kind)
        except UnknownOp as exc:
            if native:
                raise SessionEnd(exc.close_code, str(exc)) from exc
            event(log, "hub ignored upstream frame", level=logging.WARNING, error=str(exc))
            return None
        except ProtocolError as exc:
            raise SessionEnd(exc.close_code, str(exc)) from exc

    async def _on_status(self, session: Session, msg: Message) -> None:
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
        self.finishing.add(task)
        task.add_done_callback(self.finishing.discard)

    def _awaits_placement(self, node: str, msg: Message) -> bool:
        return (self.placement_grace > 0 and self._awaiting.get(node, 0) < MAX_AWAITING
                and not self._source.is_assigned(node, msg.kind, msg.namespace, msg.name)
                and self._source.lacks(msg.kind, msg.namespace, msg.name))

    async def _placed_then_taken(self, session: Session, msg: Message) -> None:
        """Wait up to `placement_grace` for the object to be placed on the node, then take the
        report (refused if it still is not); left unacked if the session ends meanwhile."""
        node, loop = session.node, asyncio.get_running_loop()
        self.stats.placement_waits += 1
        started = loop.time()
        try:
            while not self._source.is_assigned(node, msg.kind, msg.namespace, msg.name):
                if loop.time() - started >= self.placement_grace or self._sessions.get(node) is not session:
                    break
                await asyncio.sleep(PLACEMENT_POLL)
        finally:
            if left := self._awaiting.pop(node) - 1:
                self._awaiting[node] = left
        if self._sessions.get(node) is session:
            event(log, "hub status waited for placement", **_where(node, msg), waited=round(loop.time() - started, 3))
            await self._take(session, msg)

    async def _take(self, session: Session, msg: Message) -> None:
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
        self.finishing.add(task)
        task.add_done_callback(self.finishing.discard)

    async def _finish(self, session: Session, msg: Message, pending: Awaitable[None]) -> None:
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
            self._writer.queue_ack(session, msg.seq, None)

    def _refused(self, session: Session, msg: Message, exc: ReportRefused) -> None:
        """Ack a refused report with the reason; a session that keeps sending them is closed."""
        self.stats.refused += 1
        reason = str(exc) or type(exc).__name__
        event(log, "hub status refused", level=logging.WARNING, **_where(session.node, msg), reason=reason)
        if session.native:
            self._writer.queue_ack(session, msg.seq, reason)
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


def _where(node: str, msg: Message) -> dict[str, Any]:
    return {"node": node, "kind": msg.kind, "key": f"{msg.namespace}/{msg.name}", "seq": msg.seq}

