"""A whole incremental-learning cycle through the GM's real report handler, as an LC drives it.

The LC evaluates the triggers and reports each stage Ready with its input; the GM runs the
stage's pod, the pod's end (the dev cluster's `devcluster.sedna.io/phase` annotation) moves
the stage on, and Deploy/Ready restarts the inference pod on the deployed model. Reports go
through gm/edge/status.py's handler (real StatusWriter, real API server), in upstream's bodies.
"""

from __future__ import annotations

import copy
from typing import Any

from gm.edge.pipeline import StatusPipeline
from gm.edge.status import UpstreamStatus
from gm.kindlib import learning
from gm.kube.apierrors import NotFound
from gm.kube.resources import DATASETS, MODELS, PODS, sedna_gvr
from gm.kube.statuswriter import StatusWriter
from proto import Message, Op
from shared import apis
from tests.conftest import eventually
from tests.e2e.conftest import load_example
from tests.e2e.kindcases import env_of
from tests.e2e.test_gm_edge import connect  # noqa: F401 - the fixture: native LCs on the hub

NS = "default"
NODE = "edge-node-1"
WAIT = 15.0
PHASE = "devcluster.sedna.io/phase"
IL = sedna_gvr(apis.INCREMENTAL_LEARNING)
LL = sedna_gvr(apis.LIFELONG_LEARNING)
PLURALS = {"Dataset": DATASETS, "Model": MODELS, "IncrementalLearningJob": IL, "LifelongLearningJob": LL}
JOB = "helmet-detection-demo"
TRAIN_INPUT = {"models": [{"format": "ckpt", "url": "/models/base_model"}],
               "dataURL": "/output/data/train/1/data.txt", "outputDir": "/output/train/1"}
TRAINED = [{"format": "pb", "url": "/output/train/1/model.pb", "metrics": {"loss": 0.83}},
           {"format": "ckpt", "url": "/output/train/1", "metrics": {"loss": 0.83}}]
EVAL_INPUT = {"models": [{"format": "pb", "url": "/output/train/1/model.pb"},
                         {"format": "pb", "url": "/models/deploy_model/saved_model.pb"}],
              "dataURL": "/output/data/eval/1/data.txt"}


async def apply_example(api, file: str, *, change=None) -> None:
    for obj in load_example(file):
        obj = copy.deepcopy(obj)
        if obj["kind"] in ("IncrementalLearningJob", "LifelongLearningJob"):
            # PyYAML reads the unquoted 02:00 as a base-60 integer; Kubernetes keeps it a string
            obj["spec"]["trainSpec"]["trigger"]["timer"] = {"start": "02:00", "end": "20:00"}
            if change is not None:
                change(obj["spec"])
        await api.create(PLURALS[obj["kind"]], obj, namespace=NS)


class FakeLC:
    """What the LC sends upstream for a learning job, numbered as a native LC's outbox."""

    def __init__(self, handler: UpstreamStatus, kind: str, name: str):
        self.handler, self.kind, self.name, self.seq = handler, kind, name, 0

    async def report(self, phase: str, status: str, *, input_: dict | None = None,
                     output: dict | None = None) -> None:
        self.seq += 1
        body: dict[str, Any] = {"phase": phase, "status": status}
        if input_ is not None:
            body["input"] = input_
        body["output"] = output
        await self.handler.handle_status(NODE, Message(Op.STATUS, self.seq, self.kind, NS, self.name, body),
                                         epoch="0123456789abcdef")


async def read(api, gvr, name: str) -> dict | None:
    try:
        return await api.get(gvr, name, namespace=NS)
    except NotFound:
        return None


async def at(api, gvr, name: str, stage: str, type_: str) -> dict | None:
    obj = await read(api, gvr, name)
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    last = conditions[-1] if conditions else {}
    if (last.get("stage"), last.get("type"), last.get("status")) == (stage, type_, "True"):
        return obj["status"]
    return None


async def running(api, name: str) -> dict | None:
    pod = await read(api, PODS, name)
    return pod if pod is not None and (pod.get("status") or {}).get("phase") == "Running" else None


async def end(api, name: str, phase: str) -> None:
    await api.patch(PODS, name, {"metadata": {"annotations": {PHASE: phase}}}, namespace=NS)


