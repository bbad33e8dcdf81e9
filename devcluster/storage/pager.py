"""List pagination: `limit` / `continue` over a snapshot kept under an opaque token (spec §5.2).

The first page freezes the full filtered result; later pages slice it, so a paginated
list is consistent at one resourceVersion however the store changes meanwhile.
"""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devcluster.machinery.errors import bad_request, expired

_EXPIRED = ("The provided continue parameter is too old to display a consistent list result. "
            "You can start a new list without the continue parameter, or use the continue token "
            "in this response to retrieve the remainder of the results. Continuing with the "
            "provided token results in an inconsistent list - objects that were created, "
            "modified, or deleted between the time the first chunk was returned and now may "
            "show up in the list.")


@dataclass(slots=True)
class Page:
    items: list[dict[str, Any]]
    rv: int
    continue_token: str = ""
    remaining: int | None = None


@dataclass(slots=True)
class _Snapshot:
    items: list[dict[str, Any]]
    rv: int
    expires: float


class Pager:
    def __init__(self, *, ttl: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        self._snapshots: dict[str, _Snapshot] = {}

    def first(self, items: list[dict[str, Any]], rv: int, limit: int | None) -> Page:
        if not limit or limit >= len(items):
            return Page(items, rv)
        self._expire()
        sid = secrets.token_urlsafe(12)
        self._snapshots[sid] = _Snapshot(items, rv, self._clock() + self.ttl)
        return self._slice(sid, 0, limit)

    def next(self, token: str, limit: int | None) -> Page:
        sid, offset = _decode(token)
        self._expire()
        if sid not in self._snapshots:
            raise expired(_EXPIRED)
        return self._slice(sid, offset, limit)

    def _slice(self, sid: str, offset: int, limit: int | None) -> Page:
        snap = self._snapshots[sid]
        end = len(snap.items) if not limit else min(len(snap.items), offset + limit)
        page = Page(snap.items[offset:end], snap.rv)
        if end < len(snap.items):
            page.continue_token = _encode(sid, end)
            page.remaining = len(snap.items) - end
        else:
            del self._snapshots[sid]
        return page

    def _expire(self) -> None:
        now = self._clock()
        for sid in [s for s, snap in self._snapshots.items() if snap.expires < now]:
            del self._snapshots[sid]


def _encode(sid: str, offset: int) -> str:
    return base64.urlsafe_b64encode(f"{sid}:{offset}".encode()).decode().rstrip("=")


def _decode(token: str) -> tuple[str, int]:
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        sid, _, offset = text.rpartition(":")
        return sid, int(offset)
    except (ValueError, UnicodeDecodeError):
        raise bad_request(f"continue key is not valid: {token}") from None
