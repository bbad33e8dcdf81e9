"""Reflector + informer against the dev cluster: list+watch delivery, indexes, relists
after a 410 and after a dropped stream (with deletions seen once), resync, sharing."""

from __future__ import annotations

import asyncio

import pytest

from gm.kube.informer import CacheSyncTimeout, InformerFactory, InformerFailed, SharedInformer
from gm.kube.reflector import ReflectorSettings
from gm.kube.resources import CONFIGMAPS, GVR, PODS
from gm.kube.store import INDEX_LABEL, INDEX_NAMESPACE, INDEX_OWNER, by_label
from shared.metrics import sample
from tests.conftest import eventually
from tests.e2e.test_kube_client import NS, cm

# Every namespace holds this ConfigMap on a real cluster (and on the dev cluster): not the tests' own.
ROOT_CA = "kube-root-ca.crt"
FAST = ReflectorSettings(page_size=2, watch_timeout=30, backoff_initial=0.02, backoff_max=0.1)


class Recorder:
    """Handlers that only record, the way controller handlers only enqueue."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []  # (type, name, data value)
        self.changed = asyncio.Event()

    def attach(self, inf: SharedInformer) -> None:
        inf.add_event_handler(on_add=lambda o: self._rec("add", o),
                              on_update=lambda old, new: self._rec("update", new),
                              on_delete=lambda o: self._rec("delete", o))

    def _rec(self, kind: str, obj: dict) -> None:
        if obj["metadata"]["name"] == ROOT_CA:
            return
        self.events.append((kind, obj["metadata"]["name"], (obj.get("data") or {}).get("v", "")))
        self.changed.set()

    def of(self, name: str) -> list[tuple[str, str]]:
        return [(k, v) for k, n, v in self.events if n == name]


@pytest.fixture
async def running():
    """Start informers and always stop them."""
    started: list[asyncio.Task] = []

    async def start(inf: SharedInformer) -> SharedInformer:
        started.append(asyncio.create_task(inf.run()))
        async with asyncio.timeout(5):
            await inf.wait_synced()
        return inf

    yield start
    for task in started:
        task.cancel()
    await asyncio.gather(*started, return_exceptions=True)


async def test_list_then_watch_delivers_add_update_delete(kube, running):
    await kube.create(CONFIGMAPS, cm("pre-1", {"v": "a"}), namespace=NS)
    await kube.create(CONFIGMAPS, cm("pre-2", {"v": "b"}), namespace=NS)
    await kube.create(CONFIGMAPS, cm("pre-3", {"v": "c"}), namespace=NS)
    inf = SharedInformer(kube, CONFIGMAPS, namespace=NS, settings=FAST)
    rec = Recorder()
    rec.attach(inf)
    await running(inf)
    assert inf.has_synced()
    assert sorted(rec.events) == [("add", "pre-1", "a"), ("add", "pre-2", "b"), ("add", "pre-3", "c")]
    assert inf.reflector.lists == 1

    await kube.create(CONFIGMAPS, cm("live", {"v": "1"}), namespace=NS)
    await kube.patch(CONFIGMAPS, "live", {"data": {"v": "2"}}, namespace=NS)
    await kube.delete(CONFIGMAPS, "live", namespace=NS)
    await eventually(lambda: ("delete", "2") in rec.of("live"))
    assert rec.of("live") == [("add", "1"), ("update", "2"), ("delete", "2")]
    assert inf.store.get(f"{NS}/live") is None
    assert inf.store.get(f"{NS}/pre-2")["data"] == {"v": "b"}
    assert inf.reflector.lists == 1  # no relist was needed


async def test_indexes_by_namespace_owner_label_and_custom(kube, running):
    owner_ref = {"apiVersion": "test/v1", "kind": "Job", "name": "j", "uid": "uid-1",
                 "controller": True}
    a = cm("a", labels={"app": "x"})
    a["metadata"]["ownerReferences"] = [owner_ref]
    await kube.create(CONFIGMAPS, a, namespace=NS)
    await kube.create(CONFIGMAPS, cm("b", {"v": "big"}, labels={"app": "y"}), namespace=NS)
    inf = SharedInformer(kube, CONFIGMAPS, namespace=NS, settings=FAST)
    inf.add_indexer(INDEX_LABEL, by_label)  # opt-in: not a default index
    inf.add_indexer("by-v", lambda o: [o["data"]["v"]] if (o.get("data") or {}).get("v") else [])
    await running(inf)

    assert [o["metadata"]["name"] for o in inf.store.by_index(INDEX_OWNER, "uid-1")] == ["a"]
    assert [o["metadata"]["name"] for o in inf.store.by_index(INDEX_LABEL, "app=y")] == ["b"]
    assert [k for k in inf.store.index_keys(INDEX_NAMESPACE, NS) if k != f"{NS}/{ROOT_CA}"] == [f"{NS}/a", f"{NS}/b"]
    assert inf.store.index_keys("by-v", "big") == [f"{NS}/b"]

    await kube.patch(CONFIGMAPS, "b", {"metadata": {"labels": {"app": "x"}}}, namespace=NS)
    await eventually(lambda: len(inf.store.by_index(INDEX_LABEL, "app=x")) == 2)
    assert inf.store.by_index(INDEX_LABEL, "app=y") == []
    with pytest.raises(KeyError):
        inf.store.by_index("no-such-index", "x")


async def test_forced_410_relists_at_once_without_duplicate_events(kube, cluster, running):
    await kube.create(CONFIGMAPS, cm("a", {"v": "1"}), namespace=NS)
    cluster.faults.configure({"force_410": 1})  # the first watch gets ERROR 410 Expired
    inf = SharedInformer(kube, CONFIGMAPS, namespace=NS, settings=FAST)
    rec = Recorder()
    rec.attach(inf)
    await running(inf)
    await eventually(lambda: inf.reflector.lists == 2 and cluster.faults.force_410 == 0)
    await kube.create(CONFIGMAPS, cm("b", {"v": "1"}), namespace=NS)
    await eventually(lambda: rec.of("b") == [("add", "1")])
    assert rec.of("a") == [("add", "1")]  # the relist found it unchanged: no second event
    assert inf.reflector.lists == 2


async def test_relist_after_dropped_stream_delivers_missed_changes_once(kube, cluster, running):
    await kube.create(CONFIGMAPS, cm("stays", {"v": "1"}), namespace=NS)
    await kube.create(CONFIGMAPS, cm("goes", {"v": "1"}), namespace=NS)
    cluster.faults.configure({"watch_drop_after": 0.3})  # the first watch is cut abruptly
    inf = SharedInformer(kube, CONFIGMAPS, namespace=NS, settings=FAST)
    rec = Recorder()
    rec.attach(inf)
    await running(inf)
    # After the cut, keep the reflector from reconnecting while the state changes.
    cluster.faults.configure({"watch_drop_after": None, "errors": [
        {"rate": 1, "verb": "list", "resource": "configmaps", "code": 503},
        {"rate": 1, "verb": "watch", "resource": "configmaps", "code": 503}]})
    await eventually(lambda: sample(kube.metrics.registry, "sedna_gm_api_requests_total", verb="list", code="503") >= 1)
    await kube.delete(CONFIGMAPS, "goes", namespace=NS)
    await kube.patch(CONFIGMAPS, "stays", {"data": {"v": "2"}}, namespace=NS)
    await kube.create(CONFIGMAPS, cm("new", {"v": "1"}), namespace=NS)
    cluster.faults.configure({"reset": True})

    await eventually(lambda: rec.of("new") == [("add", "1")])
    assert rec.of("goes") == [("add", "1"), ("delete", "1")]  # once, with its last known state
    assert rec.of("stays") == [("add", "1"), ("update", "2")]
    assert sorted(k for k in inf.store.keys() if k != f"{NS}/{ROOT_CA}") == [f"{NS}/new", f"{NS}/stays"]
    assert inf.reflector.lists >= 2


async def test_resync_redelivers_updates(kube, running):
    await kube.create(CONFIGMAPS, cm("r", {"v": "1"}), namespace=NS)
    inf = SharedInformer(kube, CONFIGMAPS, namespace=NS, settings=FAST, resync_period=0.05)
    rec = Recorder()
    rec.attach(inf)
    await running(inf)
    await eventually(lambda: rec.of("r").count(("update", "1")) >= 2)
    assert rec.of("r")[0] == ("add", "1")


@pytest.mark.expect_log_errors(r"event handler failed")
async def test_late_handler_gets_adds_and_bad_handler_is_contained(kube, running):
    await kube.create(CONFIGMAPS, cm("late", {"v": "1"}), namespace=NS)
    inf = SharedInformer(kube, CONFIGMAPS, namespace=NS, settings=FAST)

    def broken(obj):
        raise RuntimeError("handler bug")

    inf.add_event_handler(on_add=broken)
    await running(inf)
    rec = Recorder()
    rec.attach(inf)
    assert rec.of("late") == [("add", "1")]
    await kube.create(CONFIGMAPS, cm("after", {"v": "1"}), namespace=NS)
    await eventually(lambda: rec.of("after") == [("add", "1")])


async def test_label_selector_transitions_become_add_and_delete(kube, running):
    inf = SharedInformer(kube, CONFIGMAPS, namespace=NS, label_selector="sel=yes", settings=FAST)
    rec = Recorder()
    rec.attach(inf)
    await running(inf)
    await kube.create(CONFIGMAPS, cm("s", {"v": "1"}, labels={"sel": "no"}), namespace=NS)
    await kube.patch(CONFIGMAPS, "s", {"metadata": {"labels": {"sel": "yes"}}}, namespace=NS)
    await eventually(lambda: rec.of("s") == [("add", "1")])
    await kube.patch(CONFIGMAPS, "s", {"metadata": {"labels": {"sel": "no"}}}, namespace=NS)
    await eventually(lambda: rec.of("s") == [("add", "1"), ("delete", "1")])


async def test_factory_shares_informers_and_serves_cache(kube):
    factory = InformerFactory(kube, namespace=NS, resync_period=None, settings=FAST)
    pods_a = factory.informer(PODS)
    assert factory.informer(PODS) is pods_a
    cms = factory.informer(CONFIGMAPS)
    await kube.create(CONFIGMAPS, cm("cached", {"v": "1"}), namespace=NS)
    factory.start()
    try:
        async with asyncio.timeout(5):
            await factory.wait_synced()
        assert factory.has_synced()
        await eventually(lambda: factory.get_cached(CONFIGMAPS, NS, "cached") is not None)
        assert factory.get_cached(CONFIGMAPS, NS, "cached") is cms.store.get(f"{NS}/cached")
        late = factory.informer(CONFIGMAPS, label_selector="a=b")  # started on creation
        async with asyncio.timeout(5):
            await late.wait_synced()
    finally:
        await factory.stop()
    assert sample(kube.metrics.registry, "sedna_gm_informer_lists_total", resource=str(CONFIGMAPS)) == 2


@pytest.mark.expect_log_errors(r"task ended, failing the process")
async def test_an_informer_that_dies_after_sync_fails_its_cache_and_tells_the_owner(kube):
    fatal: list[tuple[str, str]] = []
    factory = InformerFactory(kube, namespace=NS, resync_period=None, settings=FAST,
                              on_fatal=lambda name, why: fatal.append((name, why)))
    cms = factory.informer(CONFIGMAPS)
    factory.start()
    try:
        async with asyncio.timeout(5):
            await factory.wait_synced()
        factory.supervised(cms).current.cancel()  # killed from outside, after sync
        await eventually(lambda: fatal)
        assert fatal == [(f"informer {CONFIGMAPS}", "cancelled")]
        assert not cms.has_synced() and not factory.has_synced()
        assert factory.unsynced() == [str(CONFIGMAPS)]
        with pytest.raises(InformerFailed, match="cancelled"):
            await factory.wait_synced()  # nobody may wait on, or reconcile from, a dead cache
    finally:
        await factory.stop()


async def test_cache_sync_timeout_names_the_caches_that_did_not_sync(kube):
    missing = GVR("sedna.io", "v1alpha1", "datasets")  # no CRD in this cluster: lists get 404
    factory = InformerFactory(kube, namespace=NS, resync_period=None, settings=FAST)
    factory.informer(CONFIGMAPS)
    factory.informer(missing)
    factory.start()
    try:
        with pytest.raises(CacheSyncTimeout) as exc:
            await factory.wait_synced(within=0.5)
        assert exc.value.unsynced == [str(missing)]
        assert str(exc.value) == f"caches not synced within 0.5s: {missing}"
    finally:
        await factory.stop()


async def test_transform_shapes_what_is_cached_on_list_and_watch(kube, running):
    await kube.create(CONFIGMAPS, cm("listed", {"v": "1", "bulk": "x" * 1000}), namespace=NS)

    def slim(obj: dict) -> dict:
        return {**obj, "data": {k: v for k, v in (obj.get("data") or {}).items() if k != "bulk"}}

    inf = await running(SharedInformer(kube, CONFIGMAPS, namespace=NS, settings=FAST, transform=slim))
    rec = Recorder()
    rec.attach(inf)
    await kube.create(CONFIGMAPS, cm("watched", {"v": "2", "bulk": "y"}), namespace=NS)
    await eventually(lambda: inf.store.get(f"{NS}/watched") is not None)
    assert inf.store.get(f"{NS}/listed")["data"] == {"v": "1"}
    assert inf.store.get(f"{NS}/watched")["data"] == {"v": "2"}
    assert rec.of("watched") == [("add", "2")]


async def test_shared_informer_index_asked_twice_is_made_once(kube):
    factory = InformerFactory(kube, namespace=NS, resync_period=None, settings=FAST)

    def by_v(obj: dict) -> list[str]:
        return [(obj.get("data") or {}).get("v", "")]

    inf = factory.informer(CONFIGMAPS)
    inf.ensure_indexer("by-v", by_v)
    inf.ensure_indexer("by-v", by_v)  # a second controller asking for the same index
    with pytest.raises(ValueError):
        inf.ensure_indexer("by-v", lambda o: [])
    with pytest.raises(ValueError):
        factory.informer(CONFIGMAPS, transform=lambda o: o)  # made without one
