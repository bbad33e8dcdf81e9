"""What every Table printer shares: the column definition, the Name and Age columns, ages as
kubectl prints them, and safe reads of an object's parts. Pure."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import lru_cache
from typing import Any

Cells = list[Any]
RowFn = Callable[[dict, float], Cells]

NAME_DESC = (
    "Name must be unique within a namespace. Is required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name automatically. "
    "Name is primarily intended for creation idempotence and configuration definition. Cannot be "
    "updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
AGE_DESC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. "
    "It is represented in RFC3339 form and is in UTC."
)


def column(name: str, type_: str = "string", desc: str = "", *, priority: int = 0, fmt: str = "") -> dict:
    return {"name": name, "type": type_, "format": fmt, "description": desc, "priority": priority}


NAME = column("Name", "string", NAME_DESC, fmt="name")
AGE = column("Age", "string", AGE_DESC)


# --------------------------------------------------------------------------- durations


def human_age(seconds: float) -> str:
    """A duration as kubectl prints ages (apimachinery `duration.HumanDuration`)."""
    s = int(seconds)  # truncates toward zero, like Go's int(d.Seconds())
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


@lru_cache(maxsize=4096)
def epoch(timestamp: str) -> float | None:
    try:
        return datetime.fromisoformat(timestamp).timestamp()
    except ValueError:
        return None


def since(timestamp: Any, now: float) -> str:
    """Age of an RFC 3339 timestamp; `<unknown>` when absent or unreadable."""
    when = epoch(timestamp) if isinstance(timestamp, str) and timestamp else None
    return "<unknown>" if when is None else human_age(now - when)


def age_of(obj: dict, now: float) -> str:
    return since(meta_of(obj).get("creationTimestamp"), now)


def meta_of(obj: dict) -> dict:
    return obj.get("metadata") or {}


def name_of(obj: dict) -> str:
    return meta_of(obj).get("name", "")


def as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list:
    return value if isinstance(value, list) else []
