"""GM websocket hub against real websocket clients on a random port (native and upstream mode)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import WSMsgType, web

import proto
from gm.edge.auth import NodeAuth, NodeTokens, NodeTokenTable, TokenReviewAuth
from gm.edge.hub import HELLO_TIMEOUT, Hub
from gm.kube.apierrors import Unavailable
from gm.kube.tokenreview import NODE_NAME_EXTRA, TokenReviewResult
from gm.reports import ReportDeferred, ReportInvalid
from lc.link.dialer import LinkSettings
from proto import SUBPROTOCOL, Message, Op, decode_native, encode_native
from tests.conftest import eventually
from tests.hubfakes import MemSource

NODE = "edge-1"
OTHER = "edge-2"
TIMEOUT = 5.0


class MemHandler:
    """Records applied reports; object names steer it into refusing, deferring or failing."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, Message]] = []
        self.epochs: list[str] = []
        self.unavailable: set[str] = set()  # names deferred while listed here
        self.defer_seqs: set[int] = set()  # seqs deferred while listed here
        self.refuse_seqs: set[int] = set()  # seqs refused while listed here
        self.gates: dict[str, asyncio.Event] = {}  # names whose reports wait for their gate

    def submit(self, node: str, message: Message, *, epoch: str = ""):
        return self.handle_status(node, message, epoch=epoch)

    async def handle_status(self, node: str, message: Message, *, epoch: str = "") -> None:
        if message.name == "invalid" or message.seq in self.refuse_seqs:
            raise ReportInvalid("numberOfSamples must be an integer")
        if message.name == "later" or message.name in self.unavailable or message.seq in self.defer_seqs:
            raise ReportDeferred("api server unavailable")
        if (gate := self.gates.get(message.name)) is not None:
            await gate.wait()
        self.epochs.append(epoch)
        if message.name == "crash":
            raise RuntimeError("handler bug")
        self.applied.append((node, message))


def dataset(name: str, node: str = NODE, **extra: Any) -> dict[str, Any]:
    return {"kind": "Dataset", "metadata": {"name": name, "namespace": "default"},
            "spec": {"url": f"/data/{name}.txt", "format": "txt", "nodeName": node, **extra}}


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


HubFactory = Callable[..., Awaitable[tuple[Hub, str]]]


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


async def recv(ws: aiohttp.ClientWebSocketResponse) -> Message:
    frame = await ws.receive(timeout=TIMEOUT)
    assert frame.type is WSMsgType.BINARY, (frame.type, frame.data, frame.extra)
    return decode_native(frame.data)


async def recv_close(ws: aiohttp.ClientWebSocketResponse) -> tuple[int, str]:
    """Skip data frames until the close frame; its code and reason."""
    while True:
        frame = await ws.receive(timeout=TIMEOUT)
        if frame.type is WSMsgType.CLOSE:
            return frame.data, frame.extra
        if frame.type in (WSMsgType.CLOSED, WSMsgType.CLOSING):
            return ws.close_code, ""
        assert frame.type in (WSMsgType.BINARY, WSMsgType.TEXT), frame.type


async def connect(http: aiohttp.ClientSession, url: str, node: str = NODE, *, acked: int = 0,
                  epoch: str | None = None, headers: Mapping[str, str] | None = None,
                  **kw: Any) -> aiohttp.ClientWebSocketResponse:
    """A native client that has sent its hello and read the GM's."""
    ws = await http.ws_connect(url, headers={"Node-Name": node, **(headers or {})}, protocols=(SUBPROTOCOL,), **kw)
    assert ws.protocol == SUBPROTOCOL
    await ws.send_bytes(encode_native(proto.hello(node, acked=acked, epoch=epoch)))
    assert await recv(ws) == proto.hello(node, versions=(1,))
    return ws


