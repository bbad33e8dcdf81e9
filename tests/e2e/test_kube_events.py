"""EventRecorder against the dev cluster: naming, dedup into count+1, re-create after
deletion, non-blocking drops when the queue is full."""

from __future__ import annotations

import pytest

from gm.kube.events import EventRecorder
from gm.kube.resources import CONFIGMAPS, EVENTS
from shared.metrics import sample
from tests.e2e.test_kube_client import NS, cm


@pytest.fixture
async def target(kube):
    return await kube.create(CONFIGMAPS, cm("subject"), namespace=NS)


@pytest.fixture
async def recorder(kube):
    rec = EventRecorder(kube, component="sedna-gm", host="gm-0", retry_delay=0.01)
    await rec.start()
    yield rec
    await rec.stop(grace=2)


async def events_about(kube, name: str) -> list[dict]:
    items, _ = await kube.list_all(EVENTS, namespace=NS,
                                   field_selector=f"involvedObject.name={name}")
    return items


async def test_first_event_is_created_with_reference_and_name(kube, recorder, target):
    assert recorder.normal(target, "Created", "made the thing")
    await recorder.flush()
    [ev] = await events_about(kube, "subject")
    assert ev["metadata"]["name"].startswith("subject.")
    int(ev["metadata"]["name"].split(".", 1)[1], 16)  # hex of the time in ns
    assert ev["involvedObject"] == {
        "apiVersion": "v1", "kind": "ConfigMap", "name": "subject", "namespace": NS,
        "uid": target["metadata"]["uid"], "resourceVersion": target["metadata"]["resourceVersion"]}
    assert (ev["reason"], ev["message"], ev["type"], ev["count"]) == ("Created", "made the thing", "Normal", 1)
    assert ev["source"] == {"component": "sedna-gm", "host": "gm-0"}
    assert ev["firstTimestamp"] == ev["lastTimestamp"]


async def test_repeats_fold_into_count_and_different_ones_do_not(kube, recorder, target):
    for _ in range(3):
        recorder.warning(target, "Failed", "boom")
    recorder.warning(target, "Failed", "other message")
    recorder.normal(target, "Failed", "boom")  # another type is another event
    await recorder.flush()
    evs = await events_about(kube, "subject")
    counts = sorted((e["type"], e["message"], e["count"]) for e in evs)
    assert counts == [("Normal", "boom", 1), ("Warning", "boom", 3), ("Warning", "other message", 1)]
    assert sample(kube.metrics.registry, "sedna_gm_events_total", outcome="patched") == 2
    assert sample(kube.metrics.registry, "sedna_gm_events_total", outcome="created") == 3


async def test_deleted_event_is_recreated(kube, recorder, target):
    recorder.warning(target, "Failed", "boom")
    await recorder.flush()
    [ev] = await events_about(kube, "subject")
    await kube.delete(EVENTS, ev["metadata"]["name"], namespace=NS)
    recorder.warning(target, "Failed", "boom")
    await recorder.flush()
    [again] = await events_about(kube, "subject")
    assert again["metadata"]["name"] != ev["metadata"]["name"]
    assert again["count"] == 1


async def test_full_queue_drops_without_blocking(kube, target):
    rec = EventRecorder(kube, component="sedna-gm", max_queue=2)  # not started: nothing drains
    assert rec.normal(target, "A", "1") and rec.normal(target, "A", "2")
    assert rec.normal(target, "A", "3") is False
    assert sample(kube.metrics.registry, "sedna_gm_events_total", outcome="dropped") == 1
    await rec.start()
    await rec.flush()
    await rec.stop()
    assert len(await events_about(kube, "subject")) == 2


@pytest.mark.parametrize("obj,type_,reason", [
    pytest.param({"metadata": {}}, "Normal", "R", id="no-name"),
    pytest.param({"metadata": {"name": "x"}}, "Info", "R", id="bad-type"),
    pytest.param({"metadata": {"name": "x"}}, "Normal", "", id="no-reason"),
])
async def test_bad_input_is_rejected_at_the_call(kube, obj, type_, reason):
    rec = EventRecorder(kube, component="c")
    with pytest.raises(ValueError):
        rec.event(obj, type_, reason, "m")
