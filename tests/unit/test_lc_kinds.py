"""The LC relays reports of every Sedna kind it has no manager for, in upstream's body shape.

The multi-edge kinds (FeatureExtractionService, ObjectSearchService, ObjectTrackingService,
ReidJob, VideoAnalyticsJob) have no LC logic upstream; the GM sends their objects to the
nodes their workers run on and turns the relayed reports into status. Each case posts a
worker report to a real LC over HTTP and reads back what the outbox holds for the GM, and
how the upstream codec frames it.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import orjson
import pytest

from lc.app import forwarders
from lc.managers.federatedlearning import FederatedLearningManager
from lc.managers.forward import ReportForwarder
from lc.managers.jointinference import JointInferenceManager
from lc.managers.learning.manager import LearningManager
from lc.report import WorkerReport
from proto.message import Message, Op
from proto.upstream import encode_upstream
from shared import apis
from tests.unit.test_lc_support import running_lc, session

MULTI_EDGE = ("FeatureExtractionService", "ObjectSearchService", "ObjectTrackingService",
              "ReidJob", "VideoAnalyticsJob")

FE_METRICS = {"name": "feature-extraction-deployment-fe-7d9c4-x2k8p", "namespace": "default",
              "ownerName": "feature-extraction", "ownerKind": "featureextractionservice",
              "kind": "inference", "results": [],
              "ownerInfo": {"startTime": "2026-12-01 10:00:00", "updateTime": "2026-12-01 10:00:05",
                            "frameNumber": 120, "featureNumber": 37}}
REID_PROGRESS = {"name": "reid-reid-0", "namespace": "default", "ownerName": "reid",
                 "ownerKind": "reidjob", "kind": "inference", "status": "running",
                 "ownerInfo": {"startTime": "2026-12-01 10:00:00",
                               "updateTime": "2026-12-01 10:00:05", "matchedNumber": 4}}
VA_DONE = {"name": "video-analytics-videoanalytics-0", "namespace": "default",
           "ownerName": "video-analytics", "ownerKind": "videoanalyticsjob", "kind": "inference",
           "status": "completed",
           "results": [{"format": "json", "url": "/data/output/tracks.json"}],
           "ownerInfo": {"frameNumber": 300, "detectionNumber": 812}}
OS_TRACKING = {"name": "pedestrian-search-trackingworker-0", "namespace": "default",
               "ownerName": "pedestrian-search", "ownerKind": "objectsearchservice",
               "kind": "inference", "ownerInfo": {"trackedNumber": 9}}
OT_TRACKING = {"name": "pedestrian-tracking-trackingworker-1", "namespace": "sedna-demo",
               "ownerName": "pedestrian-tracking", "ownerKind": "ObjectTrackingService",
               "kind": "inference", "status": "running"}


def _content(body: dict) -> dict:
    """The upstream status content for a report (upstream-lc.md section 2.7)."""
    return {"phase": body.get("kind", ""), "status": body.get("status", ""),
            "output": {"models": body.get("results"), "ownerInfo": body.get("ownerInfo")}}


def _object(kind: str, namespace: str, name: str, uid: str = "u1") -> dict:
    return {"apiVersion": apis.API_VERSION, "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "uid": uid}, "spec": {}}


async def test_every_sedna_kind_has_a_manager_and_the_multi_edge_ones_relay(tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, _):
        managers = {api.kind: lc.dispatcher.manager(api.kind) for api in apis.ALL_KINDS}
    assert all(managers.values())
    relayed = {kind for kind, m in managers.items() if type(m) is ReportForwarder}
    assert relayed == set(MULTI_EDGE)
    assert all(managers[k].takes_reports and managers[k].include_models for k in relayed)
    learning = ("IncrementalLearningJob", "LifelongLearningJob")
    assert all(type(managers[k]) is LearningManager and managers[k].include_models
               for k in learning)


def test_forwarders_skip_the_kinds_with_a_manager_of_their_own() -> None:
    dedicated = [JointInferenceManager(), FederatedLearningManager()]
    kinds = [f.kind for f in forwarders(dedicated)]
    assert "JointInferenceService" not in kinds and "FederatedLearningJob" not in kinds
    assert len(kinds) == len(apis.ALL_KINDS) - 2


@pytest.mark.parametrize(("body", "kind"), [
    pytest.param(FE_METRICS, "FeatureExtractionService", id="fe-metrics"),
    pytest.param(REID_PROGRESS, "ReidJob", id="reid-progress"),
    pytest.param(VA_DONE, "VideoAnalyticsJob", id="va-completed-with-results"),
    pytest.param(OS_TRACKING, "ObjectSearchService", id="os-tracking"),
    pytest.param(OT_TRACKING, "ObjectTrackingService", id="ot-camelcase-owner-kind"),
])
async def test_multi_edge_report_is_forwarded_in_upstream_shape(tmp_path: Path, body: dict,
                                                                kind: str) -> None:
    async with running_lc(tmp_path) as (lc, base), session() as http:
        async with http.post(f"{base}/sedna/workers/{body['name']}/info",
                             data=json.dumps(body),
                             headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 200
            assert await resp.json() == {"Status": 200, "Message": "OK"}
        [entry] = await lc.store.pending()
    assert (entry.kind, entry.namespace, entry.name) == (kind, body["namespace"], body["ownerName"])
    assert entry.body == _content(body)
    frame = orjson.loads(encode_upstream(Message(Op.STATUS, entry.seq, entry.kind, entry.namespace,
                                                 entry.name, entry.body)))
    assert frame["header"] == {"namespace": body["namespace"], "resourceKind": kind,
                               "resourceName": body["ownerName"], "operation": "status"}
    assert orjson.loads(base64.b64decode(frame["content"])) == _content(body)


@pytest.mark.parametrize("kind", MULTI_EDGE)
async def test_objects_the_gm_sends_are_kept_and_match_reports_without_owner_kind(
        tmp_path: Path, kind: str) -> None:
    async with running_lc(tmp_path) as (lc, _):
        await lc.apply_upsert(kind.lower(), "default", "job", _object(kind, "default", "job"))
        assert [r[:3] for r in await lc.store.list_resources()] == [(kind, "default", "job")]
        report = WorkerReport(name="w-0", namespace="default", owner_name="job", owner_kind="",
                              kind="inference", status="running", owner_info={"n": 1})
        assert (await lc.dispatcher.handle_report(report)).route == "forwarded"
        [entry] = await lc.store.pending()
        assert (entry.kind, entry.name, entry.body["output"]["ownerInfo"]) == (kind, "job", {"n": 1})
        await lc.apply_delete(kind, "default", "job")
        assert await lc.store.list_resources() == []


async def test_report_before_its_object_waits_and_is_routed_once_it_arrives(tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, _):
        early = WorkerReport(name="reid-reid-0", namespace="default", owner_name="reid",
                             owner_kind="default", kind="inference", status="completed")
        assert (await lc.dispatcher.handle_report(early)).route == "unrouted"
        assert await lc.store.pending() == []
        await lc.apply_upsert("ReidJob", "default", "reid", _object("ReidJob", "default", "reid"))
        [entry] = await lc.store.pending()
        assert (entry.kind, entry.name, entry.body["status"]) == ("ReidJob", "reid", "completed")
