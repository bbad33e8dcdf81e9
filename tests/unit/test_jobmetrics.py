"""The job metrics (gm/jobmetrics.py): what each kind's status becomes on the GM's page, and
what user input in it (names, reported keys and values) can and cannot do to the page."""

from __future__ import annotations

import json

import pytest

from gm.jobmetrics import MAX_KEYS, MAX_LABEL, JobCollector, bounded, number
from gm.kinds.federatedlearning import fl_status
from shared.metrics import render, service_registry
from tests.scrape import families, samples, value
from tests.unit.test_metrics import documented

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
JOB_FAMILIES = ("sedna_gm_job_", "sedna_gm_ji_", "sedna_gm_fl_", "sedna_gm_learning_", "sedna_gm_ll_",
                "sedna_gm_dataset_")


def meta(name: str, ns: str = "default") -> dict:
    return {"namespace": ns, "name": name}


def cond(type_: str, status: str, at: str, **extra) -> dict:
    return {"type": type_, "status": status, "lastTransitionTime": at, **extra}


def ji(name: str = "ji", **status) -> dict:
    base = {"active": 2, "failed": 0, "conditions": [cond("Running", "True", "2027-01-15T07:59:00Z")],
            "metrics": [{"key": "hardExampleNumber", "value": "31"}, {"key": "inferenceNumber", "value": "240"},
                        {"key": "uploadCloudRatio", "value": "0.125"}],
            "lastReports": [{"node": "edge-node-2", "epoch": "e", "seq": 4, "appliedAt": "2027-01-15T07:59:50Z"}]}
    return {"metadata": meta(name), "status": {**base, **status}}


FL = {"metadata": meta("fl"), "spec": {"aggregationWorker": {"model": {"name": "agg"}}},
      "status": {"phase": "Running", "active": 3, "succeeded": 0, "failed": 0, "conditions": [
          cond("Training", "True", "2027-01-15T07:50:00Z", reason="DoTraining",
               message="Round 4 reaches at 2025-03-01 10:04:10")]}}
MODEL = {"metadata": meta("agg"), "status": {"metrics": [{"key": "accuracy", "value": "[0.86,0.9]"},
                                                         {"key": "loss", "value": "0.41"}]}}
EVAL_DATA = json.dumps({"output": {"models": [{"url": "/new", "metrics": {"precision": [0.8, 0.9], "recall": 0.7}},
                                              {"url": "/old", "metrics": {"precision": [0.6, 0.7]}}]}})
IL = {"metadata": meta("il"), "status": {"cycle": 2, "deploys": 1, "conditions": [
    cond("Completed", "False", "2027-01-15T07:40:00Z", stage="Train"),
    cond("Completed", "False", "2027-01-15T07:45:00Z", stage="Eval", data=EVAL_DATA),
    cond("Waiting", "False", "2027-01-15T07:46:00Z", stage="Deploy"),
    cond("Ready", "True", "2027-01-15T07:46:00Z", stage="Deploy")]}}
LL = {"metadata": meta("ll"), "status": {"cycle": 1, "deploys": 0, "knowledgeBase": {
    "AIModels": {"numberOfAIModels": 2, "listOfAIModels": []},
    "AIClasses": {"numberOfAIClasses": 3, "listOfAIClasses": ["a", "b", "c"]},
    "samples": {"numberOfLabeledUnseenSample": 5, "numberOfUnseenSample": 0}},
    "conditions": [cond("Completed", "False", "2027-01-15T07:30:00Z", stage="Train"),
                   cond("Running", "True", "2027-01-15T07:30:00Z", stage="Eval")]}}
DATASET = {"metadata": meta("ds"), "spec": {"nodeName": "edge-node-1"}, "status": {"numberOfSamples": 500}}


def page(jobs: dict[str, list[dict]], *, datasets=(), models=()) -> str:
    collector = JobCollector(clock=lambda: NOW)
    by_name = {m["metadata"]["name"]: m for m in models}
    collector.watch(jobs={k: (lambda v=v: v) for k, v in jobs.items()}, datasets=lambda: list(datasets),
                    model=lambda ns, name: by_name.get(name))
    registry = service_registry("gm")
    registry.register(collector)
    return render(registry).decode()


def job(name: str, kind: str) -> dict[str, str]:
    return {"namespace": "default", "name": name, "kind": kind}


