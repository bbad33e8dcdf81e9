"""Writing a CR's status without losing anyone's update.

The GM's reconcilers and the upstream dispatcher (reports relayed from the edge) both
write status. A writer therefore never builds a status from scratch: it applies a
mutation to a copy of the *latest* status, so fields owned by the other writer survive,
and PUTs `/status` guarded by the resourceVersion it read. A 409 means someone wrote in
between; it re-reads from the API (the cache may lag) and applies the mutation again. A
mutation that changes nothing writes nothing.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gm.kube.client import KubeClient
from gm.kube.errors import Conflict, NotFound
from gm.kube.resources import GVR
from shared.logs import event

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Mutate = Callable[[dict[str, Any]], dict[str, Any] | None]
"""Gets a private copy of the current status; edits it in place or returns a new one.
It may run several times (once per attempt), so it must be a function of its input."""
CacheLookup = Callable[[GVR, str | None, str], Obj | None]


@dataclass(frozen=True, slots=True)
class StatusResult:
    object: Obj  # the object as last read or as written
    written: bool  # False when the mutation changed nothing
    attempts: int  # PUTs sent (0 when nothing changed)


class StatusWriter:
    """Read-mutate-PUT of `/status` with resourceVersion guards and bounded 409 retries."""

    def __init__(self, client: KubeClient, *, cache: CacheLookup | None = None,
                 max_attempts: int = 5):
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.client = client
        self.cache = cache
        self.max_attempts = max_attempts

    async def update(self, gvr: GVR, namespace: str | None, name: str,
                     mutate: Mutate, *, uid: str | None = None) -> StatusResult:
        """Apply `mutate` to the latest status and write it.

        Raises `NotFound` if the object is gone (or, given `uid`, if the object of that name
        is another one: a status computed for a deleted object must not land on its
        successor) and `Conflict` if every attempt lost a race.
        """
        obj = self.cache(gvr, namespace, name) if self.cache is not None else None
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
                written = await self.client.replace(
                    gvr, name, _with_status(obj, desired), namespace=namespace,
                    subresource="status")
                return StatusResult(written, written=True, attempts=attempts)
            except Conflict:
                if attempts >= self.max_attempts:
                    raise
                event(log, "status conflict, re-reading", level=logging.DEBUG,
                      key=f"{namespace}/{name}", resource=str(gvr), attempt=attempts)
                obj = await self.client.get(gvr, name, namespace=namespace)


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


def _with_status(obj: Obj, status: dict[str, Any]) -> Obj:
    """The object as read (its RV is the guard) with the new status; other fields untouched."""
    body = dict(obj)
    body["status"] = status
    return body
