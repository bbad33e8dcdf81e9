"""Watch streams: a watch request's options, the events written as chunked JSON lines (or Table
rows), the fault hooks (forced 410, dropped streams), and every open stream ended at shutdown.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from devcluster.machinery.errors import ApiError, bad_request, too_old
from devcluster.machinery.resource import ResourceType
from devcluster.server.faults import Faults
from devcluster.server.httputil import parse_bool, parse_int, wants_table
from devcluster.storage.watch import WatchEvent
from devcluster.tables.render import to_table


class WatchStreams:
    """The open watch streams of one application (its view types' handlers share it)."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self._open: set[Any] = set()  # open watches, ended on shutdown so handlers finish at once

    async def close_all(self, _app: web.Application) -> None:
        for w in list(self._open):
            w.close()

    async def serve(self, request: web.Request, store: Any, rt: ResourceType, namespace: str | None,
                    accept: list) -> web.StreamResponse:
        """A watch request: its options checked, the watch opened, its events streamed until it ends."""
        q = request.query
        send_initial = parse_bool("sendInitialEvents", q.get("sendInitialEvents"))
        bookmarks = parse_bool("allowWatchBookmarks", q.get("allowWatchBookmarks")) or False
        if send_initial and (q.get("resourceVersionMatch") != "NotOlderThan" or not bookmarks):
            raise bad_request("sendInitialEvents is forbidden for watch unless resourceVersionMatch is "
                              "NotOlderThan and allowWatchBookmarks is true")
        timeout = parse_int("timeoutSeconds", q.get("timeoutSeconds"))
        rv = q.get("resourceVersion")
        forced_410 = self.faults.take_forced_410()
        w = None
        if not forced_410:
            w = store.watch(rt, namespace, resource_version=rv, label_selector=q.get("labelSelector"),
                                 field_selector=q.get("fieldSelector"), send_initial_events=send_initial,
                                 allow_bookmarks=bookmarks,
                                 timeout=float(timeout) if timeout and timeout > 0 else store.watch_timeout)
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        if w is None:
            await resp.write(error_line(too_old(rv or 0, store.compacted + 1)))
            await resp.write_eof()
            return resp
        return await self._stream(request, resp, w, encoder(store, rt, wants_table(accept), q.get("includeObject")))

    async def _stream(self, request: web.Request, resp: web.StreamResponse, w: Any,
                      encode: Callable[[WatchEvent], bytes]) -> web.StreamResponse:
        transport = request.transport
        w.alive = lambda: transport is not None and not transport.is_closing()
        drop = self.faults.watch_drop_after
        self._open.add(w)
        try:
            async with asyncio.timeout(drop):
                async for ev in w:
                    await resp.write(encode(ev))
        except ApiError as err:
            await resp.write(error_line(err))
        except TimeoutError:
            if transport is not None:
                transport.close()  # an abrupt cut: no chunked terminator
            return resp
        except (ConnectionResetError, OSError):
            return resp
        finally:
            w.close()
            self._open.discard(w)
        if transport is None or transport.is_closing():
            return resp  # the client went away: nothing left to terminate
        try:
            await resp.write_eof()
        except ConnectionResetError:
            pass  # the client left between the last event and the terminator
        return resp



def encoder(store: Any, rt: ResourceType, table: bool,
            include_object: str | None = None) -> Callable[[WatchEvent], bytes]:
    """How a stream writes each event: one JSON line, or a Table row for `as=Table` watches."""

    def encode_obj(obj: dict[str, Any]) -> bytes:
        return store.encode(obj, rt)

    def plain(ev: WatchEvent) -> bytes:
        return ev.line(encode_obj)

    def as_table(ev: WatchEvent) -> bytes:
        if ev.type == "BOOKMARK":
            return ev.line()
        t = to_table(rt, [ev.obj], resource_version=str(ev.rv), now=time.time(),
                            include_object=include_object)
        return orjson.dumps({"type": ev.type, "object": t}) + b"\n"
    return as_table if table else plain


def error_line(err: ApiError) -> bytes:
    return orjson.dumps({"type": "ERROR", "object": err.status()}) + b"\n"
