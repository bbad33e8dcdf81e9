"""The Sedna API registry: names, lookups, and the fields that name nodes and references."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from shared import apis

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "upstream"


def _example(filename: str, kind: str) -> dict:
    docs = yaml.safe_load_all((EXAMPLES / filename).read_text())
    [doc] = [d for d in docs if d["kind"] == kind]
    return doc


def test_constants():
    assert (apis.GROUP, apis.VERSION, apis.API_VERSION) == ("sedna.io", "v1alpha1", "sedna.io/v1alpha1")


@pytest.mark.parametrize(("kind", "plural", "short", "ws_kind"), [
    pytest.param("Dataset", "datasets", (), "dataset", id="dataset"),
    pytest.param("Model", "models", (), "model", id="model"),
    pytest.param("JointInferenceService", "jointinferenceservices", ("ji",), "jointinferenceservice", id="ji"),
    pytest.param("FederatedLearningJob", "federatedlearningjobs", ("fl",), "federatedlearningjob", id="fl"),
    pytest.param("IncrementalLearningJob", "incrementallearningjobs", ("il",), "incrementallearningjob", id="il"),
    pytest.param("LifelongLearningJob", "lifelonglearningjobs", ("ll",), "lifelonglearningjob", id="ll"),
    pytest.param("ObjectSearchService", "objectsearchservices", ("objs",), "objectsearchservice", id="objs"),
    pytest.param("ObjectTrackingService", "objecttrackingservices", ("objt",), "objecttrackingservice",
                 id="objt"),
    pytest.param("FeatureExtractionService", "featureextractionservices", ("fe",), "featureextractionservice",
                 id="fe"),
    pytest.param("ReidJob", "reidjobs", ("reid",), "reidjob", id="reid"),
    pytest.param("VideoAnalyticsJob", "videoanalyticsjobs", ("va",), "videoanalyticsjob", id="va"),
])
def test_kind_names_and_lookups(kind, plural, short, ws_kind):
    api = apis.by_kind(kind)
    assert (api.kind, api.plural, api.singular, api.short_names, api.ws_kind) == (
        kind, plural, kind.lower(), short, ws_kind)
    assert api.api_version == "sedna.io/v1alpha1"
    assert api.crd_name == f"{plural}.sedna.io"
    assert apis.by_plural(plural) is api
    assert apis.by_ws_kind(ws_kind) is api
    assert apis.by_ws_kind(kind) is api  # upstream LCs also send CamelCase kinds
    for name in (kind, kind.upper(), plural, *short):
        assert apis.lookup(name) is api


def test_eleven_kinds_and_unknown_names():
    assert len(apis.ALL_KINDS) == 11
    assert apis.by_kind("jointinferenceservice") is None  # by_kind is exact
    assert apis.by_plural("ji") is None
    assert apis.by_ws_kind("pod") is None
    assert apis.lookup("deployments") is None


def test_kinds_synced_to_edge_match_upstream():
    synced = {k.ws_kind for k in apis.ALL_KINDS if k.synced_to_edge}
    assert synced == {"dataset", "model", "jointinferenceservice", "federatedlearningjob",
                      "incrementallearningjob", "lifelonglearningjob"}


def test_rest_paths():
    ji = apis.JOINT_INFERENCE
    assert ji.path() == "/apis/sedna.io/v1alpha1/jointinferenceservices"
    assert ji.path("default") == "/apis/sedna.io/v1alpha1/namespaces/default/jointinferenceservices"
    assert ji.path("default", "helmet", "status") == (
        "/apis/sedna.io/v1alpha1/namespaces/default/jointinferenceservices/helmet/status")


def test_joint_inference_references():
    ji = _example("joint-inference-helmet-detection.yaml", "JointInferenceService")
    assert apis.spec_node_names(apis.JOINT_INFERENCE, ji) == ["edge-node-1"]
    assert apis.model_names(apis.JOINT_INFERENCE, ji) == [
        "helmet-detection-inference-little-model", "helmet-detection-inference-big-model"]
    assert apis.dataset_names(apis.JOINT_INFERENCE, ji) == []


def test_federated_learning_references():
    fl = _example("federated-learning-surface-defect.yaml", "FederatedLearningJob")
    api = apis.by_plural("federatedlearningjobs")
    # The aggregation worker's node is not an edge target, as upstream.
    assert apis.spec_node_names(api, fl) == ["edge-node-1", "edge-node-2"]
    assert apis.model_names(api, fl) == ["surface-defect-detection-model"]
    assert apis.dataset_names(api, fl) == ["edge1-surface-defect-detection-dataset",
                                           "edge2-surface-defect-detection-dataset"]
    fl_s3 = _example("federated-learning-yolo-s3.yaml", "FederatedLearningJob")
    assert apis.model_names(api, fl_s3) == ["yolo-v5-model", "yolo-v5-pretrained-model"]


def test_node_names_are_distinct_and_skip_blanks():
    fl = {"spec": {"trainingWorkers": [
        {"template": {"spec": {"nodeName": "n1"}}},
        {"template": {"spec": {"nodeName": "n1"}}},
        {"template": {"spec": {"nodeName": ""}}},
        {"template": {"spec": {}}},
        {"template": {"spec": {"nodeName": "n2"}}},
    ]}}
    assert apis.spec_node_names(apis.FEDERATED_LEARNING, fl) == ["n1", "n2"]
    assert apis.spec_node_names(apis.FEDERATED_LEARNING, {"spec": {"trainingWorkers": "bad"}}) == []
    assert apis.spec_node_names(apis.DATASET, {"spec": {"nodeName": "edge-node-1"}}) == ["edge-node-1"]
    assert apis.spec_node_names(apis.DATASET, {}) == []


def test_incremental_learning_references():
    il = _example("incremental-learning-helmet-detection.yaml", "IncrementalLearningJob")
    api = apis.INCREMENTAL_LEARNING
    assert [s.name for s in api.stages] == ["Train", "Eval", "Deploy"]
    assert apis.dataset_names(api, il) == ["incremental-dataset"]
    assert apis.model_names(api, il) == ["initial-model", "deploy-model"]
    il["spec"]["evalSpec"]["initialEvalModel"] = {"name": "eval-model"}
    assert apis.model_names(api, il) == ["initial-model", "eval-model", "deploy-model"]


def test_lifelong_learning_references():
    ll = _example("lifelong-learning-atcii.yaml", "LifelongLearningJob")
    assert apis.dataset_names(apis.LIFELONG_LEARNING, ll) == ["lifelong-dataset"]
    assert apis.model_names(apis.LIFELONG_LEARNING, ll) == []  # LL never references Models


def test_field_values_walks_lists():
    obj = {"a": [{"b": 1}, {"b": 2}, {"c": 3}]}
    assert apis.field_values(obj, ("a", "*", "b")) == [1, 2]
    assert apis.field_values(obj, ("a",)) == [obj["a"]]
    assert apis.field_values(obj, ("x", "*")) == []


def test_crd_manifests_load_from_the_chart():
    manifests = apis.crd_manifests()
    assert apis.CRD_DIR == Path(__file__).resolve().parents[2] / "charts" / "sedna" / "crds"
    assert sorted(m["metadata"]["name"] for m in manifests) == sorted(k.crd_name for k in apis.ALL_KINDS)
    manifests[0]["spec"]["group"] = "mutated"
    assert all(m["spec"]["group"] == "sedna.io" for m in apis.crd_manifests())  # fresh copies
    assert apis.crd_manifest(apis.MODEL)["spec"]["names"]["kind"] == "Model"


def test_registry_node_fields_exist_in_the_schema():
    """Every path the registry reads is a real field of the CRD (free-form objects excepted)."""
    for api in apis.ALL_KINDS:
        schema = apis.crd_manifest(api)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        paths = [*api.node_paths, *api.model_paths, *api.dataset_paths,
                 *((*stage.template, "spec", "nodeName") for stage in api.stages)]
        for path in paths:
            node = schema
            for key in path:
                if node.get("x-kubernetes-preserve-unknown-fields"):
                    break
                node = node["items"] if key == "*" else node["properties"][key]
            else:
                assert node["type"] == "string", (api.kind, path)
