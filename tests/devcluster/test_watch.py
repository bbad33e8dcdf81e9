"""Watch protocol over raw HTTP (spec §6): start points, transitions, bookmarks, 410, timeouts."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest

from devcluster.machinery.errors import ApiError
from tests.conftest import eventually
from tests.devcluster.conftest import ApiServer, Http, pod

PODS = "/api/v1/namespaces/default/pods"


def pods_rt(apiserver: ApiServer):
    return apiserver.store.registry.lookup(group="", version="v1", resource="pods")


async def read(resp: aiohttp.ClientResponse, n: int, limit: float = 5.0) -> list[dict[str, Any]]:
    out = []
    async with asyncio.timeout(limit):
        while len(out) < n:
            line = await resp.content.readline()
            if not line:
                break
            assert line.endswith(b"\n")
            out.append(orjson.loads(line))
    return out


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"].get("name", "")) for e in events]


@pytest.mark.parametrize("rv", ["", "&resourceVersion=0"], ids=["unset", "zero"])
async def test_initial_added_events(apiserver: ApiServer, http: Http, rv: str) -> None:
    store, rt = apiserver.store, pods_rt(apiserver)
    store.create(rt, "default", pod("a"))
    store.create(rt, "default", pod("b"))
    async with http.session.get(PODS + "?watch=True" + rv) as resp:
        first = await read(resp, 2)
        store.create(rt, "default", pod("c"))
        later = await read(resp, 1)
    assert summary(first) == [("ADDED", "a"), ("ADDED", "b")]
    assert summary(later) == [("ADDED", "c")]
    assert later[0]["object"]["kind"] == "Pod" and later[0]["object"]["apiVersion"] == "v1"


async def test_start_at_exact_rv_replays_history(apiserver: ApiServer, http: Http) -> None:
    store, rt = apiserver.store, pods_rt(apiserver)
    start = store.rv
    store.create(rt, "default", pod("a"))
    store.mutate(rt, "default", "a", lambda o: o["metadata"].setdefault("labels", {}).update(x="1"))
    store.delete(rt, "default", "a")
    async with http.session.get(PODS + f"?watch=1&resourceVersion={start}") as resp:
        events = await read(resp, 3)
    assert summary(events) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == [start + 1, start + 2, start + 3]  # DELETED carries the removal's RV


async def test_selector_transitions(apiserver: ApiServer, http: Http) -> None:
    store, rt = apiserver.store, pods_rt(apiserver)
    store.create(rt, "default", pod("p", {"app": "x"}))
    async with http.session.get(PODS + f"?watch=true&labelSelector=app%3Dy&resourceVersion={store.rv}") as resp:
        store.mutate(rt, "default", "p", lambda o: o["metadata"].setdefault("labels", {}).update(app="y"))   # enters
        store.mutate(rt, "default", "p", lambda o: o["metadata"].setdefault("labels", {}).update(more="1"))  # stays
        store.mutate(rt, "default", "p", lambda o: o["metadata"].setdefault("labels", {}).update(app="z"))   # leaves
        store.mutate(rt, "default", "p", lambda o: o["metadata"].setdefault("labels", {}).update(app="w"))   # outside
        store.mutate(rt, "default", "p", lambda o: o["metadata"].setdefault("labels", {}).update(app="y"))   # enters again
        events = await read(resp, 4)
    assert summary(events) == [("ADDED", "p"), ("MODIFIED", "p"), ("DELETED", "p"), ("ADDED", "p")]
    assert events[2]["object"]["metadata"]["labels"]["app"] == "y"  # DELETED shows the old state


async def test_field_selector_single_object_watch(apiserver: ApiServer, http: Http) -> None:
    store, rt = apiserver.store, pods_rt(apiserver)
    store.create(rt, "default", pod("one"))
    store.create(rt, "default", pod("two"))
    async with http.session.get(PODS + "?fieldSelector=metadata.name%3Dtwo&resourceVersion=0&watch=true") as resp:
        first = await read(resp, 1)
        store.mutate(rt, "default", "one", lambda o: o["metadata"].setdefault("labels", {}).update(a="1"))
        store.mutate(rt, "default", "two", lambda o: o["metadata"].setdefault("labels", {}).update(a="1"))
        second = await read(resp, 1)
    assert summary(first + second) == [("ADDED", "two"), ("MODIFIED", "two")]


async def test_bookmarks_carry_rv(apiserver: ApiServer, http: Http) -> None:
    store = apiserver.store
    async with http.session.get(PODS + f"?watch=True&allowWatchBookmarks=True&resourceVersion={store.rv}") as resp:
        events = await read(resp, 1)
    bm = events[0]
    assert bm["type"] == "BOOKMARK"
    assert bm["object"] == {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": str(store.rv)}}


async def test_timeout_ends_stream_with_bookmark(apiserver: ApiServer, http: Http) -> None:
    apiserver.store.bookmark_interval = 60
    async with http.session.get(PODS + f"?watch=1&allowWatchBookmarks=true&timeoutSeconds=1"
                                       f"&resourceVersion={apiserver.store.rv}") as resp:
        events = await read(resp, 10, limit=4)
    assert [e["type"] for e in events] == ["BOOKMARK"]
    assert apiserver.store.watcher_count() == 0


async def test_compacted_rv_gets_error_410(apiserver: ApiServer, http: Http) -> None:
    store, rt = apiserver.store, pods_rt(apiserver)
    old = store.rv
    store.create(rt, "default", pod("a"))
    code, body = await http.post("/devcluster/compact")
    assert code == 200 and body["compacted"] == store.rv
    async with http.session.get(PODS + f"?watch=true&resourceVersion={old}") as resp:
        assert resp.status == 200
        events = await read(resp, 5)
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"
    assert events[0]["object"]["message"] == f"too old resource version: {old} ({store.rv + 1})"


async def test_forced_410_fault(apiserver: ApiServer, http: Http) -> None:
    apiserver.faults.configure({"force_410": 1})
    rv = apiserver.store.rv
    async with http.session.get(PODS + f"?watch=true&resourceVersion={rv}") as resp:
        events = await read(resp, 5)
    assert [e["object"]["code"] for e in events] == [410]
    async with http.session.get(PODS + f"?watch=true&allowWatchBookmarks=true&resourceVersion={rv}") as resp:
        assert (await read(resp, 1))[0]["type"] == "BOOKMARK"  # only the next watch was affected


async def test_send_initial_events(apiserver: ApiServer, http: Http) -> None:
    store, rt = apiserver.store, pods_rt(apiserver)
    store.create(rt, "default", pod("a"))
    q = "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    async with http.session.get(PODS + q) as resp:
        events = await read(resp, 2)
    assert summary(events)[0] == ("ADDED", "a")
    end = events[1]
    assert end["type"] == "BOOKMARK"
    assert end["object"]["metadata"] == {"resourceVersion": str(store.rv),
                                         "annotations": {"k8s.io/initial-events-end": "true"}}
    code, body = await http.get(PODS + "?watch=true&sendInitialEvents=true")
    assert code == 400 and body["kind"] == "Status"


async def test_disconnect_releases_watcher(apiserver: ApiServer, http: Http) -> None:
    store, rt = apiserver.store, pods_rt(apiserver)
    async with aiohttp.ClientSession(apiserver.url) as session:
        resp = await session.get(PODS + f"?watch=true&resourceVersion={store.rv}")
        assert resp.status == 200
        await eventually(lambda: store.watcher_count(rt) == 1, message="one watcher")
        resp.close()
    store.create(rt, "default", pod("wake"))  # the next write on a dead stream fails and closes it
    await eventually(lambda: store.watcher_count(rt) == 0, message="watcher released")


async def test_watch_drop_fault_cuts_stream(apiserver: ApiServer, http: Http) -> None:
    apiserver.faults.configure({"watch_drop_after": 0.2})
    with pytest.raises(aiohttp.ClientPayloadError):
        async with http.session.get(PODS + f"?watch=true&resourceVersion={apiserver.store.rv}") as resp:
            await read(resp, 1, limit=3)
    await eventually(lambda: apiserver.store.watcher_count() == 0, message="watcher released")


async def test_table_watch(apiserver: ApiServer, http: Http) -> None:
    store, rt = apiserver.store, pods_rt(apiserver)
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    async with http.session.get(PODS + f"?watch=true&resourceVersion={store.rv}", headers={"Accept": accept}) as resp:
        store.create(rt, "default", pod("t"))
        events = await read(resp, 1)
    obj = events[0]["object"]
    assert events[0]["type"] == "ADDED" and obj["kind"] == "Table" and obj["rows"][0]["cells"][0] == "t"


async def test_watch_errors_are_plain_status(http: Http) -> None:
    code, body = await http.get(PODS + "?watch=true&labelSelector=a+in+()")
    assert code == 400 and body["kind"] == "Status"
    code, body = await http.get(PODS + "?watch=true&resourceVersion=abc")
    assert code == 400


# -- the in-process Watch -------------------------------------------------------------------------

async def test_store_watch_iteration_and_410(apiserver: ApiServer) -> None:
    store, rt = apiserver.store, pods_rt(apiserver)
    w = store.watch(rt, "default", resource_version=str(store.rv), timeout=2)
    store.create(rt, "default", pod("a"))
    store.create(rt, "kube-system", pod("other"))
    ev = await anext(w)
    assert (ev.type, ev.obj["metadata"]["name"], ev.rv) == ("ADDED", "a", store.rv - 1)
    w.close()
    store.compact()
    stale = store.watch(rt, "default", resource_version="1001")
    with pytest.raises(ApiError) as info:
        await anext(stale)
    assert info.value.code == 410 and store.watcher_count(rt) == 0


async def test_slow_watcher_is_closed(apiserver: ApiServer) -> None:
    store, rt = apiserver.store, pods_rt(apiserver)
    w = store.watch(rt, "default", resource_version=str(store.rv))
    w.max_pending = 3
    for i in range(5):
        store.create(rt, "default", pod(f"p{i}"))
    assert w.closed and store.watcher_count(rt) == 0
    assert [ev async for ev in w] == []
