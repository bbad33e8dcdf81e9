"""The store's state: every object, the global resourceVersion, the indexes kept in step with
the objects, commits and their fan-out to watches and listeners, reads, the state dump.

`ObjectStore` is the half of `Store` (store.py) that no verb's semantics live in: a commit
is one RV bump and one event, delivered to the history, the open watches and the listeners
inside the write. Stored objects are immutable (a write builds a new dict), so reads
return them without copying and their JSON encoding is cached until they are replaced.
"""

from __future__ import annotations

import bisect
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import orjson

from devcluster.machinery.errors import ApiError, bad_request, expired, not_found, timeout, too_old
from devcluster.machinery.resource import ResourceType
from devcluster.machinery.selectors import LabelSelector, parse_field_selector, parse_label_selector
from devcluster.storage.allocator import ServiceAllocator
from devcluster.storage.history import History
from devcluster.storage.pager import Page, Pager
from devcluster.storage.registry import Registry
from devcluster.storage.watch import Watch, WatchEvent

log = logging.getLogger("devcluster.store")

Key = tuple[str, str]  # (namespace or "", name)
Listener = Callable[[WatchEvent], None]

NS_KEY = ("", "namespaces")
CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
SERVICE_KEY = ("", "services")
POD_KEY = ("", "pods")
EVENT_KEY = ("", "events")


def get_or_none(store: Any, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any] | None:
    """`store.get` (any store or view of one), with None for an absent object instead of a 404."""
    try:
        return store.get(rt, namespace, name)
    except ApiError as err:
        if err.code == 404:
            return None
        raise


