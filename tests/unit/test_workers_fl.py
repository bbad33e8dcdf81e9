"""gm.workers: FederatedLearningJob children, on the surface-defect-detection example."""

from __future__ import annotations

import base64
import copy

import pytest

from gm.config import WorkerConfig
from gm.kinds.federatedlearning import build_fl_children
from gm.workers.owned import MANAGED_BY
from gm.workers.specerrors import InvalidSpec, MissingDependency
from shared.objects import is_controlled_by, spec_hash_of

JOB = "surface-defect-detection"
UID = "0b8c1a6e-5d4f-4e3a-9c2b-1a0f9e8d7c6b"
PREFIX = "federatedlearningjob.sedna.io/"
AGG_IMAGE = "kubeedge/sedna-example-federated-learning-surface-defect-detection-aggregation:v0.3.0"
TRAIN_IMAGE = "kubeedge/sedna-example-federated-learning-surface-defect-detection-train:v0.3.0"
MODEL = "surface-defect-detection-model"
DS1, DS2 = "edge1-surface-defect-detection-dataset", "edge2-surface-defect-detection-dataset"


def trainer(dataset: str, node: str | None) -> dict:
    spec = {"containers": [{
        "image": TRAIN_IMAGE, "name": "train-worker", "imagePullPolicy": "IfNotPresent",
        "env": [{"name": "batch_size", "value": "32"},
                {"name": "learning_rate", "value": "0.001"},
                {"name": "epochs", "value": "2"}],
        "resources": {"limits": {"memory": "2Gi"}},
    }]}
    if node:
        spec["nodeName"] = node
    return {"dataset": {"name": dataset}, "template": {"spec": spec}}


def surface_defect_fl() -> dict:
    return {
        "apiVersion": "sedna.io/v1alpha1",
        "kind": "FederatedLearningJob",
        "metadata": {"name": JOB, "namespace": "default", "uid": UID},
        "spec": {
            "aggregationWorker": {
                "model": {"name": MODEL},
                "template": {"spec": {
                    "nodeName": "cloud-node",
                    "containers": [{
                        "image": AGG_IMAGE, "name": "agg-worker",
                        "imagePullPolicy": "IfNotPresent",
                        "env": [{"name": "exit_round", "value": "3"}],
                        "resources": {"limits": {"memory": "2Gi"}},
                    }],
                }},
            },
            "trainingWorkers": [trainer(DS1, "edge-node-1"), trainer(DS2, "edge-node-2")],
        },
    }


