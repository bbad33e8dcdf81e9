"""Small helpers on object dicts the controllers share: owner references, times, conditions.

Pure functions over plain dicts; nothing here touches the store.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any


def now_time() -> str:
    """`metav1.Time` for now: RFC 3339 UTC with second precision."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """`metav1.MicroTime` for now: six fraction digits."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: str | None) -> _dt.datetime | None:
    """Parse a Time or MicroTime; None when absent or malformed."""
    if not value:
        return None
    try:
        return _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def seconds_since(value: str | None) -> float | None:
    """Seconds elapsed since a stored timestamp; None when absent."""
    t = parse_time(value)
    if t is None:
        return None
    return (_dt.datetime.now(_dt.UTC) - t).total_seconds()


def controller_ref(owner: dict[str, Any]) -> dict[str, Any]:
    """The owner reference a controller puts on what it creates."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owner_refs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return obj.get("metadata", {}).get("ownerReferences") or []


def get_controller_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The reference marked `controller: true`, if any."""
    for ref in owner_refs(obj):
        if ref.get("controller"):
            return ref
    return None


def is_deleting(obj: dict[str, Any]) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def finalizers(obj: dict[str, Any]) -> list[str]:
    return obj.get("metadata", {}).get("finalizers") or []


def labels_of(obj: dict[str, Any]) -> dict[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


def annotations_of(obj: dict[str, Any]) -> dict[str, str]:
    return obj.get("metadata", {}).get("annotations") or {}


def find_condition(conds: list[dict[str, Any]] | None, ctype: str) -> dict[str, Any] | None:
    for c in conds or []:
        if c.get("type") == ctype:
            return c
    return None


def set_condition(
    conds: list[dict[str, Any]], ctype: str, status: str, *, reason: str = "",
    message: str = "", now: str | None = None, heartbeat_field: str | None = None,
) -> None:
    """Upsert one condition in place; `lastTransitionTime` moves only when status changes."""
    now = now or now_time()
    cur = find_condition(conds, ctype)
    if cur is None:
        cur = {"type": ctype}
        conds.append(cur)
    if cur.get("status") != status or "lastTransitionTime" not in cur:
        cur["lastTransitionTime"] = now
    if heartbeat_field and (
        cur.get("status") != status or cur.get("reason") != reason or cur.get("message") != message
    ):
        cur[heartbeat_field] = now
    cur["status"] = status
    if reason:
        cur["reason"] = reason
    else:
        cur.pop("reason", None)
    if message:
        cur["message"] = message
    else:
        cur.pop("message", None)
