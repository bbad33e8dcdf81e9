"""How the GM's port is served: the hub's websocket lane in front of the GM's aiohttp app.

One place for it, so the GM, the hub alone in bench/hub_servers.py and the hub's tests serve
the hub the same way: LC upgrades on `path` go to the lane (shared/lanes.py) and are handled by
`entry` (the hub's `handle`, or the GM's wrapper that first waits for its caches), unless the
hub wants aiohttp's websocket (compression on); every other request is the app's.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from gm.edge.hub import Hub
from shared.lanes import LaneSite, Upgrade, WebSocketLane
from shared.server_limits import GuardedAppRunner

LISTEN_BACKLOG = 4096  # a deep accept queue for a fleet that dials at once; the kernel caps it (somaxconn)


async def serve_hub(runner: GuardedAppRunner, hub: Hub, host: str | None, port: int, *,
                    entry: Callable[[Upgrade], Awaitable[Any]] | None = None, path: str = "/",
                    ssl_context: ssl.SSLContext | None = None, backlog: int = LISTEN_BACKLOG,
                    **site_options: Any) -> tuple[LaneSite, WebSocketLane]:
    """Start the site of a set-up runner whose app has the hub attached on `path`; the site
    and the lane (close the lane after the hub, when stopping)."""
    lane = WebSocketLane(path, entry or hub.handle, when=lambda: hub.lean)
    site = LaneSite(runner, host, port, lanes=[lane], ssl_context=ssl_context, backlog=backlog, **site_options)
    await site.start()
    return site, lane
