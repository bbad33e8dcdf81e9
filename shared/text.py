"""Bounding text that came from outside before it is echoed in a reply or a log line.

A value a client sent (a 1 MB number literal, a worker name, a path) may be quoted back
in an error body or a log field; `clip` keeps its start and states how long it was, so
the echo costs at most `limit` characters plus a short suffix whatever the input.
"""

from __future__ import annotations

ECHO_LIMIT = 200  # characters of a client's value quoted in an error body
LOG_FIELD_LIMIT = 4096  # characters of one structured log field


def clip(text: str, limit: int = ECHO_LIMIT) -> str:
    """`text` when it fits in `limit` characters, else its start and its full length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"
