"""The GM's status page without a cluster: the history's bounds, what a job's status reads as,
the page model, the HTML (escaping, length bounds, nothing fetched from elsewhere) and the
wiring to informers, recorders and the hub through fakes."""

from __future__ import annotations

import json
import math
from html.parser import HTMLParser
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gm.edge.session import SessionView
from gm.kube.events import EventRecorder
from gm.kube.metrics import KubeMetrics
from gm.ui import StatusPage
from gm.ui import model as ui_model
from gm.ui.history import History
from gm.ui.jobs import key_values, summarize
from gm.ui.model import NodeRow, build_page
from gm.ui.render import render
from gm.ui.warnings import WarningLog

NOW = 1_767_000_000.0


def job(kind: str, name: str, status: dict[str, Any], namespace: str = "default") -> tuple[str, dict]:
    return kind, {"kind": kind, "metadata": {"namespace": namespace, "name": name}, "status": status}


def metrics(**values: Any) -> list[dict[str, str]]:
    return [{"key": k, "value": str(v)} for k, v in values.items()]


# -- history ---------------------------------------------------------------------------


def test_history_keeps_the_last_points_of_each_series():
    h = History(max_points=5, min_interval=0)
    for i in range(12):
        h.record(("JI", "ns", "a"), {"n": i}, now=NOW + i)
    [series] = h.series(("JI", "ns", "a"))
    assert (series.name, series.values, series.times) == ("n", (7, 8, 9, 10, 11), tuple(NOW + i for i in range(7, 12)))


def test_history_bounds_series_per_job_and_jobs_least_recently_updated_first():
    h = History(max_series=2, max_jobs=3, min_interval=0)
    h.record(("K", "ns", "a"), {"x": 1, "y": 2, "z": 3}, now=NOW)
    assert [s.name for s in h.series(("K", "ns", "a"))] == ["x", "y"]
    for name in "bc":
        h.record(("K", "ns", name), {"x": 1}, now=NOW)
    h.record(("K", "ns", "a"), {"x": 5}, now=NOW + 1)  # a is now the most recent
    h.record(("K", "ns", "d"), {"x": 1}, now=NOW + 2)
    assert len(h) == 3
    assert h.series(("K", "ns", "b")) == []
    assert [s.values for s in h.series(("K", "ns", "a"))] == [(1, 5), (2, 2)]


def test_history_adds_no_point_for_an_unchanged_sample_and_folds_a_burst():
    h = History(min_interval=1.0)
    key = ("FL", "ns", "a")
    h.record(key, {"round": 1}, now=NOW)
    h.record(key, {"round": 1}, now=NOW + 30)  # a resync: nothing new
    h.record(key, {"round": 2}, now=NOW + 31)
    h.record(key, {"round": 3}, now=NOW + 31.5)  # within min_interval: replaces round 2
    h.record(key, {"round": 4}, now=NOW + 31.9)  # and again: the point keeps its time
    h.record(key, {"round": 5}, now=NOW + 32.0)
    [series] = h.series(key)
    assert (series.times, series.values) == ((NOW, NOW + 31, NOW + 32), (1, 4, 5))


def test_history_pads_a_series_that_appears_later_and_holds_a_missing_one():
    h = History(min_interval=0)
    key = ("JI", "ns", "a")
    h.record(key, {"a": 1}, now=NOW)
    h.record(key, {"a": 2, "b": 7}, now=NOW + 1)
    h.record(key, {"b": 8}, now=NOW + 2)
    a, b = h.series(key)
    assert a.values == (1, 2, 2)
    assert math.isnan(b.values[0]) and b.values[1:] == (7, 8)


def test_history_forgets_a_deleted_job_and_refuses_a_useless_size():
    h = History()
    h.record(("K", "ns", "a"), {"x": 1}, now=NOW)
    h.forget(("K", "ns", "a"))
    h.forget(("K", "ns", "never"))
    assert (len(h), h.series(("K", "ns", "a"))) == (0, [])
    with pytest.raises(ValueError):
        History(max_points=1)


# -- a job's status ----------------------------------------------------------------------

