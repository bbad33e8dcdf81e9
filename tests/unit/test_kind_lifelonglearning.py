"""gm/kinds/lifelonglearning: no inference pod before the first deploy, the train and eval pods'
env (KB server, initial training, cloud KB index), bad specs, and the knowledge base."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from gm.kindlib import learning
from gm.kindlib.learning import Position, with_position
from gm.kindlib.learningpods import DEPLOYS_ANNOTATION
from gm.kinds import lifelonglearning as ll
from gm.kube.resources import PODS
from gm.reconcile.declaration import Dependencies, Observed
from gm.workers.specerrors import InvalidSpec, MissingDependency
from shared.objects import SPEC_HASH_ANNOTATION
from tests.jobsim import CONFIG

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "upstream" / "lifelong-learning-atcii.yaml"
DOCS = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
UID = "9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b"
NOW = "2026-03-01T10:00:00Z"
NAME = "atcii-classifier-demo"
PREFIX = "lifelonglearningjob.sedna.io/"
TRAIN_DATA = json.dumps({"input": {"dataURL": "/output/data/train/1/data.csv", "outputDir": "/output/train/1"}})
EVAL_DATA = json.dumps({"input": {"models": [{"format": "pkl", "url": "/output/train/1/index.pkl"}],
                                  "dataURL": "/output/data/eval/1/data.csv", "outputDir": "/output/eval/1"}})


def job(status=None) -> dict:
    cr = copy.deepcopy(next(d for d in DOCS if d["kind"] == "LifelongLearningJob"))
    cr["metadata"].update(namespace="default", uid=UID, generation=1)
    if status is not None:
        cr["status"] = status
    return cr


def deps(pods=()) -> Dependencies:
    datasets = {d["metadata"]["name"]: d for d in DOCS if d["kind"] == "Dataset"}
    return Dependencies(objects={"datasets": datasets}, secrets={}, children={"pods": list(pods)},
                        config=CONFIG, now=NOW)


def pods_of(cr: dict) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in ll.build(cr, deps())[PODS]}


def env(pod: dict) -> dict[str, object]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]}


def test_no_pod_before_the_first_deploy():
    assert pods_of(job()) == {}
    assert pods_of(job(with_position({}, Position(stage="Eval", type="Waiting", cycle=1), now=NOW))) == {}


def test_the_first_train_pod_has_not_completed_initial_training():
    pods = pods_of(job(with_position({}, Position(stage="Train", type="Ready", data=TRAIN_DATA), now=NOW)))
    pod = pods[f"{NAME}-train-1"]
    values = env(pod)
    assert values["HAS_COMPLETED_INITIAL_TRAINING"] == "false" and "CLOUD_KB_INDEX" not in values
    assert values["KB_SERVER"] == CONFIG.kb_server and values["LC_SERVER"] == CONFIG.lc_server
    assert values["OUTPUT_URL"] == "/home/data/output/train/1"
    assert values["TRAIN_DATASET_URL"] == "/home/data/output/data/train/1/data.csv"
    assert values["ORIGINAL_DATASET_URL"] == "/home/data/data/trainData.csv"
    spec = pod["spec"]
    assert (spec["hostNetwork"], spec["dnsPolicy"], spec["restartPolicy"]) == (
        True, "ClusterFirstWithHostNet", "OnFailure")
    assert pod["metadata"]["labels"][f"{PREFIX}worker-type"] == "train"


def test_a_later_train_pod_gets_the_cloud_kb_index_of_the_last_training():
    rule = ll.DECLARATION.report
    status = rule({"phase": "train", "status": "completed",
                   "output": {"models": [{"format": "pkl", "url": "/output/train/1/index.pkl"}]}}, NOW)({})
    status = with_position(status, Position(stage="Train", type="Ready", data=TRAIN_DATA, cycle=1), now=NOW)
    pod = pods_of(job(status))[f"{NAME}-train-2"]
    values = env(pod)
    assert values["HAS_COMPLETED_INITIAL_TRAINING"] == "true"
    assert values["CLOUD_KB_INDEX"] == "/output/train/1/index.pkl"


def test_the_eval_pod_mounts_the_reported_models():
    pod = pods_of(job(with_position({}, Position(stage="Eval", type="Starting", data=EVAL_DATA, cycle=1),
                                    now=NOW)))[f"{NAME}-eval-1"]
    values = env(pod)
    assert values["MODEL_URLS"] == "/home/data/output/train/1/index.pkl"
    assert values["OUTPUT_URL"] == "/home/data/output/eval/1"
    assert values["TEST_DATASET_URL"] == "/home/data/output/data/eval/1/data.csv"
    assert values["KB_SERVER"] == CONFIG.kb_server


def test_deploy_ready_creates_the_inference_pod_and_a_later_deploy_recreates_it():
    first = pods_of(job(with_position({}, Position(stage="Deploy", type="Ready"), now=NOW)))
    pod = first[f"{NAME}-infer"]
    values = env(pod)
    assert values["MODEL_URLS"] == "/home/data/output/deploy/index.pkl"  # host path, not downloaded
    assert values["OUTPUT_URL"] == "/output"
    assert pod["metadata"]["annotations"][DEPLOYS_ANNOTATION] == "1"
    assert pod["metadata"]["labels"][f"{PREFIX}worker-type"] == "inference"
    assert pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet" and "restartPolicy" not in pod["spec"]
    kept = pods_of(job(with_position({}, Position(stage="Train", type="Waiting", deploys=1), now=NOW)))
    assert kept == first  # the same pod while nothing is deployed
    again = pods_of(job(with_position({}, Position(stage="Deploy", type="Ready", deploys=1), now=NOW)))
    assert again[f"{NAME}-infer"]["metadata"]["annotations"][SPEC_HASH_ANNOTATION] != \
        pod["metadata"]["annotations"][SPEC_HASH_ANNOTATION]


def test_deploy_ready_moves_to_completed_without_waiting_for_the_pod():
    cr = job(with_position({}, Position(stage="Deploy", type="Ready"), now=NOW))
    new = ll.status(cr, Observed(children={"pods": []}, desired={"pods": {}}, converged=True, now=NOW))
    assert (new["conditions"][-1]["stage"], new["conditions"][-1]["type"], new["deploys"]) == (
        "Deploy", "Completed", 1)


@pytest.mark.parametrize(("change", "error", "reason"), [
    (lambda s: s["dataset"].update(name="nope"), MissingDependency, "DatasetNotFound"),
    (lambda s: s["deploySpec"].pop("template"), InvalidSpec, "InvalidTemplate"),
    (lambda s: s.update(credentialName="nope"), MissingDependency, "SecretNotFound"),
])
def test_bad_specs_are_spec_errors(change, error, reason):
    cr = job()
    change(cr["spec"])
    with pytest.raises(error) as exc:
        ll.build(cr, deps())
    assert exc.value.reason == reason


def test_an_eval_ready_without_models_is_failed():
    data = json.dumps({"input": {"dataURL": "/d.csv"}})
    cr = job(with_position({}, Position(stage="Eval", type="Ready", data=data, cycle=1), now=NOW))
    assert pods_of(cr) == {}
    new = ll.status(cr, Observed(children={"pods": []}, desired={"pods": {}}, converged=True, now=NOW))
    assert (new["conditions"][-1]["type"], new["conditions"][-1]["reason"]) == ("Failed", "InvalidInput")


def test_a_report_rewrites_the_knowledge_base_in_a_fixed_order():
    models = [{"format": "pkl", "url": "/kb/index.pkl", "classes": ["hot", "cold"],
               "current_metric": {"task-b": {"recall": 0.7, "precision": 0.9}, "task-a": {"precision": 0.6}},
               "number_of_labeled_unseen_sample": 12},
              {"format": "pkl", "url": "/kb/2.pkl", "number_of_labeled_unseen_sample": 3}]
    body = {"phase": "eval", "status": "completed", "output": {"models": models}}
    status = ll.DECLARATION.report(body, NOW)({})
    assert status["knowledgeBase"] == {
        "AIModels": {"numberOfAIModels": 2, "listOfAIModels": [
            {"modelID": "task-a", "averagePrecision": 0.6, "numberOfTrainSamples": 12},
            {"modelID": "task-b", "averagePrecision": 0.9, "numberOfTrainSamples": 12}]},
        "AIClasses": {"numberOfAIClasses": 2, "listOfAIClasses": ["hot", "cold"]},
        "samples": {"numberOfLabeledUnseenSample": 15, "numberOfUnseenSample": 0}}
    current = status["conditions"][-1]
    assert (current["stage"], current["type"]) == ("Eval", "Completed")
    # a report without models leaves the knowledge base as it is
    kept = ll.DECLARATION.report({"phase": "deploy", "status": "completed"}, NOW)(status)
    assert kept["knowledgeBase"] == status["knowledgeBase"]
    assert learning.has_completed(kept, "Eval")


def test_the_declaration():
    decl = ll.DECLARATION
    assert decl.kind == "LifelongLearningJob" and decl.report is not None
    assert {w.gvr.plural for w in decl.watches} == {"datasets"}
