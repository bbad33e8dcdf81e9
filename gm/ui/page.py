"""The status page's wiring: its sources in the GM, and the `GET /ui` handler.

`watch` hooks the page to what the GM already runs: an event handler on the informer of each
reconciled kind (it samples the key series into the history on every add and status change,
and forgets a job when it is deleted: it only computes a few numbers, as informer handlers
must), a listener on every event recorder (the warning log), and the hub (read per request).
The handler reads the caches and renders in one go on the loop; it makes no API call.

The page is served on the GM's port beside `/metrics`, under the same access rule: whatever
guards that port (network policy, TLS). It changes nothing, and what it shows is already in
the cluster's objects and events (`kubectl get`) and on `/sessions`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from aiohttp import web

from gm.ui.history import History, JobKey
from gm.ui.jobs import key_values
from gm.ui.model import NodeRow, Page, build_page
from gm.ui.render import render
from gm.ui.warnings import WarningLog

REUSE_SECONDS = 2.0  # viewers whose page reloads together share one render
HEADERS = {
    "Content-Type": "text/html; charset=utf-8",
    "Cache-Control": "no-store",
    # inline style and inline SVG only: the page asks the browser for nothing else
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class JobCache(Protocol):
    """A reconciled kind's informer, as the page uses it."""

    def add_event_handler(self, *, on_add: Callable[[dict], None] | None = None,
                          on_update: Callable[[dict, dict], None] | None = None,
                          on_delete: Callable[[dict], None] | None = None) -> None: ...

    @property
    def store(self) -> Any: ...  # `.list()` of the cached objects


class Recorder(Protocol):
    def listen(self, fn: Callable[[Mapping[str, Any], str, str, str], None]) -> None: ...


class StatusPage:
    """The GM's status page. Built empty; `watch(...)` once the sources exist."""

    def __init__(self, *, history: History | None = None, warnings: WarningLog | None = None,
                 clock: Callable[[], float] = time.time, reuse_seconds: float = REUSE_SECONDS) -> None:
        self.history = history if history is not None else History()  # an empty one is falsy
        self.warnings = warnings if warnings is not None else WarningLog(clock=clock)
        self._clock = clock
        self._jobs: dict[str, JobCache] = {}  # kind -> its informer
        self._hub: Any = None
        self._rendered: tuple[float, bytes] | None = None  # (when, the page then)
        self._reuse = reuse_seconds

    def watch(self, *, hub: Any, jobs: Mapping[str, JobCache], recorders: Iterable[Recorder]) -> None:
        """`hub`: gm/edge/hub.Hub; `jobs`: kind -> the informer of that reconciled kind."""
        self._hub = hub
        for kind, informer in jobs.items():
            self._jobs[kind] = informer
            informer.add_event_handler(on_add=lambda obj, k=kind: self._sample(k, obj),
                                       on_update=lambda old, new, k=kind: self._changed(k, old, new),
                                       on_delete=lambda obj, k=kind: self.history.forget(_key(k, obj)))
        for recorder in recorders:
            recorder.listen(self.warnings.note)

    def _changed(self, kind: str, old: dict, new: dict) -> None:
        if old.get("status") is not new.get("status"):  # a resync re-delivers the same object
            self._sample(kind, new)

    def _sample(self, kind: str, obj: dict) -> None:
        self.history.record(_key(kind, obj), key_values(kind, obj), now=self._clock())

    def page(self) -> Page:
        jobs = [(kind, obj) for kind, informer in self._jobs.items() for obj in informer.store.list()]
        return build_page(now=self._clock(), nodes=node_rows(self._hub), jobs=jobs,
                          history=self.history, warnings=self.warnings.recent())

    async def handle(self, request: web.Request) -> web.Response:
        """GET /ui: the model is read on the loop (the caches change there), the HTML is made
        in a thread from that immutable snapshot, and reused for requests within `reuse_seconds`."""
        now = self._clock()
        if self._rendered is None or not 0 <= now - self._rendered[0] < self._reuse:
            body = (await asyncio.to_thread(_encoded, self.page()))
            self._rendered = (now, body)
        return web.Response(body=self._rendered[1], headers=HEADERS)


def node_rows(hub: Any) -> list[NodeRow]:
    """The hub's sessions, and the nodes that left recently, as rows."""
    if hub is None:
        return []
    rows = [NodeRow(v.node, True, v.mode, v.since, v.last_frame, v.pending, v.acked_seq) for v in hub.sessions()]
    rows += [NodeRow(node, False, "", None, last, None, None) for node, last in hub.departed().items()]
    return rows


def _encoded(page: Page) -> bytes:
    return render(page).encode()


def _key(kind: str, obj: Mapping[str, Any]) -> JobKey:
    meta = obj.get("metadata") or {}
    return kind, str(meta.get("namespace") or ""), str(meta.get("name") or "")
