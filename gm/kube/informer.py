"""Shared informers: one reflector and one indexed cache per resource type, many handlers.

Every controller that needs pods shares the pods informer made by the `InformerFactory`,
so the GM lists and watches each type once. Handlers get the cached dicts
(`on_add(obj)`, `on_update(old, new)`, `on_delete(obj)`) and must only compute keys and
enqueue them: reconcilers read the latest state from `informer.store` later. A deletion
is delivered exactly once, with the object's last known state, whether it came as a
DELETED event or was noticed missing on a relist. A periodic resync re-delivers
`on_update(obj, obj)` for every cached object, so a reconcile that dropped a key catches up.

An informer never gives up on the API server (the reflector retries with backoff), so its
task ending means a bug or a stray cancel, after which its cache silently goes stale. Its
policy is fail-fast: the factory marks the informer failed (its `wait_synced` raises, the
GM's readiness fails) and calls the owner's `on_fatal`, so the GM exits rather than
reconciling from a dead cache. `wait_synced(within=...)` bounds the first sync at start
and names the caches that did not make it.

A `transform` (client-go's SetTransform) rewrites each object before it is cached, so a
cache of a type the GM needs little of (Secrets) keeps only what its readers use.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gm.errors import GMError
from gm.kube.client import KubeClient
from gm.kube.metrics import KubeMetrics
from gm.kube.reflector import Reflector, ReflectorSettings
from gm.kube.resources import GVR
from gm.kube.store import IndexFunc, Store, object_key
from shared.logs import event
from shared.tasks import FailFast, FatalHandler, Supervised

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Transform = Callable[[Obj], Obj]


@dataclass(frozen=True, slots=True)
class Handler:
    on_add: Callable[[Obj], None] | None = None
    on_update: Callable[[Obj, Obj], None] | None = None
    on_delete: Callable[[Obj], None] | None = None


class InformerFailed(GMError):
    """The informer's task died of a bug; waiting for its sync cannot succeed."""


class CacheSyncTimeout(GMError):
    """Some caches did not complete their first list in time; the message names them."""

    def __init__(self, within: float, unsynced: list[str]):
        super().__init__(f"caches not synced within {within:g}s: {', '.join(unsynced)}")
        self.unsynced = unsynced


