"""A GM hub on a real port and LCs linked to it, for end-to-end tests of the LC link.

The GM side is gm.edge.hub.Hub over tests/hubfakes.MemSource and MemHandler (which records
what it applies and can be held closed or made to defer); the LC side is a real
LocalController whose links are GMLinks with short timings, attached by `attach`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from gm.edge.hub import Hub
from gm.edge.site import serve_hub
from gm.reports import ReportDeferred
from lc.app import LocalController
from lc.config import LCConfig
from lc.link.dialer import GMLink, LinkSettings
from proto import MAX_FRAME_BYTES, Message
from shared.lanes import Upgrade, WebSocketLane
from shared.server_limits import ServerLimits, guarded_runner
from tests.hubfakes import MemSource

NODE = "edge-1"
TIMEOUT = 10.0


class MemHandler:
    """Records every applied report as (node, seq, kind, name, body); can be held closed."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, int, str, str, dict[str, Any]]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = 0
        self.defer: dict[str, int] = {}  # name -> how many more times to defer its reports
        self.deferred = 0

    def submit(self, node: str, message: Message, *, epoch: str = ""):
        return self.handle_status(node, message, epoch=epoch)

    async def handle_status(self, node: str, message: Message, *, epoch: str = "") -> None:
        if self.defer.get(message.name, 0) > 0:
            self.defer[message.name] -= 1
            self.deferred += 1
            raise ReportDeferred("api server unavailable")
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1
        self.applied.append((node, message.seq, message.kind, message.name, dict(message.body or {})))

    def seqs(self, name: str | None = None) -> list[int]:
        return [seq for _, seq, _, n, _ in self.applied if name is None or n == name]


def model(name: str, version: int = 1) -> dict[str, Any]:
    return {"kind": "Model", "metadata": {"name": name, "namespace": "default"},
            "spec": {"url": f"/models/{name}-{version}.pb", "format": "pb"}}


def dataset(name: str) -> dict[str, Any]:
    return {"kind": "Dataset", "metadata": {"name": name, "namespace": "default"},
            "spec": {"url": f"/data/{name}.txt", "format": "txt", "nodeName": NODE}}


@web.middleware
async def strip_subprotocol(request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
    """Make the hub behave like an upstream GM: it never sees the offered subprotocol."""
    headers = request.headers.copy()
    headers.popall("Sec-WebSocket-Protocol", None)
    return await handler(request.clone(headers=headers))


def strip_offer(hub: Hub) -> Callable[[Upgrade], Awaitable[Any]]:
    """The lane's entry for a hub that behaves like an upstream GM (see strip_subprotocol)."""
    async def entry(upgrade: Upgrade) -> Any:
        headers = CIMultiDict(upgrade.headers)
        headers.popall("Sec-WebSocket-Protocol", None)
        upgrade.head = dataclasses.replace(upgrade.head, headers=CIMultiDictProxy(headers))
        return await hub.handle(upgrade)

    return entry


class HubServer:
    """A Hub on an aiohttp site that can be stopped and started again on the same port."""

    def __init__(self, source: MemSource, handler: MemHandler, *, upstream_only: bool = False,
                 token: str | None = None) -> None:
        self.source, self.handler = source, handler
        self.upstream_only = upstream_only
        self.token = token
        self.port = 0
        self.max_frame_bytes = MAX_FRAME_BYTES
        self.ping_interval = 10.0
        self.limits = ServerLimits()
        self.hub: Hub | None = None
        self._runner: web.AppRunner | None = None
        self._lane: WebSocketLane | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> Hub:
        self.hub = Hub(self.source, self.handler, token=self.token, close_timeout=1.0,
                       max_frame_bytes=self.max_frame_bytes,
                       ping_interval=self.ping_interval)
        app = web.Application(middlewares=[strip_subprotocol] if self.upstream_only else [])
        self.hub.attach(app)
        # the GM's own server setup (gm/app.py): the shared limits
        self._runner = guarded_runner(app, limits=self.limits, shutdown_timeout=1.0)
        await self._runner.setup()
        entry = strip_offer(self.hub) if self.upstream_only else None
        _, self._lane = await serve_hub(self._runner, self.hub, "127.0.0.1", self.port, entry=entry,
                                        reuse_address=True)
        self.port = self._runner.addresses[0][1]
        return self.hub

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._lane is not None:
            await self._lane.close()
            self._lane = None


def lc_config(tmp_path: Path, gm_address: str | None) -> LCConfig:
    return LCConfig(gm_address=gm_address, gm_scheme="ws", gm_token=None, node_name=NODE,
                    bind_address="127.0.0.1", bind_port=0, rootfs=str(tmp_path / "rootfs"),
                    db_path=str(tmp_path / "lc.db"), db_synchronous="NORMAL",
                    dataset_period=3600.0, log_level="info", log_format="text")


def fast_settings(address: str, **overrides: Any) -> LinkSettings:
    options: dict[str, Any] = {"ping_interval": 0.5, "silence_timeout": 3.0, "hello_timeout": 2.0,
                               "connect_timeout": 2.0, "close_timeout": 1.0, "ack_timeout": 5.0,
                               "idle_poll": 0.5, "backoff_base": 0.02, "backoff_cap": 0.2,
                               "replaced_delay": 60.0}
    return LinkSettings(url=f"ws://{address}/", node=NODE, **{**options, **overrides})


def attach(lc: LocalController, links: list[GMLink], address: str, **overrides: Any) -> GMLink:
    assert lc.store is not None
    link = GMLink(fast_settings(address, **overrides), store=lc.store, sink=lc)
    link.start()
    links.append(link)
    return link


async def stored(lc: LocalController) -> dict[tuple[str, str], dict[str, Any]]:
    assert lc.store is not None
    return {(kind, name): obj for kind, _, name, obj in await lc.store.list_resources()}


@contextlib.asynccontextmanager
async def serving(source: MemSource, handler: MemHandler) -> AsyncIterator[HubServer]:
    """A started HubServer, stopped on exit (with the handler's gate opened, so no
    report held by a test keeps the hub from closing)."""
    server = HubServer(source, handler)
    await server.start()
    try:
        yield server
    finally:
        handler.gate.set()
        await server.stop()


@contextlib.asynccontextmanager
async def link_list() -> AsyncIterator[list[GMLink]]:
    """A list tests `attach` links to; every link in it is stopped on exit."""
    started: list[GMLink] = []
    try:
        yield started
    finally:
        for link in started:
            await link.stop(within=5.0)
