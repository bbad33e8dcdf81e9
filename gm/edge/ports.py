"""What the hub needs from the rest of the GM: which objects each node needs, and a taker of
status reports (gm/edge/objects.py and gm/edge/status.py in the GM; fakes in tests)."""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from proto import Message

if TYPE_CHECKING:
    from aiohttp import web

    from shared.lanes import Upgrade
    from shared.websocket import ServerWebSocket


class ObjectSource(Protocol):
    """What the GM tells the hub about which objects each node needs.

    An object version is one mapping, never mutated, handed out (here and to `notify_changed`)
    for as long as that version lasts: the hub shares its encodings by that identity."""

    def objects_for_node(self, node: str) -> Iterable[tuple[str, str, str, Mapping[str, Any]]]:
        """Every (kind, namespace, name, object) the node needs right now."""
        ...

    def is_assigned(self, node: str, kind: str, namespace: str, name: str) -> bool:
        """Whether the node may report status for this object."""
        ...

    def lacks(self, kind: str, namespace: str, name: str) -> bool:
        """Whether the object is of a kind the GM places and is not in its caches (yet)."""
        ...


class StatusHandler(Protocol):
    """Takes status reports in arrival order.

    `submit` queues one report before it returns (raising ReportRefused when it is refused at
    once); the awaitable it returns completes when the report's effect is committed, or raises
    ReportRefused (never applicable), or ReportDeferred or another error (not acked: the LC
    resends). `epoch` is the reporting LC's outbox epoch ("" when it sent none):
    `message.seq` is ordered only within it."""

    def submit(self, node: str, message: Message, *, epoch: str = "") -> Awaitable[None]: ...



EdgeSocket: TypeAlias = "web.WebSocketResponse | ServerWebSocket"
"""An LC session's websocket: the websocket lane's (shared/lanes.py), or aiohttp's when the hub
is served by aiohttp alone (compression on, or a hub attached to an aiohttp app)."""

UpgradeRequest: TypeAlias = "web.Request | Upgrade"
"""An LC's upgrade request, as the lane or aiohttp hands it to the hub."""
