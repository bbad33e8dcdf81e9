"""An indexed cache of objects keyed `namespace/name`, the read side of every informer.

Reconcilers read children "by owner uid" or "by label" here instead of listing from the
API. Objects are the dicts parsed from the wire and are shared by every reader: they must
be treated as read-only (copy before changing). Indexes are kept up to date on every
write, so a lookup is a dict access.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from shared.logs import event
from shared.objects import deep_get

log = logging.getLogger(__name__)

IndexFunc = Callable[[dict[str, Any]], Iterable[str]]


def index_reads(*paths: str) -> Callable[[IndexFunc], IndexFunc]:
    """Declare what an index function reads of an object besides its key (namespace and
    name), as dotted paths ("spec", "metadata.labels"): an update in which every one of
    them is equal (`==`) keeps the object's index values without calling the function.
    Declare none for a function of the key alone. Undeclared functions run on every update.
    Only for functions whose values cannot differ between `==` parts (1 == 1.0 == True)."""
    def mark(fn: IndexFunc) -> IndexFunc:
        fn.index_reads = tuple(tuple(path.split(".")) for path in paths)  # type: ignore[attr-defined]
        return fn
    return mark


def _unchanged(fn: IndexFunc, old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether `fn` (declared with `index_reads`) would index `new` as it did `old`."""
    paths: tuple[tuple[str, ...], ...] | None = getattr(fn, "index_reads", None)
    return paths is not None and all(deep_get(old, *path) == deep_get(new, *path) for path in paths)


INDEX_NAMESPACE = "namespace"
INDEX_OWNER = "owner-uid"
INDEX_LABEL = "label"


def object_key(obj: dict[str, Any]) -> str:
    """`namespace/name`, or `name` for cluster-scoped objects (client-go's MetaNamespaceKey)."""
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise ValueError("object has no metadata.name")
    ns = meta.get("namespace")
    return f"{ns}/{name}" if ns else str(name)


def split_key(key: str) -> tuple[str | None, str]:
    """The inverse of `object_key`: (namespace or None, name)."""
    ns, sep, name = key.partition("/")
    if not sep:
        return None, key
    if not ns or not name or "/" in name:
        raise ValueError(f"invalid object key {key!r}")
    return ns, name


@index_reads()  # the namespace is the key's
def by_namespace(obj: dict[str, Any]) -> list[str]:
    ns = (obj.get("metadata") or {}).get("namespace")
    return [ns] if ns else []


@index_reads("metadata.ownerReferences")
def by_controller_uid(obj: dict[str, Any]) -> list[str]:
    """The uid of the object's controller ownerReference (at most one)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") and ref.get("uid"):
            return [str(ref["uid"])]
    return []


@index_reads("metadata.labels")
def by_label(obj: dict[str, Any]) -> list[str]:
    """One `key=value` entry per label: an index a cache asks for (`add_indexer(INDEX_LABEL,
    by_label)`), not a default, since it holds an entry per label of every object (about
    2 KB per CR's children at 1,000 CRs) where the GM looks pods up by one label only."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return [f"{k}={v}" for k, v in labels.items()] if isinstance(labels, dict) else []


DEFAULT_INDEXERS: dict[str, IndexFunc] = {
    INDEX_NAMESPACE: by_namespace,
    INDEX_OWNER: by_controller_uid,
}


class Store:
    """Objects by key plus named indexes (index name -> value -> keys)."""

    def __init__(self, indexers: dict[str, IndexFunc] | None = None):
        self._items: dict[str, dict[str, Any]] = {}
        self._indexers: dict[str, IndexFunc] = dict(DEFAULT_INDEXERS)
        self._indexers.update(indexers or {})
        # invariant: key in _indices[name][value] <=> value in indexers[name](_items[key])
        self._indices: dict[str, dict[str, set[str]]] = {n: {} for n in self._indexers}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def add_indexer(self, name: str, fn: IndexFunc) -> None:
        """Register an index; existing objects are indexed at once."""
        if name in self._indexers:
            raise ValueError(f"index {name!r} already exists")
        self._indexers[name] = fn
        self._indices[name] = {}
        for key, obj in self._items.items():
            self._index_one(name, key, obj)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._items.get(key)

    def get_by_name(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self._items.get(f"{namespace}/{name}" if namespace else name)

    def keys(self) -> list[str]:
        return list(self._items)

    def list(self) -> list[dict[str, Any]]:
        return list(self._items.values())

    def by_index(self, index: str, value: str) -> list[dict[str, Any]]:
        """Objects whose index function yields `value` (`KeyError` for an unknown index)."""
        return [self._items[k] for k in self.index_keys(index, value)]

    def index_keys(self, index: str, value: str) -> list[str]:
        if index not in self._indices:
            raise KeyError(f"no index named {index!r}")
        return sorted(self._indices[index].get(value, ()))

    def upsert(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Insert or replace; returns the previous object for that key."""
        key = object_key(obj)
        old = self._items.get(key)
        self._items[key] = obj
        for name, fn in self._indexers.items():
            if old is not None:
                if _unchanged(fn, old, obj):  # a status write, say: the same values
                    continue
                self._unindex_one(name, key, old)
            self._index_one(name, key, obj)
        return old

    def remove(self, key: str) -> dict[str, Any] | None:
        """Remove by key; returns the removed object (None if it was absent)."""
        old = self._items.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return old

    def _values(self, name: str, key: str, obj: dict[str, Any]) -> list[str]:
        """Index values of `obj`; a failing custom index function indexes nothing."""
        try:
            return [str(v) for v in self._indexers[name](obj)]
        except Exception as exc:  # a bug in one index must not break the cache
            event(log, "index function failed", level=logging.ERROR, index=name, key=key,
                  error=repr(exc))
            return []

    def _index_one(self, name: str, key: str, obj: dict[str, Any]) -> None:
        for value in self._values(name, key, obj):
            self._indices[name].setdefault(value, set()).add(key)

    def _unindex(self, key: str, obj: dict[str, Any]) -> None:
        for name in self._indexers:
            self._unindex_one(name, key, obj)

    def _unindex_one(self, name: str, key: str, obj: dict[str, Any]) -> None:
        bucket = self._indices[name]
        for value in self._values(name, key, obj):
            keys = bucket.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del bucket[value]
