"""The last Warning events this GM emitted, for the status page.

The event recorders (gm/kube/events.py) tell every listener about each event they queue; this
log keeps the Warnings, newest last, at most `max_entries` of them with their text clipped, so it
stays small whatever the controllers say. It holds only what this process emitted: another
replica's events, or events older than its start, are in the API server (`kubectl get events`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

MAX_ENTRIES = 50
MAX_TEXT = 512  # characters kept of a reason or message
MAX_NAME = 253  # characters kept of a kind, namespace or name


@dataclass(frozen=True, slots=True)
class WarningEntry:
    time: float  # unix seconds the GM emitted it
    kind: str  # the involved object's
    namespace: str
    name: str
    reason: str
    message: str


class WarningLog:
    """Bounded; `note` is an event recorder's listener."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES, clock: Callable[[], float] = time.time) -> None:
        self._entries: deque[WarningEntry] = deque(maxlen=max_entries)
        self._clock = clock

    def __len__(self) -> int:
        return len(self._entries)

    def note(self, involved: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        """Keep it if it is a Warning (Normal events are not the page's)."""
        if type != "Warning":
            return
        self._entries.append(WarningEntry(
            self._clock(), _clip(involved.get("kind"), MAX_NAME), _clip(involved.get("namespace"), MAX_NAME),
            _clip(involved.get("name"), MAX_NAME), _clip(reason, MAX_TEXT), _clip(message, MAX_TEXT)))

    def recent(self) -> list[WarningEntry]:
        """Newest first."""
        return list(reversed(self._entries))


def _clip(value: Any, limit: int) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"
