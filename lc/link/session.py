"""One websocket session between the LC and the GM, from handshake to the first failure.

A session runs four tasks it owns and cancels together: the reader (downstream objects, acks,
silence detection), the sender (outbox replay then new reports, within the in-flight
window, folded and bounded per object by lc/link/backlog.py), the pinger, and the acker (deletes acked reports from the outbox). The first
one to end ends the session by raising `SessionEnded`; the link then closes the socket
and redials. Nothing here retries: a session is disposable, the outbox and the next
snapshot carry everything across sessions.

Two modes, fixed at dial time by whether the GM picked the native subprotocol:

- native: hello both ways, snapshot markers, per-seq acks; a report leaves the outbox
  only once the GM applied it, or refused it for good: then it moves to the store's
  dead letters with the GM's reason, as does a report this side cannot encode.
- upstream: upstream Sedna's JSON envelope. An upstream GM never acks, so a report is
  deleted once the websocket write returned, as upstream's LC does: a report written
  into a connection that dies before the GM reads it is lost. That is the price of
  talking to a GM that cannot acknowledge.

Poison reports (native): a report whose frame the GM refuses is found and dead-lettered
without holding back the others by lc/link/quarantine.py; the session asks it how many
reports it may send and hands it the session's end when the GM closed over a frame.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import aiohttp
from aiohttp import WSMsgType

from lc.errors import StoreError
from lc.link.apply import DownstreamApplier, object_key
from lc.link.backlog import Backlog
from lc.link.quarantine import FRAME_REFUSED_CODES, Quarantine
from lc.link.state import LinkInfo, LinkMetrics
from lc.link.window import InFlight
from lc.store.facade import Store
from lc.store.outbox import OutboxEntry
from proto import (
    CLOSE_DEAD,
    CLOSE_GOING_AWAY,
    CLOSE_PROTOCOL_ERROR,
    CLOSE_REPLACED,
    MAX_REPORT_BYTES,
    MAX_REPORT_ENVELOPE_BYTES,
    PROTOCOL_VERSIONS,
    Message,
    ObjKey,
    Op,
    ProtocolError,
    UnknownOp,
    decode_native,
    decode_upstream,
    encode_native,
    encode_upstream,
    hello,
)
from proto.limits import check_json_like
from shared import apis
from shared.logs import event
from shared.tasks import until_first_done

log = logging.getLogger(__name__)

CLOSE_INTERNAL_ERROR = 1011


class SessionEnded(Exception):
    """Why a session ended, and the close code this side sends (if the socket is still open)."""

    def __init__(self, reason: str, *, code: int = CLOSE_GOING_AWAY, peer_code: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code
        self.peer_code = peer_code  # the GM's close code when the GM closed

    @property
    def replaced(self) -> bool:
        """The GM closed us because a newer connection for this node took over."""
        return self.peer_code == CLOSE_REPLACED


@dataclass(frozen=True, slots=True)
class SessionParams:
    """Timing and sizing of one session (see LinkSettings for the defaults and why)."""

    node: str
    ping_interval: float
    silence_timeout: float
    hello_timeout: float
    window: int
    per_object: int
    read_ahead: int
    ack_timeout: float
    idle_poll: float
    upstream_batch: int
    max_frame_bytes: int
    ack_flush_timeout: float


class Ack(NamedTuple):
    """The GM's answer for one report: applied (error None) or refused for good."""

    seq: int
    error: str | None
    fold: str | None  # the report's fold key: its ack settles the older reports it covered


