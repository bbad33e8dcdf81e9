"""List-then-watch for one resource type, feeding a sink (the informer's cache).

The loop is client-go's reflector: list (paginated) to get the full state and its
resourceVersion, then watch from that RV with bookmarks and a server-side timeout. A
cleanly ended watch resumes from the last RV it saw; an `Expired` (410) means the RV is
gone, so it lists again at once; any other failure (5xx, dropped connection, garbage on
the stream) backs off exponentially and lists again, so the cache converges to the
server's state whatever was missed.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import Any, Protocol

from gm.kube.apierrors import ApiError, Expired
from gm.kube.client import KubeClient
from gm.kube.metrics import KubeMetrics
from gm.kube.resources import GVR
from shared.logs import event

log = logging.getLogger(__name__)


class Sink(Protocol):
    """What a reflector feeds: a full state after each list, then single changes."""

    def replace(self, items: list[dict[str, Any]], resource_version: str) -> None: ...

    def apply(self, event_type: str, obj: dict[str, Any]) -> None: ...


@dataclass(frozen=True, slots=True)
class ReflectorSettings:
    page_size: int = 500
    watch_timeout: float = 300.0  # each watch asks for a timeout drawn from [t, 2t)
    backoff_initial: float = 0.8
    backoff_max: float = 30.0


class Reflector:
    """Keeps a `Sink` in step with one (resource type, namespace, selectors) on the server."""

    def __init__(self, client: KubeClient, gvr: GVR, sink: Sink, *,
                 namespace: str | None = None, label_selector: str | None = None,
                 field_selector: str | None = None, settings: ReflectorSettings | None = None,
                 metrics: KubeMetrics | None = None):
        self.client = client
        self.gvr = gvr
        self.sink = sink
        self.namespace = namespace if gvr.namespaced else None
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.settings = settings or ReflectorSettings()
        self.metrics = metrics or client.metrics
        self.resource_version = ""  # last RV delivered to the sink
        self.lists = 0  # completed lists (the first sync plus every relist)
        self.watches = 0  # watch requests opened
        self._failures = 0  # consecutive failures without progress; drives backoff

    async def run(self) -> None:
        """Run until cancelled; API failures are logged and retried, never raised."""
        while True:
            try:
                await self._list()
                while True:
                    await self._watch_once()
            except Expired as exc:
                delay = self._next_delay(expired=True)
                self._log("watch expired, relisting", exc, delay)
            except ApiError as exc:
                delay = self._next_delay(expired=False)
                self._log("list/watch failed, relisting", exc, delay)
            if delay:
                await asyncio.sleep(delay)

    async def _list(self) -> None:
        items, rv = await self.client.list_all(
            self.gvr, namespace=self.namespace, label_selector=self.label_selector,
            field_selector=self.field_selector, page_size=self.settings.page_size)
        self.lists += 1
        self.metrics.informer_lists.labels(str(self.gvr)).inc()
        self.resource_version = rv
        self.sink.replace(items, rv)

    async def _watch_once(self) -> None:
        """One watch request from the current RV, until the server ends it."""
        timeout = self.settings.watch_timeout * (1.0 + random.random())
        self.watches += 1
        self.metrics.informer_watches.labels(str(self.gvr)).inc()
        stream = self.client.watch(
            self.gvr, namespace=self.namespace, resource_version=self.resource_version,
            label_selector=self.label_selector, field_selector=self.field_selector,
            allow_bookmarks=True, timeout_seconds=max(1, int(timeout)))
        async with stream:
            async for event_type, obj in stream:
                if event_type != "BOOKMARK":
                    self.sink.apply(event_type, obj)
                self.resource_version = stream.resource_version or self.resource_version
                self._failures = 0
        self._failures = 0

    def _next_delay(self, *, expired: bool) -> float:
        """No wait for the first 410 after progress; otherwise jittered exponential backoff."""
        self._failures += 1
        if expired and self._failures == 1:
            return 0.0
        s = self.settings
        base = min(s.backoff_initial * 2 ** min(self._failures - 1, 30), s.backoff_max)
        return base * (0.5 + random.random() / 2)

    def _log(self, msg: str, exc: ApiError, delay: float) -> None:
        event(log, msg, level=logging.WARNING if self._failures > 1 else logging.INFO,
              resource=str(self.gvr), namespace=self.namespace or "", code=exc.code,
              reason=exc.reason, error=exc.message, retry_in=round(delay, 3))
