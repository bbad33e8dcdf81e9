"""Recording core/v1 Events about the objects the GM manages (what `kubectl describe` shows).

Recording must never slow or fail a reconcile, so `event()` only puts the event on a
bounded queue and returns; a background task writes it. When the queue is full the
event is dropped and counted. Repeats of the same (object uid, reason, message, type) are
folded into the first event like client-go's recorder: a merge PATCH of `count` and
`lastTimestamp`, or a fresh POST when that event has since been deleted. Each involved
object also has its own token bucket (burst 25, one more every 5 minutes, as client-go's spam
filter), so one object in a crash loop cannot fill the queue or the API's Events; the writes
go through the client's `events` budget, apart from status and child writes.

The writer task only ends by a bug (API failures are retried, then counted and logged),
and a dead writer would drop every later event without a word. Its policy is set by the
owner at `start`: the GM passes `on_fatal` (fail fast: the process exits with a clear
log); a recorder used on its own restarts its writer with backoff.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gm.kube.apierrors import AlreadyExists, ApiError, NotFound, Unavailable
from gm.kube.client import KubeClient
from gm.kube.metrics import KubeMetrics
from gm.kube.ratelimit import TokenBucket
from gm.kube.resources import EVENTS
from shared.logs import event
from shared.tasks import FailFast, FatalHandler, Restart, Supervised

log = logging.getLogger(__name__)

EVENT_TYPES = ("Normal", "Warning")
MAX_MESSAGE = 1024
SPAM_BURST = 25  # events one object may raise at once
SPAM_QPS = 1 / 300  # and then one more every five minutes
# told of every event queued: (involved object, type, reason, message); it must not block
EventListener = Callable[[dict[str, Any], str, str, str], None]


@dataclass(frozen=True, slots=True)
class _Pending:
    involved: dict[str, Any]
    namespace: str
    reason: str
    message: str
    type: str
    time_ns: int


@dataclass(slots=True)
class _Seen:
    name: str  # the Event object's name
    namespace: str
    count: int
    first_timestamp: str


class EventRecorder:
    """Non-blocking, deduplicating event writer; `await start()` / `await stop()`."""

    def __init__(self, client: KubeClient, *, component: str, host: str = "",
                 max_queue: int = 1000, cache_size: int = 4096, retries: int = 3,
                 retry_delay: float = 0.5, metrics: KubeMetrics | None = None,
                 spam_burst: int = SPAM_BURST, spam_qps: float = SPAM_QPS):
        if not component:
            raise ValueError("an event recorder needs a component name")
        if retries < 1:
            raise ValueError("retries must be >= 1")
        self.client = client
        self.component = component
        self.host = host
        self.metrics = metrics or client.metrics
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=max_queue)
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()  # LRU of written events
        self._cache_size = cache_size
        self._retries = retries
        self._retry_delay = retry_delay
        self._writer: Supervised | None = None
        self._spam: OrderedDict[str, TokenBucket] = OrderedDict()  # per involved object, LRU
        self._spam_burst, self._spam_qps = spam_burst, spam_qps
        self._listeners: list[EventListener] = []

    def _allowed(self, involved: dict[str, Any]) -> bool:
        """Whether the involved object's own bucket has a token left for one more event."""
        key = involved.get("uid") or _object_id(involved)
        bucket = self._spam.get(key)
        if bucket is None:
            bucket = self._spam[key] = TokenBucket(self._spam_qps, self._spam_burst)
            if len(self._spam) > self._cache_size:
                self._spam.popitem(last=False)
        self._spam.move_to_end(key)
        if bucket.reserve() > 0:
            bucket.refund()
            return False
        return True

    def event(self, obj: dict[str, Any], type: str, reason: str, message: str) -> bool:
        """Queue an event about `obj`; False if it was dropped (queue full, or the object's
        own rate limit spent)."""
        if type not in EVENT_TYPES:
            raise ValueError(f"event type must be one of {EVENT_TYPES}, got {type!r}")
        if not reason:
            raise ValueError("an event needs a reason")
        involved = involved_object(obj)
        if not self._allowed(involved):
            self.metrics.events_sent.labels("throttled").inc()
            return False
        pending = _Pending(involved, involved.get("namespace") or "default", reason,
                           message[:MAX_MESSAGE], type, time.time_ns())
        try:
            self._queue.put_nowait(pending)
        except asyncio.QueueFull:
            self.metrics.events_sent.labels("dropped").inc()
            return False
        for listener in self._listeners:
            listener(involved, type, reason, pending.message)
        return True

    def listen(self, fn: EventListener) -> None:
        """Call `fn` with each event this recorder queues from now on (the GM's status page)."""
        self._listeners.append(fn)

    def normal(self, obj: dict[str, Any], reason: str, message: str) -> bool:
        return self.event(obj, "Normal", reason, message)

    def warning(self, obj: dict[str, Any], reason: str, message: str) -> bool:
        return self.event(obj, "Warning", reason, message)

    @property
    def writer(self) -> Supervised | None:
        """The supervised writer task, once started."""
        return self._writer

    async def start(self, *, on_fatal: FatalHandler | None = None) -> None:
        """Start the writer: fail-fast to `on_fatal` when given, else restarted with backoff."""
        if self._writer is None:
            policy = FailFast() if on_fatal is not None else Restart()
            self._writer = Supervised(self._run, name=f"events {self.component}", policy=policy,
                                      on_fatal=on_fatal, logger=log)
            self._writer.start()

    async def stop(self, grace: float = 5.0) -> None:
        """Write what is queued (for at most `grace` seconds), then stop the writer."""
        if self._writer is None:
            return
        try:
            async with asyncio.timeout(grace):
                await self._queue.join()
        except TimeoutError:
            event(log, "events left unwritten at stop", level=logging.WARNING,
                      component=self.component, pending=self._queue.qsize())
        await self._writer.stop(within=grace)
        self._writer = None

    async def flush(self) -> None:
        """Wait until every queued event has been written or given up on."""
        await self._queue.join()

    async def _run(self) -> None:
        while True:
            pending = await self._queue.get()
            try:
                await self._write_with_retries(pending)
            finally:
                self._queue.task_done()

    async def _write_with_retries(self, p: _Pending) -> None:
        for attempt in range(1, self._retries + 1):
            try:
                outcome = await self._write(p)
                self.metrics.events_sent.labels(outcome).inc()
                return
            except Unavailable as exc:
                last: ApiError = exc
                if attempt < self._retries:
                    await asyncio.sleep(self._retry_delay * attempt)
            except ApiError as exc:  # 4xx: retrying the same body cannot help
                last = exc
                break
        self.metrics.events_sent.labels("failed").inc()
        event(log, "event not written", level=logging.WARNING, key=_object_key(p.involved),
                  kind=p.involved.get("kind"), reason=p.reason, code=last.code, error=last.message)

    async def _write(self, p: _Pending) -> str:
        key = (p.involved.get("uid") or _object_id(p.involved), p.reason, p.message, p.type)
        seen = self._seen.get(key)
        now = _timestamp(p.time_ns)
        if seen is not None:
            try:
                await self.client.patch(EVENTS, seen.name, namespace=seen.namespace,
                                        body={"count": seen.count + 1, "lastTimestamp": now},
                                        budget="events")
                seen.count += 1
                self._seen.move_to_end(key)
                return "patched"
            except NotFound:
                del self._seen[key]  # the event expired or was deleted: write a new one
        body = self._new_event(p, now)
        try:
            await self.client.create(EVENTS, body, namespace=p.namespace, budget="events")
        except AlreadyExists:
            pass  # a retry after a lost answer: the first POST landed
        self._remember(key, _Seen(body["metadata"]["name"], p.namespace, 1, now))
        return "created"

    def _new_event(self, p: _Pending, now: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{p.involved['name']}.{p.time_ns:x}", "namespace": p.namespace},
            "involvedObject": p.involved, "reason": p.reason, "message": p.message,
            "type": p.type, "source": {"component": self.component, **_host(self.host)},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": self.component, "reportingInstance": self.host,
        }

    def _remember(self, key: tuple[str, ...], seen: _Seen) -> None:
        self._seen[key] = seen
        while len(self._seen) > self._cache_size:
            self._seen.popitem(last=False)


def involved_object(obj: dict[str, Any]) -> dict[str, Any]:
    """The `involvedObject` reference of an event about `obj`."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict) or not meta.get("name"):
        raise ValueError("an event needs an object with metadata.name")
    ref = {"apiVersion": obj.get("apiVersion", ""), "kind": obj.get("kind", ""),
           "name": meta["name"]}
    for src, dst in (("namespace", "namespace"), ("uid", "uid"),
                     ("resourceVersion", "resourceVersion")):
        if meta.get(src):
            ref[dst] = meta[src]
    return ref


def _object_id(ref: dict[str, Any]) -> str:
    return f"{ref.get('apiVersion')}/{ref.get('kind')}/{ref.get('namespace', '')}/{ref['name']}"


def _object_key(ref: dict[str, Any]) -> str:
    """`namespace/name` (or `name` for cluster-scoped objects), as every GM log line keys objects."""
    ns = ref.get("namespace")
    return f"{ns}/{ref['name']}" if ns else str(ref["name"])


def _host(host: str) -> dict[str, str]:
    return {"host": host} if host else {}


def _timestamp(time_ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time_ns / 1e9))