class SharedInformer:
    """A cache of one resource type kept current by a reflector, with event handlers."""

    def __init__(self, client: KubeClient, gvr: GVR, *, namespace: str | None = None,
                 label_selector: str | None = None, field_selector: str | None = None,
                 resync_period: float | None = None, indexers: dict[str, IndexFunc] | None = None,
                 settings: ReflectorSettings | None = None, metrics: KubeMetrics | None = None,
                 transform: Transform | None = None):
        self.gvr = gvr
        self.store = Store(indexers)
        self.transform = transform
        self._index_fns: dict[str, IndexFunc] = dict(indexers or {})
        self.resync_period = resync_period
        self.metrics = metrics or client.metrics
        self.reflector = Reflector(client, gvr, self, namespace=namespace,
                                   label_selector=label_selector, field_selector=field_selector,
                                   settings=settings, metrics=self.metrics)
        self._handlers: list[Handler] = []
        self._synced = asyncio.Event()  # set after the first list (or on failure)
        self._failure: BaseException | None = None

    def add_event_handler(self, *, on_add: Callable[[Obj], None] | None = None,
                          on_update: Callable[[Obj, Obj], None] | None = None,
                          on_delete: Callable[[Obj], None] | None = None) -> None:
        """Register handlers; a late handler first gets `on_add` for every cached object."""
        handler = Handler(on_add, on_update, on_delete)
        self._handlers.append(handler)
        if handler.on_add is not None:
            for obj in self.store.list():
                self._call(handler.on_add, obj)

    def add_indexer(self, name: str, fn: IndexFunc) -> None:
        self.store.add_indexer(name, fn)
        self._index_fns[name] = fn

    def ensure_indexer(self, name: str, fn: IndexFunc) -> None:
        """`add_indexer` unless `fn` is already the index `name`: several controllers share
        this informer and may each ask for the same index; two functions under one name
        is a bug (ValueError)."""
        if self._index_fns.get(name) is fn:
            return
        self.add_indexer(name, fn)

    def has_synced(self) -> bool:
        return self._synced.is_set() and self._failure is None

    async def wait_synced(self) -> None:
        """Wait for the first full list; raises `InformerFailed` if the informer died."""
        await self._synced.wait()
        if self._failure is not None:
            raise InformerFailed(f"informer for {self.gvr} failed: {self._failure!r}")

    async def run(self) -> None:
        """Run the reflector (and the resync timer) until cancelled."""
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self.reflector.run(), name=f"reflector {self.gvr}")
                if self.resync_period:
                    tg.create_task(self._resync_loop(), name=f"resync {self.gvr}")
        except Exception as exc:
            self.fail(exc)
            raise

    def fail(self, why: BaseException | str) -> None:
        """Mark the cache dead: no longer synced, and every waiter wakes to `InformerFailed`."""
        if self._failure is None:
            self._failure = why if isinstance(why, BaseException) else RuntimeError(why)
        self._synced.set()

    # -- Sink: called by the reflector ----------------------------------------------------

    def replace(self, items: list[Obj], resource_version: str) -> None:
        """A full list: add/update what is listed, delete what the cache has and the list lacks."""
        seen: set[str] = set()
        for obj in items:
            obj = self._transformed(obj)
            key = self._key(obj)
            if key is None:
                continue
            seen.add(key)
            old = self.store.upsert(obj)
            if old is None:
                self._dispatch_add(obj)
            elif _rv(old) != _rv(obj):
                self._dispatch_update(old, obj)
        for key in [k for k in self.store.keys() if k not in seen]:
            gone = self.store.remove(key)
            if gone is not None:
                self._dispatch_delete(gone)
        self._set_gauge()
        self._synced.set()

    def apply(self, event_type: str, obj: Obj) -> None:
        """One watch event."""
        obj = self._transformed(obj)
        key = self._key(obj)
        if key is None:
            return
        if event_type == "DELETED":
            if self.store.remove(key) is not None:  # a second delete of a key is dropped
                self._dispatch_delete(obj)
        else:
            old = self.store.upsert(obj)
            if old is None:
                self._dispatch_add(obj)
            else:
                self._dispatch_update(old, obj)
        self._set_gauge()

    # -- internals ------------------------------------------------------------------------

    async def _resync_loop(self) -> None:
        assert self.resync_period
        while True:
            await asyncio.sleep(self.resync_period)
            for obj in self.store.list():
                self._dispatch_update(obj, obj)

    def _transformed(self, obj: Obj) -> Obj:
        return self.transform(obj) if self.transform is not None else obj

    def _key(self, obj: Obj) -> str | None:
        try:
            return object_key(obj)
        except ValueError:
            event(log, "ignoring object without a name", level=logging.WARNING,
                  resource=str(self.gvr))
            return None

    def _dispatch_add(self, obj: Obj) -> None:
        for h in self._handlers:
            if h.on_add is not None:
                self._call(h.on_add, obj)

    def _dispatch_update(self, old: Obj, new: Obj) -> None:
        for h in self._handlers:
            if h.on_update is not None:
                self._call(h.on_update, old, new)

    def _dispatch_delete(self, obj: Obj) -> None:
        for h in self._handlers:
            if h.on_delete is not None:
                self._call(h.on_delete, obj)

    def _call(self, fn: Callable[..., None], *args: Obj) -> None:
        try:
            fn(*args)
        except Exception as exc:  # one bad handler must not stop the cache or other handlers
            event(log, "event handler failed", level=logging.ERROR, resource=str(self.gvr),
                  handler=getattr(fn, "__qualname__", repr(fn)), error=repr(exc))

    def _set_gauge(self) -> None:
        self.metrics.informer_objects.labels(str(self.gvr)).set(len(self.store))


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