FL_TRAINING = {"type": "Training", "status": "True", "reason": "DoTraining",
               "message": "Round 4 reaches at 2026-12-02T07:54:50Z", "lastTransitionTime": "2026-12-02T07:54:50Z"}
STATUSES = [
    pytest.param(*job("JointInferenceService", "ji", {
        "active": 2, "failed": 0, "metrics": metrics(hardExampleNumber=32, inferenceNumber=284, uploadCloudRatio=0.11),
        "conditions": [{"type": "Running", "status": "True", "reason": "WorkersAvailable"}]}),
        ("Running", "", None, None, (("active", 2), ("failed", 0))),
        {"inferenceNumber": 284, "hardExampleNumber": 32}, id="ji"),
    pytest.param(*job("FederatedLearningJob", "fl", {
        "active": 3, "failed": 0, "succeeded": 0, "phase": "Running", "conditions": [FL_TRAINING]}),
        ("Running", "", 4, None, (("active", 3), ("succeeded", 0), ("failed", 0))), {"round": 4}, id="fl"),
    pytest.param(*job("FederatedLearningJob", "fl-done", {
        "phase": "Succeeded", "succeeded": 3, "conditions": [
            {**FL_TRAINING, "status": "False", "reason": "Completed", "message": ""},
            {"type": "Complete", "status": "True", "reason": "Completed"}]}),
        ("Succeeded", "", None, None, (("succeeded", 3),)), {}, id="fl-ended"),
    pytest.param(*job("IncrementalLearningJob", "il", {
        "cycle": 1, "deploys": 0, "conditions": [
            {"type": "Completed", "status": "False", "stage": "Eval"},
            {"type": "Running", "status": "True", "stage": "Deploy", "reason": "WorkerRunning"}]}),
        ("Running", "Deploy", None, 1, ()), {"cycle": 1, "stage": 3}, id="il"),
    pytest.param(*job("IncrementalLearningJob", "il-evaluated", {
        "cycle": 2, "deploys": 1, "conditions": [
            {"type": "Completed", "status": "False", "stage": "Eval", "data": json.dumps({"output": {
                "models": [{"url": "/new", "metrics": {"precision": [0.8, 0.9], "recall": 0.7, "f1": 0.75}},
                           {"url": "/old", "metrics": {"precision": [0.6, 0.7]}}]}})},
            {"type": "Running", "status": "True", "stage": "Deploy", "reason": "WorkerRunning"}]}),
        ("Running", "Deploy", None, 2, ()), {"cycle": 2, "f1": 0.75, "precision": pytest.approx(0.85)},
        id="il-evaluated"),
    pytest.param(*job("LifelongLearningJob", "ll", {
        "cycle": 2, "conditions": [{"type": "Waiting", "status": "True", "stage": "Train"}]}),
        ("Waiting", "Train", None, 2, ()), {"stage": 1, "cycle": 2}, id="ll"),
    pytest.param(*job("ReidJob", "reid", {
        "phase": "Succeeded", "active": 0, "failed": 0, "succeeded": 1,
        "metrics": metrics(queryNumber=173, matchNumber=19)}),
        ("Succeeded", "", None, None, (("active", 0), ("succeeded", 1), ("failed", 0))),
        {"matchNumber": 19, "queryNumber": 173}, id="reid"),
    pytest.param(*job("ObjectSearchService", "search", {"active": 4, "failed": 0}),
        ("", "", None, None, (("active", 4), ("failed", 0))), {"active": 4}, id="object-search"),
    pytest.param(*job("VideoAnalyticsJob", "va", {
        "metrics": "not a list", "conditions": "nor this", "active": True, "cycle": "x"}),
        ("", "", None, None, ()), {}, id="hostile-shapes"),
]


@pytest.mark.parametrize(("kind", "obj", "shown", "charted"), STATUSES)
def test_what_a_job_status_reads_as(kind, obj, shown, charted):
    s = summarize(kind, obj)
    assert (s.phase, s.stage, s.round, s.cycle, s.workers) == shown
    assert key_values(kind, obj) == charted


