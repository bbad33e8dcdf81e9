"""A session's life: replaced by a newer one, closed on a broken or oversized frame, kept alive
or declared dead by the heartbeat, closed when the GM stops or the node is removed."""

from __future__ import annotations

import asyncio
import contextlib
import os

import aiohttp
import pytest

import proto
from gm.edge.hub import Hub
from proto import Message, Op, encode_native
from tests.conftest import eventually
from tests.hubfakes import MemSource
from tests.unit.hub.rig import (
    NODE,
    OTHER,
    TIMEOUT,
    HubFactory,
    MemHandler,
    connect,
    dataset,
    read_snapshot,
    recv,
    recv_close,
    send_status,
)


async def test_new_connection_replaces_old_session(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    hub, url = await make_hub()
    old = await connect(http, url)
    await read_snapshot(old)
    new = await connect(http, url)
    assert await recv_close(old) == (proto.CLOSE_REPLACED, "replaced by a newer connection for this node")
    assert len(await read_snapshot(new)) == 6
    assert hub.connected_nodes() == [NODE] and hub.stats.sessions_replaced == 1
    hub.notify_changed("Dataset", "default", "d1", dataset("d1", version=2), [NODE])
    assert (await recv(new)).body["spec"]["version"] == 2


@pytest.mark.parametrize(
    ("frame", "code", "reason"),
    [
        pytest.param(b"\xc1garbage", 1007, "not a msgpack frame", id="garbage"),
        pytest.param("{}", 1007, "native frames are binary msgpack, got a text frame", id="text"),
        pytest.param(encode_native(Message(Op.UPSERT, 1, "Dataset", "default", "d1", {})), 1002,
                     "upsert is not accepted from an LC", id="upsert-from-lc"),
        pytest.param(b"\x82\xa2op\xa4frob\xa3seq\x01", 1002, "unknown operation 'frob'", id="unknown-op"),
    ],
)
async def test_broken_frame_closes_only_that_session(make_hub: HubFactory, http: aiohttp.ClientSession,
                                                     frame: bytes | str, code: int, reason: str) -> None:
    hub, url = await make_hub()
    bad = await connect(http, url)
    good = await connect(http, url, OTHER)
    await read_snapshot(bad)
    await read_snapshot(good)
    await (bad.send_bytes(frame) if isinstance(frame, bytes) else bad.send_str(frame))
    got_code, got_reason = await recv_close(bad)
    assert got_code == code and reason in got_reason
    await eventually(lambda: hub.connected_nodes() == [OTHER], "broken session deregistered")
    hub.notify_changed("Dataset", "default", "o2", dataset("o2", OTHER), [OTHER])
    assert (await recv(good)).name == "o2"
    assert hub.stats.sessions_broken == 1


async def test_oversized_frame_closes_with_1009(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    hub, url = await make_hub(max_frame_bytes=4096)
    ws = await connect(http, url)
    await read_snapshot(ws)
    await send_status(ws, 1, "d1", {"blob": "x" * 8192})
    assert (await recv_close(ws))[0] == 1009
    await eventually(lambda: hub.connected_nodes() == [], "session ended")


async def test_silent_peer_is_declared_dead(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    hub, url = await make_hub(ping_interval=0.05, dead_after=0.3)
    ws = await connect(http, url)  # from here on the client reads nothing, so it never pongs
    await eventually(lambda: hub.connected_nodes() == [], "dead session removed")
    assert hub.stats.sessions_dead == 1
    assert await recv_close(ws) == (proto.CLOSE_DEAD, "no frame from the peer for 0.3s")


async def test_peer_that_answers_pings_stays_alive(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    hub, url = await make_hub(ping_interval=0.05, dead_after=0.3)
    ws = await connect(http, url)
    await read_until_pings(hub, ws, 12)  # 12 pings = 0.6 s, twice dead_after
    assert hub.connected_nodes() == [NODE] and hub.stats.sessions_dead == 0


async def test_a_peer_that_pings_on_its_own_is_not_pinged(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    """Our LC pings every 10 s: its pings, answered, keep the session; the GM sends none."""
    hub, url = await make_hub(ping_interval=0.1, dead_after=0.4)
    ws = await connect(http, url)
    await read_snapshot(ws)
    for _ in range(20):  # 1 s, two and a half times dead_after
        await ws.ping()
        with contextlib.suppress(TimeoutError):
            await ws.receive(timeout=0.05)  # the pong, which the client takes itself
    assert hub.stats.pings_out == 0
    assert hub.connected_nodes() == [NODE] and hub.stats.sessions_dead == 0


async def test_a_peer_that_stops_reading_is_ended_while_the_others_keep_their_beat(
        make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    """One wheel pings every session: a peer whose socket does not drain must not hold it."""
    hub, url = await make_hub(ping_interval=0.05, dead_after=0.4, compress=False)
    stuck = await connect(http, url, NODE, compress=0)
    await read_snapshot(stuck)  # and never reads again
    alive = await connect(http, url, OTHER)
    await read_snapshot(alive)
    blob = os.urandom(192 * 1024).hex()
    for version in range(40):  # 15 MiB the stuck peer does not read: the GM's writes block
        hub.notify_changed("Dataset", "default", f"big-{version}", {"v": version, "blob": blob}, [NODE])
    pings = hub.stats.pings_out
    await read_until_pings(hub, alive, pings + 20)  # 1 s of the live peer's pings
    await eventually(lambda: hub.stats.sessions_dead == 1, "the stuck session ended")
    assert hub.connected_nodes() == [OTHER]


async def read_until_pings(hub: Hub, ws: aiohttp.ClientWebSocketResponse, pings: int) -> None:
    """Keep reading (receive() answers pings) until the hub has sent `pings` pings."""
    async with asyncio.timeout(TIMEOUT):
        while hub.stats.pings_out < pings:
            try:
                await ws.receive(timeout=0.05)
            except TimeoutError:
                continue


async def test_close_sends_going_away(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    hub, url = await make_hub()
    ws = await connect(http, url)
    await read_snapshot(ws)
    closing = asyncio.create_task(hub.close(), name="hub-close")
    assert await recv_close(ws) == (proto.CLOSE_GOING_AWAY, "GM shutting down")
    await asyncio.wait_for(closing, TIMEOUT)
    assert hub.connected_nodes() == []
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await http.ws_connect(url, headers={"Node-Name": NODE})
    assert info.value.status == 503


async def test_forget_node_closes_its_session(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    hub, url = await make_hub()
    ws = await connect(http, url)
    await read_snapshot(ws)
    hub.forget_node(NODE)
    assert await recv_close(ws) == (proto.CLOSE_GOING_AWAY, "node removed")
    await eventually(lambda: hub.connected_nodes() == [], "session gone")
    assert hub.departed() == {}  # forgotten: no trace left for /metrics


async def test_a_departed_node_is_remembered_for_a_while(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    hub, url = await make_hub(departed_retention=0.2)
    ws = await connect(http, url)
    await read_snapshot(ws)
    [view] = hub.sessions()
    assert (view.node, view.mode, view.pending, view.acked_seq) == (NODE, "native", 0, 0)
    await ws.close()
    await eventually(lambda: hub.connected_nodes() == [], "session gone")
    assert list(hub.departed()) == [NODE] and hub.sessions() == []
    assert hub.departed()[NODE] == pytest.approx(view.last_frame, abs=1.0)
    await eventually(lambda: hub.departed() == {}, "departure forgotten after the retention")


@pytest.mark.parametrize(("ping", "dead"), [(30.0, 30.0), (0.0, 1.0), (5.0, 1.0)])
def test_ping_interval_must_be_below_dead_after(source: MemSource, handler: MemHandler, ping: float, dead: float) -> None:
    with pytest.raises(ValueError, match="need 0 < ping_interval"):
        Hub(source, handler, ping_interval=ping, dead_after=dead)
