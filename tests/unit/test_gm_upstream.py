"""The pure parts of gm/edge/status.py: report parsing, metric conversion, round handling."""

from __future__ import annotations

import pytest

from gm.edge.pipeline import StatusPipeline
from gm.edge.status import (
    FLReport,
    UpstreamStatus,
    advance_round,
    field,
    metric_value,
    parse_dataset_report,
    parse_fl_report,
    parse_ji_report,
    round_of,
    set_metrics,
    set_sample_count,
    to_metrics,
)
from gm.kube.statuswriter import StatusWriter
from gm.reports import ReportInvalid, ReportRefused
from proto import Message, Op

NOW = "2025-03-01T10:00:00Z"
LATER = "2025-03-01T11:00:00Z"


@pytest.mark.parametrize(("value", "text"), [
    pytest.param("0.9", "0.9", id="string-verbatim"),
    pytest.param(240, "240", id="int"),
    pytest.param(0.12916666666666668, "0.12916666666666668", id="float-repr"),
    pytest.param(True, "true", id="bool"),
    pytest.param(None, "null", id="null"),
    pytest.param([0.86, 0.9], "[0.86,0.9]", id="list"),
    pytest.param({"b": 1, "a": "<x>"}, '{"a":"<x>","b":1}', id="map-sorted"),
])
def test_metric_value(value, text):
    assert metric_value(value) == text


def test_metric_value_too_big_for_json_is_invalid():
    with pytest.raises(ReportInvalid, match="cannot be written as JSON"):
        metric_value(2**70)


def test_to_metrics_sorted_and_dropped():
    assert to_metrics({"z": 1, "a": "x", "startTime": "t"}, drop=("startTime",)) == [
        {"key": "a", "value": "x"}, {"key": "z", "value": "1"}]


def test_field_matches_case_insensitively_after_exact():
    assert field({"NumberOfSamples": 3}, "numberOfSamples") == 3
    assert field({"numberofsamples": 1, "numberOfSamples": 2}, "numberOfSamples") == 2
    assert field({}, "numberOfSamples") is None


@pytest.mark.parametrize(("body", "error"), [
    pytest.param({}, "Dataset report needs numberOfSamples", id="missing"),
    pytest.param({"numberOfSamples": "5"}, "numberOfSamples must be an integer, got str", id="string"),
    pytest.param({"numberOfSamples": True}, "numberOfSamples must be an integer, got bool", id="bool"),
    pytest.param({"numberOfSamples": 5.0}, "numberOfSamples must be an integer, got float", id="float"),
    pytest.param({"numberOfSamples": -1}, "numberOfSamples must be between 0 and 9223372036854775807, got -1",
                 id="negative"),
])
def test_dataset_report_invalid(body, error):
    with pytest.raises(ReportInvalid) as exc:
        parse_dataset_report(body)
    assert str(exc.value) == error


def test_dataset_report_and_mutation():
    assert parse_dataset_report({"numberOfSamples": 500}) == 500
    status = set_sample_count({"numberOfSamples": 1, "updateTime": NOW}, 500, now=LATER)
    assert status == {"numberOfSamples": 500, "updateTime": LATER}
    assert set_sample_count(dict(status), 500, now="2030-01-01T00:00:00Z") == status  # a replay


UPSTREAM_JI = {"phase": "inference", "status": "", "output": {"models": None, "ownerInfo": {
    "hardExampleNumber": 31, "inferenceNumber": 240, "startTime": "2025-03-01 10:00:00",
    "updateTime": "2025-03-01 10:00:30", "uploadCloudRatio": 0.12916666666666668}}}


def test_ji_report_metrics_without_times():
    assert parse_ji_report(UPSTREAM_JI) == [
        {"key": "hardExampleNumber", "value": "31"}, {"key": "inferenceNumber", "value": "240"},
        {"key": "uploadCloudRatio", "value": "0.12916666666666668"}]


@pytest.mark.parametrize("body", [
    pytest.param({"phase": "inference", "status": "", "output": {"models": None, "ownerInfo": None}}, id="null-info"),
    pytest.param({"phase": "inference", "output": None}, id="null-output"),
    pytest.param({}, id="empty"),
])
def test_ji_report_without_owner_info_applies_nothing(body):
    assert parse_ji_report(body) is None


@pytest.mark.parametrize(("body", "error"), [
    pytest.param({"output": []}, "output must be an object, got list", id="output-list"),
    pytest.param({"output": {"ownerInfo": "x"}}, "output.ownerInfo must be an object, got str", id="info-str"),
])
def test_ji_report_invalid(body, error):
    with pytest.raises(ReportInvalid) as exc:
        parse_ji_report(body)
    assert str(exc.value) == error


def fl_body(round_=3, update="2025-03-01 10:02:10", models=None):
    return {"phase": "train", "status": "running",
            "output": {"models": models, "ownerInfo": {"currentRound": round_, "updateTime": update}}}


