"""Garbage collector (spec §7.2): cascade deletion through owner references.

Each owner reference of a dependent is classified as solid, dangling or waiting (owner in
foreground deletion); `plan_dependent` turns the verdicts into one action. Owners being
deleted with the `orphan` or `foregroundDeletion` finalizer are processed here too. The
collector keeps two indexes built from store events: every object by uid, and dependents
by owner uid, so an owner's deletion reaches its dependents without a scan.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from devcluster.controllers.base import Controller
from devcluster.controllers.meta import finalizers, is_deleting, owner_refs
from devcluster.machinery.errors import ApiError
from devcluster.storage.objects import get_or_none

log = logging.getLogger("devcluster.gc")

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"


class Verdict(enum.Enum):
    SOLID = "solid"
    DANGLING = "dangling"
    WAITING = "waiting"
    UNRESOLVED = "unresolved"  # the kind is not served: leave the dependent alone


@dataclass(frozen=True, slots=True)
class ObjKey:
    """Where an object lives in the store."""

    gr: tuple[str, str]  # (group, resource): every served version shares the objects
    namespace: str | None
    name: str

    @classmethod
    def of(cls, rt: Any, obj: dict[str, Any]) -> ObjKey:
        meta = obj["metadata"]
        return cls(rt.key, meta.get("namespace") or None, meta["name"])


@dataclass(frozen=True, slots=True)
class Keep:
    """Keep the dependent; drop references to these owner uids (may be empty)."""

    prune: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Delete:
    policy: str  # Background | Foreground | Orphan


def classify_owner(owner: dict[str, Any] | None, ref: dict[str, Any]) -> Verdict:
    """Verdict for one reference, given the object currently at the owner's name."""
    if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
        return Verdict.DANGLING
    if is_deleting(owner) and FOREGROUND in finalizers(owner):
        return Verdict.WAITING
    return Verdict.SOLID


def plan_dependent(
    verdicts: list[tuple[str, Verdict]], *, has_dependents: bool, own_finalizers: list[str]
) -> Keep | Delete:
    """What to do with a dependent whose references got these verdicts (uid, verdict)."""
    kinds = {v for _, v in verdicts}
    if not verdicts or Verdict.UNRESOLVED in kinds:
        return Keep()
    if Verdict.SOLID in kinds:
        return Keep(tuple(uid for uid, v in verdicts if v is not Verdict.SOLID))
    if Verdict.WAITING in kinds and has_dependents:
        return Delete("Foreground")
    if ORPHAN in own_finalizers:
        return Delete("Orphan")
    if FOREGROUND in own_finalizers:
        return Delete("Foreground")
    return Delete("Background")