def test_a_job_shows_a_bounded_number_of_metrics_and_charts_no_unparsable_value():
    kind, obj = job("FeatureExtractionService", "fe", {"metrics": metrics(
        **{f"k{i:02}": i for i in range(40)}, huge="9" * 100, nan="nan", word="many")})
    assert len(summarize(kind, obj).metrics) == 12
    kind, obj = job("FeatureExtractionService", "fe", {"metrics": metrics(huge="9" * 100, nan="nan", inf="inf",
                                                                          word="x", frameNumber=5)})
    assert key_values(kind, obj) == {"frameNumber": 5}


# -- the page ------------------------------------------------------------------------------

HOSTILE = '"><script>alert(1)</script><img src=x onerror=alert(2)>'


def page_with(jobs, *, nodes=(), warnings=None, history=None):
    return build_page(now=NOW, nodes=nodes, jobs=jobs, history=history if history is not None else History(),
                      warnings=(warnings if warnings is not None else WarningLog()).recent())


def test_the_page_model_orders_and_counts_jobs_and_lists_connected_nodes_first(monkeypatch):
    monkeypatch.setattr(ui_model, "MAX_JOB_ROWS", 2)
    jobs = [job("ReidJob", "b", {}), job("JointInferenceService", "z", {}), job("JointInferenceService", "a", {})]
    nodes = [NodeRow("n2", False, "", None, NOW - 9, None, None), NodeRow("n3", True, "native", NOW, NOW, 0, 4),
             NodeRow("n1", True, "upstream", NOW, NOW, 1, 0)]
    page = page_with(jobs, nodes=nodes)
    assert [(v.summary.kind, v.summary.name) for v in page.jobs] == [("JointInferenceService", "a"),
                                                                      ("JointInferenceService", "z")]
    assert (page.jobs_total, page.by_kind) == (3, {"JointInferenceService": 2, "ReidJob": 1})
    assert [n.node for n in page.nodes] == ["n1", "n3", "n2"]
    assert "1 more jobs not listed" in render(page)


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text, of a document."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def hostile_page() -> str:
    history = History()
    kind, obj = job("JointInferenceService", "x" + HOSTILE, {
        "phase": HOSTILE, "metrics": [{"key": HOSTILE, "value": HOSTILE}, {"key": "inferenceNumber", "value": "3"}],
        "conditions": [{"type": "Failed", "status": "True", "reason": HOSTILE, "message": HOSTILE * 100}]},
        namespace=HOSTILE)
    history.record((kind, HOSTILE, "x" + HOSTILE), {HOSTILE: 1.0}, now=NOW - 5)
    warnings = WarningLog(clock=lambda: NOW)
    warnings.note({"kind": HOSTILE, "namespace": HOSTILE, "name": HOSTILE}, "Warning", HOSTILE, HOSTILE * 1000)
    nodes = [NodeRow(HOSTILE, True, HOSTILE, NOW, NOW, 0, 0)]
    return render(page_with([(kind, obj)], nodes=nodes, warnings=warnings, history=history))


def test_every_user_value_is_escaped_and_clipped():
    html = hostile_page()
    doc = Tags(html)
    assert "<script" not in html and "<img" not in html
    assert [t for t, _ in doc.tags if t in ("script", "img", "iframe", "link", "object", "embed")] == []
    assert not any(name.startswith("on") for _, attrs in doc.tags for name in attrs)
    text = "".join(doc.text)
    assert HOSTILE in text  # shown as text, whole where short
    assert text.count("alert(1)") < 30  # the 100- and 1000-fold message clipped
    assert len(html) < 40_000


def test_nothing_is_fetched_from_anywhere():
    html = hostile_page()
    doc = Tags(html)
    refs = [(tag, name, value) for tag, attrs in doc.tags for name, value in attrs.items()
            if name in ("src", "href", "action", "data", "poster", "srcset", "xlink:href")]
    assert refs == []
    assert "url(" not in html and "@import" not in html and "//" not in html.replace("<!DOCTYPE html>", "")
    meta = [a for t, a in doc.tags if t == "meta" and a.get("http-equiv") == "refresh"]
    assert meta == [{"http-equiv": "refresh", "content": "10"}]


