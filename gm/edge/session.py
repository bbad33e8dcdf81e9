"""One LC's session on the hub: its state, its downstream queue, how it ends, and the hub's counters.

Pure state (no I/O): gm/edge/hub.py runs a session's lifecycle, gm/edge/intake.py reads its
frames, gm/edge/writer.py writes to it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gm.edge.ports import EdgeSocket
from gm.errors import GMError
from proto import ObjKey

CLOSE_INTERNAL_ERROR = 1011


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



class SessionEnd(GMError):
    """Raised inside a session's tasks to end it with a websocket close code."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code} {reason}")
        self.code = code
        self.reason = reason



class PendingVersions:
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



class Session:
    """One connected node. The hub's `_sessions[node]` points at the current one.

    Its reader is the task that runs the hub's handler for the connection; its writer is a
    task only while something is queued (`SessionWriter.kick`). `end` is set once, by whatever ends the
    session first; `stop` then cancels both tasks, and the reader turns that cancellation
    into the end.
    """

    __slots__ = ("node", "ws", "transport", "native", "epoch", "pending", "acks", "refusals", "snapshot_count",
                 "snapshot_due", "seq", "end", "reader", "writer", "heard", "peer_pinged", "pinged", "beat_slot",
                 "since", "acked")

    def __init__(self, node: str, ws: EdgeSocket, transport: asyncio.BaseTransport | None, *,
                 native: bool, epoch: str = "") -> None:
        self.node = node
        self.ws = ws
        self.transport = transport  # no ping while its write buffer holds data
        self.native = native
        self.epoch = epoch  # the LC's outbox epoch from its hello ("" in upstream mode)
        self.pending = PendingVersions()
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
        self.since = time.time()  # unix time it opened (for operators: GET /sessions, /metrics)
        self.acked = 0  # the highest report seq acked in this session (native mode only)

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

    def view(self, wall_offset: float) -> SessionView:
        """What operators see of it; `wall_offset` turns loop time into unix time."""
        return SessionView(node=self.node, mode=self.mode, since=self.since,
                           last_frame=self.last_frame(wall_offset), pending=len(self.pending),
                           acked_seq=self.acked)

    def last_frame(self, wall_offset: float) -> float:
        """Unix time of the last frame from the peer (its opening, before the wheel took it)."""
        return self.heard + wall_offset if self.heard else self.since


@dataclass(frozen=True, slots=True)
class SessionView:
    """One session as `GET /sessions` lists it and the per-node series show it."""

    node: str
    mode: str  # native or upstream
    since: float  # unix time the session opened
    last_frame: float  # unix time of the last frame from the node: its heartbeat
    pending: int  # object versions waiting to be written to the node
    acked_seq: int  # the highest report seq acked in this session (0: none, or upstream mode)

    def as_json(self) -> dict[str, Any]:
        return {"node": self.node, "mode": self.mode, "since": self.since,
                "lastFrame": self.last_frame, "pending": self.pending, "ackedSeq": self.acked_seq}


def wall_offset() -> float:
    """Unix time minus the running loop's time (the loop's clock without a running loop)."""
    try:
        now = asyncio.get_running_loop().time()
    except RuntimeError:
        now = time.monotonic()  # asyncio's default loop clock
    return time.time() - now

