"""Object metadata helpers shared by the store modules: timestamps, uids, generated names."""

from __future__ import annotations

import random
import time
import uuid
from datetime import UTC, datetime
from typing import Any

# The alphabet of apimachinery's rand.String: no vowels, no look-alike digits.
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
MAX_GENERATE_PREFIX = 58


def rfc3339(t: float | None = None) -> str:
    """metav1.Time: RFC 3339 UTC, second precision."""
    return datetime.fromtimestamp(time.time() if t is None else t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(t: float | None = None) -> str:
    """metav1.MicroTime: RFC 3339 UTC with six fraction digits."""
    return datetime.fromtimestamp(time.time() if t is None else t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 time (with or without fraction)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def new_uid() -> str:
    return str(uuid.uuid4())


def generated_name(prefix: str, rng: random.Random) -> str:
    """`generateName` + 5 random characters, the prefix cut to 58 characters."""
    return prefix[:MAX_GENERATE_PREFIX] + "".join(rng.choice(NAME_ALPHABET) for _ in range(5))


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    """The object's metadata (an empty dict when absent). Read-only use."""
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def rv_int(value: Any) -> int | None:
    """A resourceVersion as an integer; None when unset; ValueError when not a number."""
    if value in (None, "", 0):
        return None
    return int(value)