def obj(kind: str, name: str, spec: dict) -> dict:
    return {"apiVersion": "sedna.io/v1alpha1", "kind": kind,
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": spec}


MODELS = {MODEL: obj("Model", MODEL, {"url": "/model", "format": "pb"})}
DATASETS = {
    DS1: obj("Dataset", DS1, {"url": "/data/1.txt", "format": "txt", "nodeName": "edge-node-1"}),
    DS2: obj("Dataset", DS2, {"url": "/data/2.txt", "format": "txt", "nodeName": "edge-node-2"}),
}
CONFIG = WorkerConfig()


def build(fl=None, *, models=MODELS, datasets=DATASETS, node_addresses=None, secrets=None):
    return build_fl_children(fl if fl is not None else surface_defect_fl(), models=models,
                             datasets=datasets, config=CONFIG, node_addresses=node_addresses,
                             secrets=secrets)


def env_of(pod: dict) -> list[dict]:
    return pod["spec"]["containers"][0]["env"]


def env_map(pod: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in env_of(pod)}


def test_names_kinds_and_order():
    children = build()
    assert [(o["kind"], o["metadata"]["name"]) for o in children.objects()] == [
        ("Pod", f"{JOB}-aggworker"),
        ("Service", f"{JOB}-aggregation"),
        ("Pod", f"{JOB}-trainworker-0"),
        ("Pod", f"{JOB}-trainworker-1"),
    ]
    assert children.aggregator_host == f"{JOB}-aggregation.default"
    assert children.train_nodes == ("edge-node-1", "edge-node-2")


def test_aggregation_pod_env_and_knobs():
    pod = build().aggregation_pod
    assert env_of(pod) == [
        {"name": "exit_round", "value": "3"},
        {"name": "DATA_PATH_PREFIX", "value": "/home/data"},
        {"name": "NAMESPACE", "value": "default"},
        {"name": "JOB_NAME", "value": JOB},
        {"name": "WORKER_NAME", "value": f"{JOB}-aggworker"},
        {"name": "AGG_BIND_PORT", "value": "7363"},
        {"name": "PARTICIPANTS_COUNT", "value": "2"},
        {"name": "TRANSMITTER", "value": "ws"},
        {"name": "MODEL_URL", "value": "/home/data/model"},
    ]
    spec = pod["spec"]
    assert spec["restartPolicy"] == "OnFailure"
    assert spec["nodeName"] == "cloud-node"
    assert "hostNetwork" not in spec and "dnsPolicy" not in spec
    assert spec["volumes"] == [{"name": "model", "hostPath": {"path": "/model"}}]
    assert spec["containers"][0]["volumeMounts"] == [
        {"name": "model", "mountPath": "/home/data/model"}]
    assert pod["metadata"]["labels"] == {f"{PREFIX}name": JOB, f"{PREFIX}uid": UID,
                                         f"{PREFIX}worker-type": "aggregation", **MANAGED_BY}


def test_training_pod_env_and_knobs():
    pod = build().training_pods[1]
    assert pod["metadata"]["name"] == f"{JOB}-trainworker-1"
    assert env_of(pod) == [
        {"name": "batch_size", "value": "32"},
        {"name": "learning_rate", "value": "0.001"},
        {"name": "epochs", "value": "2"},
        {"name": "DATA_PATH_PREFIX", "value": "/home/data"},
        {"name": "NAMESPACE", "value": "default"},
        {"name": "JOB_NAME", "value": JOB},
        {"name": "WORKER_NAME", "value": f"{JOB}-trainworker-1"},
        {"name": "LC_SERVER", "value": "http://localhost:9100"},
        {"name": "AGG_IP", "value": f"{JOB}-aggregation.default"},
        {"name": "AGG_PORT", "value": "7363"},
        {"name": "PARTICIPANTS_COUNT", "value": "2"},
        {"name": "TRANSMITTER", "value": "ws"},
        {"name": "MODEL_NAME", "value": MODEL},
        {"name": "DATASET_NAME", "value": DS2},
        {"name": "MODEL_URL", "value": "/home/data/model"},
        {"name": "TRAIN_DATASET_URL", "value": "/home/data/data/2.txt"},
    ]
    spec = pod["spec"]
    assert (spec["hostNetwork"], spec["restartPolicy"], spec["dnsPolicy"], spec["nodeName"]) == (
        True, "OnFailure", "ClusterFirstWithHostNet", "edge-node-2")
    assert spec["volumes"] == [
        {"name": "model", "hostPath": {"path": "/model"}},
        {"name": "dataz", "hostPath": {"path": "/data/", "type": "Directory"}},
    ]
    assert spec["containers"][0]["volumeMounts"] == [
        {"name": "model", "mountPath": "/home/data/model"},
        {"name": "dataz", "mountPath": "/home/data/data/"},
    ]
    assert pod["metadata"]["labels"] == {f"{PREFIX}name": JOB, f"{PREFIX}uid": UID,
                                         f"{PREFIX}worker-type": "train", **MANAGED_BY}


def test_worker_name_equals_pod_name_for_every_pod():
    children = build()
    for pod in (children.aggregation_pod, *children.training_pods):
        assert env_map(pod)["WORKER_NAME"] == pod["metadata"]["name"]


def test_service_exact():
    svc = build().aggregation_service
    labels = {f"{PREFIX}name": JOB, f"{PREFIX}uid": UID, f"{PREFIX}worker-type": "aggregation"}
    assert svc["metadata"]["name"] == f"{JOB}-aggregation"
    assert svc["spec"] == {"type": "ClusterIP", "selector": labels, "ports": [
        {"name": "tcp-0", "protocol": "TCP", "port": 7363, "targetPort": 7363}]}


def test_every_child_is_owned():
    fl = surface_defect_fl()
    for child in build(fl).objects():
        assert child["metadata"]["ownerReferences"] == [{
            "apiVersion": "sedna.io/v1alpha1", "kind": "FederatedLearningJob", "name": JOB,
            "uid": UID, "controller": True, "blockOwnerDeletion": True}]
        assert is_controlled_by(child, fl)


def test_trainer_without_node_runs_on_its_datasets_node():
    fl = surface_defect_fl()
    fl["spec"]["trainingWorkers"][0] = trainer(DS1, None)
    fl["spec"]["trainingWorkers"].append(trainer(DS1, "edge-node-1"))
    children = build(fl)
    assert children.training_pods[0]["spec"]["nodeName"] == "edge-node-1"
    assert children.train_nodes == ("edge-node-1", "edge-node-2")
    assert env_map(children.aggregation_pod)["PARTICIPANTS_COUNT"] == "3"


def test_template_restart_and_dns_policy_win():
    fl = surface_defect_fl()
    fl["spec"]["trainingWorkers"][0]["template"]["spec"].update(
        {"restartPolicy": "Never", "dnsPolicy": "Default"})
    spec = build(fl).training_pods[0]["spec"]
    assert (spec["restartPolicy"], spec["dnsPolicy"]) == ("Never", "Default")


def test_host_network_aggregator_is_reached_at_its_node_address():
    fl = surface_defect_fl()
    fl["spec"]["aggregationWorker"]["template"]["spec"]["hostNetwork"] = True
    children = build(fl, node_addresses={"cloud-node": "192.168.1.10"})
    assert children.aggregator_host == "192.168.1.10"
    for pod in children.training_pods:
        assert env_map(pod)["AGG_IP"] == "192.168.1.10"
        assert "dnsPolicy" not in pod["spec"]
    with pytest.raises(InvalidSpec, match="node cloud-node of the host-network aggregation "
                                          "worker has no known address") as info:
        build(fl, node_addresses={"edge-node-1": "10.0.0.1"})
    assert info.value.reason == "NodeWithoutAddress"


def test_s3_transmitter_and_pretrained_model():
    secret = {"metadata": {"name": "minio", "annotations": {"s3-endpoint": "minio:9000",
                                                              "s3-usehttps": "0"}},
              "data": {"ACCESS_KEY_ID": base64.b64encode(b"ak").decode(),
                       "SECRET_ACCESS_KEY": base64.b64encode(b"sk").decode()}}
    fl = surface_defect_fl()
    fl["spec"]["transmitter"] = {"s3": {"aggDataPath": "s3://sedna/fl/agg/",
                                        "credentialName": "minio"}}
    fl["spec"]["pretrainedModel"] = {"name": "pretrained"}
    models = {**MODELS, "pretrained": obj("Model", "pretrained",
                                          {"url": "s3://sedna/models/pre.pb", "format": "pb",
                                           "credentialName": "minio"})}
    children = build(fl, models=models, secrets={"minio": secret})
    agg = env_of(children.aggregation_pod)
    assert agg[1:] == [
        {"name": "DATA_PATH_PREFIX", "value": "/home/data"},
        {"name": "S3_ENDPOINT_URL", "value": "http://minio:9000"},
        {"name": "ACCESS_KEY_ID", "value": "ak"},
        {"name": "SECRET_ACCESS_KEY", "value": "sk"},
        {"name": "NAMESPACE", "value": "default"},
        {"name": "JOB_NAME", "value": JOB},
        {"name": "WORKER_NAME", "value": f"{JOB}-aggworker"},
        {"name": "AGG_BIND_PORT", "value": "7363"},
        {"name": "PARTICIPANTS_COUNT", "value": "2"},
        {"name": "TRANSMITTER", "value": "s3"},
        {"name": "AGG_DATA_PATH", "value": "s3://sedna/fl/agg/"},
        {"name": "MODEL_URL", "value": "/home/data/model"},
        {"name": "PRETRAINED_MODEL_URL", "value": "/downloads/sedna/models/pre.pb"},
    ]
    train = env_map(children.training_pods[0])
    assert (train["TRANSMITTER"], train["AGG_DATA_PATH"], train["PRETRAINED_MODEL_URL"]) == (
        "s3", "s3://sedna/fl/agg/", "/downloads/sedna/models/pre.pb")
    init = children.training_pods[0]["spec"]["initContainers"][0]
    assert init["args"] == ["s3://sedna/models/pre.pb", "/downloads/sedna/models/"]


def test_unchanged_spec_gives_identical_output():
    fl = surface_defect_fl()
    before = copy.deepcopy(fl)
    assert build(fl) == build(copy.deepcopy(fl))
    assert fl == before


def hashes(children) -> list[str]:
    return [spec_hash_of(o) for o in children.objects()]


def test_editing_one_trainer_changes_only_its_hash():
    base = hashes(build())
    fl = surface_defect_fl()
    fl["spec"]["trainingWorkers"][1]["template"]["spec"]["containers"][0]["env"][2]["value"] = "5"
    edited = hashes(build(fl))
    assert [a != b for a, b in zip(base, edited, strict=True)] == [False, False, False, True]


def test_editing_aggregator_changes_only_its_hash():
    base = hashes(build())
    fl = surface_defect_fl()
    fl["spec"]["aggregationWorker"]["template"]["spec"]["containers"][0]["env"][0]["value"] = "5"
    edited = hashes(build(fl))
    assert [a != b for a, b in zip(base, edited, strict=True)] == [True, False, False, False]


def test_job_level_inputs_reach_every_pod_hash():
    base = hashes(build())
    moved = {**DATASETS, DS1: obj("Dataset", DS1, {"url": "/data/1b.txt", "format": "txt",
                                                   "nodeName": "edge-node-1"})}
    assert [a != b for a, b in zip(base, hashes(build(datasets=moved)), strict=True)] == [
        False, False, True, False]
    fl = surface_defect_fl()
    fl["spec"]["trainingWorkers"].append(trainer(DS2, "edge-node-2"))
    grown = hashes(build(fl))
    assert [a != b for a, b in zip(base, grown[:4], strict=True)] == [True, False, True, True]


def drop(path):
    fl = surface_defect_fl()
    target = fl
    for step in path[:-1]:
        target = target[step]
    del target[path[-1]]
    return fl


def with_value(path, value):
    fl = surface_defect_fl()
    target = fl
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return fl


@pytest.mark.parametrize("fl,reason,message", [
    pytest.param(with_value(("spec", "trainingWorkers"), []), "InvalidSpec",
                 "spec.trainingWorkers needs at least one worker", id="no-trainers"),
    pytest.param(with_value(("spec", "trainingWorkers"), ["edge-node-1"]), "InvalidSpec",
                 r"spec.trainingWorkers\[0\] is not an object", id="trainer-not-object"),
    pytest.param(drop(("spec", "aggregationWorker")), "InvalidSpec",
                 "spec.aggregationWorker is required", id="no-aggregator"),
    pytest.param(drop(("spec", "trainingWorkers", 1, "template")), "InvalidTemplate",
                 r"spec.trainingWorkers\[1\].template is missing", id="no-template"),
    pytest.param(with_value(("spec", "trainingWorkers", 0, "template", "spec", "containers"),
                            []), "InvalidTemplate",
                 r"spec.trainingWorkers\[0\].template.spec.containers has no container",
                 id="no-containers"),
    pytest.param(drop(("spec", "trainingWorkers", 0, "dataset")), "InvalidSpec",
                 r"spec.trainingWorkers\[0\].dataset.name is required", id="no-dataset"),
    pytest.param(with_value(("spec", "transmitter"), {"s3": {}}), "InvalidSpec",
                 "spec.transmitter.s3.aggDataPath is required", id="s3-no-path"),
    pytest.param(with_value(("metadata", "name"), "f" * 52), "InvalidName",
                 "Service name", id="name-too-long-for-service"),
    pytest.param(with_value(("spec", "trainingWorkers", 0, "template", "spec", "containers", 0,
                             "env"), {"batch_size": "32"}), "InvalidTemplate",
                 r"containers\[0\].env must be a list", id="env-not-list"),
])
def test_invalid_specs(fl, reason, message):
    with pytest.raises(InvalidSpec, match=message) as info:
        build(fl)
    assert info.value.reason == reason


@pytest.mark.parametrize("kwargs,kind,name", [
    pytest.param({"datasets": {DS1: DATASETS[DS1]}}, "Dataset", DS2, id="dataset"),
    pytest.param({"models": {}}, "Model", MODEL, id="model"),
])
def test_missing_dependencies(kwargs, kind, name):
    with pytest.raises(MissingDependency) as info:
        build(**kwargs)
    assert (info.value.kind, info.value.name, info.value.reason) == (kind, name, f"{kind}NotFound")


def test_missing_pretrained_model_and_transmitter_secret():
    fl = surface_defect_fl()
    fl["spec"]["pretrainedModel"] = {"name": "pretrained"}
    with pytest.raises(MissingDependency, match="Model default/pretrained does not exist"):
        build(fl)
    fl = surface_defect_fl()
    fl["spec"]["transmitter"] = {"s3": {"aggDataPath": "s3://b/p/", "credentialName": "minio"}}
    with pytest.raises(MissingDependency, match="Secret default/minio does not exist"):
        build(fl)