class Session:
    """One connected websocket; `run()` returns only by raising SessionEnded."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, *, native: bool, params: SessionParams,
                 store: Store, applier: DownstreamApplier, info: LinkInfo, metrics: LinkMetrics) -> None:
        self.ws = ws
        self.native = native
        self.p = params
        self._store = store
        self._applier = applier
        self._info = info
        self._metrics = metrics
        self._inflight = InFlight(limit=params.window, ack_timeout=params.ack_timeout)
        self._backlog = Backlog(per_object=params.per_object)
        self._room = asyncio.Event()  # set by every ack: a slot (of the window or an object) freed
        self._acks: asyncio.Queue[Ack] = asyncio.Queue()
        self._seen: set[ObjKey] | None = None  # keys upserted since snapshot begin
        self._snapshot_frames = 0
        self._loop = asyncio.get_running_loop()
        self._quarantine = Quarantine(store, ack_timeout=params.ack_timeout, clock=self._loop.time,
                                      shielded=_unless_cancelled)

    @property
    def mode(self) -> str:
        return "native" if self.native else "upstream"

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    async def run(self, on_established: Callable[[Session], None]) -> None:
        """Handshake, then run the session's tasks until one of them ends it."""
        if self.native:
            await self._quarantine.load(within=self.p.hello_timeout)
        await self._handshake()
        on_established(self)
        tasks = [asyncio.create_task(self._read_loop(), name="lc-link-read"),
                 asyncio.create_task(self._send_loop(), name="lc-link-send"),
                 asyncio.create_task(self._ping_loop(), name="lc-link-ping")]
        if self.native:
            tasks.append(asyncio.create_task(self._ack_loop(), name="lc-link-ack"))
        try:
            done = await until_first_done(tasks)
        finally:
            await self._flush_acks()
        end = _first_end(done)
        if self.native and end.peer_code in FRAME_REFUSED_CODES:
            convicted = await self._quarantine.isolate(end.reason, self._inflight,
                                                       within=self.p.ack_flush_timeout)
            if convicted is not None:
                self._count_dead(convicted, "protocol", end.reason)
        raise end

    # ---- handshake -------------------------------------------------------------------

    async def _handshake(self) -> None:
        if not self.native:
            # Upstream's LC opens with a bare header; upstream GMs tolerate and drop it.
            await self._send(encode_upstream(hello(self.p.node)))
            return
        await self._send(encode_native(hello(self.p.node, acked=self._info.highest_acked,
                                             epoch=self._store.outbox_epoch)))
        msg = await self._next_message(self.p.hello_timeout, "the GM's hello")
        if msg is None or msg.op is not Op.HELLO:
            raise SessionEnded(f"first frame from the GM must be hello, got {msg.op if msg else None}",
                               code=CLOSE_PROTOCOL_ERROR)
        versions = msg.body["versions"]
        if len(versions) != 1 or versions[0] not in PROTOCOL_VERSIONS:
            raise SessionEnded(f"GM chose protocol versions {versions!r}; this LC speaks "
                               f"{list(PROTOCOL_VERSIONS)}", code=CLOSE_PROTOCOL_ERROR)
        if msg.body["node"] != self.p.node:
            raise SessionEnded(f"GM hello names node {msg.body['node']!r}, this LC is {self.p.node!r}",
                               code=CLOSE_PROTOCOL_ERROR)

    # ---- reading ---------------------------------------------------------------------

    async def _next_message(self, silence: float, waiting_for: str) -> Message | None:
        """Decode the next data frame; None for frames that carry nothing (upstream)."""
        data = await self._receive(silence, waiting_for)
        try:
            if self.native:
                return decode_native(data, max_bytes=self.p.max_frame_bytes)
            return decode_upstream(data, max_bytes=self.p.max_frame_bytes,
                                   canonical_kind=apis.canonical_kind)
        except UnknownOp as exc:
            if self.native:
                raise SessionEnded(f"GM sent a broken frame: {exc}", code=exc.close_code) from exc
            event(log, "upstream frame skipped", level=logging.WARNING, error=str(exc))
            return None
        except ProtocolError as exc:
            raise SessionEnded(f"GM sent a broken frame: {exc}", code=exc.close_code) from exc

    async def _receive(self, silence: float, waiting_for: str) -> str | bytes:
        """The next text or binary frame; pings are answered by aiohttp (autoping)."""
        try:
            msg = await self.ws.receive(timeout=silence)
        except TimeoutError:
            raise SessionEnded(f"no frame from the GM for {silence:g}s while waiting for {waiting_for}",
                               code=CLOSE_DEAD) from None
        if msg.type in (WSMsgType.BINARY, WSMsgType.TEXT):
            return msg.data
        if msg.type is WSMsgType.ERROR:
            raise SessionEnded(f"websocket error: {msg.data}", code=CLOSE_PROTOCOL_ERROR)
        code = self.ws.close_code
        reason = msg.extra if msg.type is WSMsgType.CLOSE and msg.extra else ""
        raise SessionEnded(f"GM closed the connection (code {code}{': ' + reason if reason else ''})",
                           peer_code=code)

    async def _read_loop(self) -> None:
        while True:
            msg = await self._next_message(self.p.silence_timeout, "any frame")
            if msg is not None:
                await self._on_message(msg)

    async def _on_message(self, msg: Message) -> None:
        if msg.op in (Op.UPSERT, Op.DELETE):
            self._on_object(msg)
        elif msg.op is Op.ACK and self.native:
            self._on_ack(msg)
        elif msg.op is Op.SNAPSHOT and self.native:
            self._on_snapshot(msg)
        elif self.native:
            raise SessionEnded(f"GM sent {msg.op}, which a GM must not send after hello",
                               code=CLOSE_PROTOCOL_ERROR)
        else:
            event(log, "upstream frame ignored", level=logging.WARNING, op=str(msg.op),
                  kind=msg.kind, key=f"{msg.namespace}/{msg.name}")

    def _on_object(self, msg: Message) -> None:
        self._info.downstream += 1
        self._metrics.downstream.labels(str(msg.op)).inc()
        key = object_key(msg.kind, msg.namespace, msg.name)
        if msg.op is Op.UPSERT:
            assert msg.body is not None  # Message enforces a body on upsert
            self._applier.upsert(msg.kind, msg.namespace, msg.name, dict(msg.body))
            if self._seen is not None:
                self._seen.add(key)
        else:
            self._applier.delete(msg.kind, msg.namespace, msg.name)
            if self._seen is not None:
                self._seen.discard(key)
        if self._seen is not None:
            self._snapshot_frames += 1

    def _on_snapshot(self, msg: Message) -> None:
        assert msg.body is not None  # Message enforces the phase
        if msg.body["phase"] == "begin":
            self._seen, self._snapshot_frames = set(), 0
            return
        if self._seen is None:
            raise SessionEnded("GM sent snapshot end without begin", code=CLOSE_PROTOCOL_ERROR)
        if msg.body["count"] != self._snapshot_frames:
            event(log, "snapshot count differs", level=logging.WARNING,
                  announced=msg.body["count"], received=self._snapshot_frames)
        self._applier.sweep(self._seen)
        event(log, "snapshot received", objects=len(self._seen))
        self._seen = None

    def _on_ack(self, msg: Message) -> None:
        entry = self._inflight.ack(msg.seq)
        self._room.set()
        self._info.highest_acked = max(self._info.highest_acked, msg.seq)
        error = msg.body.get("error") if msg.body is not None else None
        if error is None:
            self._info.acked += 1
        else:
            self._info.refused += 1
            where = f"{entry.namespace}/{entry.name}" if entry else "?"
            event(log, "report refused by the GM, moved to dead letters", level=logging.WARNING,
                  seq=msg.seq, kind=entry.kind if entry else "?", key=where, error=error)
        if entry is not None:
            self._info.settled(entry.kind, "acked" if error is None else "refused")
        self._acks.put_nowait(Ack(msg.seq, error, entry.fold if entry else None))

    # ---- writing ---------------------------------------------------------------------

    async def _send(self, data: str | bytes) -> None:
        try:
            if isinstance(data, bytes):
                await self.ws.send_bytes(data)
            else:
                await self.ws.send_str(data)
        except ConnectionError as exc:
            raise SessionEnded(f"write to the GM failed: {exc}") from exc

    async def _send_loop(self) -> None:
        if self.native:
            await self._send_native()
        else:
            await self._send_upstream()

    async def _send_native(self) -> None:
        """Replay every unacked report, then follow the outbox: per object in seq order,
        folded, within the window and the per-object bound."""
        cursor = 0  # highest seq read from the outbox in this session
        while True:
            self._room.clear()  # before looking: an ack from now on wakes the wait below
            for entry in self._inflight.overdue(self._loop.time()):
                await self._send_report(entry, resend=True)
            cursor = await self._read_ahead(cursor)
            head = self._backlog.lowest()
            next_seq = head.seq if head is not None else cursor + 1
            if self._quarantine.can_clear(next_seq, self._inflight):
                await self._clear_suspects()
            if not await self._send_some(next_seq):
                await self._wait_for_work(cursor)

    async def _read_ahead(self, cursor: int) -> int:
        """Read new outbox entries into the backlog up to its bound; the new cursor."""
        while len(self._backlog) < self.p.read_ahead:
            horizon = self._store.last_seq  # every entry <= horizon is committed and readable
            entries = await self._store.pending(cursor, self.p.read_ahead)
            if not entries:
                return max(cursor, horizon)
            covered = self._backlog.covered
            for entry in entries:
                self._backlog.add(entry)
            cursor = entries[-1].seq
            self._count_covered(self._backlog.covered - covered)
        return cursor

    async def _send_some(self, next_seq: int) -> bool:
        """Send what the window, the per-object bound and the quarantine allow; False if none."""
        room = self._quarantine.room(next_seq, self._inflight, self._inflight.room())
        if room == 0:
            return False
        if self._quarantine.is_suspect(next_seq):  # alone, and only the lowest seq
            entry = self._backlog.take_lowest(self._inflight)
            batch = [entry] if entry is not None else []
        else:
            batch = self._backlog.take(room, self._inflight)
        for entry in batch:
            probe = self._quarantine.is_suspect(entry.seq)
            await self._send_report(entry, resend=False,
                                    before_send=(lambda seq=entry.seq: self._quarantine.probing(seq)) if probe else None)
        return bool(batch)

    async def _wait_for_work(self, cursor: int) -> None:
        """Wait for an ack (a freed slot) or, when the backlog has room, a new outbox entry,
        at most until the next ack deadline."""
        within = self._wait_budget()
        waits = [asyncio.ensure_future(self._room.wait())]
        if len(self._backlog) < self.p.read_ahead:
            waits.append(asyncio.ensure_future(self._store.wait_outbox(cursor, within=within)))
        try:
            await asyncio.wait(waits, timeout=within, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    async def _send_report(self, entry: OutboxEntry, *, resend: bool,
                           before_send: Callable[[], None] | None = None) -> bool:
        """Send one report; False when it could not be encoded (it is a dead letter now).

        It is in flight (and `before_send` has run) before the write starts: a GM that closes
        the session over this frame while the write is still being awaited must find it there,
        or the quarantine could not tell which report it refused."""
        try:
            msg = Message(Op.STATUS, entry.seq, entry.kind, entry.namespace, entry.name, entry.body)
            check_json_like(entry.body, "body")  # what the GM's decoder checks
            # a report over what the GM decodes is a dead letter here, not a closed session there
            data = encode_native(msg, max_bytes=min(self.p.max_frame_bytes, MAX_REPORT_BYTES))
        except ProtocolError as exc:
            await self._drop(entry, str(exc))
            return False
        self._inflight.add(entry, self._loop.time())
        if before_send is not None:
            before_send()
        await self._send(data)
        self._count_sent(resend)
        return True

    async def _send_upstream(self) -> None:
        """Send in seq order and delete once written: upstream GMs never ack."""
        cursor = 0
        while True:
            horizon = self._store.last_seq
            entries = await self._store.pending(cursor, self.p.upstream_batch)
            if not entries:
                cursor = max(cursor, horizon)
                await self._store.wait_outbox(cursor, within=self.p.idle_poll)
                continue
            for entry in entries:
                await self._send_upstream_report(entry)
                cursor = entry.seq
            await self._delete_upto(cursor)

    async def _send_upstream_report(self, entry: OutboxEntry) -> None:
        try:
            msg = Message(Op.STATUS, 0, entry.kind, entry.namespace, entry.name, entry.body)
            check_json_like(entry.body, "body")
            data = encode_upstream(msg, max_bytes=min(self.p.max_frame_bytes, MAX_REPORT_ENVELOPE_BYTES))
        except ProtocolError as exc:
            await self._drop(entry, str(exc))
            return
        await self._send(data)
        self._count_sent(False)

    async def _delete_upto(self, seq: int) -> None:
        try:
            await _unless_cancelled(self._store.ack(seq))
        except StoreError as exc:
            raise SessionEnded(f"cannot delete sent reports from the outbox: {exc}",
                               code=CLOSE_INTERNAL_ERROR) from exc

    def _count_covered(self, count: int) -> None:
        if count:
            self._info.covered += count

    def _count_sent(self, resend: bool) -> None:
        self._info.sent += 1
        if resend:
            self._info.resent += 1

    async def _clear_suspects(self) -> None:
        try:
            await self._quarantine.clear()
        except StoreError as exc:
            raise SessionEnded(f"cannot clear suspect reports: {exc}",
                               code=CLOSE_INTERNAL_ERROR) from exc

    async def _drop(self, entry: OutboxEntry, error: str) -> None:
        """An entry that can never be sent: move it to the dead letters with the reason."""
        self._info.dropped += 1
        self._info.settled(entry.kind, "unsendable")
        event(log, "report cannot be sent, moved to dead letters", level=logging.WARNING,
              seq=entry.seq, kind=entry.kind, key=f"{entry.namespace}/{entry.name}", error=error)
        try:
            await _unless_cancelled(self._store.dead_letter(entry.seq, reason="unsendable",
                                                            error=error))
        except StoreError as exc:
            raise SessionEnded(f"cannot drop report {entry.seq}: {exc}", code=CLOSE_INTERNAL_ERROR) from exc

    def _count_dead(self, seq: int, reason: str, error: str) -> None:
        self._info.dropped += 1
        event(log, "report the GM cannot decode moved to dead letters", level=logging.WARNING,
              seq=seq, reason=reason, error=error)

    def _wait_budget(self) -> float:
        """How long the sender may wait before it must look for overdue acks again."""
        deadline = self._inflight.next_deadline()
        if deadline is None:
            return self.p.idle_poll
        return min(max(deadline - self._loop.time(), 0.001), self.p.idle_poll)

    async def _ping_loop(self) -> None:
        while True:
            await asyncio.sleep(self.p.ping_interval)
            try:
                await self.ws.ping()
            except ConnectionError as exc:
                raise SessionEnded(f"ping to the GM failed: {exc}") from exc

    # ---- acks ------------------------------------------------------------------------

    async def _ack_loop(self) -> None:
        while True:
            acks = [await self._acks.get()]
            await self._delete_acked(acks + self._drain_acks())

    def _drain_acks(self) -> list[Ack]:
        acks: list[Ack] = []
        while not self._acks.empty():
            acks.append(self._acks.get_nowait())
        return acks

    def _settle(self, acks: list[Ack]) -> Awaitable[list[Any]]:
        """Delete applied reports, move refused ones to the dead letters, each with the older
        reports it covered (same fold key): one transaction."""
        applied = [(seq, fold) for seq, error, fold in acks if error is None]
        return asyncio.gather(
            *([self._store.ack_many(applied)] if applied else []),
            *(self._store.dead_letter(seq, reason="refused", error=error, fold=fold)
              for seq, error, fold in acks if error is not None))

    async def _delete_acked(self, acks: list[Ack]) -> None:
        """Settle acked reports; concurrent writes share one group-commit transaction."""
        try:
            await _unless_cancelled(self._settle(acks))
        except StoreError as exc:
            raise SessionEnded(f"cannot delete acked reports: {exc}", code=CLOSE_INTERNAL_ERROR) from exc

    async def _flush_acks(self) -> None:
        """Delete acks that arrived before the end, so the next session does not resend them."""
        acks = self._drain_acks()
        if not acks:
            return
        try:
            async with asyncio.timeout(self.p.ack_flush_timeout):
                await _unless_cancelled(self._settle(acks))
        except (StoreError, TimeoutError) as exc:
            event(log, "acked reports left in the outbox", level=logging.WARNING,
                  count=len(acks), error=str(exc) or "timeout")


async def _unless_cancelled(deleting: Awaitable[Any]) -> Any:
    """Await an outbox delete that must finish even if this session is cancelled meanwhile.

    The store updates its outbox size in the coroutine that awaits the commit; cancelling
    that coroutine after the DELETE was submitted would commit the delete and skip the
    bookkeeping, leaving /metrics reporting reports that are no longer there.
    """
    future = asyncio.ensure_future(deleting)
    future.add_done_callback(_log_late_failure)
    return await asyncio.shield(future)


def _log_late_failure(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        event(log, "outbox delete failed", level=logging.WARNING, error=repr(future.exception()))


def _first_end(done: set[asyncio.Task[None]]) -> SessionEnded:
    """The SessionEnded that ended the session; a crashed task becomes one (logged)."""
    errors = [t.exception() for t in done if not t.cancelled() and t.exception() is not None]
    for exc in errors:
        if isinstance(exc, SessionEnded):
            return exc
    for exc in errors:
        log.error("link session task crashed", exc_info=exc)
    first = errors[0] if errors else None
    return SessionEnded(f"internal error: {first!r}", code=CLOSE_INTERNAL_ERROR)
