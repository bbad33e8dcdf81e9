"""A GM hub on a random port over MemSource and MemHandler, and an HTTP session to dial it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gm.edge.hub import Hub
from gm.edge.site import serve_hub
from shared.lanes import WebSocketLane
from shared.server_limits import guarded_runner
from tests.hubfakes import MemSource
from tests.unit.hub.rig import (
    NODE,
    OTHER,
    HubFactory,
    MemHandler,
    dataset,
)


@pytest.fixture
def source() -> MemSource:
    src = MemSource()
    for name in ("d1", "d2", "d3"):
        src.put(NODE, "Dataset", name, dataset(name))
    src.put(OTHER, "Dataset", "o1", dataset("o1", OTHER))
    for name in ("invalid", "later", "crash"):
        src.put(NODE, "Dataset", name, dataset(name))
    return src


@pytest.fixture
def handler() -> MemHandler:
    return MemHandler()


@pytest.fixture(params=["lane", "aiohttp"])
async def make_hub(request: pytest.FixtureRequest, aiohttp_server: Any, source: MemSource,
                   handler: MemHandler) -> AsyncIterator[HubFactory]:
    """Hubs served as the GM serves it (its websocket lane in front of aiohttp), or by aiohttp
    alone (what carries the sessions when compression is on)."""
    runners: list[web.AppRunner] = []
    lanes: list[WebSocketLane] = []

    async def make(**options: Any) -> tuple[Hub, str]:
        hub = Hub(source, handler, close_timeout=1.0, **options)
        app = web.Application()
        hub.attach(app)
        if request.param == "aiohttp":
            server = await aiohttp_server(app)
            return hub, str(server.make_url("/"))
        runner = guarded_runner(app, shutdown_timeout=1.0)
        await runner.setup()
        runners.append(runner)
        _, lane = await serve_hub(runner, hub, "127.0.0.1", 0)
        lanes.append(lane)
        return hub, f"http://127.0.0.1:{runner.addresses[0][1]}/"

    yield make
    for runner in runners:
        await runner.cleanup()
    for lane in lanes:
        await lane.close()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session