async def read_snapshot(ws: aiohttp.ClientWebSocketResponse) -> list[Message]:
    begin = await recv(ws)
    assert (begin.op, begin.body) == (Op.SNAPSHOT, {"phase": "begin"})
    frames = []
    while (msg := await recv(ws)).op is not Op.SNAPSHOT:
        frames.append(msg)
    assert msg.body == {"phase": "end", "count": len(frames)}
    assert [m.seq for m in (begin, *frames, msg)] == list(range(begin.seq, msg.seq + 1))
    return frames


async def send_status(ws: aiohttp.ClientWebSocketResponse, seq: int, name: str, body: dict | None = None) -> None:
    msg = Message(Op.STATUS, seq, "Dataset", "default", name, body or {"numberOfSamples": seq})
    await ws.send_bytes(encode_native(msg))


# ---- native: snapshot and deltas ---------------------------------------------------------


async def test_snapshot_on_connect(make_hub: HubFactory, http: aiohttp.ClientSession, source: MemSource) -> None:
    hub, url = await make_hub()
    ws = await connect(http, url)
    frames = await read_snapshot(ws)
    assert [(m.op, m.key, m.body) for m in frames] == [
        (Op.UPSERT, key, obj) for key, obj in source.by_node[NODE].items()]
    assert frames[0].seq == 2  # 1 is the begin marker
    assert hub.connected_nodes() == [NODE]
    assert hub.stats.sessions_opened == 1
    assert hub.stats.frames_in == 1 and hub.stats.frames_out == 1 + 2 + len(frames)


async def test_deltas_reach_connected_nodes_only(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    hub, url = await make_hub()
    ws = await connect(http, url)
    await read_snapshot(ws)
    new = dataset("d9")
    hub.notify_changed("Dataset", "default", "d9", new, [NODE, OTHER])
    assert hub.pending(OTHER) == 0
    msg = await recv(ws)
    assert (msg.op, msg.key, msg.body) == (Op.UPSERT, ("Dataset", "default", "d9"), new)
    hub.notify_changed("Dataset", "default", "d1", None, [NODE])
    msg = await recv(ws)
    assert (msg.op, msg.key, msg.body) == (Op.DELETE, ("Dataset", "default", "d1"), None)


async def test_burst_of_changes_is_coalesced_per_object(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    hub, url = await make_hub()
    ws = await connect(http, url)
    await read_snapshot(ws)
    for version in range(100):  # no await: the writer cannot run in between
        for name in ("a", "b", "c"):
            hub.notify_changed("Dataset", "default", name, dataset(name, version=version), [NODE])
    hub.notify_changed("Dataset", "default", "b", None, [NODE])
    assert hub.pending(NODE) == 3
    got = [await recv(ws) for _ in range(3)]
    assert [(m.op, m.name) for m in got] == [(Op.UPSERT, "a"), (Op.DELETE, "b"), (Op.UPSERT, "c")]
    assert got[0].body["spec"]["version"] == 99 and got[2].body["spec"]["version"] == 99


async def test_slow_reader_costs_one_pending_version_per_object(
    make_hub: HubFactory, http: aiohttp.ClientSession
) -> None:
    """The client stops reading; the GM's writer blocks on TCP and versions are coalesced."""
    hub, url = await make_hub(compress=False)
    ws = await connect(http, url, compress=0)
    await read_snapshot(ws)
    blob = os.urandom(192 * 1024).hex()  # incompressible, 384 KiB per frame
    names, versions = ("a", "b", "c", "d"), 60
    for version in range(versions):
        for name in names:
            hub.notify_changed("Dataset", "default", name, {"v": version, "blob": blob}, [NODE])
            assert hub.pending(NODE) <= len(names)
            await asyncio.sleep(0)  # let the writer run: it blocks once the socket buffers fill
    latest: dict[str, int] = {}
    received = 0
    while set(latest.values()) != {versions - 1} or len(latest) != len(names):
        msg = await recv(ws)
        received += 1
        latest[msg.name] = msg.body["v"]
    assert received < len(names) * versions
    assert hub.pending(NODE) == 0


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


# ---- handshake ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        pytest.param({}, 400, id="no-node-name"),
        pytest.param({"Node-Name": ""}, 400, id="empty-node-name"),
        pytest.param({"Node-Name": "Edge_1!"}, 400, id="invalid-node-name"),
        pytest.param({"Node-Name": NODE, "Origin": "http://evil.example"}, 403, id="cross-origin"),
    ],
)
async def test_handshake_rejections(make_hub: HubFactory, http: aiohttp.ClientSession,
                                    headers: dict[str, str], status: int) -> None:
    hub, url = await make_hub()
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await http.ws_connect(url, headers=headers)
    assert info.value.status == status
    assert hub.stats.handshakes_rejected == 1 and hub.connected_nodes() == []


