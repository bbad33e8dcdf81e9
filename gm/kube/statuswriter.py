"""Writing a CR's status without losing anyone's update, in one API call when nothing raced.

The GM's reconcilers and the edge status pipeline (reports relayed from the edge) both
write status. A writer therefore never builds a status from scratch: it applies a
mutation to a copy of the *latest* status it knows, so fields owned by the other writer
survive, and sends only what changed as a JSON merge patch of `/status`, guarded by the
resourceVersion it started from (a merge patch that names `metadata.resourceVersion` is
refused with 409 unless that is still the object's version). A mutation that changes nothing
writes nothing.

"The latest status it knows" is the newer of the informer cache's copy and the object this
writer itself got back from its last write of that object. Under a stream of writes the cache
lags behind by the watch's delay; starting from our own last write instead means the next
write of the same object needs no re-read, so a write costs one call unless someone else
really wrote in between. Then the 409 is answered with one GET from the API (not the cache,
which may still lag) and the mutation is applied again to what it returned.
"""

from __future__ import annotations

import copy
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gm.kube.apierrors import Conflict, NotFound
from gm.kube.client import KubeClient
from gm.kube.informer import SharedInformer
from gm.kube.resources import GVR
from shared.logs import event

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Mutate = Callable[[dict[str, Any]], dict[str, Any] | None]
"""Gets a private copy of the current status; edits it in place or returns a new one.
It may run several times (once per attempt), so it must be a function of its input."""
CacheLookup = Callable[[GVR, str | None, str], Obj | None]
BUDGET = "status"  # the client bucket status writes draw from (gm/kube/client.py)
MAX_REMEMBERED = 4096  # objects whose last written version is kept (least recently written go)


@dataclass(frozen=True, slots=True)
class StatusResult:
    object: Obj  # the object as last read or as written
    written: bool  # False when the mutation changed nothing
    attempts: int  # writes sent (0 when nothing changed)


