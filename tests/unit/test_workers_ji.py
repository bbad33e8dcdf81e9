"""gm.workers: JointInferenceService children, on the helmet-detection example."""

from __future__ import annotations

import base64
import copy

import pytest

from gm.config import WorkerConfig
from gm.kinds.jointinference import build_ji_children, hpa_names
from gm.workers.gojson import go_json, hem_parameters
from gm.workers.owned import MANAGED_BY, MANAGED_BY_LABEL
from gm.workers.specerrors import InvalidSpec, MissingDependency, SpecError
from shared.objects import SPEC_HASH_ANNOTATION, is_controlled_by, spec_hash_of

NAME = "helmet-detection-inference-example"
UID = "6f1d2c3b-8a9e-4c7d-b1e2-3f4a5b6c7d8e"
PREFIX = "jointinferenceservice.sedna.io/"
LITTLE_IMAGE = "kubeedge/sedna-example-joint-inference-helmet-detection-little:v0.3.0"
BIG_IMAGE = "kubeedge/sedna-example-joint-inference-helmet-detection-big:v0.3.0"


def helmet_ji() -> dict:
    return {
        "apiVersion": "sedna.io/v1alpha1",
        "kind": "JointInferenceService",
        "metadata": {"name": NAME, "namespace": "default", "uid": UID, "generation": 1},
        "spec": {
            "edgeWorker": {
                "model": {"name": "helmet-detection-inference-little-model"},
                "hardExampleMining": {"name": "IBT", "parameters": [
                    {"key": "threshold_img", "value": "0.9"},
                    {"key": "threshold_box", "value": "0.9"}]},
                "template": {"spec": {
                    "nodeName": "edge-node-1",
                    "containers": [{
                        "image": LITTLE_IMAGE, "imagePullPolicy": "IfNotPresent",
                        "name": "little-model",
                        "env": [{"name": "input_shape", "value": "416,736"},
                                {"name": "video_url", "value": "rtsp://localhost/video"}],
                        "resources": {"requests": {"memory": "64M", "cpu": "100m"},
                                      "limits": {"memory": "2Gi"}},
                        "volumeMounts": [{"name": "outputdir", "mountPath": "/data/"}],
                    }],
                    "volumes": [{"name": "outputdir", "hostPath": {
                        "path": "/joint_inference/output", "type": "Directory"}}],
                }},
            },
            "cloudWorker": {
                "model": {"name": "helmet-detection-inference-big-model"},
                "template": {"spec": {
                    "nodeName": "cloud-node",
                    "containers": [{
                        "image": BIG_IMAGE, "name": "big-model",
                        "imagePullPolicy": "IfNotPresent",
                        "env": [{"name": "input_shape", "value": "544,544"}],
                        "resources": {"requests": {"memory": "2Gi"}},
                    }],
                }},
            },
        },
    }


def model(name: str, url: str, **spec) -> dict:
    return {"apiVersion": "sedna.io/v1alpha1", "kind": "Model",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"url": url, "format": "pb", **spec}}


LITTLE = model("helmet-detection-inference-little-model", "/data/little-model/yolo3_resnet18.pb")
BIG = model("helmet-detection-inference-big-model", "/data/big-model/yolo3_darknet.pb")
CONFIG = WorkerConfig()


def build(ji=None, *, edge=LITTLE, cloud=BIG, config=CONFIG, secrets=None):
    return build_ji_children(ji if ji is not None else helmet_ji(), edge_model=edge,
                             cloud_model=cloud, config=config, secrets=secrets)


def pod_spec(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]


def env_of(deployment: dict) -> list[dict]:
    return pod_spec(deployment)["containers"][0]["env"]


