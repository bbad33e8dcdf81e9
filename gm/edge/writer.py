"""The hub's writing side: what a session sends its LC, acks first, then object versions.

A session has a writer task only while something is queued (`kick` starts one, and it ends
when nothing is left): an idle session costs no task. The first run of a native session's
writer sends the snapshot (begin, the node's objects, end). Object versions are encoded once
and shared by every session they go to (gm/edge/encoded.py). An upstream-mode LC is sent only
the kinds upstream's LC has managers for, and the hub remembers which keys each such node
holds, so that it can be told about objects deleted while it was away.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from gm.edge.encoded import EncodedVersions
from gm.edge.ports import EdgeSocket
from gm.edge.session import CLOSE_INTERNAL_ERROR, HubStats, Session, SessionEnd
from proto import (
    CLOSE_GOING_AWAY,
    Message,
    ObjKey,
    Op,
    ProtocolError,
    ack,
    encode_native,
    encode_upstream,
    snapshot_begin,
    snapshot_end,
)
from shared import apis
from shared.logs import event

log = logging.getLogger("sedna.gm.edge.hub")


def upstream_lc_takes(kind: str) -> bool:
    """Whether upstream's LC has a manager for the kind (the ones upstream's GM sends it);
    it would log and drop any other, so an upstream-mode session is not sent those."""
    api = apis.by_kind(kind)
    return api is not None and api.synced_to_edge



class SessionWriter:
    """Writes every session's queued acks and object versions."""

    def __init__(self, encoded: EncodedVersions, stats: HubStats, *, max_frame_bytes: int) -> None:
        self.encoded = encoded
        self.stats = stats
        self.max_frame_bytes = max_frame_bytes
        # Keys each upstream-mode node was last sent as present; lets an upstream LC, which
        # has no snapshot markers, be told about objects deleted while it was away.
        self.held: dict[str, set[ObjKey]] = {}

    def queue_ack(self, session: Session, seq: int, error: str | None) -> None:
        """Acks go out as the reports' writes commit, in the order they commit."""
        if session.acks is None:
            session.acks = []
        session.acks.append((seq, error))
        self.kick(session)

    def kick(self, session: Session) -> None:
        """Start the session's writer unless it runs or the session is ending: it sends what is
        queued (acks first, then objects) and ends when nothing is left."""
        if session.end is not None or (session.writer is not None and not session.writer.done()):
            return
        writer = asyncio.create_task(self._write(session), name=f"hub-write-{session.node}")
        writer.add_done_callback(lambda task: self._written(session, task))
        session.writer = writer

    def _written(self, session: Session, task: asyncio.Task[None]) -> None:
        """A writer's end: a failed write ends the session, a crash too (logged)."""
        if session.writer is task:
            session.writer = None
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, SessionEnd):
            session.stop(exc.code, exc.reason)
        elif exc is not None:
            event(log, "hub session task crashed", level=logging.ERROR, exc_info=exc, node=session.node)
            session.stop(CLOSE_INTERNAL_ERROR, "internal error")

    async def _write(self, session: Session) -> None:
        if session.snapshot_due:
            session.snapshot_due = False
            await self._write_snapshot(session)
        while session.acks or session.pending:
            if session.acks:
                seq, error = session.acks.pop(0)
                await self.send(session.ws, encode_native(ack(seq, error=error)))
                self.stats.acks_out += 1
                session.acked = max(session.acked, seq)
            else:
                key, obj = session.pending.pop()
                await self._send_object(session, key, obj)
        session.acks = None

    async def _write_snapshot(self, session: Session) -> None:
        """begin, the snapshot's objects (the first entries of the queue), end."""
        count = session.snapshot_count
        await self.send(session.ws, encode_native(snapshot_begin(session.next_seq())))
        for _ in range(count):
            key, obj = session.pending.pop()
            await self._send_object(session, key, obj)
        await self.send(session.ws, encode_native(snapshot_end(count, session.next_seq())))

    async def _send_object(self, session: Session, key: ObjKey, obj: Mapping[str, Any] | None) -> None:
        kind, namespace, name = key
        if not session.native and not upstream_lc_takes(kind):
            return  # assigned all the same: the node's reports for it are accepted
        op = Op.DELETE if obj is None else Op.UPSERT
        try:
            msg = Message(op, session.next_seq(), kind, namespace, name, obj)
            data: str | bytes
            if obj is None:
                data = (encode_native if session.native else encode_upstream)(msg, max_bytes=self.max_frame_bytes)
            elif session.native:
                data = encode_native(msg, max_bytes=self.max_frame_bytes,
                                     packed_body=self.encoded.native_body(key, obj))
            else:
                data = self.encoded.upstream_frame(key, msg)
        except ProtocolError as exc:
            self.stats.skipped_out += 1
            event(log, "hub cannot send", level=logging.ERROR, node=session.node, kind=kind,
                  key=f"{namespace}/{name}", error=str(exc))
            return
        await self.send(session.ws, data)
        if not session.native:
            held = self.held.setdefault(session.node, set())
            if obj is None:
                held.discard(key)
            else:
                held.add(key)

    async def send(self, ws: EdgeSocket, data: str | bytes) -> None:
        try:
            if isinstance(data, bytes):
                await ws.send_bytes(data)
            else:
                await ws.send_str(data)
        except ConnectionError as exc:
            raise SessionEnd(CLOSE_GOING_AWAY, f"write failed: {exc}") from exc
        self.stats.frames_out += 1