def test_fl_report_round_and_first_model_metrics():
    models = [{"format": "pb", "url": "/model/model.pb", "metrics": {"loss": [0.41, 0.33], "accuracy": [0.86, 0.9]}},
              {"format": "ckpt", "url": "/model", "metrics": {"other": 1}}]
    report = parse_fl_report(fl_body(models=models))
    assert report == FLReport(3, "2025-03-01 10:02:10", [{"key": "accuracy", "value": "[0.86,0.9]"},
                                                         {"key": "loss", "value": "[0.41,0.33]"}])
    assert report.message == "Round 3 reaches at 2025-03-01 10:02:10"


@pytest.mark.parametrize("models", [None, [], [{"format": "pb", "url": "/m", "metrics": {}}],
                                    [{"format": "pb", "url": "/m"}]])
def test_fl_report_without_metrics(models):
    assert parse_fl_report(fl_body(models=models)).metrics is None


def test_fl_report_without_round():
    assert parse_fl_report({"phase": "train", "output": None}) == FLReport(0, "", None)


@pytest.mark.parametrize(("body", "error"), [
    pytest.param(fl_body(round_="3"), "output.ownerInfo.currentRound must be an integer, got str", id="round-str"),
    pytest.param(fl_body(round_=-2), "output.ownerInfo.currentRound must be between 0 and 9223372036854775807, got -2",
                 id="round-negative"),
    pytest.param(fl_body(update=None), "output.ownerInfo.updateTime must be a string, got null", id="no-time"),
    pytest.param(fl_body(models={"a": 1}), "output.models must be a list, got dict", id="models-map"),
    pytest.param(fl_body(models=[3]), "output.models[0] must be an object, got int", id="model-int"),
    pytest.param(fl_body(models=[{"metrics": [1]}]), "output.models[0].metrics must be an object, got list",
                 id="metrics-list"),
])
def test_fl_report_invalid(body, error):
    with pytest.raises(ReportInvalid) as exc:
        parse_fl_report(body)
    assert str(exc.value) == error


@pytest.mark.parametrize(("condition", "expected"), [
    pytest.param({"type": "Training", "reason": "DoTraining", "message": "Round 12 reaches at x"}, 12, id="round"),
    pytest.param({"type": "Training", "reason": "Training", "message": "Round 12 reaches at x"}, 0, id="other-reason"),
    pytest.param({"type": "Training", "reason": "DoTraining", "message": "the workers are running"}, 0, id="no-round"),
    pytest.param(None, 0, id="absent"),
])
def test_round_of(condition, expected):
    assert round_of(condition) == expected


def training(status):
    return [c for c in status.get("conditions", []) if c["type"] == "Training"]


def test_rounds_replace_one_condition_and_only_move_forward():
    status = {"phase": "Running", "conditions": [
        {"type": "Training", "status": "True", "reason": "Training", "message": "the workers are running",
         "lastTransitionTime": NOW, "lastHeartbeatTime": NOW}]}
    status = advance_round(status, FLReport(3, "t3", None), now=LATER)
    assert training(status) == [{"type": "Training", "status": "True", "reason": "DoTraining",
                                 "message": "Round 3 reaches at t3", "lastTransitionTime": NOW,
                                 "lastHeartbeatTime": LATER}]
    same = advance_round({**status, "conditions": list(status["conditions"])}, FLReport(3, "t3b", None), now="z")
    assert same == status
    older = advance_round({**status, "conditions": list(status["conditions"])}, FLReport(2, "t2", None), now="z")
    assert older == status
    newer = advance_round(status, FLReport(4, "t4", None), now="2025-03-01T12:00:00Z")
    assert [c["message"] for c in training(newer)] == ["Round 4 reaches at t4"]


def test_no_round_or_finished_job_leaves_conditions():
    done = {"conditions": [{"type": "Complete", "status": "True", "reason": "Completed", "message": ""}]}
    assert advance_round(dict(done), FLReport(5, "t", None), now=NOW) == done
    assert advance_round({}, FLReport(0, "", None), now=NOW) == {}


def test_model_metrics_update_time_moves_only_on_change():
    metrics = [{"key": "loss", "value": "0.4"}]
    status = set_metrics({}, metrics, now=NOW)
    assert status == {"metrics": metrics, "updateTime": NOW}
    assert set_metrics(dict(status), list(metrics), now=LATER) == status


def message(kind, body):
    return Message(Op.STATUS, 1, kind, "default", "x", body)


async def test_handler_refuses_unknown_kinds_and_invalid_bodies_before_any_write():
    # No API behind the writer: these reports must be decided without one.
    handler = UpstreamStatus(StatusPipeline(StatusWriter(client=None)))  # type: ignore[arg-type]
    with pytest.raises(ReportRefused, match="no status reports for kind 'Model'"):
        await handler.handle_status("n1", message("Model", {"phase": "Train"}))
    with pytest.raises(ReportInvalid, match="status must be one of ready, completed, failed, waiting"):
        await handler.handle_status("n1", message("IncrementalLearningJob", {"phase": "Train"}))
    with pytest.raises(ReportInvalid, match="numberOfSamples must be an integer"):
        await handler.handle_status("n1", message("Dataset", {"numberOfSamples": [1]}))
    with pytest.raises(ReportInvalid, match="currentRound must be an integer"):
        await handler.handle_status("n1", message("FederatedLearningJob", fl_body(round_=1.5)))
    assert {"Dataset", "JointInferenceService", "FederatedLearningJob"} <= set(handler.kinds)
