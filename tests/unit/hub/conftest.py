"""A GM hub on a random port over MemSource and MemHandler, and an HTTP session to dial it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gm.edge.hub import Hub
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


@pytest.fixture
async def make_hub(aiohttp_server: Any, source: MemSource, handler: MemHandler) -> HubFactory:
    async def make(**options: Any) -> tuple[Hub, str]:
        hub = Hub(source, handler, close_timeout=1.0, **options)
        app = web.Application()
        hub.attach(app)
        server = await aiohttp_server(app)
        return hub, str(server.make_url("/"))

    return make


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session
