"""Change events and watchers: what a write tells listeners and open watches (spec §6).

A `Watch` is fed synchronously by the store inside the write (`offer`), so a watch
opened in the same event-loop step as a snapshot sees every later change exactly once.
The HTTP layer only iterates it; bookmarks, the timeout and the liveness check live
here so in-process users get the same stream as HTTP clients.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson

from devcluster.machinery.errors import ApiError
from devcluster.machinery.resource import ResourceType

log = logging.getLogger("devcluster.watch")

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


class WatchEvent:
    """One change: ADDED / MODIFIED / DELETED (or BOOKMARK on a watch).

    `obj` is the stored object (for DELETED, its last state carrying the removal's RV),
    `old` the previous state or None. Both are shared and must not be mutated.
    """

    __slots__ = ("type", "rt", "obj", "old", "rv", "_raw", "time")

    def __init__(self, type: str, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None,
                 rv: int, time: float = 0.0) -> None:
        self.type = type
        self.rt = rt
        self.obj = obj
        self.old = old
        self.rv = rv
        self.time = time
        self._raw: bytes | None = None

    def with_type(self, type: str, obj: dict[str, Any] | None = None) -> WatchEvent:
        """The same change seen as another type (selector transitions, spec §6.4)."""
        return WatchEvent(type, self.rt, self.obj if obj is None else obj, self.old, self.rv, self.time)

    def object_bytes(self, encode: Callable[[dict[str, Any]], bytes] = orjson.dumps) -> bytes:
        """The event object as JSON, encoded once however many watchers send it."""
        if self._raw is None:
            self._raw = encode(self.obj)
        return self._raw

    def line(self, encode: Callable[[dict[str, Any]], bytes] = orjson.dumps) -> bytes:
        """The newline-framed watch line `{"type":…,"object":…}\\n`."""
        return b'{"type":"' + self.type.encode() + b'","object":' + self.object_bytes(encode) + b"}\n"

    def __repr__(self) -> str:
        m = self.obj.get("metadata") or {}
        return f"WatchEvent({self.type} {self.rt.resource} {m.get('namespace', '')}/{m.get('name', '')} rv={self.rv})"


Matcher = Callable[[dict[str, Any]], bool]


class Watch:
    """An open watch: a queue of events filtered by namespace and selectors.

    Iterate with `async for`; iteration ends after the timeout, when closed, or when the
    consumer fell too far behind (`max_pending`; the client resumes from its last RV).
    An expired start RV raises ApiError(410) from the first `__anext__`.
    """

    def __init__(self, *, rt: ResourceType, matches: Matcher, current_rv: Callable[[], int],
                 on_close: Callable[[Watch], None], allow_bookmarks: bool = False,
                 bookmark_interval: float = 30.0, timeout: float | None = None,
                 max_pending: int = 200_000) -> None:
        self.rt = rt
        self.matches = matches
        self.allow_bookmarks = allow_bookmarks
        self.bookmark_interval = bookmark_interval
        self.max_pending = max_pending
        self.alive: Callable[[], bool] | None = None  # set by the HTTP layer: is the client still there
        self.alive_interval = 1.0  # how soon an idle watch notices a gone client
        self._current_rv = current_rv
        self._on_close = on_close
        self._pending: deque[WatchEvent] = deque()  # events not yet handed out, in RV order
        self._waiter: asyncio.Future[None] | None = None
        self._error: ApiError | None = None
        self._closed = False
        self._final_bookmark = False
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._deadline = None if timeout is None else loop.time() + timeout
        self._next_bookmark = loop.time() + bookmark_interval

    # -- fed by the store (synchronous, inside the write) --------------------------------------

    def offer(self, ev: WatchEvent) -> None:
        """Deliver a committed change, applying the selector transition table."""
        if self._closed:
            return
        old_ok = ev.old is not None and self.matches(ev.old)
        if ev.type == "DELETED":
            if old_ok:
                self.push(ev)
            return
        new_ok = self.matches(ev.obj)
        if new_ok:
            self.push(ev if old_ok or ev.type == "ADDED" else ev.with_type("ADDED"))
        elif old_ok:
            self.push(ev.with_type("DELETED", _with_rv(ev.old, ev.rv)))

    def push(self, ev: WatchEvent) -> None:
        if len(self._pending) >= self.max_pending:
            log.warning("watch resource=%s overflow pending=%d: closing", self.rt.resource, len(self._pending))
            self._pending.clear()
            self.close()
            return
        self._pending.append(ev)
        self._wake()

    def fail(self, err: ApiError) -> None:
        """End the watch with an error once the pending events are handed out."""
        self._error = err
        self._wake()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._on_close(self)
            self._wake()

    @property
    def closed(self) -> bool:
        return self._closed

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # -- consumed by the reader ----------------------------------------------------------------

    def bookmark(self, *, initial_events_end: bool = False) -> WatchEvent:
        """A BOOKMARK at an RV the client may resume from (every earlier event was handed out)."""
        rv = self._pending[0].rv - 1 if self._pending else self._current_rv()
        m: dict[str, Any] = {"resourceVersion": str(rv)}
        if initial_events_end:
            m["annotations"] = {INITIAL_EVENTS_END: "true"}
        obj = {"kind": self.rt.kind, "apiVersion": self.rt.api_version, "metadata": m}
        return WatchEvent("BOOKMARK", self.rt, obj, None, rv)

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> WatchEvent:
        while True:
            if self._pending:
                return self._pending.popleft()
            if self._error is not None:
                err, self._error = self._error, None
                self.close()
                raise err
            if self._closed:
                raise StopAsyncIteration
            ev = await self._idle()
            if ev is not None:
                return ev

    async def _idle(self) -> WatchEvent | None:
        """Wait for a change; return a bookmark when one is due; close at the deadline."""
        now = self._loop.time()
        if self._deadline is not None and now >= self._deadline:
            self.close()
            if self.allow_bookmarks and not self._final_bookmark:
                self._final_bookmark = True
                return self.bookmark()
            return None
        if self.allow_bookmarks and now >= self._next_bookmark:
            self._next_bookmark = now + self.bookmark_interval
            return self.bookmark()
        if self.alive is not None and not self.alive():
            self.close()
            return None
        await self._wait(self._wait_time(now))
        return None

    def _wait_time(self, now: float) -> float:
        limits = [self.alive_interval if self.alive is not None else 3600.0]
        if self._deadline is not None:
            limits.append(self._deadline - now)
        if self.allow_bookmarks:
            limits.append(self._next_bookmark - now)
        return max(0.0, min(limits))

    async def _wait(self, seconds: float) -> None:
        self._waiter = self._loop.create_future()
        handle = self._loop.call_later(seconds, _resolve, self._waiter)
        try:
            await self._waiter
        finally:
            handle.cancel()
            self._waiter = None


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _with_rv(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    """A shallow copy of `obj` whose metadata carries `rv` (shared sub-dicts stay untouched)."""
    out = dict(obj)
    m = dict(out.get("metadata") or {})
    m["resourceVersion"] = str(rv)
    out["metadata"] = m
    return out