class ObjectStore:
    """The objects and their indexes, the RV, commits, reads and watches; `Store` adds the verbs."""

    def __init__(self, registry: Registry | None = None, *, history_limit: int = 50_000,
                 history_window: float = 300.0, bookmark_interval: float = 30.0,
                 watch_timeout: float = 1800.0, continue_ttl: float = 300.0, start_rv: int = 1000,
                 seed: int | None = None, clock: Callable[[], float] = time.time) -> None:
        self.registry = registry or Registry.with_builtins()
        # the admission steps (devcluster/auth/admission.py) every write goes through; None = none, as a
        # bare store for unit tests (DevCluster installs them)
        self.admission: Any = None
        self.rv = start_rv  # the global counter: +1 per persisted write
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self._clock = clock
        self._rng = random.Random(seed)
        # (group, resource) -> {(namespace, name): stored object}
        self._objects: dict[tuple[str, str], dict[Key, dict[str, Any]]] = {}
        self._sorted: dict[tuple[str, str], list[Key]] = {}  # sorted keys per bucket, kept in step with it
        self._ns_counts: dict[str, int] = {}  # namespace -> number of namespaced objects in it
        # (group, resource, controller uid or "") -> keys of the objects it controls ("" = no controller);
        # kept in step with the buckets so controllers find their children without scanning
        self._controlled: dict[tuple[str, str, str], dict[Key, None]] = {}
        self._watchers: dict[tuple[str, str], set[Watch]] = {}
        self._listeners: list[Listener] = []
        self._history = History(limit=history_limit, window=history_window, start_rv=start_rv)
        self._pager = Pager(ttl=continue_ttl)
        self._services = ServiceAllocator()
        self._event_index: dict[tuple[str, str, str, str], Key] = {}
        self._encoded: dict[int, tuple[dict[str, Any], bytes]] = {}  # id(stored obj) -> (obj, JSON)

    # -- reads ---------------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        """The stored object (shared: do not mutate); ApiError 404 when absent."""
        obj = self._bucket(rt).get((self._ns(rt, namespace), name))
        if obj is None:
            raise not_found(rt.resource, rt.group, name)
        return obj

    def controlled_by(self, rt: ResourceType, uid: str | None,
                      namespace: str | None = None) -> list[dict[str, Any]]:
        """Objects of `rt` whose controller ownerReference has `uid`; `uid=None` gives the
        objects without a controller (adoption candidates). Shared: do not mutate."""
        keys = self._controlled.get((*rt.key, uid or ""), {})
        bucket = self._bucket(rt)
        return [bucket[k] for k in keys if namespace is None or k[0] == namespace]

    def list(self, rt: ResourceType, namespace: str | None, *, label_selector: Any = None,
             field_selector: Any = None) -> tuple[list[dict[str, Any]], int]:
        """Matching objects sorted by namespace then name, and the snapshot RV."""
        match = self._matcher(rt, None, label_selector, field_selector)
        items = [o for o in self._scan(rt, namespace) if match(o)]
        return items, self.rv

    def list_page(self, rt: ResourceType, namespace: str | None, *, label_selector: Any = None,
                  field_selector: Any = None, limit: int | None = None, continue_token: str | None = None,
                  resource_version: str | None = None, resource_version_match: str | None = None) -> Page:
        """LIST with pagination and resourceVersion semantics (spec §5.2)."""
        if continue_token:
            return self._pager.next(continue_token, limit)
        self._check_list_rv(resource_version, resource_version_match)
        items, rv = self.list(rt, namespace, label_selector=label_selector, field_selector=field_selector)
        return self._pager.first(items, rv, limit)

    def _check_list_rv(self, resource_version: str | None, match: str | None) -> None:
        rv = _parse_rv(resource_version)
        if match not in (None, "", "NotOlderThan", "Exact"):
            raise bad_request(f'resourceVersionMatch: Unsupported value: "{match}"')
        if match and rv is None:
            raise bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
        if rv is None:
            return
        if rv > self.rv:
            raise timeout(f"Too large resource version: {rv}, current: {self.rv}")
        if match == "Exact" and rv != self.rv:
            if rv <= self._history.compacted:
                raise too_old(rv, self._history.compacted + 1)
            raise expired(f"resource version {rv} is not the current state ({self.rv}); "
                          "this server only serves exact lists of the current state")

    def _scan(self, rt: ResourceType, namespace: str | None) -> list[dict[str, Any]]:
        bucket = self._bucket(rt)
        keys = self._sorted.get(rt.key)
        if keys is None:
            keys = self._sorted[rt.key] = sorted(bucket)
        if namespace and rt.namespaced:
            lo = bisect.bisect_left(keys, (namespace, ""))
            hi = bisect.bisect_left(keys, (namespace + "\x00", ""))
            keys = keys[lo:hi]
        return [bucket[k] for k in keys]

    def encode(self, obj: dict[str, Any], rt: ResourceType | None = None) -> bytes:
        """JSON of an object; cached while `obj` is the stored version (lists, watch fan-out)."""
        hit = self._encoded.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        data = orjson.dumps(obj)
        if rt is not None and self._is_current(rt, obj):
            self._encoded[id(obj)] = (obj, data)
        return data

    def _is_current(self, rt: ResourceType, obj: dict[str, Any]) -> bool:
        m = obj.get("metadata") or {}
        return self._bucket(rt).get((m.get("namespace", ""), m.get("name", ""))) is obj

    # -- watch, listeners, history -------------------------------------------------------------

    def add_listener(self, callback: Listener) -> Callable[[], None]:
        """Call `callback(event)` after every commit, synchronously; returns the unsubscribe."""
        self._listeners.append(callback)

        def unsubscribe() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)
        return unsubscribe

    def watch(self, rt: ResourceType, namespace: str | None = None, *, resource_version: str | None = None,
              label_selector: Any = None, field_selector: Any = None, send_initial_events: bool | None = None,
              allow_bookmarks: bool = False, timeout: float | None = None,
              bookmark_interval: float | None = None) -> Watch:
        """Open a watch (spec §6.2); snapshot and subscription happen in this one call."""
        rv = _parse_rv(resource_version)
        match = self._matcher(rt, namespace, label_selector, field_selector)
        w = Watch(rt=rt, matches=match, current_rv=lambda: self.rv, on_close=self._unwatch,
                  allow_bookmarks=allow_bookmarks, timeout=timeout,
                  bookmark_interval=bookmark_interval or self.bookmark_interval)
        initial = send_initial_events if send_initial_events is not None else rv is None
        if initial:
            for obj in self._scan(rt, namespace if rt.namespaced else None):
                if match(obj):
                    w.push(WatchEvent("ADDED", rt, obj, None, int(obj["metadata"]["resourceVersion"])))
            if send_initial_events:
                w.push(_initial_events_end(rt, self.rv))
        elif rv is not None:
            if self._history.too_old(rv):
                w.fail(too_old(rv, self._history.compacted + 1))
            else:
                for ev in self._history.since(rv):
                    if ev.rt.key == rt.key:
                        w.offer(ev)
        self._watchers.setdefault(rt.key, set()).add(w)
        return w

    def _unwatch(self, w: Watch) -> None:
        self._watchers.get(w.rt.key, set()).discard(w)

    def watcher_count(self, rt: ResourceType | None = None) -> int:
        if rt is None:
            return sum(len(s) for s in self._watchers.values())
        return len(self._watchers.get(rt.key, ()))

    def compact(self, rv: int | None = None) -> None:
        """Test hook: forget history up to `rv` (default: the current RV)."""
        self._history.compact(self.rv if rv is None else rv)

    @property
    def compacted(self) -> int:
        return self._history.compacted

    # -- state dump ----------------------------------------------------------------------------

    def dump(self) -> bytes:
        """The whole state as bytes (for `--state FILE`); history is not kept."""
        objects = [[g, r, list(bucket.values())] for (g, r), bucket in self._objects.items()]
        return orjson.dumps({"version": 1, "rv": self.rv, "objects": objects})

    def load(self, data: bytes) -> None:
        """Replace the whole state with a `dump()`; open watches end, listeners hear nothing."""
        try:
            state = orjson.loads(data)
            rv, groups = int(state["rv"]), state["objects"]
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not a devcluster state dump: {err}") from None
        for watchers in list(self._watchers.values()):
            for w in list(watchers):
                w.close()
        self._objects, self._sorted, self._encoded, self._event_index = {}, {}, {}, {}
        self._ns_counts, self._controlled = {}, {}
        for group, resource, items in groups:
            bucket = self._objects[(group, resource)] = {}
            for o in items:
                ns = o["metadata"].get("namespace", "")
                bucket[(ns, o["metadata"]["name"])] = o
                self._controlled.setdefault((group, resource, _controller_uid(o)), {})[
                    (ns, o["metadata"]["name"])] = None
                if ns:
                    self._ns_counts[ns] = self._ns_counts.get(ns, 0) + 1
        for crd in self._objects.get(CRD_KEY, {}).values():
            self.registry.register_crd(crd)
        self._services.rebuild(self._objects.get(SERVICE_KEY, {}).values())
        self.rv = rv
        self._history.reset(rv)

    # -- internals -----------------------------------------------------------------------------

    def _bucket(self, rt: ResourceType) -> dict[Key, dict[str, Any]]:
        bucket = self._objects.get(rt.key)
        if bucket is None:
            bucket = self._objects[rt.key] = {}
        return bucket

    def _ns(self, rt: ResourceType, namespace: str | None) -> str:
        if not rt.namespaced:
            return ""
        if not namespace:
            raise bad_request("a namespace is required for a namespaced resource")
        return namespace

    def _storage_types(self) -> list[ResourceType]:
        seen: dict[tuple[str, str], ResourceType] = {}
        for rt in self.registry.all():
            if rt.key not in seen or rt.storage:
                seen[rt.key] = rt
        return list(seen.values())

    def _matcher(self, rt: ResourceType, namespace: str | None, label_selector: Any,
                 field_selector: Any) -> Callable[[dict[str, Any]], bool]:
        labels = _label_selector(label_selector)
        fields = parse_field_selector(field_selector, rt) if isinstance(field_selector, str) else field_selector
        ns = namespace if namespace and rt.namespaced else None
        if fields is not None and fields.empty:
            fields = None

        def match(obj: dict[str, Any]) -> bool:
            m = obj["metadata"]
            if ns is not None and m.get("namespace") != ns:
                return False
            if labels is not None and not labels.matches(m.get("labels")):
                return False
            return fields is None or fields.matches(obj)
        return match

    def _commit(self, rt: ResourceType, type_: str, new: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        self.rv += 1
        m = new["metadata"]
        m["resourceVersion"] = str(self.rv)
        bucket = self._bucket(rt)
        key = (m.get("namespace", ""), m["name"])
        if old is None:
            self._index_add(rt, key)
        else:
            self._encoded.pop(id(old), None)
            self._control_remove(rt, key, old)
        self._control_add(rt, key, new)
        bucket[key] = new
        self._emit(WatchEvent(type_, rt, new, old, self.rv, self._clock()))
        return new

    def _index_add(self, rt: ResourceType, key: Key) -> None:
        keys = self._sorted.get(rt.key)
        if keys is not None:
            bisect.insort(keys, key)
        if rt.namespaced:
            self._ns_counts[key[0]] = self._ns_counts.get(key[0], 0) + 1

    def _index_remove(self, rt: ResourceType, key: Key) -> None:
        keys = self._sorted.get(rt.key)
        if keys is not None:
            i = bisect.bisect_left(keys, key)
            if i < len(keys) and keys[i] == key:
                del keys[i]
        if rt.namespaced:
            self._ns_counts[key[0]] -= 1

    def _control_add(self, rt: ResourceType, key: Key, obj: dict[str, Any]) -> None:
        self._controlled.setdefault((*rt.key, _controller_uid(obj)), {})[key] = None

    def _control_remove(self, rt: ResourceType, key: Key, obj: dict[str, Any]) -> None:
        keys = self._controlled.get((*rt.key, _controller_uid(obj)))
        if keys is not None:
            keys.pop(key, None)

    def _emit(self, ev: WatchEvent) -> None:
        self._history.append(ev, ev.time)
        for w in list(self._watchers.get(ev.rt.key, ())):
            w.offer(ev)
        for cb in list(self._listeners):
            try:
                cb(ev)
            except Exception:  # a listener bug must not fail the write that already happened
                log.exception("store listener failed event=%r", ev)


def _controller_uid(obj: dict[str, Any]) -> str:
    for ref in obj["metadata"].get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") and ref.get("uid"):
            return str(ref["uid"])
    return ""

def _parse_rv(value: Any) -> int | None:
    if value in (None, "", "0", 0):
        return None
    try:
        rv = int(value)
    except (TypeError, ValueError):
        raise bad_request(f'resourceVersion: Invalid value: "{value}": strconv.ParseUint: parsing '
                          f'"{value}": invalid syntax') from None
    if rv < 0:
        raise bad_request(f'resourceVersion: Invalid value: "{value}"')
    return rv

def _label_selector(sel: Any) -> LabelSelector | None:
    parsed = parse_label_selector(sel) if isinstance(sel, str) else sel
    if parsed is None or parsed.empty:
        return None
    return parsed

def _initial_events_end(rt: ResourceType, rv: int) -> WatchEvent:
    obj = {"kind": rt.kind, "apiVersion": rt.api_version,
           "metadata": {"resourceVersion": str(rv), "annotations": {"k8s.io/initial-events-end": "true"}}}
    return WatchEvent("BOOKMARK", rt, obj, None, rv)