class StatusWriter:
    """Mutate-and-patch of `/status` with resourceVersion guards and bounded 409 retries."""

    def __init__(self, client: KubeClient, *, cache: CacheLookup | None = None,
                 max_attempts: int = 5, remember: int = MAX_REMEMBERED):
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.client = client
        self.cache = cache
        self.max_attempts = max_attempts
        # Invariant: holds, per object, the version this writer last wrote and nothing older
        # than what the API returned to it; dropped once the cache has caught up.
        self._written: OrderedDict[tuple[GVR, str | None, str], Obj] = OrderedDict()
        self._remember = remember

    async def update(self, gvr: GVR, namespace: str | None, name: str,
                     mutate: Mutate, *, uid: str | None = None) -> StatusResult:
        """Apply `mutate` to the latest status and write what changed.

        Raises `NotFound` if the object is gone (or, given `uid`, if the object of that name
        is another one: a status computed for a deleted object must not land on its
        successor) and `Conflict` if every attempt lost a race. Other `ApiError`s propagate
        unchanged: the caller decides whether they are worth retrying.
        """
        obj = self.latest(gvr, namespace, name)
        if obj is None:
            obj = await self.client.get(gvr, name, namespace=namespace)
        attempts = 0
        while True:
            _check_uid(obj, uid, gvr=gvr, namespace=namespace, name=name)
            current = obj.get("status") or {}
            desired = _apply(mutate, current)
            if desired == current:
                return StatusResult(obj, written=False, attempts=attempts)
            attempts += 1
            try:
                written = await self._patch(gvr, namespace, name, obj, merge_patch(current, desired))
                return StatusResult(written, written=True, attempts=attempts)
            except Conflict:
                self._forget(gvr, namespace, name)
                if attempts >= self.max_attempts:
                    raise
                event(log, "status conflict, re-reading", level=logging.DEBUG,
                      key=f"{namespace}/{name}", resource=str(gvr), attempt=attempts)
                obj = await self.client.get(gvr, name, namespace=namespace)
            except NotFound:
                self._forget(gvr, namespace, name)
                raise

    def latest(self, gvr: GVR, namespace: str | None, name: str) -> Obj | None:
        """The newest version known without a request: the cache's, or our own last write's."""
        cached = self.cache(gvr, namespace, name) if self.cache is not None else None
        key = (gvr, namespace, name)
        mine = self._written.get(key)
        if mine is None:
            return cached
        if cached is not None and not _older(cached, mine):
            del self._written[key]  # the cache caught up (or someone wrote after us)
            return cached
        return mine

    async def _patch(self, gvr: GVR, namespace: str | None, name: str, base: Obj,
                     status_patch: dict[str, Any]) -> Obj:
        meta = base.get("metadata") or {}
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": status_patch}
        written = await self.client.patch(gvr, name, body, namespace=namespace, subresource="status",
                                          patch_type="merge", budget=BUDGET)
        self._remember_written(gvr, namespace, name, written)
        return written

    def _remember_written(self, gvr: GVR, namespace: str | None, name: str, obj: Obj) -> None:
        key = (gvr, namespace, name)
        self._written[key] = obj
        self._written.move_to_end(key)
        while len(self._written) > self._remember:
            self._written.popitem(last=False)

    def _forget(self, gvr: GVR, namespace: str | None, name: str) -> None:
        self._written.pop((gvr, namespace, name), None)

    def follow(self, informer: SharedInformer) -> None:
        """Forget a remembered write as soon as `informer`'s cache holds it or a newer version
        (or the object is gone), not only at the object's next write: an object written once
        must not keep a second, whole copy of itself here."""
        gvr = informer.gvr

        def seen(obj: Obj) -> None:
            meta = obj.get("metadata") or {}
            key = (gvr, meta.get("namespace"), meta.get("name"))
            mine = self._written.get(key)
            if mine is not None and not _older(obj, mine):
                del self._written[key]

        def gone(obj: Obj) -> None:
            meta = obj.get("metadata") or {}
            self._written.pop((gvr, meta.get("namespace"), meta.get("name")), None)

        informer.add_event_handler(on_add=seen, on_update=lambda _old, new: seen(new), on_delete=gone)

    def __len__(self) -> int:
        """Writes remembered now (ahead of the cache)."""
        return len(self._written)


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns `old` into `new`: changed keys, maps recursed,
    removed keys as null. Lists are replaced whole, as merge patch does."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        if key in old and old[key] == value:
            continue
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            patch[key] = merge_patch(before, value)
        else:
            patch[key] = value
    return patch


def _older(a: Obj, b: Obj) -> bool:
    """Whether `a` is an older version than `b` of one object, by resourceVersion.

    resourceVersions are opaque by contract, but every API server in use (etcd's revision, the
    dev cluster's counter) hands out increasing integers; anything else is taken as not older."""
    ra = str((a.get("metadata") or {}).get("resourceVersion") or "")
    rb = str((b.get("metadata") or {}).get("resourceVersion") or "")
    if (a.get("metadata") or {}).get("uid") != (b.get("metadata") or {}).get("uid"):
        return False
    return ra.isdigit() and rb.isdigit() and int(ra) < int(rb)


def _check_uid(obj: Obj, uid: str | None, *, gvr: GVR, namespace: str | None, name: str) -> None:
    if uid is not None and (obj.get("metadata") or {}).get("uid") != uid:
        raise NotFound(404, "NotFound", f"{gvr.plural} {namespace}/{name} with uid {uid} no longer exists")


def _apply(mutate: Mutate, status: dict[str, Any]) -> dict[str, Any]:
    draft = copy.deepcopy(status)
    result = mutate(draft)
    out = draft if result is None else result
    if not isinstance(out, dict):
        raise TypeError(f"status mutation returned {type(out).__name__}, not a dict")
    return out
