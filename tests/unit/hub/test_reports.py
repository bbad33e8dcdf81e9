"""Native status reports: handled, then acked or refused, one object's slow report never holding
another's ack."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

import proto
from proto import Message, Op
from tests.unit.hub.rig import (
    NODE,
    HubFactory,
    MemHandler,
    connect,
    read_snapshot,
    recv,
    recv_close,
    send_status,
)


async def test_status_is_handled_then_acked(make_hub: HubFactory, http: aiohttp.ClientSession,
                                            handler: MemHandler) -> None:
    hub, url = await make_hub()
    ws = await connect(http, url)
    await read_snapshot(ws)
    await send_status(ws, 7, "d1", {"numberOfSamples": 500})
    assert await recv(ws) == proto.ack(7)
    assert handler.applied == [(NODE, Message(Op.STATUS, 7, "Dataset", "default", "d1", {"numberOfSamples": 500}))]
    assert hub.stats.status_applied == 1 and hub.stats.acks_out == 1


async def test_status_for_unassigned_object_is_refused(make_hub: HubFactory, http: aiohttp.ClientSession,
                                                       handler: MemHandler) -> None:
    hub, url = await make_hub()
    ws = await connect(http, url)
    await read_snapshot(ws)
    await send_status(ws, 3, "o1")  # assigned to edge-2, not edge-1
    assert await recv(ws) == proto.ack(3, error="Dataset default/o1 is not assigned to node edge-1")
    assert handler.applied == [] and hub.stats.refused == 1
    await send_status(ws, 4, "d2")
    assert await recv(ws) == proto.ack(4)


async def test_a_slow_report_never_holds_another_objects_ack(make_hub: HubFactory, http: aiohttp.ClientSession,
                                                              handler: MemHandler) -> None:
    hub, url = await make_hub()
    ws = await connect(http, url)
    await read_snapshot(ws)
    handler.gates["d1"] = asyncio.Event()  # d1's write does not commit yet
    await send_status(ws, 1, "d1")
    await send_status(ws, 2, "d2")
    assert await recv(ws) == proto.ack(2)  # acked out of order: d2 did not wait for d1
    handler.gates["d1"].set()
    assert await recv(ws) == proto.ack(1)
    assert [m.seq for _, m in handler.applied] == [2, 1]


async def test_a_session_that_keeps_sending_refused_reports_is_closed(make_hub: HubFactory,
                                                                      http: aiohttp.ClientSession) -> None:
    hub, url = await make_hub(max_refusals=5, refusal_window=60.0)
    ws = await connect(http, url)
    await read_snapshot(ws)
    for seq in range(1, 7):
        await send_status(ws, seq, "o1")  # not assigned to this node: each one refused
    code, reason = await recv_close(ws)
    assert code == 1008 and reason == "more than 5 refused reports within 60s"
    assert hub.stats.sessions_refusing == 1 and hub.stats.refused == 6


@pytest.mark.expect_log_errors(r"hub status handler failed")
async def test_handler_outcomes(make_hub: HubFactory, http: aiohttp.ClientSession, handler: MemHandler,
                                caplog: pytest.LogCaptureFixture) -> None:
    hub, url = await make_hub()
    ws = await connect(http, url)
    await read_snapshot(ws)
    await send_status(ws, 1, "invalid")
    assert await recv(ws) == proto.ack(1, error="numberOfSamples must be an integer")
    await send_status(ws, 2, "later")
    await send_status(ws, 3, "crash")
    await send_status(ws, 4, "d3")
    assert await recv(ws) == proto.ack(4)  # 2 and 3 were not applied, so not acked
    assert [m.seq for _, m in handler.applied] == [4]
    assert (hub.stats.refused, hub.stats.deferred, hub.stats.handler_errors) == (1, 1, 1)
    assert hub.connected_nodes() == [NODE]
    logged = {r.getMessage(): r for r in caplog.records if r.name == "sedna.gm.edge.hub"}
    for text, seq, name in (("hub status refused", 1, "invalid"), ("hub status deferred", 2, "later"),
                            ("hub status handler failed", 3, "crash")):
        record = logged[text]  # structured: the fields, not a formatted message
        assert (record.node, record.kind, record.key, record.seq) == (NODE, "Dataset", f"default/{name}", seq)
    assert logged["hub status refused"].reason == "numberOfSamples must be an integer"
    assert logged["hub status handler failed"].exc_info[0] is RuntimeError


async def test_handler_gets_the_outbox_epoch_of_the_hello(make_hub: HubFactory, http: aiohttp.ClientSession,
                                                           handler: MemHandler) -> None:
    hub, url = await make_hub()
    ws = await connect(http, url, epoch="0f3a9c")
    await read_snapshot(ws)
    await send_status(ws, 1, "d1")
    assert await recv(ws) == proto.ack(1)
    await ws.close()
    ws = await connect(http, url)  # an LC that sends no epoch
    await read_snapshot(ws)
    await send_status(ws, 2, "d1")
    assert await recv(ws) == proto.ack(2)
    assert handler.epochs == ["0f3a9c", ""]
