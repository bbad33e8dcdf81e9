"""Who the hub lets in: the handshake and hello, node identity (node tokens, TokenReview, the
shared token) and the capacity for sessions and for upgrades in progress."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest

import proto
from gm.edge.auth import NodeAuth, NodeTokens, NodeTokenTable, TokenReviewAuth
from gm.edge.hub import HELLO_TIMEOUT, Hub
from gm.kube.apierrors import Unavailable
from gm.kube.tokenreview import NODE_NAME_EXTRA, TokenReviewResult
from lc.link.dialer import LinkSettings
from proto import SUBPROTOCOL, Message, Op, encode_native
from tests.conftest import eventually
from tests.hubfakes import MemSource
from tests.unit.hub.rig import (
    NODE,
    OTHER,
    HubFactory,
    MemHandler,
    connect,
    dataset,
    read_snapshot,
    recv,
    recv_close,
)


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