WORKER_NAME = {"name": "WORKER_NAME",
               "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}


def test_names_kinds_and_order():
    children = build()
    assert [(o["kind"], o["metadata"]["name"]) for o in children.objects()] == [
        ("Deployment", f"{NAME}-deployment-cloud"),
        ("Service", f"{NAME}-cloud"),
        ("Deployment", f"{NAME}-deployment-edge"),
    ]
    assert {o["metadata"]["namespace"] for o in children.objects()} == {"default"}
    assert children.cloud_hpa is None and children.edge_hpa is None
    assert children.edge_node == "edge-node-1"


def test_edge_env_exact_in_order():
    assert env_of(build().edge_deployment) == [
        {"name": "input_shape", "value": "416,736"},
        {"name": "video_url", "value": "rtsp://localhost/video"},
        {"name": "DATA_PATH_PREFIX", "value": "/home/data"},
        {"name": "NAMESPACE", "value": "default"},
        {"name": "SERVICE_NAME", "value": NAME},
        {"name": "JOB_NAME", "value": NAME},
        WORKER_NAME,
        {"name": "MODEL_URL", "value": "/home/data/data/little-model/yolo3_resnet18.pb"},
        {"name": "LC_SERVER", "value": "http://localhost:9100"},
        {"name": "BIG_MODEL_IP", "value": f"{NAME}-cloud.default"},
        {"name": "BIG_MODEL_PORT", "value": "5000"},
        {"name": "HEM_NAME", "value": "IBT"},
        {"name": "HEM_PARAMETERS", "value": '[{"key":"threshold_img","value":"0.9"},'
                                            '{"key":"threshold_box","value":"0.9"}]'},
    ]


def test_cloud_env_with_s3_model_and_credentials():
    secret = {"metadata": {"name": "minio", "annotations": {"s3-endpoint": "minio:9000"}},
              "data": {"ACCESS_KEY_ID": base64.b64encode(b"ak").decode(),
                       "SECRET_ACCESS_KEY": base64.b64encode(b"sk").decode()}}
    big = model("helmet-detection-inference-big-model",
                "s3://models/helmet/yolo3_darknet.pb", credentialName="minio")
    children = build(cloud=big, secrets={"minio": secret},
                     config=WorkerConfig(lc_server="http://127.0.0.1:9100"))
    assert env_of(children.cloud_deployment) == [
        {"name": "input_shape", "value": "544,544"},
        {"name": "NAMESPACE", "value": "default"},
        {"name": "SERVICE_NAME", "value": NAME},
        {"name": "JOB_NAME", "value": NAME},
        WORKER_NAME,
        {"name": "MODEL_URL", "value": "/downloads/models/helmet/yolo3_darknet.pb"},
        {"name": "BIG_MODEL_BIND_PORT", "value": "5000"},
    ]
    spec = pod_spec(children.cloud_deployment)
    init = spec["initContainers"][0]
    assert init["args"] == ["s3://models/helmet/yolo3_darknet.pb", "/downloads/models/helmet/"]
    assert init["env"][:3] == [{"name": "S3_ENDPOINT_URL", "value": "https://minio:9000"},
                               {"name": "ACCESS_KEY_ID", "value": "ak"},
                               {"name": "SECRET_ACCESS_KEY", "value": "sk"}]
    assert spec["volumes"] == [{"name": "sedna-storage-initializer", "emptyDir": {}}]
    assert spec["containers"][0]["volumeMounts"] == [
        {"name": "sedna-storage-initializer", "mountPath": "/downloads", "readOnly": True}]
    assert "LC_SERVER" in {e["name"] for e in env_of(children.edge_deployment)}
    assert {"name": "LC_SERVER", "value": "http://127.0.0.1:9100"} in env_of(
        children.edge_deployment)


def test_edge_keeps_user_volumes_and_adds_model_mount():
    spec = pod_spec(build().edge_deployment)
    assert spec["volumes"] == [
        {"name": "outputdir", "hostPath": {"path": "/joint_inference/output",
                                           "type": "Directory"}},
        {"name": "data-little-modelz", "hostPath": {"path": "/data/little-model/",
                                                    "type": "Directory"}},
    ]
    assert spec["containers"][0]["volumeMounts"] == [
        {"name": "outputdir", "mountPath": "/data/"},
        {"name": "data-little-modelz", "mountPath": "/home/data/data/little-model/"},
    ]
    assert "initContainers" not in spec
    assert spec["nodeName"] == "edge-node-1"
    assert "hostNetwork" not in spec and "restartPolicy" not in spec


@pytest.mark.parametrize("worker,app", [
    pytest.param("cloud", f"{NAME}-Cloud-svc", id="cloud"),
    pytest.param("edge", f"{NAME}-Edge-svc", id="edge"),
])
def test_deployment_labels_selector_template(worker, app):
    dep = getattr(build(), f"{worker}_deployment")
    expected = {f"{PREFIX}name": NAME, f"{PREFIX}uid": UID, f"{PREFIX}worker-type": worker,
                "app.sedna.io": app}
    assert dep["metadata"]["labels"] == {**expected, **MANAGED_BY}
    assert dep["spec"]["selector"] == {"matchLabels": expected}
    assert dep["spec"]["template"]["metadata"]["labels"] == expected
    assert "replicas" not in dep["spec"]


def test_template_labels_and_annotations_survive():
    ji = helmet_ji()
    ji["spec"]["edgeWorker"]["template"]["metadata"] = {
        "labels": {"team": "vision"}, "annotations": {"prometheus.io/scrape": "true"}}
    meta = build(ji).edge_deployment["spec"]["template"]["metadata"]
    assert meta["labels"]["team"] == "vision"
    assert meta["labels"][f"{PREFIX}worker-type"] == "edge"
    assert meta["annotations"] == {"prometheus.io/scrape": "true"}


def test_service_exact():
    svc = build().cloud_service
    labels = {f"{PREFIX}name": NAME, f"{PREFIX}uid": UID, f"{PREFIX}worker-type": "cloud"}
    assert svc["metadata"]["labels"] == {**labels, **MANAGED_BY}
    assert svc["spec"] == {"type": "ClusterIP", "selector": labels, "ports": [
        {"name": "tcp-0", "protocol": "TCP", "port": 5000, "targetPort": 5000}]}


def test_every_child_is_owned_and_hashed():
    ji = helmet_ji()
    ji["spec"]["cloudWorker"]["hpa"] = {"maxReplicas": 3}
    children = build(ji)
    assert len(children.objects()) == 4
    for obj in children.objects():
        assert obj["metadata"]["ownerReferences"] == [{
            "apiVersion": "sedna.io/v1alpha1", "kind": "JointInferenceService", "name": NAME,
            "uid": UID, "controller": True, "blockOwnerDeletion": True}]
        assert is_controlled_by(obj, ji)
        assert len(spec_hash_of(obj)) == 16


def test_hpa_exact():
    ji = helmet_ji()
    behavior = {"scaleDown": {"stabilizationWindowSeconds": 60}}
    metrics = [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]
    ji["spec"]["edgeWorker"]["hpa"] = {"minReplicas": 1, "maxReplicas": 4, "metrics": metrics,
                                       "behavior": behavior}
    hpa = build(ji).edge_hpa
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["kind"] == "HorizontalPodAutoscaler"
    assert hpa["metadata"]["name"] == f"hpa-{NAME}-deployment-edge"
    assert hpa["metadata"]["name"] == hpa_names(NAME)[1]
    assert hpa["metadata"]["labels"][f"{PREFIX}worker-type"] == "edge"
    assert hpa["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                           "name": f"{NAME}-deployment-edge"},
        "minReplicas": 1, "maxReplicas": 4, "metrics": metrics, "behavior": behavior}


def test_unchanged_spec_gives_identical_output_and_input_is_untouched():
    ji = helmet_ji()
    before = copy.deepcopy(ji)
    first, second = build(ji), build(copy.deepcopy(ji))
    assert first == second
    assert ji == before
    reordered = helmet_ji()
    reordered["spec"] = dict(reversed(list(reordered["spec"].items())))
    assert build(reordered).objects() == first.objects()


def hashes(children) -> dict[str, str]:
    return {o["metadata"]["name"]: spec_hash_of(o) for o in children.objects()}


def changed(a, b) -> set[str]:
    ha, hb = hashes(a), hashes(b)
    return {k for k in ha.keys() | hb.keys() if ha.get(k) != hb.get(k)}


def test_edits_change_only_the_affected_hash():
    base = build()
    ji = helmet_ji()
    ji["spec"]["edgeWorker"]["template"]["spec"]["containers"][0]["env"][0]["value"] = "320,320"
    assert changed(base, build(ji)) == {f"{NAME}-deployment-edge"}
    ji = helmet_ji()
    ji["spec"]["edgeWorker"]["hardExampleMining"]["parameters"][0]["value"] = "0.8"
    assert changed(base, build(ji)) == {f"{NAME}-deployment-edge"}
    new_big = model(BIG["metadata"]["name"], "/data/big-model/v2.pb")
    assert changed(base, build(cloud=new_big)) == {f"{NAME}-deployment-cloud"}
    ji = helmet_ji()
    ji["spec"]["cloudWorker"]["hpa"] = {"maxReplicas": 2}
    assert changed(base, build(ji)) == {f"hpa-{NAME}-deployment-cloud"}
    ji["metadata"]["generation"] = 7
    assert changed(base, build(ji)) == {f"hpa-{NAME}-deployment-cloud"}


def test_hash_annotation_is_the_hash_of_the_rest():
    """The rest less the managed-by marker: the hash a GM from before the marker recorded."""
    from shared.objects import spec_hash
    dep = copy.deepcopy(build().edge_deployment)
    recorded = dep["metadata"].pop("annotations")[SPEC_HASH_ANNOTATION]
    assert dep["metadata"]["labels"].pop(MANAGED_BY_LABEL) == "sedna-gm"
    assert recorded == spec_hash(dep)


def test_injected_env_replaces_user_entry_of_same_name():
    ji = helmet_ji()
    ji["spec"]["edgeWorker"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "BIG_MODEL_IP", "value": "10.0.0.9"})
    env = env_of(build(ji).edge_deployment)
    assert [e for e in env if e["name"] == "BIG_MODEL_IP"] == [
        {"name": "BIG_MODEL_IP", "value": f"{NAME}-cloud.default"}]