def series_of(text: str, **labels: str) -> dict[str, float]:
    """name (and the labels beyond `labels`) -> value, of the samples carrying `labels`."""
    out = {}
    for s in samples(text):
        if all(s.labels.get(k) == v for k, v in labels.items()):
            rest = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k not in labels)
            out[f"{s.name}{{{rest}}}" if rest else s.name] = s.value
    return out


def test_every_job_family_is_documented_and_shows_without_jobs():
    text = page({"JointInferenceService": []})
    ours = {n: k for n, k in families(text).items() if n.startswith(JOB_FAMILIES)}
    assert ours == {n: k for n, k in documented("sedna_gm_").items() if n.startswith(JOB_FAMILIES)}
    assert not [s for s in samples(text) if s.name.startswith(JOB_FAMILIES)]


def test_a_joint_inference_service():
    kind = "JointInferenceService"
    assert series_of(page({kind: [ji()]}), **job("ji", kind)) == {
        "sedna_gm_job_phase{phase=Running}": 1, "sedna_gm_job_stage_seconds{stage=Running}": 60,
        "sedna_gm_job_workers_active": 2, "sedna_gm_job_workers_failed": 0,
        "sedna_gm_ji_inferences": 240, "sedna_gm_ji_hard_examples": 31, "sedna_gm_ji_upload_cloud_ratio": 0.125,
        "sedna_gm_job_last_report_time_seconds{node=edge-node-2}": NOW - 10}


def test_a_federated_learning_job_with_its_aggregation_models_metrics():
    kind = "FederatedLearningJob"
    assert series_of(page({kind: [FL]}, models=[MODEL]), **job("fl", kind)) == {
        "sedna_gm_job_phase{phase=Running}": 1, "sedna_gm_job_stage_seconds{stage=Training}": 600,
        "sedna_gm_job_workers_active": 3, "sedna_gm_job_workers_failed": 0,
        "sedna_gm_job_workers_succeeded": 0, "sedna_gm_fl_round": 4,
        "sedna_gm_job_reported_metric{metric=accuracy}": 0.88, "sedna_gm_job_reported_metric{metric=loss}": 0.41}
    assert "sedna_gm_job_reported_metric{metric=loss}" not in series_of(page({kind: [FL]}), **job("fl", kind))


def test_a_completed_federated_learning_job_keeps_its_last_round():
    kind = "FederatedLearningJob"
    pods = [{"status": {"phase": "Succeeded"}}] * 3
    status = fl_status(FL, pods, all_present=True, converged_generation=None, problem=None,
                       now="2027-01-15T07:58:00Z")
    assert status["phase"] == "Succeeded"
    assert series_of(page({kind: [{**FL, "status": status}]}), **job("fl", kind))["sedna_gm_fl_round"] == 4


def test_an_incremental_learning_job_in_its_deploy_stage():
    kind = "IncrementalLearningJob"
    assert series_of(page({kind: [IL]}), **job("il", kind)) == {
        "sedna_gm_job_phase{phase=Ready}": 1, "sedna_gm_job_stage{stage=Deploy}": 1,
        # the stage began when Eval/Completed stopped being current, not at Ready
        "sedna_gm_job_stage_seconds{stage=Deploy}": 15 * 60,
        "sedna_gm_learning_cycle": 2, "sedna_gm_learning_deploys": 1,
        "sedna_gm_learning_eval_metric{metric=precision,model=0}": pytest.approx(0.85),
        "sedna_gm_learning_eval_metric{metric=recall,model=0}": 0.7,
        "sedna_gm_learning_eval_metric{metric=precision,model=1}": pytest.approx(0.65)}


def test_a_lifelong_learning_jobs_knowledge_base():
    kind = "LifelongLearningJob"
    assert series_of(page({kind: [LL]}), **job("ll", kind)) == {
        "sedna_gm_job_phase{phase=Running}": 1, "sedna_gm_job_stage{stage=Eval}": 1,
        "sedna_gm_job_stage_seconds{stage=Eval}": 30 * 60, "sedna_gm_learning_cycle": 1,
        "sedna_gm_learning_deploys": 0, "sedna_gm_ll_kb_tasks": 2, "sedna_gm_ll_kb_classes": 3,
        "sedna_gm_ll_kb_labeled_unseen_samples": 5}