class InformerFactory:
    """Makes and runs one `SharedInformer` per (type, namespace, selectors)."""

    def __init__(self, client: KubeClient, *, namespace: str | None = None,
                 resync_period: float | None = 30.0, jitter: bool = True,
                 settings: ReflectorSettings | None = None, metrics: KubeMetrics | None = None,
                 on_fatal: FatalHandler | None = None,
                 transforms: Callable[[GVR], Transform | None] | None = None):
        """`transforms(gvr)`: the transform of every informer of `gvr` made without one."""
        self.client = client
        self._transforms = transforms
        self.on_fatal = on_fatal  # told when an informer's task ends; None: only logged
        self.namespace = namespace  # "" / None = all namespaces (upstream's `namespace`)
        # like upstream, one draw per factory from [min, 2*min)
        self.resync_period = (resync_period * (1 + random.random())
                              if resync_period and jitter else resync_period)
        self.settings = settings
        self.metrics = metrics or client.metrics
        self._informers: dict[tuple[GVR, str | None, str | None, str | None], SharedInformer] = {}
        self._tasks: dict[SharedInformer, Supervised] = {}
        self._started = False

    def informer(self, gvr: GVR, *, label_selector: str | None = None,
                 field_selector: str | None = None, transform: Transform | None = None) -> SharedInformer:
        """The shared informer for `gvr` (made on first use; started if the factory runs).
        Every caller of one informer must pass the same `transform` (ValueError otherwise):
        a reader must not get objects cut down for another."""
        if transform is None and self._transforms is not None:
            transform = self._transforms(gvr)
        ns = (self.namespace or None) if gvr.namespaced else None
        key = (gvr, ns, label_selector, field_selector)
        inf = self._informers.get(key)
        if inf is None:
            inf = self._informers[key] = SharedInformer(
                self.client, gvr, namespace=ns, label_selector=label_selector,
                field_selector=field_selector, resync_period=self.resync_period,
                settings=self.settings, metrics=self.metrics, transform=transform)
            if self._started:
                self._start_one(inf)
        elif inf.transform is not transform:
            raise ValueError(f"informer for {gvr} already made with another transform")
        return inf

    def start(self) -> None:
        """Start every informer made so far (and any made later); needs a running loop."""
        self._started = True
        for inf in self._informers.values():
            if inf not in self._tasks:
                self._start_one(inf)

    async def wait_synced(self, *, within: float | None = None) -> None:
        """Wait until every informer has listed once (`InformerFailed` if one died);
        `CacheSyncTimeout`, naming the unsynced ones, if that takes over `within` seconds."""
        try:
            async with asyncio.timeout(within):
                for inf in list(self._informers.values()):
                    await inf.wait_synced()
        except TimeoutError:
            raise CacheSyncTimeout(within or 0.0, self.unsynced()) from None

    def has_synced(self) -> bool:
        return all(inf.has_synced() for inf in self._informers.values())

    def unsynced(self) -> list[str]:
        """The resource types whose caches have not (or no longer) synced."""
        return sorted(str(inf.gvr) for inf in self._informers.values() if not inf.has_synced())

    def informers(self) -> list[SharedInformer]:
        """Every informer made so far."""
        return list(self._informers.values())

    def get_cached(self, gvr: GVR, namespace: str | None, name: str) -> Obj | None:
        """The cached object from the first unfiltered informer of `gvr`, if any."""
        for (g, _ns, ls, fs), inf in self._informers.items():
            if g == gvr and ls is None and fs is None:
                return inf.store.get_by_name(namespace, name)
        return None

    async def stop(self, within: float = 5.0) -> None:
        """Stop every informer task, waiting at most `within` seconds for them."""
        supervised = list(self._tasks.values())
        await asyncio.gather(*(sup.stop(within) for sup in supervised))
        self._tasks.clear()
        self._started = False

    def all(self) -> list[SharedInformer]:
        """Every informer made so far."""
        return list(self._informers.values())

    def supervised(self, inf: SharedInformer) -> Supervised | None:
        """The supervised task running `inf` (None before the factory starts it)."""
        return self._tasks.get(inf)

    def _start_one(self, inf: SharedInformer) -> None:
        # policy: fail fast. An informer retries the API forever, so an end is a bug and
        # its cache would go stale; the owner stops the process instead.
        sup = Supervised(inf.run, name=f"informer {inf.gvr}", policy=FailFast(),
                         on_fatal=lambda name, why: self._informer_ended(inf, name, why), logger=log)
        self._tasks[inf] = sup
        sup.start()

    def _informer_ended(self, inf: SharedInformer, name: str, why: str) -> None:
        inf.fail(f"{name} {why}")
        if self.on_fatal is not None:
            self.on_fatal(name, why)