def test_hem_parameters_encoding():
    assert hem_parameters(None) == "null"
    assert hem_parameters([]) == "[]"
    assert hem_parameters([{"value": "a<b&c>", "key": "k", "extra": 1}]) == (
        '[{"key":"k","value":"a\\u003cb\\u0026c\\u003e"}]')
    assert go_json({"s": "\u2028"}) == '{"s":"\\u2028"}'
    ji = helmet_ji()
    del ji["spec"]["edgeWorker"]["hardExampleMining"]["parameters"]
    assert env_of(build(ji).edge_deployment)[-1] == {"name": "HEM_PARAMETERS", "value": "null"}


def test_multi_container_template_gets_env_in_every_container():
    ji = helmet_ji()
    ji["spec"]["cloudWorker"]["template"]["spec"]["containers"].append(
        {"name": "sidecar", "image": "busybox:1.36"})
    containers = pod_spec(build(ji).cloud_deployment)["containers"]
    assert [c["env"][-1] for c in containers] == [
        {"name": "BIG_MODEL_BIND_PORT", "value": "5000"}] * 2


def mutate(path, value):
    ji = helmet_ji()
    target = ji
    for step in path[:-1]:
        target = target[step]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return ji


@pytest.mark.parametrize("ji,reason,message", [
    pytest.param(mutate(("spec", "edgeWorker", "template", "spec", "containers"), []),
                 "InvalidTemplate", "spec.edgeWorker.template.spec.containers has no container",
                 id="no-containers"),
    pytest.param(mutate(("spec", "cloudWorker", "template"), KeyError),
                 "InvalidTemplate", "spec.cloudWorker.template is missing", id="no-template"),
    pytest.param(mutate(("spec", "cloudWorker", "template", "spec", "containers", 0, "image"),
                        KeyError),
                 "InvalidTemplate", r"spec.cloudWorker.template.spec.containers\[0\].image "
                 "is required", id="no-image"),
    pytest.param(mutate(("spec", "edgeWorker", "hardExampleMining"), KeyError),
                 "InvalidSpec", "hardExampleMining.name is required", id="no-hem"),
    pytest.param(mutate(("spec", "edgeWorker", "hardExampleMining", "parameters"),
                        [{"key": "threshold_img", "value": 0.9}]),
                 "InvalidSpec", r"parameters\[0\] needs string key and value", id="hem-number"),
    pytest.param(mutate(("spec", "cloudWorker", "model"), {}),
                 "InvalidSpec", "spec.cloudWorker.model.name is required", id="no-model-name"),
    pytest.param(mutate(("spec", "edgeWorker"), KeyError),
                 "InvalidSpec", "spec.edgeWorker is required", id="no-edge-worker"),
    pytest.param(mutate(("spec", "edgeWorker", "hpa"), {"minReplicas": 5, "maxReplicas": 2}),
                 "InvalidHPA", "spec.edgeWorker.hpa.minReplicas must be an integer in "
                 "1..maxReplicas", id="hpa-min-over-max"),
    pytest.param(mutate(("spec", "cloudWorker", "hpa"), {"minReplicas": 1}),
                 "InvalidHPA", "spec.cloudWorker.hpa.maxReplicas must be an integer >= 1",
                 id="hpa-no-max"),
    pytest.param(mutate(("metadata", "uid"), KeyError),
                 "InvalidObject", "JointInferenceService lacks metadata.uid", id="no-uid"),
    pytest.param(mutate(("kind",), "FederatedLearningJob"),
                 "InvalidObject", "expected a JointInferenceService", id="wrong-kind"),
    pytest.param(mutate(("metadata", "name"), "j" * 54),
                 "NameTooLong", "app.sedna.io label value", id="name-too-long"),
])
def test_invalid_specs_raise_typed_errors(ji, reason, message):
    with pytest.raises(InvalidSpec, match=message) as info:
        build(ji)
    assert info.value.reason == reason
    assert not info.value.retryable
    assert isinstance(info.value, SpecError)


def test_missing_model_and_secret_are_missing_dependencies():
    with pytest.raises(MissingDependency) as info:
        build(edge=None)
    err = info.value
    assert (err.kind, err.name, err.namespace, err.reason) == (
        "Model", "helmet-detection-inference-little-model", "default", "ModelNotFound")
    assert err.message == "Model default/helmet-detection-inference-little-model does not exist"
    assert err.retryable
    with_cred = model(BIG["metadata"]["name"], "s3://m/big.pb", credentialName="minio")
    with pytest.raises(MissingDependency, match="Secret default/minio does not exist"):
        build(cloud=with_cred, secrets={})


def test_model_without_url_is_invalid():
    with pytest.raises(InvalidSpec, match="Model helmet-detection-inference-big-model has no "
                                          "spec.url"):
        build(cloud=model(BIG["metadata"]["name"], ""))


def test_wrong_model_object_is_a_caller_error():
    with pytest.raises(ValueError, match="looked up Model"):
        build(edge=BIG)


def test_worker_config_validates():
    with pytest.raises(ValueError, match="lc_server must be an http"):
        WorkerConfig(lc_server="localhost:9100")
    with pytest.raises(ValueError, match="image_pull_policy"):
        WorkerConfig(image_pull_policy="Sometimes")