def test_each_job_has_a_chart_drawn_from_its_history():
    history = History(min_interval=0)
    for i, (inferences, hard) in enumerate([(10, 1), (20, 3), (35, 4)]):
        history.record(("JointInferenceService", "default", "ji"),
                       {"inferenceNumber": inferences, "hardExampleNumber": hard}, now=NOW - 30 + i)
    html = render(page_with([job("JointInferenceService", "ji", {}), job("ReidJob", "reid", {})], history=history))
    doc = Tags(html)
    charts = [a for t, a in doc.tags if t == "svg"]
    assert [c["class"] for c in charts] == ["chart", "chart"]
    assert [a["class"] for t, a in doc.tags if t == "path"] == ["s0", "s1"]
    assert "inferenceNumber 35" in "".join(doc.text) and "no samples yet" in "".join(doc.text)


def test_the_warning_log_keeps_the_last_warnings_only():
    log = WarningLog(max_entries=3, clock=lambda: NOW)
    for i in range(5):
        log.note({"kind": "ReidJob", "namespace": "ns", "name": f"r{i}"}, "Warning", "Bad", "m" * 5000)
    log.note({"kind": "ReidJob", "namespace": "ns", "name": "ok"}, "Normal", "Fine", "")
    assert [w.name for w in log.recent()] == ["r4", "r3", "r2"]
    assert len(log.recent()[0].message) == 512


# -- the wiring ------------------------------------------------------------------------------


class FakeInformer:
    def __init__(self, objects: list[dict]):
        self.store = SimpleNamespace(list=lambda: list(self.objects.values()))
        self.objects = {o["metadata"]["name"]: o for o in objects}
        self.handlers: list[dict] = []

    def add_event_handler(self, **handlers):
        self.handlers.append(handlers)
        for obj in self.objects.values():
            handlers["on_add"](obj)

    def update(self, obj: dict) -> None:
        old = self.objects[obj["metadata"]["name"]]
        self.objects[obj["metadata"]["name"]] = obj
        for h in self.handlers:
            h["on_update"](old, obj)

    def delete(self, name: str) -> None:
        obj = self.objects.pop(name)
        for h in self.handlers:
            h["on_delete"](obj)


class FakeHub:
    def sessions(self):
        return [SessionView(node="edge-1", mode="native", since=NOW - 60, last_frame=NOW - 2, pending=3, acked_seq=9)]

    def departed(self):
        return {"edge-2": NOW - 120}


async def test_the_page_follows_informers_recorders_and_the_hub():
    clock = iter(NOW + i for i in range(100))
    page = StatusPage(history=History(min_interval=0), clock=lambda: next(clock))
    _, ji = job("JointInferenceService", "ji", {"metrics": metrics(inferenceNumber=1, hardExampleNumber=0)})
    informer = FakeInformer([ji])
    recorder = EventRecorder(SimpleNamespace(), component="test", metrics=KubeMetrics())
    page.watch(hub=FakeHub(), jobs={"JointInferenceService": informer}, recorders=[recorder])
    informer.update({**ji, "status": {"metrics": metrics(inferenceNumber=5, hardExampleNumber=1)}})
    informer.update(informer.objects["ji"])  # a resync: same object
    recorder.warning(ji, "ModelNotFound", "model m is missing")
    key = ("JointInferenceService", "default", "ji")
    assert [s.values for s in page.history.series(key)] == [(1, 5), (0, 1)]
    built = page.page()
    assert [(n.node, n.connected, n.pending, n.acked_seq) for n in built.nodes] == [
        ("edge-1", True, 3, 9), ("edge-2", False, None, None)]
    assert [(w.kind, w.name, w.reason) for w in built.warnings] == [("JointInferenceService", "ji", "ModelNotFound")]
    informer.delete("ji")
    assert page.history.series(key) == [] and page.page().jobs == []

    app = web.Application()
    app.router.add_get("/ui", page.handle)
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/ui")
        body = await resp.text()
    assert resp.status == 200 and resp.headers["Content-Type"] == "text/html; charset=utf-8"
    assert resp.headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert 'data-node="edge-1"' in body and "ModelNotFound" in body
