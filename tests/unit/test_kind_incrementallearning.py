"""gm/kinds/incrementallearning: the pods of each stage (names, owner, labels, env, mounts),
what an edit changes, bad specs, and the status the stage machine writes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from gm.kindlib import learning
from gm.kindlib.learning import Position, with_position
from gm.kindlib.learningpods import DEPLOYS_ANNOTATION
from gm.kinds import incrementallearning as il
from gm.kube.resources import PODS
from gm.reconcile.declaration import Dependencies, Observed
from gm.workers.owned import MANAGED_BY
from gm.workers.specerrors import InvalidSpec, MissingDependency
from shared.objects import SPEC_HASH_ANNOTATION, is_controlled_by
from tests.jobsim import CONFIG

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "upstream" / "incremental-learning-helmet-detection.yaml"
DOCS = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
UID = "5c0f6a1e-3b2d-4e8f-9a7c-1d2e3f4a5b6c"
NOW = "2026-03-01T10:00:00Z"
PREFIX = "incrementallearningjob.sedna.io/"
TRAIN_DATA = json.dumps({"input": {"models": [{"format": "ckpt", "url": "/models/base_model"}],
                                   "dataURL": "/output/data/train/1/data.txt",
                                   "outputDir": "/output/train/1"}})
EVAL_DATA = json.dumps({"input": {"models": [{"format": "pb", "url": "/output/train/1/model.pb"},
                                             {"format": "pb", "url": "/models/deploy_model/saved_model.pb"}],
                                  "dataURL": "/output/data/eval/1/data.txt"}})


def job(**status) -> dict:
    cr = copy.deepcopy(next(d for d in DOCS if d["kind"] == "IncrementalLearningJob"))
    cr["metadata"].update(namespace="default", uid=UID, generation=1)
    if status:
        cr["status"] = status
    return cr


def at(pos: Position) -> dict:
    return job(**with_position({}, pos, now=NOW))


def deps(pods=(), *, models=None) -> Dependencies:
    found = {d["metadata"]["name"]: d for d in DOCS if d["kind"] == "Model"} if models is None else models
    datasets = {d["metadata"]["name"]: d for d in DOCS if d["kind"] == "Dataset"}
    return Dependencies(objects={"models": found, "datasets": datasets}, secrets={},
                        children={"pods": list(pods)}, config=CONFIG, now=NOW)


def pods_of(cr: dict, pods=()) -> dict[str, dict]:
    built = il.build(cr, deps(pods))
    return {p["metadata"]["name"]: p for p in built[PODS]}


def env(pod: dict) -> dict[str, object]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]}


def names(pod: dict) -> list[str]:
    return [e["name"] for e in pod["spec"]["containers"][0]["env"]]


def test_a_new_job_gets_its_inference_pod_owned_and_labelled():
    pods = pods_of(job())
    assert list(pods) == ["helmet-detection-demo-infer"]
    pod = pods["helmet-detection-demo-infer"]
    meta = pod["metadata"]
    assert meta["ownerReferences"] == [{
        "apiVersion": "sedna.io/v1alpha1", "kind": "IncrementalLearningJob", "name": "helmet-detection-demo",
        "uid": UID, "controller": True, "blockOwnerDeletion": True}]
    assert is_controlled_by(pod, job())
    assert meta["labels"] == {f"{PREFIX}name": "helmet-detection-demo", f"{PREFIX}uid": UID,
                              f"{PREFIX}worker-type": "inference", **MANAGED_BY}
    assert meta["annotations"][DEPLOYS_ANNOTATION] == "0"
    spec = pod["spec"]
    assert spec["hostNetwork"] is True and "restartPolicy" not in spec and spec["nodeName"] == "edge-node-1"


def test_the_inference_pod_env_is_upstreams_with_hot_update():
    pod = pods_of(job())["helmet-detection-demo-infer"]
    values = env(pod)
    assert names(pod)[-10:] == ["NAMESPACE", "JOB_NAME", "WORKER_NAME", "HEM_NAME", "HEM_PARAMETERS", "LC_SERVER",
                                "MODEL_HOT_UPDATE", "MODEL_POLL_PERIOD_SECONDS", "MODEL_HOT_UPDATE_CONFIG",
                                "MODEL_URL"]
    assert values["WORKER_NAME"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}
    assert values["HEM_NAME"] == "IBT"
    assert json.loads(values["HEM_PARAMETERS"]) == [{"key": "threshold_img", "value": "0.9"},
                                                    {"key": "threshold_box", "value": "0.9"}]
    assert values["LC_SERVER"] == CONFIG.lc_server
    assert values["MODEL_POLL_PERIOD_SECONDS"] == "60"
    assert values["MODEL_HOT_UPDATE_CONFIG"] == "/model-hot-update/model_config.json"
    assert values["MODEL_URL"] == "/home/data/models/deploy_model/saved_model.pb"
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "sedna-model-hot-update-volume")
    assert volume["hostPath"] == {
        "path": "/var/lib/sedna/model-hot-update/default/incrementallearningjob/helmet-detection-demo/",
        "type": "DirectoryOrCreate"}


def test_without_hot_update_no_hot_update_env_or_volume():
    cr = job()
    cr["spec"]["deploySpec"]["model"]["hotUpdateEnabled"] = False
    pod = pods_of(cr)["helmet-detection-demo-infer"]
    assert "MODEL_HOT_UPDATE" not in env(pod)
    assert all(v["name"] != "sedna-model-hot-update-volume" for v in pod["spec"]["volumes"])


def test_train_ready_builds_the_train_pod_from_the_reported_input():
    pods = pods_of(at(Position(stage="Train", type="Ready", data=TRAIN_DATA)))
    pod = pods["helmet-detection-demo-train-1"]
    assert pod["metadata"]["labels"][f"{PREFIX}worker-type"] == "train"
    values = env(pod)
    assert names(pod)[-8:] == ["NAMESPACE", "JOB_NAME", "WORKER_NAME", "LC_SERVER", "BASE_MODEL_URL",
                               "MODEL_URL", "TRAIN_DATASET_URL", "ORIGINAL_DATASET_URL"]
    assert values["BASE_MODEL_URL"] == "/home/data/models/base_model"
    assert values["MODEL_URL"] == "/home/data/output/train/1"
    assert values["TRAIN_DATASET_URL"] == "/home/data/output/data/train/1/data.txt"
    assert values["ORIGINAL_DATASET_URL"] == "/home/data/data/helmet_detection/train_data/train_data.txt"
    assert pod["spec"]["restartPolicy"] == "OnFailure" and pod["spec"]["hostNetwork"] is True


def test_eval_running_builds_the_eval_pod_with_every_model():
    pods = pods_of(at(Position(stage="Eval", type="Running", data=EVAL_DATA, cycle=1)))
    pod = pods["helmet-detection-demo-eval-1"]
    values = env(pod)
    assert values["MODEL_URLS"] == "/home/data/output/train/1/model.pb;/home/data/models/deploy_model/saved_model.pb"
    assert values["TEST_DATASET_URL"] == "/home/data/output/data/eval/1/data.txt"
    assert "helmet-detection-demo-infer" in pods and len(pods) == 2


def test_a_finished_stage_has_no_pod_and_the_next_waits():
    pods = pods_of(at(Position(stage="Train", type="Completed", data=TRAIN_DATA, cycle=1)))
    assert list(pods) == ["helmet-detection-demo-infer"]


def test_an_unchanged_spec_builds_identical_pods_and_an_edit_changes_only_its_pod():
    cr = at(Position(stage="Train", type="Running", data=TRAIN_DATA, cycle=1))
    first, again = pods_of(cr), pods_of(copy.deepcopy(cr))
    assert first == again
    edited = copy.deepcopy(cr)
    edited["spec"]["trainSpec"]["template"]["spec"]["containers"][0]["image"] = "example/train:v2"
    after = pods_of(edited)
    train, infer = "helmet-detection-demo-train-1", "helmet-detection-demo-infer"
    hash_of = lambda p: p["metadata"]["annotations"][SPEC_HASH_ANNOTATION]  # noqa: E731
    assert hash_of(after[train]) != hash_of(first[train])
    assert hash_of(after[infer]) == hash_of(first[infer])


def test_a_deploy_recreates_the_inference_pod():
    cr = at(Position(stage="Deploy", type="Ready", data="", deploys=0))
    cr["spec"]["deploySpec"]["model"]["hotUpdateEnabled"] = False
    before = pods_of({**cr, "status": with_position({}, Position(stage="Deploy", type="Waiting"), now=NOW)})
    after = pods_of(cr)
    pod = "helmet-detection-demo-infer"
    assert after[pod]["metadata"]["annotations"][DEPLOYS_ANNOTATION] == "1"
    assert after[pod]["metadata"]["annotations"][SPEC_HASH_ANNOTATION] != \
        before[pod]["metadata"]["annotations"][SPEC_HASH_ANNOTATION]


@pytest.mark.parametrize(("change", "error", "reason"), [
    (lambda s: s["initialModel"].update(name="nope"), MissingDependency, "ModelNotFound"),
    (lambda s: s["deploySpec"]["model"].update(name="nope"), MissingDependency, "ModelNotFound"),
    (lambda s: s.update(evalSpec={**s["evalSpec"], "initialEvalModel": {"name": "nope"}}), MissingDependency,
     "ModelNotFound"),
    (lambda s: s["dataset"].update(name="nope"), MissingDependency, "DatasetNotFound"),
    (lambda s: s.update(credentialName="nope"), MissingDependency, "SecretNotFound"),
    (lambda s: s["evalSpec"]["template"]["spec"].update(containers=[]), InvalidSpec, "InvalidTemplate"),
    (lambda s: s["deploySpec"].pop("hardExampleMining"), InvalidSpec, "InvalidSpec"),
    (lambda s: s["deploySpec"]["model"].update(pollPeriodSeconds=0), InvalidSpec, "InvalidSpec"),
    (lambda s: s.pop("initialModel"), InvalidSpec, "InvalidSpec"),
])
def test_bad_specs_are_spec_errors_with_a_reason(change, error, reason):
    cr = job()
    change(cr["spec"])
    with pytest.raises(error) as exc:
        il.build(cr, deps())
    assert exc.value.reason == reason


def observed(cr: dict, pods=(), problem=None, retrying=False) -> Observed:
    return Observed(children={"pods": list(pods)}, desired=None if problem else {"pods": {}}, converged=True,
                    now=NOW, problem=problem, retrying=retrying)


def pod(name: str, worker_type: str, phase: str) -> dict:
    return {"metadata": {"name": name, "labels": {f"{PREFIX}worker-type": worker_type}}, "status": {"phase": phase}}


def test_status_follows_the_train_pod_to_completion():
    cr = at(Position(stage="Train", type="Starting", data=TRAIN_DATA, cycle=1))
    running = il.status(cr, observed(cr, [pod("helmet-detection-demo-train-1", "train", "Running")]))
    assert (running["conditions"][-1]["type"], running["conditions"][-1]["stage"]) == ("Running", "Train")
    cr["status"] = running
    done = il.status(cr, observed(cr, [pod("helmet-detection-demo-train-1", "train", "Succeeded")]))
    assert done["conditions"][-1]["type"] == "Completed" and done["cycle"] == 1
    cr["status"] = done
    nxt = il.status(cr, observed(cr))
    assert (nxt["conditions"][-1]["stage"], nxt["conditions"][-1]["type"]) == ("Eval", "Waiting")
    assert learning.completed_data(nxt, "Train")["input"]["outputDir"] == "/output/train/1"


def test_a_bad_spec_is_the_failed_condition_and_clears_to_train_waiting():
    cr = job()
    bad = ("InvalidSpec", "spec.deploySpec.model.name must be a non-empty string")
    failed = il.status(cr, observed(cr, problem=bad))
    current = failed["conditions"][-1]
    assert (current["type"], current["status"], current["reason"], current["stage"]) == (
        "Failed", "True", "InvalidSpec", "Train")
    cr["status"] = failed
    assert il.status(cr, observed(cr, problem=bad)) == failed
    cr["status"] = failed
    fixed = il.status(cr, observed(cr))
    assert (fixed["conditions"][-1]["type"], fixed["conditions"][-1]["stage"]) == ("Waiting", "Train")


@pytest.mark.parametrize("before", [
    pytest.param(None, id="new-job"),
    pytest.param(Position(stage="Eval", type="Waiting", reason="Waiting", message="waiting for the eval trigger",
                          cycle=1), id="waiting-in-eval"),
    pytest.param(Position(stage="Train", type="Running", reason="WorkerRunning", message="the train worker is running",
                          data=TRAIN_DATA, cycle=1), id="training"),
])
def test_a_missing_model_is_a_wait_with_its_reason_that_clears_when_it_appears(before):
    cr = job() if before is None else at(before)
    missing = ("ModelNotFound", "Model default/initial-model does not exist")
    waiting = il.status(cr, observed(cr, problem=missing, retrying=True))
    current = waiting["conditions"][-1]
    stage = "Eval" if before is not None and before.type == "Waiting" else "Train"
    assert (current["stage"], current["type"], current["status"], current["reason"], current["message"]) == (
        stage, "Waiting", "True", "ModelNotFound", "Model default/initial-model does not exist")
    assert not any(c["type"] == "Failed" and c["status"] == "True" for c in waiting["conditions"])
    cr["status"] = waiting
    assert il.status(cr, observed(cr, problem=missing, retrying=True)) == waiting
    fixed = il.status(cr, observed(cr))
    current = fixed["conditions"][-1]
    assert (current["stage"], current["type"], current["reason"], current["message"]) == (
        stage, "Waiting", "Waiting", f"waiting for the {stage.lower()} trigger")


def test_a_ready_without_models_fails_the_stage_and_builds_no_train_pod():
    data = json.dumps({"input": {"dataURL": "/d.txt", "outputDir": "/o"}})
    cr = at(Position(stage="Train", type="Ready", data=data))
    assert list(pods_of(cr)) == ["helmet-detection-demo-infer"]
    new = il.status(cr, observed(cr))
    current = new["conditions"][-1]
    assert (current["type"], current["reason"]) == ("Failed", "InvalidInput")
    assert "input.models" in current["message"]


def test_the_declaration():
    decl = il.DECLARATION
    assert decl.kind == "IncrementalLearningJob" and decl.report is not None
    assert [o.on_edit for o in decl.owns] == ["recreate"] and decl.owns[0].gvr == PODS
    assert {w.gvr.plural for w in decl.watches} == {"models", "datasets"}


def secret(name: str, endpoint: str) -> dict:
    return {"metadata": {"name": name, "annotations": {"s3-endpoint": endpoint}},
            "stringData": {"ACCESS_KEY_ID": f"{name}-id", "SECRET_ACCESS_KEY": f"{name}-key"}}


def s3_job(status: dict) -> tuple[dict, Dependencies]:
    cr = job(**status)
    cr["spec"]["credentialName"] = "job-secret"
    models = {d["metadata"]["name"]: copy.deepcopy(d) for d in DOCS if d["kind"] == "Model"}
    models["initial-model"]["spec"].update(url="s3://models/base/model.ckpt", credentialName="model-secret")
    base = deps(models=models)
    found = Dependencies(objects=base.objects, children=base.children, config=base.config, now=NOW,
                         secrets={"job-secret": secret("job-secret", "job.s3"),
                                  "model-secret": secret("model-secret", "model.s3")})
    return cr, found


@pytest.mark.parametrize(("base_url", "endpoint"), [
    ("s3://models/base/model.ckpt", "https://model.s3"),     # the initial Model: its own Secret
    ("s3://output/train/1/model.ckpt", "https://job.s3"),    # a trained model: the job's Secret
])
def test_the_base_model_is_fetched_with_the_secret_of_where_it_lives(base_url, endpoint):
    data = json.dumps({"input": {"models": [{"format": "ckpt", "url": base_url}],
                                 "dataURL": "/output/data/train/2/data.txt", "outputDir": "/output/train/2"}})
    cr, found = s3_job(with_position({}, Position(stage="Train", type="Ready", data=data, cycle=1), now=NOW))
    pod = {p["metadata"]["name"]: p for p in il.build(cr, found)[PODS]}["helmet-detection-demo-train-2"]
    [init] = [c for c in pod["spec"]["initContainers"] if c["name"] == "storage-initializer"]
    assert init["args"][0] == base_url
    assert {e["name"]: e["value"] for e in init["env"]}["S3_ENDPOINT_URL"] == endpoint
