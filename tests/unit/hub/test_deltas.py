"""Native sessions get a snapshot on connect, then the changes to their node's objects."""

from __future__ import annotations

import asyncio
import os

import aiohttp
import pytest

from proto import Op
from tests.hubfakes import MemSource
from tests.unit.hub.rig import (
    NODE,
    OTHER,
    HubFactory,
    connect,
    dataset,
    read_snapshot,
    recv,
)


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
