"""The hub against a client that behaves like upstream's Go LC: text frames, no acks."""

from __future__ import annotations

import base64

import aiohttp
import orjson

from proto import Message, Op
from tests.conftest import eventually
from tests.hubfakes import MemSource
from tests.unit.hub.rig import (
    NODE,
    OTHER,
    HubFactory,
    MemHandler,
    connect_upstream,
    dataset,
    recv_close,
    recv_text,
)


async def test_upstream_client_gets_inserts(make_hub: HubFactory, http: aiohttp.ClientSession, source: MemSource) -> None:
    hub, url = await make_hub()
    ws = await connect_upstream(http, url)
    got = [await recv_text(ws) for _ in source.by_node[NODE]]
    assert got == [
        {"header": {"namespace": "default", "resourceKind": "dataset", "resourceName": name, "operation": "insert"},
         "content": obj}
        for (_, _, name), obj in source.by_node[NODE].items()
    ]
    hub.notify_changed("Dataset", "default", "d1", None, [NODE])
    assert (await recv_text(ws))["header"] == {"namespace": "default", "resourceKind": "dataset",
                                               "resourceName": "d1", "operation": "delete"}


async def test_upstream_status_is_dispatched_without_ack(
    make_hub: HubFactory, http: aiohttp.ClientSession, source: MemSource, handler: MemHandler
) -> None:
    source.put(NODE, "Dataset", "incremental-dataset", dataset("incremental-dataset"))
    hub, url = await make_hub()
    ws = await connect_upstream(http, url)
    for _ in source.by_node[NODE]:
        await recv_text(ws)
    await ws.send_str('{"header":{"namespace":"default","resourceKind":"Dataset","resourceName":"incremental-dataset",'
                      '"operation":"status"},"content":"eyJudW1iZXJPZlNhbXBsZXMiOjUwMH0="}\n')
    await ws.send_str(orjson.dumps({"header": {"namespace": "default", "resourceKind": "dataset",
                                               "resourceName": "o1", "operation": "status"},
                                    "content": base64.b64encode(b'{"numberOfSamples":1}').decode()}).decode())
    await ws.send_str('{"header":{"namespace":"default","resourceKind":"dataset","resourceName":"d1",'
                      '"operation":"patch"},"content":null}\n')
    await eventually(lambda: hub.stats.refused == 1 and hub.stats.frames_in == 4, "all frames read")
    assert handler.applied == [(NODE, Message(Op.STATUS, 0, "Dataset", "default", "incremental-dataset",
                                              {"numberOfSamples": 500}))]
    hub.notify_changed("Dataset", "default", "d2", None, [NODE])
    assert (await recv_text(ws))["header"]["resourceName"] == "d2"  # no ack frame came first
    assert hub.stats.acks_out == 0 and hub.connected_nodes() == [NODE]


async def test_upstream_deferred_report_does_not_hold_later_ones(
        make_hub: HubFactory, http: aiohttp.ClientSession, source: MemSource, handler: MemHandler) -> None:
    """An upstream LC never resends: holding later reports behind a lost one would lose them too."""
    hub, url = await make_hub()
    ws = await connect_upstream(http, url)
    for _ in source.by_node[NODE]:
        await recv_text(ws)
    handler.unavailable.add("d1")
    for count in (1, 2):
        await ws.send_str(orjson.dumps({"header": {"namespace": "default", "resourceKind": "dataset",
                                                   "resourceName": "d1", "operation": "status"},
                                        "content": base64.b64encode(b'{"numberOfSamples":%d}' % count).decode()})
                          .decode())
        await eventually(lambda: hub.stats.deferred == 1, "first report deferred")
        handler.unavailable.clear()
    await eventually(lambda: len(handler.applied) == 1, "second report applied")
    assert handler.applied[0][1].body == {"numberOfSamples": 2}
    assert handler.epochs == [""]


async def test_upstream_garbage_closes_session(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    hub, url = await make_hub()
    ws = await connect_upstream(http, url)
    await ws.send_str("{not json\n")
    code, reason = await recv_close(ws)
    assert code == 1007 and reason.startswith("frame is not JSON")


async def test_upstream_reconnect_learns_deletions_made_while_away(
    make_hub: HubFactory, http: aiohttp.ClientSession, source: MemSource
) -> None:
    hub, url = await make_hub()
    ws = await connect_upstream(http, url, OTHER)
    assert (await recv_text(ws))["header"]["resourceName"] == "o1"
    await ws.close()
    await eventually(lambda: hub.connected_nodes() == [], "session gone")
    source.remove(OTHER, "Dataset", "o1")
    source.put(OTHER, "Dataset", "o2", dataset("o2", OTHER))
    ws = await connect_upstream(http, url, OTHER)
    got = sorted((f["header"]["operation"], f["header"]["resourceName"]) for f in [await recv_text(ws) for _ in "xy"])
    assert got == [("delete", "o1"), ("insert", "o2")]