def test_a_multi_edge_kinds_counters_and_a_dataset():
    kind = "FeatureExtractionService"
    fe = {"metadata": meta("fe"), "status": {"metrics": [{"key": "featureNumber", "value": "12"},
                                                         {"key": "frameNumber", "value": "30"}]}}
    text = page({kind: [fe]}, datasets=[DATASET, {"metadata": meta("new"), "spec": {"nodeName": "n"}}])
    assert series_of(text, **job("fe", kind)) == {
        "sedna_gm_job_phase{phase=Unknown}": 1, "sedna_gm_job_reported_metric{metric=featureNumber}": 12,
        "sedna_gm_job_reported_metric{metric=frameNumber}": 30}
    assert [(s.labels, s.value) for s in samples(text) if s.name == "sedna_gm_dataset_samples"] == [
        ({"namespace": "default", "name": "ds", "node": "edge-node-1"}, 500)]


def test_a_deleted_job_has_no_series():
    text = page({"JointInferenceService": [ji("kept")]})
    assert value(text, "sedna_gm_ji_inferences", **job("kept", "JointInferenceService")) == 240
    assert not series_of(text, name="gone")


def test_hostile_names_keys_and_values_are_bounded_and_escaped():
    long_a, long_b = "a" * 300 + "1", "a" * 300 + "2"
    keys = [{"key": f"k{i:02d}", "value": str(i)} for i in range(MAX_KEYS + 10)]
    hostile = [{"key": 'quote"d\nnew\\line', "value": "1"}, {"key": "quote_d_new_line", "value": "2"},
               {"key": "x" * 500, "value": "3"}, {"key": "nan", "value": "NaN"}, {"key": "inf", "value": "1e999"},
               {"key": "text", "value": "fast"}, {"key": "map", "value": '{"a":1}'}, {"key": "bool", "value": "true"},
               {"key": "", "value": "1"}, {"key": "huge", "value": "1" * 1000}]
    records = [{"node": f'node"\n{i}' + "n" * 200, "seq": 1, "appliedAt": "2027-01-15T07:00:00Z"} for i in range(2)]
    text = page({"JointInferenceService": [ji(long_a, metrics=hostile, lastReports=records),
                                           ji(long_b, metrics=keys)]})
    names = {s.labels["name"] for s in samples(text) if s.name == "sedna_gm_job_phase"}
    assert len(names) == 2 and all(len(n) == MAX_LABEL and n.startswith("a" * 100) for n in names)
    [hostile_name] = [n for n in names if n == bounded(long_a)]
    reported = {s.labels["metric"]: s.value for s in samples(text)
                if s.name == "sedna_gm_job_reported_metric" and s.labels["name"] == hostile_name}
    # two keys the cut makes equal: the first in key order wins ('"' sorts before '_')
    assert reported == {"quote_d_new_line": 1, "x" * 64: 3}
    nodes = {s.labels["node"] for s in samples(text)
             if s.name == "sedna_gm_job_last_report_time_seconds" and s.labels["name"] == hostile_name}
    assert len(nodes) == 2 and all(len(n) == MAX_LABEL and n.startswith('node"\n') for n in nodes)
    assert 'node=\"node\\\"\\n0' in text  # escaped by the client on the page
    capped = [s for s in samples(text) if s.name == "sedna_gm_job_reported_metric" and s.labels["name"] != hostile_name]
    assert sorted(s.labels["metric"] for s in capped) == [f"k{i:02d}" for i in range(MAX_KEYS)]


@pytest.mark.parametrize(("raw", "expected"), [
    pytest.param("12", 12.0, id="integer"), pytest.param("0.5", 0.5, id="float"),
    pytest.param("[0.4,0.6]", 0.5, id="list-mean"), pytest.param(7, 7.0, id="number"),
    pytest.param("[]", None, id="empty-list"), pytest.param('["a"]', None, id="list-of-text"),
    pytest.param("[[1]]", None, id="nested"), pytest.param("true", None, id="bool"),
    pytest.param("NaN", None, id="nan"), pytest.param("abc", None, id="text"),
    pytest.param(None, None, id="none"),
])
def test_reported_values_as_numbers(raw, expected):
    assert number(raw) == expected