async def test_an_incremental_learning_cycle_train_eval_deploy_and_back(gm, api, sedna_cluster):
    def no_hot_update(spec: dict) -> None:
        spec["deploySpec"]["model"]["hotUpdateEnabled"] = False

    await apply_example(api, "incremental-learning-helmet-detection.yaml", change=no_hot_update)
    lc = FakeLC(UpstreamStatus(StatusPipeline(StatusWriter(api))), "IncrementalLearningJob", JOB)
    infer = f"{JOB}-infer"
    await eventually(lambda: at(api, IL, JOB, "Train", "Waiting"), within=WAIT, message="Train/Waiting")
    first_infer = await eventually(lambda: running(api, infer), within=WAIT, message="the inference pod running")

    # Train: the LC's trigger fired
    await lc.report("train", "ready", input_=TRAIN_INPUT)
    train = await eventually(lambda: running(api, f"{JOB}-train-1"), within=WAIT, message="the train pod")
    assert env_of(train, "BASE_MODEL_URL") == "/home/data/models/base_model"
    assert env_of(train, "MODEL_URL") == "/home/data/output/train/1"
    assert env_of(train, "TRAIN_DATASET_URL") == "/home/data/output/data/train/1/data.txt"
    assert train["spec"]["restartPolicy"] == "OnFailure" and train["spec"]["hostNetwork"] is True
    status = await eventually(lambda: at(api, IL, JOB, "Train", "Running"), within=WAIT, message="Train/Running")
    assert status["cycle"] == 1
    await lc.report("train", "completed", output={"models": TRAINED})
    await end(api, f"{JOB}-train-1", "Succeeded")
    status = await eventually(lambda: at(api, IL, JOB, "Eval", "Waiting"), within=WAIT, message="Eval/Waiting")
    trained = learning.completed_data(status, "Train")["output"]["models"]
    assert [m["url"] for m in trained] == ["/output/train/1/model.pb", "/output/train/1"]
    await eventually(lambda: _gone(api, f"{JOB}-train-1"), within=WAIT, message="the finished train pod removed")

    # Eval
    await lc.report("eval", "ready", input_=EVAL_INPUT)
    evaluator = await eventually(lambda: running(api, f"{JOB}-eval-1"), within=WAIT, message="the eval pod")
    assert env_of(evaluator, "MODEL_URLS") == \
        "/home/data/output/train/1/model.pb;/home/data/models/deploy_model/saved_model.pb"
    await end(api, f"{JOB}-eval-1", "Succeeded")
    await eventually(lambda: at(api, IL, JOB, "Deploy", "Waiting"), within=WAIT, message="Deploy/Waiting")
    assert learning.has_completed((await read(api, IL, JOB))["status"], "Train")

    # Deploy: the LC copied the trained model to the deploy Model's URL; the pod restarts on it
    await lc.report("deploy", "ready", input_={"models": [TRAINED[0], {"format": "pb",
                                                          "url": "/models/deploy_model/saved_model.pb"}]})
    status = await eventually(lambda: at(api, IL, JOB, "Train", "Waiting"), within=WAIT,
                              message="back to Train/Waiting")
    assert status["deploys"] == 1

    async def restarted() -> dict | None:
        pod = await running(api, infer)
        return pod if pod is not None and pod["metadata"]["uid"] != first_infer["metadata"]["uid"] else None

    again = await eventually(restarted, within=WAIT, message="the inference pod restarted")
    assert again["metadata"]["annotations"]["sedna.io/deploys"] == "1"
    assert env_of(again, "MODEL_URL") == "/home/data/models/deploy_model/saved_model.pb"
    conditions = status["conditions"]
    assert [c["status"] for c in conditions].count("True") == 1 and len(conditions) <= 8
    assert len({learning.condition_key(c) for c in conditions}) == len(conditions)


async def _gone(api, name: str) -> bool:
    return await read(api, PODS, name) is None


async def test_a_failed_train_pod_goes_back_to_train_waiting_and_a_bad_input_is_a_condition(gm, api, sedna_cluster):
    await apply_example(api, "incremental-learning-helmet-detection.yaml")
    lc = FakeLC(UpstreamStatus(StatusPipeline(StatusWriter(api))), "IncrementalLearningJob", JOB)
    await eventually(lambda: at(api, IL, JOB, "Train", "Waiting"), within=WAIT, message="Train/Waiting")
    await lc.report("train", "ready", input_={"dataURL": "/d.txt", "outputDir": "/o"})  # no models

    async def failed_input() -> dict | None:
        obj = await read(api, IL, JOB)
        return next((c for c in obj["status"]["conditions"] if c["type"] == "Failed"
                     and c["reason"] == "InvalidInput"), None)

    cond = await eventually(failed_input, within=WAIT, message="Failed/InvalidInput")
    assert "input.models" in cond["message"]
    await eventually(lambda: at(api, IL, JOB, "Train", "Waiting"), within=WAIT, message="Train/Waiting again")
    assert await read(api, PODS, f"{JOB}-train-1") is None

    await lc.report("train", "ready", input_=TRAIN_INPUT)
    await eventually(lambda: running(api, f"{JOB}-train-1"), within=WAIT, message="the train pod")
    await end(api, f"{JOB}-train-1", "Failed")
    await eventually(lambda: at(api, IL, JOB, "Train", "Waiting"), within=WAIT, message="Train/Waiting after failure")
    failed = next(c for c in (await read(api, IL, JOB))["status"]["conditions"] if c["type"] == "Failed")
    assert (failed["reason"], failed["stage"], failed["status"]) == ("WorkerFailed", "Train", "False")