@pytest.mark.parametrize(
    "authorization",
    [pytest.param(None, id="missing"), pytest.param("Bearer wrong", id="wrong"), pytest.param("Basic s3cret", id="scheme")],
)
async def test_token_mismatch_is_401(make_hub: HubFactory, http: aiohttp.ClientSession, authorization: str | None) -> None:
    hub, url = await make_hub(token="s3cret")
    headers = {"Node-Name": NODE} | ({"Authorization": authorization} if authorization else {})
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await http.ws_connect(url, headers=headers)
    assert info.value.status == 401
    assert info.value.headers["WWW-Authenticate"] == "Bearer"


async def test_right_token_is_admitted(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    hub, url = await make_hub(token="s3cret")
    ws = await connect(http, url, headers={"Authorization": "Bearer s3cret"})
    assert len(await read_snapshot(ws)) == 6


async def test_plain_http_request_is_400(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    hub, url = await make_hub()
    async with http.get(url, headers={"Node-Name": NODE}) as resp:
        assert resp.status == 400
        assert await resp.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                     "message": "websocket upgrade required", "reason": "BadRequest", "code": 400}


@pytest.mark.parametrize(
    ("first", "code", "reason"),
    [
        pytest.param(encode_native(Message(Op.STATUS, 1, "Dataset", "default", "d1", {})), proto.CLOSE_PROTOCOL_ERROR,
                     "first frame must be hello, got status", id="status-first"),
        pytest.param(encode_native(proto.hello(OTHER)), proto.CLOSE_POLICY_VIOLATION,
                     "hello names node 'edge-2', Node-Name is 'edge-1'", id="other-node"),
        pytest.param(encode_native(proto.hello(NODE, versions=(2, 3))), proto.CLOSE_UNSUPPORTED_VERSION,
                     "peer offers versions [2, 3], this side speaks [1]", id="no-common-version"),
    ],
)
async def test_bad_hello_closes(make_hub: HubFactory, http: aiohttp.ClientSession,
                                first: bytes, code: int, reason: str) -> None:
    hub, url = await make_hub()
    ws = await http.ws_connect(url, headers={"Node-Name": NODE}, protocols=(SUBPROTOCOL,))
    await ws.send_bytes(first)
    assert await recv_close(ws) == (code, reason)
    assert hub.connected_nodes() == [] and hub.stats.sessions_opened == 0


async def test_missing_hello_times_out(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    hub, url = await make_hub(hello_timeout=0.2)
    ws = await http.ws_connect(url, headers={"Node-Name": NODE}, protocols=(SUBPROTOCOL,))
    assert await recv_close(ws) == (proto.CLOSE_HELLO_TIMEOUT, "no frame from the peer for 0.2s")


# ---- native: status, authorization, acks ---------------------------------------------------


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






# ---- broken peers ---------------------------------------------------------------------------


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


# ---- upstream mode --------------------------------------------------------------------------


async def connect_upstream(http: aiohttp.ClientSession, url: str, node: str = NODE) -> aiohttp.ClientWebSocketResponse:
    """A client that behaves like upstream's Go LC: no subprotocol, bare header first."""
    ws = await http.ws_connect(url, headers={"Node-Name": node})
    assert ws.protocol is None
    await ws.send_str(proto.BARE_HEADER)
    return ws


async def recv_text(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    frame = await ws.receive(timeout=TIMEOUT)
    assert frame.type is WSMsgType.TEXT, (frame.type, frame.data)
    assert frame.data.endswith("}\n")
    envelope = orjson.loads(frame.data)
    return {"header": envelope["header"], "content": orjson.loads(base64.b64decode(envelope["content"]))}


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


# ---- misc -----------------------------------------------------------------------------------


@pytest.mark.expect_log_errors(r"^sedna.gm.edge.hub: hub cannot send$")
async def test_object_that_cannot_be_encoded_is_skipped(make_hub: HubFactory, http: aiohttp.ClientSession,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    hub, url = await make_hub(max_frame_bytes=4096)
    ws = await connect(http, url)
    await read_snapshot(ws)
    hub.notify_changed("Dataset", "default", "huge", {"blob": "x" * 8192}, [NODE])
    hub.notify_changed("Dataset", "default", "d1", dataset("d1", version=3), [NODE])
    msg = await recv(ws)
    assert (msg.name, msg.body["spec"]["version"]) == ("d1", 3)
    assert hub.stats.skipped_out == 1 and hub.connected_nodes() == [NODE]
    [record] = [r for r in caplog.records if r.getMessage() == "hub cannot send"]
    assert (record.node, record.key) == (NODE, "default/huge")
    assert "exceeds the limit" in record.error


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


# ---- node identity ---------------------------------------------------------------------------

NODE_TOKEN = "edge-1-token-0123456789abcdef"
OTHER_TOKEN = "edge-2-token-0123456789abcdef"


def node_tokens() -> NodeAuth:
    return NodeAuth([NodeTokens(StaticTable({NODE_TOKEN: NODE, OTHER_TOKEN: OTHER}))])


class StaticTable:
    def __init__(self, tokens: dict[str, str]) -> None:
        self.table = NodeTokenTable(tokens)

    async def current(self) -> NodeTokenTable:
        return self.table


class FakeReviewer:
    """Answers TokenReviews from a dict token -> node; counts calls; can fail like a down API."""

    def __init__(self, nodes: dict[str, str]) -> None:
        self.nodes = nodes
        self.calls = 0
        self.down = False

    async def __call__(self, token: str) -> TokenReviewResult:
        self.calls += 1
        if self.down:
            raise Unavailable(503, "ServiceUnavailable", "apiserver down")
        node = self.nodes.get(token)
        if node is None:
            return TokenReviewResult(False, error="invalid bearer token")
        return TokenReviewResult(True, username="system:serviceaccount:sedna:sedna-lc",
                                 extra={NODE_NAME_EXTRA: (node,)}, audiences=("sedna-gm",))


async def real_node_session(hub: Hub, http: aiohttp.ClientSession, url: str,
                            token: str) -> aiohttp.ClientWebSocketResponse:
    ws = await connect(http, url, headers={"Authorization": f"Bearer {token}"})
    assert len(await read_snapshot(ws)) == 6
    return ws


async def assert_untouched(hub: Hub, ws: aiohttp.ClientWebSocketResponse, *, refused: int) -> None:
    """The real node's session survived the refused attempts and still gets deltas."""
    assert hub.stats.handshakes_rejected == refused
    assert hub.stats.sessions_replaced == 0 and hub.stats.sessions_opened == 1
    assert hub.connected_nodes() == [NODE] and not ws.closed
    hub.notify_changed("Dataset", "default", "d1", dataset("d1", version=2), [NODE])
    assert (await recv(ws)).body["spec"]["version"] == 2


async def refused(http: aiohttp.ClientSession, url: str, authorization: str | None) -> int:
    headers = {"Node-Name": NODE} | ({"Authorization": authorization} if authorization else {})
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await http.ws_connect(url, headers=headers, protocols=(SUBPROTOCOL,))
    return info.value.status


@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        pytest.param(f"Bearer {OTHER_TOKEN}", 403, id="other-nodes-token"),
        pytest.param("Bearer not-a-known-token-at-all", 401, id="unknown-token"),
        pytest.param(None, 401, id="no-token"),
        pytest.param(f"Basic {NODE_TOKEN}", 401, id="not-bearer"),
    ],
)
async def test_node_token_impersonation_is_refused(make_hub: HubFactory, http: aiohttp.ClientSession,
                                                   authorization: str | None, status: int) -> None:
    hub, url = await make_hub(auth=node_tokens())
    ws = await real_node_session(hub, http, url, NODE_TOKEN)
    assert await refused(http, url, authorization) == status
    await assert_untouched(hub, ws, refused=1)


async def test_node_token_admits_its_own_node_only(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    hub, url = await make_hub(auth=node_tokens())
    other = await connect(http, url, OTHER, headers={"Authorization": f"Bearer {OTHER_TOKEN}"})
    assert [m.name for m in await read_snapshot(other)] == ["o1"]
    assert hub.connected_nodes() == [OTHER]


@pytest.mark.parametrize(
    ("token", "status"),
    [pytest.param("pod-token-on-edge-2", 403, id="pod-on-other-node"),
     pytest.param("expired-or-unknown", 401, id="not-authenticated")],
)
async def test_token_review_impersonation_is_refused(make_hub: HubFactory, http: aiohttp.ClientSession,
                                                     token: str, status: int) -> None:
    reviewer = FakeReviewer({"pod-token-on-edge-1": NODE, "pod-token-on-edge-2": OTHER})
    hub, url = await make_hub(auth=NodeAuth([TokenReviewAuth(reviewer, audiences=("sedna-gm",))]))
    ws = await real_node_session(hub, http, url, "pod-token-on-edge-1")
    assert await refused(http, url, f"Bearer {token}") == status
    await assert_untouched(hub, ws, refused=1)


async def test_token_review_positive_answers_are_cached(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    reviewer = FakeReviewer({"pod-token-on-edge-1": NODE, "pod-token-on-edge-2": OTHER})
    hub, url = await make_hub(auth=NodeAuth([TokenReviewAuth(reviewer, cache_seconds=60)]))
    first = await real_node_session(hub, http, url, "pod-token-on-edge-1")
    second = await connect(http, url, headers={"Authorization": "Bearer pod-token-on-edge-1"})
    assert await recv_close(first) == (proto.CLOSE_REPLACED, "replaced by a newer connection for this node")
    assert reviewer.calls == 1
    reviewer.down = True  # a cached identity keeps proving its node, never another one
    assert await refused(http, url, "Bearer pod-token-on-edge-2") == 503
    await second.close()


async def test_token_review_unavailable_is_503_and_keeps_the_session(make_hub: HubFactory,
                                                                     http: aiohttp.ClientSession) -> None:
    reviewer = FakeReviewer({"pod-token-on-edge-1": NODE})
    hub, url = await make_hub(auth=NodeAuth([TokenReviewAuth(reviewer, cache_seconds=0)]))
    ws = await real_node_session(hub, http, url, "pod-token-on-edge-1")
    reviewer.down = True
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await http.ws_connect(url, headers={"Node-Name": NODE, "Authorization": "Bearer pod-token-on-edge-1"})
    assert (info.value.status, info.value.headers["Retry-After"]) == (503, "5")
    await assert_untouched(hub, ws, refused=1)


async def test_shared_token_proves_membership_not_the_node(make_hub: HubFactory,
                                                           http: aiohttp.ClientSession) -> None:
    """The upstream-compatible mode, kept as documented: any token holder may claim any node."""
    hub, url = await make_hub(token="s3cret")
    ws = await connect(http, url, OTHER, headers={"Authorization": "Bearer s3cret"})
    assert [m.name for m in await read_snapshot(ws)] == ["o1"]


def test_token_and_authenticator_are_exclusive(source: MemSource, handler: MemHandler) -> None:
    with pytest.raises(ValueError, match="not both"):
        Hub(source, handler, token="s3cret", auth=node_tokens())


# ---- capacity -----------------------------------------------------------------------------


async def test_sessions_beyond_the_capacity_get_503_and_a_node_may_still_replace_its_own(
        make_hub: HubFactory, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture) -> None:
    hub, url = await make_hub(max_sessions=1)
    first = await connect(http, url, NODE)
    for _ in range(3):
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await http.ws_connect(url, headers={"Node-Name": OTHER}, protocols=(SUBPROTOCOL,))
        assert err.value.status == 503
        assert err.value.headers is not None and err.value.headers.get("Retry-After") == "5"
    assert hub.stats.handshakes_over_capacity == 3
    assert [r.getMessage() for r in caplog.records].count(
        "hub at its session capacity: refusing new sessions") == 1  # one line, not one per refusal
    again = await connect(http, url, NODE)  # the node's own reconnect replaces its session
    assert await recv_close(first) == (proto.CLOSE_REPLACED, "replaced by a newer connection for this node")
    await again.close()
    await eventually(lambda: hub.sessions_active == 0)
    other = await connect(http, url, OTHER)  # a free slot is taken again
    await other.close()


async def test_a_client_gone_before_its_upgrade_is_answered_is_counted_not_logged(
        make_hub: HubFactory, caplog: pytest.LogCaptureFixture) -> None:
    hub, url = await make_hub()
    host, port = url.split("//", 1)[1].rstrip("/").split(":")
    for _ in range(20):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                     b"Node-Name: " + NODE.encode() + b"\r\n\r\n")
        writer.transport.abort()  # reset at once, as a dial that timed out
    await asyncio.sleep(0.5)
    assert hub.stats.handshakes_abandoned > 0
    assert hub.sessions_active == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


# ---- what a session costs ------------------------------------------------------------------


def hub_tasks() -> list[str]:
    return sorted(t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("hub-"))


async def test_idle_sessions_run_no_task_of_their_own(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    """A session's reader is the connection's handler task; a writer runs only while frames
    are queued; one heartbeat task serves every session."""
    hub, url = await make_hub()
    sessions = [await connect(http, url, NODE), await connect(http, url, OTHER)]
    for ws in sessions:
        await read_snapshot(ws)
    await eventually(lambda: hub_tasks() == ["hub-heartbeat"], "the writers finished")
    await send_status(sessions[0], 1, "d1")
    assert await recv(sessions[0]) == proto.ack(1)
    hub.notify_changed("Dataset", "default", "o1", dataset("o1", OTHER, version=2), [OTHER])
    assert (await recv(sessions[1])).body["spec"]["version"] == 2
    await eventually(lambda: hub_tasks() == ["hub-heartbeat"], "the writers finished again")


async def test_a_session_holds_little_of_the_hubs_making(make_hub: HubFactory, http: aiohttp.ClientSession) -> None:
    """What the hub's handling keeps per idle session (its websocket response, reader, writer,
    coroutines, tasks, the session): ~6 KB; 21 KB with a task each for reading, writing,
    pinging, acks and stops, and an event or queue for each."""
    hub, url = await make_hub()
    first = await connect(http, url, NODE)
    await read_snapshot(first)  # the first session builds what all share (the wheel, its task)
    count = 40
    tracemalloc.start(64)
    try:
        before = tracemalloc.take_snapshot()
        sessions = [await connect(http, url, f"n-{i}") for i in range(count)]
        for ws in sessions:
            await read_snapshot(ws)
        await eventually(lambda: hub_tasks() == ["hub-heartbeat"], "the writers finished")
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    ours = [tracemalloc.Filter(True, "*/gm/edge/*.py", all_frames=True)]
    held = sum(d.size_diff for d in after.filter_traces(ours).compare_to(before.filter_traces(ours), "filename"))
    assert hub.sessions_active == count + 1 and not first.closed
    assert held / count < 10_000


async def test_an_object_version_is_encoded_once_for_every_session(
        make_hub: HubFactory, http: aiohttp.ClientSession, source: MemSource) -> None:
    shared = {"kind": "Model", "metadata": {"name": "m1", "namespace": "default"}, "spec": {"url": "s3://m/1"}}
    for node in (NODE, OTHER):
        source.put(node, "Model", "m1", shared)
    hub, url = await make_hub()
    sessions = [await connect(http, url, NODE), await connect(http, url, OTHER)]
    got = [{m.name: m for m in await read_snapshot(ws)}["m1"] for ws in sessions]
    assert got[0].body == got[1].body == shared and got[0].seq != got[1].seq
    objects = sum(len(objs) for objs in source.by_node.values())  # 8, the Model counted twice
    assert (hub.encoded.stats.built, hub.encoded.stats.shared) == (objects - 1, 1)
    await sessions[0].close()
    again = await connect(http, url, NODE)  # a reconnect: every version it needs is encoded already
    assert len(await read_snapshot(again)) == len(source.by_node[NODE])
    assert hub.encoded.stats.built == objects - 1
    newer = {**shared, "spec": {"url": "s3://m/2"}}
    hub.notify_changed("Model", "default", "m1", newer, [NODE, OTHER])
    assert [(await recv(ws)).body for ws in (again, sessions[1])] == [newer, newer]
    assert hub.encoded.stats.built == objects and len(hub.encoded) == objects - 1


async def test_upstream_sessions_share_a_versions_frame(make_hub: HubFactory, http: aiohttp.ClientSession,
                                                        source: MemSource) -> None:
    hub, url = await make_hub()
    first = await connect_upstream(http, url, OTHER)
    assert (await recv_text(first))["header"]["resourceName"] == "o1"
    second = await connect_upstream(http, url, OTHER)  # replaces the first: the same frame again
    assert (await recv_text(second))["content"] == source.by_node[OTHER][("Dataset", "default", "o1")]
    assert (hub.encoded.stats.built, hub.encoded.stats.shared) == (1, 1)


async def test_upgrades_beyond_those_in_progress_get_503_at_once(make_hub: HubFactory,
                                                                  http: aiohttp.ClientSession) -> None:
    """A fleet dialling at once: past `max_handshakes` upgrades waiting for their hello, a dial
    is answered 503 before any other work, and served again once they are through."""
    hub, url = await make_hub(max_handshakes=2)
    waiting = [await http.ws_connect(url, headers={"Node-Name": node}, protocols=(SUBPROTOCOL,))
               for node in (NODE, OTHER)]  # upgraded, no hello yet
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        await http.ws_connect(url, headers={"Node-Name": "edge-3"}, protocols=(SUBPROTOCOL,))
    assert (err.value.status, err.value.headers.get("Retry-After")) == (503, "1")
    assert hub.stats.handshakes_busy == 1 and hub.stats.handshakes_rejected == 0
    await waiting[0].send_bytes(encode_native(proto.hello(NODE)))
    assert await recv(waiting[0]) == proto.hello(NODE, versions=(1,))
    third = await connect(http, url, "edge-3")
    assert len(await read_snapshot(third)) == 0
    assert hub.connected_nodes() == [NODE, "edge-3"]


def test_a_hello_is_awaited_as_long_as_the_lc_waits_for_its_answer() -> None:
    """Longer would hold a handshake slot for an LC that has given up and gone."""
    assert HELLO_TIMEOUT == LinkSettings(url="ws://gm:9000/", node=NODE).hello_timeout
