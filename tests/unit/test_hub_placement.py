"""A report for an object the GM's caches do not hold yet waits for it instead of being refused.

With several GM replicas, the leader places a worker from its caches while the LC's session may
be on another replica whose caches have not seen the object yet; refusing the report there
would dead-letter it at the LC for good. The hub lets such a report wait (`placement_grace`),
without holding the session's other reports, and refuses it only if the object still is not
placed on the node then. An object the caches hold, placed on another node, is refused at once.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from aiohttp import web

import proto
from gm.edge import intake as hub_module
from gm.edge.hub import Hub
from tests.hubfakes import MemSource
from tests.unit.hub.rig import (
    NODE,
    OTHER,
    MemHandler,
    connect,
    dataset,
    read_snapshot,
    recv,
    send_status,
)

GRACE = 5.0


class LaggingSource(MemSource):
    """The hub's source with caches: `known` objects are held (placed or not); the rest are
    lacking until `place` puts them on a node."""

    def __init__(self) -> None:
        super().__init__()
        self.known: set[str] = set()

    def place(self, node: str, name: str) -> None:
        self.known.add(name)
        self.put(node, "Dataset", name, dataset(name, node))

    def lacks(self, kind: str, namespace: str, name: str) -> bool:
        return name not in self.known


@pytest.fixture
async def setup(aiohttp_server: Any) -> Any:
    source, handler = LaggingSource(), MemHandler()
    source.place(NODE, "d1")
    source.place(OTHER, "elsewhere")
    hub = Hub(source, handler, close_timeout=1.0, placement_grace=GRACE)
    app = web.Application()
    hub.attach(app)
    server = await aiohttp_server(app)
    async with aiohttp.ClientSession() as http:
        ws = await connect(http, str(server.make_url("/")))
        await read_snapshot(ws)
        yield hub, source, handler, ws


async def test_a_report_waits_for_its_object_and_holds_no_other(setup: Any) -> None:
    hub, source, handler, ws = setup
    await send_status(ws, 1, "new")  # not in this GM's caches yet
    await send_status(ws, 2, "d1")
    assert await recv(ws) == proto.ack(2)  # the other object's report did not wait
    assert [m.name for _, m in handler.applied] == ["d1"]
    source.place(NODE, "new")  # the caches catch up
    assert await recv(ws) == proto.ack(1)
    assert [m.seq for _, m in handler.applied] == [2, 1]
    assert (hub.stats.refused, hub.stats.placement_waits) == (0, 1)


async def test_a_report_for_an_object_that_never_comes_is_refused_after_the_grace(setup: Any) -> None:
    hub, _, handler, ws = setup
    hub.intake.placement_grace = 0.3
    await send_status(ws, 1, "gone")
    assert await recv(ws) == proto.ack(1, error=f"Dataset default/gone is not assigned to node {NODE}")
    assert handler.applied == [] and (hub.stats.refused, hub.stats.placement_waits) == (1, 1)


async def test_an_object_placed_elsewhere_is_refused_at_once(setup: Any) -> None:
    hub, _, handler, ws = setup
    await send_status(ws, 1, "elsewhere")
    assert await recv(ws) == proto.ack(1, error=f"Dataset default/elsewhere is not assigned to node {NODE}")
    assert handler.applied == [] and hub.stats.placement_waits == 0


async def test_waiting_reports_per_node_are_bounded(setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    hub, source, _, ws = setup
    monkeypatch.setattr(hub_module, "MAX_AWAITING", 2)
    for seq in (1, 2, 3):
        await send_status(ws, seq, f"new-{seq}")
    assert await recv(ws) == proto.ack(3, error=f"Dataset default/new-3 is not assigned to node {NODE}")
    source.place(NODE, "new-1")
    source.place(NODE, "new-2")
    assert {(await recv(ws)).seq for _ in range(2)} == {1, 2}
    assert (hub.stats.refused, hub.stats.placement_waits) == (1, 2)