async def test_a_lifelong_learning_deploy_creates_the_inference_pod_and_writes_the_knowledge_base(gm, api, sedna_cluster):
    await apply_example(api, "lifelong-learning-atcii.yaml")
    name = "atcii-classifier-demo"
    lc = FakeLC(UpstreamStatus(StatusPipeline(StatusWriter(api))), "LifelongLearningJob", name)
    await eventually(lambda: at(api, LL, name, "Train", "Waiting"), within=WAIT, message="Train/Waiting")
    assert await read(api, PODS, f"{name}-infer") is None
    await lc.report("eval", "completed", output={"models": [
        {"format": "pkl", "url": "/output/eval/1/index.pkl", "classes": ["comfort"],
         "current_metric": {"task-0": {"precision_score": 0.8}}, "number_of_labeled_unseen_sample": 5}]})
    await lc.report("deploy", "ready", input_={"models": [{"format": "pkl", "url": "/output/eval/1/index.pkl"}]})
    pod = await eventually(lambda: running(api, f"{name}-infer"), within=WAIT, message="the LL inference pod")
    assert env_of(pod, "OUTPUT_URL") == "/output"
    status = await eventually(lambda: at(api, LL, name, "Train", "Waiting"), within=WAIT, message="Train/Waiting")
    assert status["deploys"] == 1
    assert status["knowledgeBase"]["AIModels"]["listOfAIModels"] == [
        {"modelID": "task-0", "averagePrecision": 0.8, "numberOfTrainSamples": 5}]
    assert learning.completed_data(status, "Eval")["output"]["models"][0]["classes"] == ["comfort"]


async def test_a_hot_update_deploy_keeps_the_inference_pod_and_waits_for_its_report(gm, api, sedna_cluster):
    await apply_example(api, "incremental-learning-helmet-detection.yaml")  # hotUpdateEnabled: true
    lc = FakeLC(UpstreamStatus(StatusPipeline(StatusWriter(api))), "IncrementalLearningJob", JOB)
    infer = f"{JOB}-infer"
    pod = await eventually(lambda: running(api, infer), within=WAIT, message="the inference pod running")
    assert env_of(pod, "MODEL_HOT_UPDATE") == "true"
    await eventually(lambda: at(api, IL, JOB, "Train", "Waiting"), within=WAIT, message="Train/Waiting")
    await lc.report("deploy", "ready", input_={"models": TRAINED[:1]})
    await eventually(lambda: at(api, IL, JOB, "Deploy", "Running"), within=WAIT, message="Deploy/Running")
    await lc.report("deploy", "completed")  # the worker loaded the new model
    status = await eventually(lambda: at(api, IL, JOB, "Train", "Waiting"), within=WAIT, message="Train/Waiting")
    assert status["deploys"] == 0
    assert (await read(api, PODS, infer))["metadata"]["uid"] == pod["metadata"]["uid"]


async def test_the_job_and_its_models_go_to_the_dataset_node(gm, api, sedna_cluster):
    await apply_example(api, "incremental-learning-helmet-detection.yaml")
    await eventually(lambda: gm.edge.nodes_of("IncrementalLearningJob", NS, JOB) == {NODE}, within=WAIT,
                     message="the job placed on the dataset's node")
    for model in ("initial-model", "deploy-model"):
        await eventually(lambda m=model: gm.edge.nodes_of("Model", NS, m) == {NODE}, within=WAIT,
                         message=f"Model {model} sent with the job")


async def test_the_dataset_node_gets_the_job_and_its_ready_report_starts_the_train_pod(gm, api, connect):  # noqa: F811
    await apply_example(api, "incremental-learning-helmet-detection.yaml")
    await eventually(lambda: gm.edge.nodes_of("IncrementalLearningJob", NS, JOB) == {NODE}, within=WAIT,
                     message="the job placed on the dataset's node")
    lc = await connect.native(NODE)
    assert {("IncrementalLearningJob", NS, JOB), ("Model", NS, "initial-model"), ("Model", NS, "deploy-model"),
            ("Dataset", NS, "incremental-dataset")} <= set(lc.snapshot)
    other = await connect.native("edge-node-2")
    refused = await other.report(1, "IncrementalLearningJob", JOB, {"phase": "train", "status": "ready"})
    assert refused.body == {"error": f"IncrementalLearningJob {NS}/{JOB} is not assigned to node edge-node-2"}
    ack = await lc.report(1, "IncrementalLearningJob", JOB, {"phase": "train", "status": "ready",
                                                             "input": TRAIN_INPUT, "output": None})
    assert ack.body is None
    await eventually(lambda: running(api, f"{JOB}-train-1"), within=WAIT, message="the train pod")
