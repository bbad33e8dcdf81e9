"""What a session costs: no task of its own while idle, a few KB of the hub's making, and each
object version encoded once for every session that needs it."""

from __future__ import annotations

import asyncio
import tracemalloc

import aiohttp

import proto
from tests.conftest import eventually
from tests.hubfakes import MemSource
from tests.unit.hub.rig import (
    NODE,
    OTHER,
    HubFactory,
    connect,
    connect_upstream,
    dataset,
    read_snapshot,
    recv,
    recv_text,
    send_status,
)


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
