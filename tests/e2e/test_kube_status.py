"""StatusWriter against the dev cluster: merges with concurrent writers, retries 409s with a
fresh read, skips no-op writes, and reports a vanished object."""

from __future__ import annotations

import asyncio

import pytest

from gm.kube.apierrors import Conflict, NotFound
from gm.kube.informer import InformerFactory
from gm.kube.statuswriter import StatusWriter
from shared.metrics import sample
from tests.conftest import eventually
from tests.e2e.test_kube_client import NS, ensure_widget_crd, widget


@pytest.fixture
async def widgets(kube):
    gvr = await ensure_widget_crd(kube)
    await kube.create(gvr, widget("w"), namespace=NS)
    return gvr


async def put_status(kube, gvr, status: dict) -> dict:
    """Another writer (e.g. the upstream dispatcher) replacing status directly."""
    obj = await kube.get(gvr, "w", namespace=NS)
    return await kube.replace(gvr, "w", dict(obj, status=status), namespace=NS, subresource="status")


async def test_writes_status_through_subresource_only(kube, widgets):
    writer = StatusWriter(kube)
    result = await writer.update(widgets, NS, "w", lambda s: s.update(phase="Running"))
    assert result.written and result.attempts == 1
    assert result.object["status"] == {"phase": "Running"}
    obj = await kube.get(widgets, "w", namespace=NS)
    assert obj["status"] == {"phase": "Running"} and obj["spec"] == {"size": 1}


async def test_stale_cache_conflict_retries_and_keeps_other_writers_fields(kube, widgets):
    stale = await kube.get(widgets, "w", namespace=NS)
    await put_status(kube, widgets, {"metrics": {"accuracy": 0.9}})  # concurrent writer

    writer = StatusWriter(kube, cache=lambda gvr, ns, name: stale)
    result = await writer.update(widgets, NS, "w", lambda s: s.update(phase="Completed"))
    assert result.written and result.attempts == 2  # first PUT used the stale RV -> 409
    obj = await kube.get(widgets, "w", namespace=NS)
    assert obj["status"] == {"metrics": {"accuracy": 0.9}, "phase": "Completed"}


async def test_concurrent_writers_lose_nothing(kube, widgets):
    writer = StatusWriter(kube, max_attempts=20)

    def bump(field: str):
        def mutate(status: dict) -> None:
            status[field] = status.get(field, 0) + 1
        return mutate

    await asyncio.gather(*(writer.update(widgets, NS, "w", bump(f"f{i % 3}")) for i in range(9)))
    obj = await kube.get(widgets, "w", namespace=NS)
    assert obj["status"] == {"f0": 3, "f1": 3, "f2": 3}


async def test_no_change_writes_nothing(kube, widgets):
    await put_status(kube, widgets, {"phase": "Running"})
    before = sample(kube.metrics.registry, "sedna_gm_api_requests_total", verb="update", code="200")
    writer = StatusWriter(kube)
    result = await writer.update(widgets, NS, "w", lambda s: s.update(phase="Running"))
    assert not result.written and result.attempts == 0
    assert sample(kube.metrics.registry, "sedna_gm_api_requests_total", verb="update", code="200") == before


async def test_mutation_may_return_a_new_status(kube, widgets):
    await put_status(kube, widgets, {"old": True})
    result = await StatusWriter(kube).update(widgets, NS, "w", lambda s: {"phase": "Failed"})
    assert result.object["status"] == {"phase": "Failed"}


async def test_gives_up_after_bounded_conflicts(kube, widgets):
    calls = 0

    async def interfere() -> None:
        await put_status(kube, widgets, {"other": calls})

    def mutate(status: dict) -> None:
        nonlocal calls
        calls += 1
        status["mine"] = calls

    # every attempt reads, then another writer gets in first: use a cache that is always stale
    stale_reads: list[dict] = []

    async def stale_cache_then_interfere():
        stale_reads.append(await kube.get(widgets, "w", namespace=NS))
        await interfere()

    await stale_cache_then_interfere()
    writer = StatusWriter(kube, cache=lambda g, n, m: stale_reads[-1], max_attempts=1)
    with pytest.raises(Conflict):
        await writer.update(widgets, NS, "w", mutate)
    assert calls == 1


async def test_missing_object_raises_not_found(kube, widgets):
    with pytest.raises(NotFound):
        await StatusWriter(kube).update(widgets, NS, "absent", lambda s: s.update(x=1))


async def test_bad_mutation_result_is_a_type_error(kube, widgets):
    with pytest.raises(TypeError, match="not a dict"):
        await StatusWriter(kube).update(widgets, NS, "w", lambda s: ["not", "a", "dict"])


async def test_a_remembered_write_is_forgotten_once_the_cache_has_it(kube, widgets):
    """A status written once is not kept whole beside the cache: the informer's update drops it."""
    factory = InformerFactory(kube, namespace=NS)
    informer = factory.informer(widgets)
    writer = StatusWriter(kube, cache=factory.get_cached)
    writer.follow(informer)
    factory.start()
    try:
        await factory.wait_synced(within=10)
        await writer.update(widgets, NS, "w", lambda s: s.update(phase="Running"))
        assert len(writer) <= 1
        await eventually(lambda: len(writer) == 0, within=10, message="the cache caught up")
    finally:
        await factory.stop()
