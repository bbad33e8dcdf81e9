"""The LC link against a real GM hub on a random port, with the real LC store and managers.

The GM side is gm.edge.hub.Hub over the in-memory source and handler of tests/linkrig.py; the LC side
is a real LocalController (SQLite on a temp file, real managers) whose link is either the
production `link_factory` or a GMLink built with short timings for restart scenarios.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType, web

from lc.app import LocalController
from lc.link.dialer import GMLink, link_factory
from proto import SUBPROTOCOL, Op, decode_native, encode_native, hello
from shared.server_limits import ServerLimits
from tests.conftest import eventually
from tests.hubfakes import MemSource
from tests.linkrig import (
    NODE,
    TIMEOUT,
    HubServer,
    MemHandler,
    attach,
    dataset,
    lc_config,
    link_list,
    model,
    serving,
    stored,
)
from tests.scrape import labelled, value


@pytest.fixture
def source() -> MemSource:
    src = MemSource()
    src.put(NODE, "Model", "m1", model("m1"))
    src.put(NODE, "Model", "m2", model("m2"))
    src.put(NODE, "Dataset", "d1", dataset("d1"))
    return src


@pytest.fixture
def handler() -> MemHandler:
    return MemHandler()


@pytest.fixture
async def gm(source: MemSource, handler: MemHandler) -> AsyncIterator[HubServer]:
    async with serving(source, handler) as server:
        yield server


@pytest.fixture
async def lc(tmp_path: Path) -> AsyncIterator[LocalController]:
    """A started LocalController without a link: tests attach GMLinks to it directly."""
    controller = LocalController(lc_config(tmp_path, None))
    await controller.start()
    try:
        yield controller
    finally:
        await controller.stop()


@pytest.fixture
async def links() -> AsyncIterator[list[GMLink]]:
    async with link_list() as started:
        yield started


# ---- the production seam ------------------------------------------------------------------


async def test_lc_with_link_factory_stores_the_snapshot_and_forgets_stale_objects(
        tmp_path: Path, gm: HubServer) -> None:
    from lc.store.facade import Store

    pre = await Store.open(str(tmp_path / "lc.db"))
    await pre.put_resource("Model", "default", "stale", model("stale"))
    await pre.close()
    controller = LocalController(lc_config(tmp_path, gm.address), link_factory=link_factory)
    await controller.start()
    try:
        assert isinstance(controller.link, GMLink)
        await controller.link.wait_connected(TIMEOUT)
        expected = {("Model", "m1"): model("m1"), ("Model", "m2"): model("m2"),
                    ("Dataset", "d1"): dataset("d1")}
        await eventually(lambda: _equals(stored(controller), expected), "snapshot stored, stale gone", within=TIMEOUT)
        assert controller.link.info.mode == "native"
        info = controller.link.info.as_dict()
        assert (info["connected"], info["sessions"], info["reconnects"], info["last_error"]) == (True, 1, 0, "")
        async with aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{controller.port}"
            async with http.get(f"{base}/readyz") as resp:
                assert (resp.status, (await resp.json())["link"]) == (200, "connected")
            async with http.get(f"{base}/metrics") as resp:
                text = await resp.text()
        assert value(text, "sedna_lc_link_connected") == 1
        assert labelled(text, "sedna_lc_link_mode", "mode") == {"native": 1, "upstream": 0}
    finally:
        await controller.stop()
    assert controller.link.state == "stopped"


async def _equals(actual: Awaitable[Any], expected: Any) -> bool:
    return await actual == expected


# ---- downstream ---------------------------------------------------------------------------


async def test_deltas_are_applied_in_order(gm: HubServer, lc: LocalController, links: list[GMLink],
                                           source: MemSource) -> None:
    link = attach(lc, links, gm.address)
    await link.wait_connected(TIMEOUT)
    await eventually(lambda: _has(stored(lc), ("Model", "m2")), "snapshot applied", within=TIMEOUT)
    assert gm.hub is not None
    steps: list[tuple[str, dict[str, Any] | None]] = [
        ("m3", model("m3", 1)), ("m3", None), ("m3", model("m3", 2)),  # ends present at v2
        ("m4", model("m4", 1)), ("m4", model("m4", 2)), ("m4", None),  # ends deleted
        ("m1", None),
    ]
    for name, obj in steps:
        gm.hub.notify_changed("Model", "default", name, obj, [NODE])
        await asyncio.sleep(0)  # let the hub's writer run between changes, so frames are not all coalesced
    expected = {("Model", "m2"): model("m2"), ("Model", "m3"): model("m3", 2), ("Dataset", "d1"): dataset("d1")}
    await eventually(lambda: _equals(stored(lc), expected), "deltas applied in order", within=TIMEOUT)
    assert link.applier.stats.errors == 0


async def _has(actual: Awaitable[dict[Any, Any]], key: Any) -> bool:
    return key in await actual


async def test_broken_downstream_frame_reconnects_without_crashing(
        tmp_path: Path, lc: LocalController, links: list[GMLink]) -> None:
    """A GM that sends garbage after hello: the link closes with 1007 and dials again."""
    closes: list[int | None] = []
    connections = 0

    async def bad_gm(request: web.Request) -> web.WebSocketResponse:
        nonlocal connections
        connections += 1
        ws = web.WebSocketResponse(protocols=(SUBPROTOCOL,))
        await ws.prepare(request)
        first = await ws.receive(timeout=TIMEOUT)
        assert decode_native(first.data).op is Op.HELLO
        await ws.send_bytes(encode_native(hello(NODE)))
        await ws.send_bytes(b"\xc1 not msgpack")
        closing = await ws.receive(timeout=TIMEOUT)
        closes.append(closing.data if closing.type is WSMsgType.CLOSE else None)
        return ws

    app = web.Application()
    app.router.add_get("/", bad_gm)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        link = attach(lc, links, f"127.0.0.1:{runner.addresses[0][1]}")
        # Sessions that die at once do not reset the backoff: consecutive failures pile up.
        await eventually(lambda: link.info.failures >= 2 and closes, within=TIMEOUT,
                       message="a second broken session")
        assert closes[0] == 1007
        assert connections >= 2
        assert link.info.last_error.startswith("GM sent a broken frame: not a msgpack frame")
        assert link.info.sessions >= 2 and link.info.reconnects >= 1
        # Stopping while sessions keep failing must end the link (no dialing after stop).
        await links.pop().stop(within=5.0)
        assert link.state == "stopped"
    finally:
        for leftover in links:
            await leftover.stop(within=5.0)
        links.clear()
        await runner.cleanup()


async def test_silent_gm_is_declared_dead(lc: LocalController, links: list[GMLink]) -> None:
    """A GM that answers the hello and then neither sends nor answers pings."""
    released = asyncio.Event()

    async def mute_gm(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(protocols=(SUBPROTOCOL,), autoping=False)
        await ws.prepare(request)
        await ws.receive(timeout=TIMEOUT)
        await ws.send_bytes(encode_native(hello(NODE)))
        await released.wait()
        return ws

    app = web.Application()
    app.router.add_get("/", mute_gm)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        link = attach(lc, links, f"127.0.0.1:{runner.addresses[0][1]}",
                      ping_interval=0.1, silence_timeout=0.4)
        await eventually(lambda: "no frame from the GM" in link.info.last_error, within=TIMEOUT,
                       message="silence detected")
        assert link.info.sessions >= 1
    finally:
        released.set()
        await links.pop().stop(within=5.0)
        await runner.cleanup()


# ---- upstream -----------------------------------------------------------------------------


async def test_reports_appended_while_the_gm_is_down_are_delivered_once(
        gm: HubServer, lc: LocalController, links: list[GMLink], handler: MemHandler,
        source: MemSource) -> None:
    assert lc.store is not None
    source.put(NODE, "Model", "r", model("r"))
    link = attach(lc, links, gm.address)
    await link.wait_connected(TIMEOUT)
    first = await lc.store.append_report("Model", "default", "r", {"n": 0})
    await eventually(lambda: handler.seqs("r") == [first], within=TIMEOUT, message="first report")

    await gm.stop()
    await eventually(lambda: link.state != "connected", within=TIMEOUT, message="link noticed the GM left")
    seqs = [await lc.store.append_report("Model", "default", "r", {"n": i}) for i in range(1, 21)]
    assert lc.store.outbox_size >= 20
    await gm.start()

    await eventually(lambda: handler.seqs("r") == [first, *seqs], within=TIMEOUT,
                   message="all reports applied once, in order")
    await eventually(lambda: lc.store.outbox_size == 0, within=TIMEOUT, message="outbox emptied by acks")
    assert await lc.store.pending(0, 100) == []
    assert [body["n"] for *_, name, body in handler.applied if name == "r"] == list(range(21))
    assert link.info.reconnects >= 1 and link.info.sessions == 2


async def test_refused_report_moves_to_the_dead_letters_after_its_error_ack(
        gm: HubServer, lc: LocalController, links: list[GMLink], handler: MemHandler,
        source: MemSource) -> None:
    assert lc.store is not None
    source.put(NODE, "Model", "mine", model("mine"))
    link = attach(lc, links, gm.address)
    await link.wait_connected(TIMEOUT)
    refused = await lc.store.append_report("Model", "default", "not-mine", {"n": 1})
    applied = await lc.store.append_report("Model", "default", "mine", {"n": 2})
    await eventually(lambda: handler.seqs("mine") == [applied], within=TIMEOUT, message="good report")
    await eventually(lambda: lc.store.outbox_size == 0, within=TIMEOUT, message="refused report moved")
    assert handler.seqs("not-mine") == []
    assert (link.info.refused, link.info.acked) == (1, 1)
    assert await lc.store.pending(0, 10) == []
    [dead] = await lc.store.dead_letters()
    assert (dead.seq, dead.reason, dead.name, dead.body) == (refused, "refused", "not-mine", {"n": 1})
    assert dead.error == "Model default/not-mine is not assigned to node edge-1"
    assert lc.store.dead_letter_counts == {"refused": 1}


# ---- poisoned reports never block the ones behind them -------------------------------------


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


async def _post(base: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT)) as http, \
            http.post(f"{base}/sedna/workers/{body['name']}/info", json=body) as resp:
        return resp.status, await resp.json(content_type=None)


def _worker_report(worker: str, owner: str, **fields: Any) -> dict[str, Any]:
    return {"name": worker, "namespace": "default", "ownerName": owner,
            "ownerKind": "jointinferenceservice", "kind": "inference", "status": "running",
            "ownerInfo": {"inferenceNumber": 1}, **fields}


async def test_poisoned_worker_report_is_refused_and_the_good_ones_reach_the_gm(
        tmp_path: Path, gm: HubServer, handler: MemHandler, source: MemSource) -> None:
    source.put(NODE, "JointInferenceService", "ji", {"kind": "JointInferenceService",
                                                     "metadata": {"name": "ji", "namespace": "default"}})
    controller = LocalController(lc_config(tmp_path, gm.address), link_factory=link_factory)
    await controller.start()
    try:
        assert controller.store is not None
        await eventually(lambda: controller.link_state() == "connected", within=TIMEOUT,
                       message="link up")
        store = controller.store
        await eventually(lambda: store.get_resource("JointInferenceService", "default", "ji"),
                       within=TIMEOUT, message="job known")
        base = f"http://127.0.0.1:{controller.port}"
        poisoned = [_worker_report("w", "ji", ownerInfo={"deep": nested(150)}),
                    _worker_report("w", "x" * 254), _worker_report("w", "ji", namespace="n" * 64)]
        for body in poisoned:
            status, reply = await _post(base, body)
            assert status == 400 and reply["Status"] == 400, reply
            assert "cannot be relayed to the GM" in reply["Message"]
        for i in range(3):
            status, _ = await _post(base, _worker_report("w", "ji", ownerInfo={"round": i}))
            assert status == 200
        await eventually(lambda: store.outbox_size == 0, within=TIMEOUT, message="good reports settled")
        # JI stats are latest-wins: reports that pile up behind an ack fold into the newest
        rounds = [body["output"]["ownerInfo"]["round"] for *_, body in handler.applied]
        assert rounds[-1] == 2 and rounds == sorted(set(rounds)), rounds
        assert gm.hub is not None and gm.hub.stats.sessions_broken == 0
    finally:
        await controller.stop()


async def test_unsendable_stored_report_becomes_a_dead_letter_and_the_rest_are_relayed(
        gm: HubServer, lc: LocalController, links: list[GMLink], handler: MemHandler) -> None:
    """A report stored before the door checked it (an older LC) must not hold the outbox."""
    assert lc.store is not None
    poisoned = await lc.store.append_report("Model", "default", "m1", {"info": nested(120)})
    good = [await lc.store.append_report("Model", "default", "m1", {"n": i}) for i in range(3)]
    link = attach(lc, links, gm.address)
    await eventually(lambda: handler.seqs("m1") == good, within=TIMEOUT, message="good reports")
    await eventually(lambda: lc.store.outbox_size == 0, within=TIMEOUT, message="outbox drained")
    [dead] = await lc.store.dead_letters()
    assert (dead.seq, dead.reason) == (poisoned, "unsendable")
    assert "nested deeper than 100 levels" in dead.error
    assert link.info.sessions == 1 and gm.hub is not None and gm.hub.stats.sessions_broken == 0


async def _no_suspects(store: Any) -> bool:
    return await store.get_meta("link.suspect_upto") is None


async def test_frame_the_gm_refuses_is_isolated_and_dead_lettered(
        source: MemSource, handler: MemHandler, lc: LocalController, links: list[GMLink]) -> None:
    """A GM with a smaller frame limit closes the session (1009) on one report: the LC finds
    it by sending the suspects one at a time, dead-letters it, and relays the rest."""
    assert lc.store is not None
    server = HubServer(source, handler)
    server.max_frame_bytes = 4096
    await server.start()
    try:
        before = [await lc.store.append_report("Model", "default", "m1", {"n": i}) for i in range(3)]
        big = await lc.store.append_report("Model", "default", "m1", {"blob": "x" * 8192})
        after = [await lc.store.append_report("Model", "default", "m1", {"n": i}) for i in range(3, 6)]
        link = attach(lc, links, server.address)
        await eventually(lambda: lc.store.dead_letter_counts.get("protocol") == 1, within=TIMEOUT,
                       message="the big report convicted")
        await eventually(lambda: sorted(set(handler.seqs("m1"))) == before + after, within=TIMEOUT,
                       message="every other report applied")
        await eventually(lambda: lc.store.outbox_size == 0, within=TIMEOUT, message="outbox drained")
        [dead] = await lc.store.dead_letters()
        assert (dead.seq, dead.reason) == (big, "protocol")
        assert re.fullmatch(r"GM closed the connection \(code 1009: message of \d+ bytes exceeds limit of 4096\)",
                            dead.error), dead.error
        store = lc.store
        await eventually(lambda: _no_suspects(store), within=TIMEOUT, message="full window again")
        assert link.info.sessions >= 2
    finally:
        await server.stop()


async def test_gm_without_the_subprotocol_gets_upstream_mode(
        source: MemSource, handler: MemHandler, lc: LocalController, links: list[GMLink]) -> None:
    assert lc.store is not None
    server = HubServer(source, handler, upstream_only=True)
    await server.start()
    try:
        source.put(NODE, "Dataset", "counted", dataset("counted"))
        link = attach(lc, links, server.address)
        await link.wait_connected(TIMEOUT)
        assert link.info.mode == "upstream"
        await eventually(lambda: _has(stored(lc), ("Model", "m1")), "upstream inserts applied", within=TIMEOUT)
        seq = await lc.store.append_report("Dataset", "default", "counted", {"numberOfSamples": 7})
        await eventually(lambda: handler.applied, within=TIMEOUT, message="status frame delivered")
        assert handler.applied == [(NODE, 0, "Dataset", "counted", {"numberOfSamples": 7})]
        await eventually(lambda: lc.store.outbox_size == 0, within=TIMEOUT,
                       message="sent report deleted (upstream has no acks)")
        assert seq >= 1 and link.info.acked == 0 and link.info.sent == 1
    finally:
        await links.pop().stop(within=5.0)
        await server.stop()


@pytest.mark.expect_log_errors(r"another connection for this node took over")
async def test_second_link_for_the_node_replaces_the_first_without_losing_reports(
        gm: HubServer, lc: LocalController, links: list[GMLink], handler: MemHandler,
        source: MemSource) -> None:
    assert lc.store is not None and gm.hub is not None
    source.put(NODE, "Model", "r", model("r"))
    first = attach(lc, links, gm.address)
    await first.wait_connected(TIMEOUT)
    handler.gate.clear()  # the GM takes the first report and does not finish it
    seqs = [await lc.store.append_report("Model", "default", "r", {"n": i}) for i in range(3)]
    await eventually(lambda: handler.waiting >= 1, within=TIMEOUT, message="GM busy with the reports")

    second = attach(lc, links, gm.address)
    await second.wait_connected(TIMEOUT)
    await eventually(lambda: first.state != "connected", within=TIMEOUT, message="first link replaced")
    handler.gate.set()

    # the first session's reports finish too; the second link resends what it saw unacked
    await eventually(lambda: sorted(set(handler.seqs("r"))) == seqs, within=TIMEOUT,
                   message="every report applied")
    await eventually(lambda: lc.store.outbox_size == 0, within=TIMEOUT, message="outbox emptied")
    assert "4000" in first.info.last_error
    assert first.state == "backoff"  # waits replaced_delay before trying again
    assert gm.hub.connected_nodes() == [NODE] and gm.hub.stats.sessions_replaced == 1


async def test_report_without_ack_is_resent_after_the_ack_timeout(
        gm: HubServer, lc: LocalController, links: list[GMLink], handler: MemHandler,
        source: MemSource) -> None:
    assert lc.store is not None
    source.put(NODE, "Model", "flaky", model("flaky"))
    source.put(NODE, "Model", "r", model("r"))
    handler.defer["flaky"] = 2  # the GM cannot apply it twice, and does not ack those attempts
    link = attach(lc, links, gm.address, ack_timeout=0.2)
    await link.wait_connected(TIMEOUT)
    flaky = await lc.store.append_report("Model", "default", "flaky", {"n": 1})
    after = await lc.store.append_report("Model", "default", "r", {"n": 2})
    await eventually(lambda: handler.seqs("flaky") == [flaky], within=TIMEOUT, message="flaky applied")
    await eventually(lambda: lc.store.outbox_size == 0, within=TIMEOUT, message="outbox emptied")
    assert handler.seqs("r") == [after]  # not held up behind the unacked one
    assert (handler.deferred, link.info.resent, link.info.acked) == (2, 2, 2)


async def test_bearer_token_is_sent_and_a_wrong_one_is_reported(
        source: MemSource, handler: MemHandler, lc: LocalController, links: list[GMLink]) -> None:
    server = HubServer(source, handler, token="s3cret")
    await server.start()
    try:
        wrong = attach(lc, links, server.address, token="nope")
        await eventually(lambda: wrong.info.reconnects >= 1, within=TIMEOUT, message="a refused dial")
        assert wrong.info.last_error.startswith("GM refused the websocket upgrade: 401")
        assert wrong.info.sessions == 0
        await links.pop().stop(within=5.0)
        right = attach(lc, links, server.address, token="s3cret")
        await right.wait_connected(TIMEOUT)
        assert right.info.mode == "native"
    finally:
        for link in links:
            await link.stop(within=5.0)
        links.clear()
        await server.stop()


# ---- the GM server's limits ----------------------------------------------------------------


async def test_gm_closes_idle_connections_but_not_websocket_sessions(
        source: MemSource, handler: MemHandler, lc: LocalController, links: list[GMLink]) -> None:
    server = HubServer(source, handler)
    server.limits = ServerLimits(idle_timeout=0.3)
    server.ping_interval = 0.1
    await server.start()
    try:
        link = attach(lc, links, server.address)
        await link.wait_connected(TIMEOUT)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            writer.write(b"GET / HTTP/1.1\r\nHo")  # a request whose headers never finish
            async with asyncio.timeout(TIMEOUT):
                assert await reader.read() == b""  # closed by the idle limit
        finally:
            writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:  # garbage before routing: a 405, logged at debug (the log guard checks)
            writer.write(b"FOO / HTTP/1.1\r\nHost: x\r\n\r\n")
            async with asyncio.timeout(TIMEOUT):
                reply = await reader.read()
        finally:
            writer.close()
        assert reply.startswith(b"HTTP/1.1 405") and b"\r\nAllow: GET, HEAD\r\n" in reply
        hub = server.hub
        assert hub is not None
        # ten GM pings span more than three idle timeouts: the session is still the first one
        await eventually(lambda: hub.stats.pings_out >= 10, within=TIMEOUT, message="GM pings")
        assert (hub.stats.sessions_opened, link.info.sessions, link.state) == (1, 1, "connected")
    finally:
        await server.stop()


async def test_suspects_recorded_before_a_restart_are_sent_one_at_a_time(
        source: MemSource, handler: MemHandler, lc: LocalController, links: list[GMLink],
        caplog: pytest.LogCaptureFixture) -> None:
    """The suspect horizon is in the store: a restarted LC probes from its first session, so
    the GM closes on the poisoned report once, not once for the whole window."""
    assert lc.store is not None
    caplog.set_level(logging.INFO, logger="sedna.gm.edge.hub")
    server = HubServer(source, handler)
    server.max_frame_bytes = 4096
    await server.start()
    try:
        good = [await lc.store.append_report("Model", "default", "m1", {"n": i}) for i in range(3)]
        big = await lc.store.append_report("Model", "default", "m1", {"blob": "x" * 8192})
        later = await lc.store.append_report("Model", "default", "m1", {"n": 9})
        await lc.store.put_meta("link.suspect_upto", str(big))  # as a previous run left it
        link = attach(lc, links, server.address)
        await eventually(lambda: sorted(set(handler.seqs("m1"))) == [*good, later], within=TIMEOUT,
                       message="every good report applied")
        hub = server.hub
        assert hub is not None
        # one close over the poisoned frame, not one per report of the old window (a session
        # can also end for other reasons on a loaded machine: only frame refusals count here)
        refusals = [r.reason for r in caplog.records
                    if r.getMessage() == "hub session closed" and "exceeds limit" in r.reason]
        assert len(refusals) == 1, refusals
        assert link.info.sessions >= 2
        assert lc.store.dead_letter_counts == {"protocol": 1}
    finally:
        await server.stop()