class GarbageCollector(Controller):
    """Deletes dependents whose owners are gone; serves foreground and orphan deletion."""

    name = "garbage-collector"

    def __init__(self, store: Any, *, resync: float = 5.0):
        super().__init__(store, resync=resync)
        self._by_uid: dict[str, ObjKey] = {}
        self._dependents: dict[str, set[ObjKey]] = {}  # owner uid -> dependents naming it
        self._refs: dict[ObjKey, frozenset[str]] = {}  # dependent -> owner uids (for unindexing)
        self._deleting: set[ObjKey] = set()  # objects waiting on a GC finalizer

    # -- indexes --------------------------------------------------------------------

    def prime(self) -> None:
        for rt in self.store.registry.all():
            if _skip(rt):
                continue
            items, _ = self.store.list(rt, None)
            for obj in items:
                self._index(rt, obj)

    def _index(self, rt: Any, obj: dict[str, Any]) -> ObjKey:
        key = ObjKey.of(rt, obj)
        self._unindex_refs(key)
        self._by_uid[obj["metadata"]["uid"]] = key
        uids = frozenset(r["uid"] for r in owner_refs(obj) if r.get("uid"))
        if uids:
            self._refs[key] = uids
            for uid in uids:
                self._dependents.setdefault(uid, set()).add(key)
        if is_deleting(obj) and {FOREGROUND, ORPHAN} & set(finalizers(obj)):
            self._deleting.add(key)
        else:
            self._deleting.discard(key)
        return key

    def _unindex_refs(self, key: ObjKey) -> None:
        for uid in self._refs.pop(key, ()):
            deps = self._dependents.get(uid)
            if deps is not None:
                deps.discard(key)
                if not deps:
                    del self._dependents[uid]

    def _unindex(self, key: ObjKey, uid: str) -> None:
        self._unindex_refs(key)
        self._deleting.discard(key)
        if self._by_uid.get(uid) == key:
            del self._by_uid[uid]

    # -- triggers -------------------------------------------------------------------

    def keys_for(self, event: Any) -> Iterable[Hashable]:
        if _skip(event.rt):
            return ()
        obj = event.obj
        uid = obj["metadata"].get("uid", "")
        refs = [r.get("uid") for r in owner_refs(obj)]
        if event.type == "DELETED":
            key = ObjKey.of(event.rt, obj)
            self._unindex(key, uid)
            owners = [self._by_uid[u] for u in refs if u in self._by_uid]
            return [*self._dependents.get(uid, ()), *owners]
        key = self._index(event.rt, obj)
        keys: list[ObjKey] = [key] if refs or key in self._deleting else []
        if is_deleting(obj):
            keys.extend(self._dependents.get(uid, ()))
        return keys

    def resync_keys(self) -> Iterable[Hashable]:
        return [*self._refs, *self._deleting]

    # -- reconcile ------------------------------------------------------------------

    async def sync(self, key: Hashable) -> float | None:
        assert isinstance(key, ObjKey)
        obj = self._get(key)
        if obj is None:
            return None
        if is_deleting(obj):
            fins = finalizers(obj)
            if ORPHAN in fins:
                self._orphan_dependents(key, obj)
            elif FOREGROUND in fins:
                self._finish_foreground(key, obj)
            return None
        if owner_refs(obj):
            self._check_dependent(key, obj)
        return None

    def _rt(self, key: ObjKey) -> Any:
        rt = self.store.registry.for_resource(*key.gr)
        if rt is None:  # the CRD went away; its objects go with it
            raise ApiError(404, "NotFound", f"resource {key.gr} is not served")
        return rt

    def _get(self, key: ObjKey) -> dict[str, Any] | None:
        return get_or_none(self.store, self._rt(key), key.namespace, key.name)

    def _verdict(self, key: ObjKey, ref: dict[str, Any]) -> Verdict:
        rt = self.store.registry.for_kind(ref.get("apiVersion", ""), ref.get("kind", ""))
        if rt is None:
            return Verdict.UNRESOLVED
        if rt.namespaced and key.namespace is None:
            return Verdict.DANGLING  # a cluster-scoped object cannot have namespaced owners
        owner = self._get(ObjKey(rt.key, key.namespace if rt.namespaced else None, ref.get("name", "")))
        return classify_owner(owner, ref)

    def _check_dependent(self, key: ObjKey, obj: dict[str, Any]) -> None:
        verdicts = [(r.get("uid", ""), self._verdict(key, r)) for r in owner_refs(obj)]
        uid = obj["metadata"]["uid"]
        action = plan_dependent(
            verdicts, has_dependents=bool(self._dependents.get(uid)), own_finalizers=finalizers(obj)
        )
        if isinstance(action, Keep):
            if action.prune:
                self._remove_refs(key, set(action.prune))
            return
        log.debug("gc deleting key=%s/%s policy=%s", key.namespace, key.name, action.policy)
        self._delete(key, uid, action.policy)

    def _delete(self, key: ObjKey, uid: str, policy: str) -> None:
        try:
            self.store.delete(
                self._rt(key), key.namespace, key.name, propagation=policy, preconditions={"uid": uid}
            )
        except ApiError as err:
            if err.code not in (404, 409):
                raise

    def _remove_refs(self, key: ObjKey, uids: set[str]) -> None:
        def edit(obj: dict[str, Any]) -> None:
            meta = obj["metadata"]
            kept = [r for r in meta.get("ownerReferences") or [] if r.get("uid") not in uids]
            if kept:
                meta["ownerReferences"] = kept
            else:
                meta.pop("ownerReferences", None)

        self._mutate(key, edit)

    def _drop_finalizer(self, key: ObjKey, name: str) -> None:
        def edit(obj: dict[str, Any]) -> None:
            meta = obj["metadata"]
            kept = [f for f in meta.get("finalizers") or [] if f != name]
            if kept:
                meta["finalizers"] = kept
            else:
                meta.pop("finalizers", None)

        self._mutate(key, edit)

    def _mutate(self, key: ObjKey, fn: Callable[[dict[str, Any]], None]) -> None:
        try:
            self.store.mutate(self._rt(key), key.namespace, key.name, fn)
        except ApiError as err:
            if err.code != 404:
                raise

    def _orphan_dependents(self, key: ObjKey, owner: dict[str, Any]) -> None:
        uid = owner["metadata"]["uid"]
        for dep in list(self._dependents.get(uid, ())):
            self._remove_refs(dep, {uid})
        self._drop_finalizer(key, ORPHAN)

    def _finish_foreground(self, key: ObjKey, owner: dict[str, Any]) -> None:
        uid = owner["metadata"]["uid"]
        for dep in list(self._dependents.get(uid, ())):
            obj = self._get(dep)
            if obj is None:
                continue
            if any(r.get("uid") == uid and r.get("blockOwnerDeletion") for r in owner_refs(obj)):
                return  # still blocked; the dependent's deletion re-enqueues this owner
        self._drop_finalizer(key, FOREGROUND)


def _skip(rt: Any) -> bool:
    """Events are never owners or dependents worth tracking, and they are many."""
    return rt.key == ("", "events")
