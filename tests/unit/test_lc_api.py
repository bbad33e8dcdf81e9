"""The worker report API against a real LocalController: upstream bodies, bad input, ops."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from lc.app import LocalController
from lc.openapi import DOCUMENT
from tests.scrape import value
from tests.unit.test_lc_support import running_lc, session

OK = b'{\n "Status": 200,\n "Message": "OK"\n}'
PY_HEADERS = {"Content-Type": "application/json", "Accept": "*/*"}  # what `requests` sends

# Bodies exactly as upstream's Python library sends them (upstream-lc.md section 2.6).
JI_STATS = {"name": "edgeworker-4kq7z", "namespace": "default", "ownerName": "sedna",
            "ownerKind": "jointinferenceservice", "kind": "inference", "results": [],
            "ownerInfo": {"startTime": "2025-03-01 10:00:00", "updateTime": "2025-03-01 10:00:30",
                          "inferenceNumber": 240, "hardExampleNumber": 31,
                          "uploadCloudRatio": 0.12916666666666668}}
FL_ROUND = {"name": "trainworker-ab12c", "namespace": "default",
            "ownerName": "surface-defect-detection", "ownerKind": "default", "kind": "train",
            "status": "running",
            "results": [{"format": "pb", "url": "/model/model.pb",
                         "metrics": {"loss": [0.41, 0.33], "accuracy": [0.86, 0.9]}},
                        {"format": "ckpt", "url": "/model",
                         "metrics": {"loss": [0.41, 0.33], "accuracy": [0.86, 0.9]}}],
            "ownerInfo": {"currentRound": 3, "sampleCount": 1200,
                          "startTime": "2025-03-01 10:00:00", "updateTime": "2025-03-01 10:02:10"}}
IL_TRAIN = {"name": "train-worker-x8k2q", "namespace": "default",
            "ownerName": "helmet-detection-demo", "ownerKind": "incrementallearningjob",
            "kind": "train", "status": "completed",
            "results": [{"format": "pb", "url": "/output/train/1/model.pb", "metrics": {"loss": 0.83}},
                        {"format": "ckpt", "url": "/output/train/1", "metrics": {"loss": 0.83}}]}
IL_EVAL = {"name": "eval-worker-p2m9d", "namespace": "default",
           "ownerName": "helmet-detection-demo", "ownerKind": "incrementallearningjob",
           "kind": "eval", "status": "completed",
           "results": [{"format": "pb", "url": "/output/train/1/model.pb",
                        "metrics": {"recall": [0.61, 0.72, 0.55, 0.58],
                                    "precision": [0.66, 0.7, 0.61, 0.64]}},
                       {"format": "pb", "url": "/models/deploy/model.pb",
                        "metrics": {"recall": [0.6, 0.7, 0.5, 0.57],
                                    "precision": [0.62, 0.69, 0.6, 0.6]}}]}
LL_TRAIN = {"name": "train-worker-ll001", "namespace": "default", "ownerName": "robot-ll",
            "ownerKind": "lifelonglearningjob", "kind": "train", "status": "completed",
            "results": [{"format": "pkl", "url": "/output/train/1/index.pkl", "metrics": None}]}
HOT_DEPLOY = {"name": "inferworker-q1w2e", "namespace": "default",
              "ownerName": "helmet-detection-demo", "ownerKind": "incrementallearningjob",
              "kind": "deploy", "status": "completed"}


@pytest.fixture
async def lc(tmp_path: Path) -> AsyncIterator[tuple[LocalController, str]]:
    async with running_lc(tmp_path) as running:
        yield running


async def _post(base: str, worker: str, data: bytes | str, headers: dict[str, str] | None = None,
                path: str | None = None) -> tuple[int, str, bytes, Any]:
    skip = ["Content-Type"] if headers == {} else []  # {} means: send no Content-Type at all
    async with session() as http, http.post(
            base + (path or f"/sedna/workers/{worker}/info"), data=data,
            headers=PY_HEADERS if headers is None else headers, skip_auto_headers=skip) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.read(), resp.headers


def _message(body: bytes) -> tuple[int, str]:
    doc = json.loads(body)
    return doc["Status"], doc["Message"]


@pytest.mark.parametrize(("body", "kind", "name", "content"), [
    pytest.param(JI_STATS, "JointInferenceService", "sedna",
                 {"phase": "inference", "status": "",
                  "output": {"models": None, "ownerInfo": JI_STATS["ownerInfo"]}}, id="ji-stats"),
    pytest.param(IL_TRAIN, "IncrementalLearningJob", "helmet-detection-demo",
                 {"phase": "train", "status": "completed",
                  "output": {"models": IL_TRAIN["results"], "ownerInfo": None}}, id="il-train"),
    pytest.param(IL_EVAL, "IncrementalLearningJob", "helmet-detection-demo",
                 {"phase": "eval", "status": "completed",
                  "output": {"models": IL_EVAL["results"], "ownerInfo": None}}, id="il-eval"),
    pytest.param(LL_TRAIN, "LifelongLearningJob", "robot-ll",
                 {"phase": "train", "status": "completed",
                  "output": {"models": LL_TRAIN["results"], "ownerInfo": None}}, id="ll-train"),
    pytest.param(HOT_DEPLOY, "IncrementalLearningJob", "helmet-detection-demo",
                 {"phase": "deploy", "status": "completed",
                  "output": {"models": None, "ownerInfo": None}}, id="hot-update-deploy"),
])
async def test_upstream_library_bodies_are_forwarded(lc, body, kind, name, content) -> None:
    controller, base = lc
    status, ctype, raw, _ = await _post(base, body["name"], json.dumps(body))
    assert (status, ctype, raw) == (200, "application/json", OK)
    entries = await controller.store.pending()
    assert [(e.kind, e.namespace, e.name, e.body) for e in entries] == [
        (kind, "default", name, content)]


async def test_fl_default_owner_kind_waits_for_its_job(lc) -> None:
    controller, base = lc
    status, _, raw, _ = await _post(base, FL_ROUND["name"], json.dumps(FL_ROUND))
    assert (status, raw) == (200, OK)
    assert await controller.store.pending() == []  # no FL job known on this node yet
    job = {"kind": "FederatedLearningJob",
           "metadata": {"name": "surface-defect-detection", "namespace": "default"}, "spec": {}}
    await controller.apply_upsert("federatedlearningjob", "default", "surface-defect-detection", job)
    [entry] = await controller.store.pending()
    assert (entry.kind, entry.name, entry.body) == (
        "FederatedLearningJob", "surface-defect-detection",
        {"phase": "train", "status": "running",
         "output": {"models": FL_ROUND["results"], "ownerInfo": FL_ROUND["ownerInfo"]}})
    await controller.apply_upsert("FederatedLearningJob", "default", "surface-defect-detection", job)
    assert len(await controller.store.pending()) == 1  # routed once only


@pytest.mark.parametrize(("data", "headers", "path", "expected"), [
    pytest.param({"name": "other", "namespace": "ns", "ownerName": "j"}, None, None,
                 (400, "worker name(name=w1) in the api is different from that(name=other) "
                       "in the message body"), id="name-mismatch"),
    pytest.param("null", None, None,
                 (400, "worker name(name=w1) in the api is different from that(name=) "
                       "in the message body"), id="null-body"),
    pytest.param("", None, None, (400, "body is empty; expected a JSON object"), id="empty"),
    pytest.param('{"name": "w1",', None, None, (400, "body is not valid JSON: Expecting property "
                 "name enclosed in double quotes: line 1 column 15 (char 14)"), id="truncated"),
    pytest.param('{"name": NaN}', None, None, (400, "body is not valid JSON: NaN is not valid JSON"),
                 id="nan"),
    pytest.param(b'{"name": "\xff"}', None, None, (400, "body is not valid UTF-8 (byte 10)"),
                 id="bad-utf8"),
    pytest.param("[" * 100_000, None, None, (400, "body is not valid JSON: maximum recursion depth "
                 "exceeded while decoding a JSON array from a unicode string"), id="deep-nesting"),
    pytest.param("[1, 2]", None, None, (400, "body must be a JSON object, got array"), id="array"),
    pytest.param({"name": 123}, None, None,
                 (400, 'field "name" must be a string, got number'), id="name-number"),
    pytest.param({"name": "w1", "results": {}}, None, None,
                 (400, 'field "results" must be an array of objects, got object'), id="results-obj"),
    pytest.param({"name": "w1", "results": [{}, 1]}, None, None,
                 (400, 'field "results[1]" must be an object, got number'), id="results-item"),
    pytest.param({"name": "w1", "ownerInfo": [], "status": True}, None, None,
                 (400, 'field "ownerInfo" must be an object, got array; '
                       'field "status" must be a string, got boolean'), id="two-type-errors"),
    pytest.param({"name": "w1", "ownerName": "j"}, None, None,
                 (400, "worker(name=w1) report lacks namespace"), id="no-namespace"),
    pytest.param({"name": "w1"}, None, None,
                 (400, "worker(name=w1) report lacks namespace and ownerName"), id="no-owner"),
    pytest.param({"name": "w1"}, {"Content-Type": "text/plain"}, None,
                 (415, "Content-Type text/plain is not supported; send application/json"),
                 id="text-plain"),
    pytest.param({"name": "w1"}, {"Content-Type": "application/octet-stream"}, None,
                 (415, "Content-Type application/octet-stream is not supported; send "
                       "application/json"), id="octet-stream"),
    pytest.param({"name": "w1"}, {"Content-Type": "application/xml"}, None,
                 (415, "Content-Type application/xml is not supported; send application/json"),
                 id="xml"),
    pytest.param({"name": "w1"}, {"Content-Type": "application/json", "Accept": "text/html"}, None,
                 (406, "Accept text/html excludes application/json, the only representation"),
                 id="accept-html"),
    pytest.param("{}", None, "/sedna/nope", (404, "no route for /sedna/nope"), id="404-sedna"),
    pytest.param("{}", None, "/elsewhere", (404, "no route for /elsewhere"), id="404-outside"),
])
async def test_bad_reports_get_json_errors(lc, data, headers, path, expected) -> None:
    controller, base = lc
    raw_data = data if isinstance(data, (str, bytes)) else json.dumps(data)
    status, ctype, raw, _ = await _post(base, "w1", raw_data, headers, path)
    assert (status, ctype) == (expected[0], "application/json")
    assert _message(raw) == expected
    assert await controller.store.pending() == []
    assert await controller.store.workers() == []


async def test_get_on_report_route_is_405_with_allow(lc) -> None:
    _, base = lc
    async with session() as http, http.get(base + "/sedna/workers/w1/info") as resp:
        assert resp.status == 405
        assert resp.headers["Allow"] == "POST"
        assert _message(await resp.read()) == (
            405, "method GET not allowed on /sedna/workers/w1/info; use POST")


@pytest.mark.parametrize("size", [pytest.param(1 << 20, id="exactly-1MiB"),
                                  pytest.param((1 << 20) + 1, id="one-byte-over")])
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_body_size_limit(lc, size: int, chunked: bool) -> None:
    _, base = lc
    prefix = b'{"name": "w1", "namespace": "ns", "ownerName": "j", "pad": "'
    body = prefix + b"x" * (size - len(prefix) - 2) + b'"}'
    assert len(body) == size

    async def stream() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 65536):
            yield body[i:i + 65536]

    status, _, raw, _ = await _post(base, "w1", stream() if chunked else body)
    if size <= 1 << 20:
        assert (status, raw) == (200, OK)
    else:
        assert _message(raw) == (413, "body larger than 1048576 bytes")


@pytest.mark.parametrize(("data", "headers", "path"), [
    pytest.param('{"NAME": "w1", "NameSpace": "ns", "OWNERNAME": "j", "ownerkind": '
                 '"jointinferenceservice"}', None, None, id="case-insensitive-keys"),
    pytest.param('{"name": "w1", "namespace": "ns", "ownerName": "j", "ownerKind": '
                 '"jointinferenceservice"} trailing garbage', None, None, id="trailing-bytes"),
    pytest.param('{"name": "x", "Name": "w1", "namespace": "ns", "ownerName": "j", "ownerKind": '
                 '"jointinferenceservice", "extra": [1]}', None, None, id="dup-last-wins-unknown"),
    pytest.param('{"name": "w1", "namespace": "ns", "ownerName": "j", "ownerKind": '
                 '"jointinferenceservice"}', {"Content-Type": "application/json; charset=utf-8"},
                 None, id="charset"),
    pytest.param('{"name": "w1", "namespace": "ns", "ownerName": "j", "ownerKind": '
                 '"jointinferenceservice"}', {}, None, id="no-content-type"),
    pytest.param('{"name": "w1", "namespace": "ns", "ownerName": "j", "ownerKind": '
                 '"jointinferenceservice"}', None, "/sedna/workers/w1/info/", id="trailing-slash"),
])
async def test_upstream_leniencies(lc, data, headers, path) -> None:
    controller, base = lc
    status, _, raw, _ = await _post(base, "w1", data, headers, path)
    assert (status, raw) == (200, OK)
    [entry] = await controller.store.pending()
    assert (entry.kind, entry.namespace, entry.name) == ("JointInferenceService", "ns", "j")


async def test_gzip_body_is_decompressed(lc) -> None:
    controller, base = lc
    body = gzip.compress(json.dumps(JI_STATS).encode())
    status, _, raw, _ = await _post(base, JI_STATS["name"], body,
                                    {**PY_HEADERS, "Content-Encoding": "gzip"})
    assert (status, raw) == (200, OK)
    assert len(await controller.store.pending()) == 1


async def test_unknown_owner_kind_is_kept_not_dropped(lc) -> None:
    controller, base = lc
    body = {"name": "w1", "namespace": "ns", "ownerName": "nobody", "ownerKind": "mystery"}
    status, _, raw, _ = await _post(base, "w1", json.dumps(body))
    assert (status, raw) == (200, OK)
    assert await controller.store.pending() == []
    [worker] = await controller.store.workers()
    assert (worker.name, worker.owner_kind, worker.routed_kind) == ("w1", "mystery", None)


async def test_64_concurrent_reports_share_transactions(lc) -> None:
    controller, base = lc
    before = controller.store.transactions

    async def post(http: aiohttp.ClientSession, i: int) -> int:
        body = {**JI_STATS, "name": f"edge-{i}", "ownerInfo": {"inferenceNumber": i}}
        async with http.post(f"{base}/sedna/workers/edge-{i}/info", data=json.dumps(body),
                             headers=PY_HEADERS) as resp:
            return resp.status

    async with session() as http:
        statuses = await asyncio.gather(*(post(http, i) for i in range(64)))
    assert statuses == [200] * 64
    entries = await controller.store.pending(limit=1000)
    assert sorted(e.body["output"]["ownerInfo"]["inferenceNumber"] for e in entries) == list(range(64))
    assert len(await controller.store.workers()) == 64
    assert controller.store.transactions - before < 64


async def test_ops_endpoints(lc) -> None:
    controller, base = lc
    await _post(base, JI_STATS["name"], json.dumps(JI_STATS))
    await _post(base, "w1", json.dumps({"name": "w2"}))
    async with session() as http:
        async with http.get(base + "/healthz") as resp:
            assert (resp.status, await resp.json()) == (200, {"status": "ok"})
        async with http.get(base + "/readyz") as resp:
            assert (resp.status, await resp.json()) == (
                200, {"status": "ready", "db": "ok", "link": "none"})
        async with http.get(base + "/sedna/workers") as resp:
            [worker] = (await resp.json())["workers"]
        async with http.get(base + "/metrics") as resp:
            assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            metrics = await resp.text()
    assert (worker["name"], worker["routedKind"], worker["report"]["ownerInfo"]) == (
        "edgeworker-4kq7z", "JointInferenceService", JI_STATS["ownerInfo"])
    assert worker["receivedAt"].endswith("Z")
    assert value(metrics, "sedna_lc_reports_accepted_total", route="forwarded") == 1
    assert value(metrics, "sedna_lc_reports_rejected_total", reason="name_mismatch") == 1
    assert value(metrics, "sedna_lc_outbox_size") == 1
    assert "sedna_lc_store_commit_batch_size_count" in metrics


@pytest.mark.expect_log_errors(r"report not stored")
async def test_readyz_fails_when_store_closed(lc) -> None:
    controller, base = lc
    await controller.store.close()
    async with session() as http, http.get(base + "/readyz") as resp:
        assert resp.status == 503
        assert await resp.json() == {"status": "not ready", "db": "store is closed", "link": "none"}
    status, _, raw, _ = await _post(base, JI_STATS["name"], json.dumps(JI_STATS))
    assert _message(raw) == (503, "report of worker(name=edgeworker-4kq7z) not stored: "
                                  "store is closed")


async def test_openapi_describes_every_route(lc) -> None:
    controller, base = lc
    async with session() as http, http.get(base + "/openapi.json") as resp:
        doc = await resp.json()
    assert doc == DOCUMENT
    served = {(r.method.lower(), r.resource.canonical.rstrip("/"))
              for r in controller.app.router.routes() if r.method != "HEAD"}
    described = {(method, path) for path, ops in doc["paths"].items() for method in ops}
    assert served == described
    assert doc["openapi"].startswith("3.")


# ---- what a client sent is echoed clipped ---------------------------------------------------

HUGE = 100_000


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(("data", "headers", "path", "start"), [
    pytest.param('{"name": 1' + "1" * 1_000_000 + "e999}", None, None,
                 "body is not valid JSON: number 1111", id="1MB-number-literal"),
    pytest.param(json.dumps({"name": "x" * HUGE, "namespace": "ns", "ownerName": "j"}), None,
                 None, "worker name(name=w1) in the api is different from that(name=xxxx",
                 id="long-name-mismatch"),
    pytest.param(json.dumps({"name": "w1", "namespace": "ns", "ownerName": "j",
                             "ownerInfo": {"k" * HUGE: _nested(120)}}), None, None,
                 "report of worker(name=w1) cannot be relayed to the GM: "
                 "report.output.ownerInfo.kkkk", id="long-key-in-a-path"),  # proto/limits cuts it
    pytest.param("{}", {"Content-Type": "application/" + "x" * 5000}, None,
                 "Content-Type application/xxxx", id="long-content-type"),
    pytest.param("{}", {"Content-Type": "application/json", "Accept": "text/" + "h" * 5000},
                 None, "Accept text/hhhh", id="long-accept"),
    pytest.param("{}", None, "/sedna/" + "p" * 5000, "no route for /sedna/pppp", id="long-path"),
])
async def test_client_values_quoted_in_errors_are_clipped(lc, caplog, data, headers, path,
                                                          start) -> None:
    _, base = lc
    caplog.set_level("INFO", logger="lc")
    _, ctype, raw, _ = await _post(base, "w1", data, headers, path)
    status, message = _message(raw)
    assert 400 <= status < 500 and ctype == "application/json"
    assert message.startswith(start), message[:300]
    assert "characters)" in message or "..." in message  # says it was cut
    assert len(raw) < 1024
    for record in caplog.records:
        fields = [v for v in vars(record).values() if isinstance(v, str)]
        assert max(map(len, fields)) < 1024, record.getMessage()


# ---- listings come in pages ------------------------------------------------------------------

async def _get(base: str, path: str, **query: str) -> tuple[int, dict[str, Any]]:
    async with session() as http, http.get(base + path, params=query) as resp:
        return resp.status, json.loads(await resp.read())


async def _pages(base: str, path: str, key: str, **query: str) -> list[list[dict[str, Any]]]:
    pages: list[list[dict[str, Any]]] = []
    token = ""
    while True:
        status, doc = await _get(base, path, **query, **({"continue": token} if token else {}))
        assert status == 200, doc
        pages.append(doc[key])
        token = doc["metadata"].get("continue", "")
        if not token:
            return pages


async def test_workers_are_listed_in_pages(lc) -> None:
    _, base = lc
    for i in range(5):
        body = {"name": f"w{i}", "namespace": "default", "ownerName": f"nobody-{i}"}
        assert (await _post(base, f"w{i}", json.dumps(body)))[0] == 200
    pages = await _pages(base, "/sedna/workers", "workers", limit="2")
    assert [[w["name"] for w in page] for page in pages] == [["w0", "w1"], ["w2", "w3"], ["w4"]]
    assert {w["ownerKnown"] for page in pages for w in page} == {False}
    assert await _pages(base, "/sedna/workers", "workers") == [[w for p in pages for w in p]]


async def test_dead_letters_are_listed_in_pages(lc) -> None:
    controller, base = lc
    seqs = []
    for i in range(3):
        seq = await controller.store.append_report("Model", "default", "m", {"n": i})
        await controller.store.dead_letter(seq, reason="refused", error="no")
        seqs.append(seq)
    pages = await _pages(base, "/sedna/deadletters", "deadLetters", limit="2")
    assert [[d["seq"] for d in page] for page in pages] == [seqs[:0:-1], seqs[:1]]
    assert [d["body"] for d in pages[1]] == [{"n": 0}]


async def test_a_big_report_is_listed_as_a_marker(lc) -> None:
    controller, base = lc
    body = {"name": "big", "namespace": "default", "ownerName": "nobody",
            "ownerInfo": {"pad": "x" * 200_000}}
    assert (await _post(base, "big", json.dumps(body)))[0] == 200
    [stored] = await controller.store.workers()
    status, doc = await _get(base, "/sedna/workers")
    [item] = doc["workers"]
    assert item["report"]["truncated"] is True
    assert item["report"]["bytes"] == len(json.dumps(stored.report, separators=(",", ":")))
    assert item["report"]["head"].startswith('{"name":"big"')
    assert len(json.dumps(item)) < 70_000


@pytest.mark.parametrize("path", ["/sedna/workers", "/sedna/deadletters"])
@pytest.mark.parametrize(("query", "message"), [
    pytest.param({"limit": "0"}, "limit must be a whole number from 1 to 1000, got '0'",
                 id="limit-0"),
    pytest.param({"limit": "1001"}, "limit must be a whole number from 1 to 1000, got '1001'",
                 id="limit-1001"),
    pytest.param({"limit": "x" * 500}, "limit must be a whole number from 1 to 1000, got 'xxxx",
                 id="limit-text"),
    pytest.param({"continue": "not a token"}, "continue token is not valid", id="garbage-token"),
    pytest.param({"continue": "WzEsMiwzXQ"}, "continue token is not valid", id="wrong-shape"),
])
async def test_bad_list_queries_are_400(lc, path: str, query: dict[str, str],
                                        message: str) -> None:
    _, base = lc
    status, doc = await _get(base, path, **query)
    assert (status, doc["Status"]) == (400, 400)
    assert doc["Message"].startswith(message) and len(doc["Message"]) < 300
