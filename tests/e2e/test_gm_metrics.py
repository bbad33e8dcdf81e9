"""The GM's /metrics and /sessions against the dev cluster: every documented family on a fresh
GM, a connected node's own series (gone once the node is forgotten), and the sessions list."""

from __future__ import annotations

import platform
import time
from importlib import metadata

import aiohttp
import pytest

from gm.kube.resources import NODES
from proto import SUBPROTOCOL
from shared.metrics import CONTENT_TYPE
from tests.conftest import eventually
from tests.e2e.test_gm_edge import DS1, NativeLC, create_fl_example
from tests.scrape import families, labelled, samples, value
from tests.unit.test_metrics import documented

NODE = "edge-node-1"
NODE_SERIES = ("sedna_gm_hub_node_connected", "sedna_gm_hub_node_session_start_time_seconds",
               "sedna_gm_hub_node_last_frame_time_seconds", "sedna_gm_hub_node_pending_objects",
               "sedna_gm_hub_node_acked_seq")


@pytest.fixture
async def http():
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def scrape(http: aiohttp.ClientSession, gm) -> str:
    async with http.get(f"http://127.0.0.1:{gm.port}/metrics") as resp:
        assert (resp.status, resp.headers["Content-Type"]) == (200, CONTENT_TYPE)
        return await resp.text()


async def sessions(http: aiohttp.ClientSession, gm) -> list[dict]:
    async with http.get(f"http://127.0.0.1:{gm.port}/sessions") as resp:
        assert resp.status == 200
        return (await resp.json())["sessions"]


async def test_a_fresh_gm_shows_every_documented_family(gm, http):
    text = await scrape(http, gm)
    found = families(text)
    assert {n: k for n, k in found.items() if n.startswith("sedna_gm_")} == documented("sedna_gm_")
    assert labelled(text, "sedna_gm_hub_sessions_total", "event") == dict.fromkeys(
        ("opened", "replaced", "dead", "broken", "rejected", "abandoned", "over_capacity", "busy"), 0)
    assert labelled(text, "sedna_gm_hub_status_reports_total", "result") == dict.fromkeys(
        ("applied", "refused", "deferred", "error", "placement_wait"), 0)
    assert labelled(text, "sedna_gm_status_pipeline_total", "event") == dict.fromkeys(
        ("writes", "unchanged", "retries", "refused", "stale", "coalesced"), 0)
    assert labelled(text, "sedna_gm_events_total", "outcome") == dict.fromkeys(
        ("created", "patched", "throttled", "dropped", "failed"), 0)
    assert value(text, "sedna_gm_hub_sessions_active") == 0
    assert value(text, "sedna_gm_hub_session_capacity") == gm.hub.max_sessions > 0
    assert value(text, "sedna_gm_reconcile_total", controller="federatedlearningjob",
                 result="error") == 0
    assert not [s for s in samples(text) if s.name in NODE_SERIES]
    assert value(text, "sedna_build_info", service="gm", version=metadata.version("sedna-py"),
                 python=platform.python_version()) == 1
    assert found["process_cpu_seconds_total"] == "counter" and found["python_info"] == "gauge"
    assert await sessions(http, gm) == []


async def test_a_connected_node_has_its_series_until_it_is_forgotten(gm, api, http):
    await create_fl_example(api, gm)
    before = time.time()
    ws = await http.ws_connect(f"http://127.0.0.1:{gm.port}/", headers={"Node-Name": NODE},
                               protocols=(SUBPROTOCOL,))
    lc = NativeLC(ws, NODE)
    await lc.handshake()
    ack = await lc.report(7, "Dataset", DS1, {"numberOfSamples": 500})
    assert ack.body is None
    text = await scrape(http, gm)
    assert {name: value(text, name, node=NODE) is not None for name in NODE_SERIES} == dict.fromkeys(
        NODE_SERIES, True)
    assert value(text, "sedna_gm_hub_node_connected", node=NODE) == 1
    assert value(text, "sedna_gm_hub_node_acked_seq", node=NODE) == 7
    assert value(text, "sedna_gm_hub_node_pending_objects", node=NODE) == 0
    since = value(text, "sedna_gm_hub_node_session_start_time_seconds", node=NODE)
    heard = value(text, "sedna_gm_hub_node_last_frame_time_seconds", node=NODE)
    # loop time turned into unix time: equal to within the clocks' drift between two reads
    assert since is not None and heard is not None and before <= since <= heard + 0.01 <= time.time() + 0.01

    [listed] = await sessions(http, gm)
    assert listed == {"node": NODE, "mode": "native", "since": since, "lastFrame": listed["lastFrame"],
                      "pending": 0, "ackedSeq": 7}
    assert listed["lastFrame"] == pytest.approx(heard, abs=0.01)

    await ws.close()  # gone, not forgotten: connected 0 and its last frame stay a while
    await eventually(lambda: gm.hub.sessions_active == 0, message="session closed")
    text = await scrape(http, gm)
    assert value(text, "sedna_gm_hub_node_connected", node=NODE) == 0
    assert value(text, "sedna_gm_hub_node_last_frame_time_seconds", node=NODE) is not None
    assert value(text, "sedna_gm_hub_node_acked_seq", node=NODE) is None
    assert await sessions(http, gm) == []

    gm.hub.forget_node(NODE)
    text = await scrape(http, gm)  # the hub's series (the Dataset's count on the node stays)
    assert not [s for s in samples(text) if s.labels.get("node") == NODE and s.name.startswith("sedna_gm_hub_")]


async def test_a_deleted_node_loses_its_session_and_its_series(gm, api, http):
    ws = await http.ws_connect(f"http://127.0.0.1:{gm.port}/", headers={"Node-Name": NODE},
                               protocols=(SUBPROTOCOL,))
    await NativeLC(ws, NODE).handshake()
    await api.delete(NODES, NODE)
    msg = await ws.receive(timeout=10)
    assert (msg.type, ws.close_code) == (aiohttp.WSMsgType.CLOSE, 1001)
    await eventually(lambda: gm.hub.sessions_active == 0, message="session gone")
    text = await scrape(http, gm)
    assert not [s for s in samples(text) if s.name in NODE_SERIES and s.labels.get("node") == NODE]
    assert await sessions(http, gm) == []
