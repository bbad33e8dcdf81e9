"""The `pod-template-hash` of a Deployment's template (spec §7.4).

Kubernetes hashes a Go dump of the template with FNV-1a 32 and spells the decimal number
with a vowel-free alphabet. We hash canonical JSON instead (sorted keys), so the format
matches a real cluster while the values differ.
"""

from __future__ import annotations

from typing import Any

import orjson

_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def fnv32a(data: bytes) -> int:
    """FNV-1a, 32 bits."""
    h = _FNV_OFFSET
    for b in data:
        h ^= b
        h = (h * _FNV_PRIME) & 0xFFFFFFFF
    return h


def safe_encode(s: str) -> str:
    """Map each character into the alphabet Kubernetes uses for generated names."""
    return "".join(_ALPHABET[ord(c) % len(_ALPHABET)] for c in s)


def pod_template_hash(template: dict[str, Any], collision_count: int | None = None) -> str:
    """Hash of a pod template, 1-10 characters from `[4-9bcdf]`."""
    data = orjson.dumps(template, option=orjson.OPT_SORT_KEYS)
    if collision_count is not None:
        data += int(collision_count).to_bytes(4, "little", signed=False)
    return safe_encode(str(fnv32a(data)))
