"""The CRDs are structural and match the registry, and upstream manifests and the statuses the
GM writes validate against them (tests/crdcheck.py: as the API server checks them, and
strictly)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from devcluster.strategy import schema as server_schema
from gm.edge.order import FIELD
from shared import apis
from tests.crdcheck import (
    _TYPES,
    CRD_IDS,
    CRDS,
    crd_schema,
    load_docs,
    server_check,
    validate,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "upstream"


_SCHEMA_KEYS = {"type", "description", "properties", "required", "items", "enum", "format",
                "nullable", "default", "minimum", "x-kubernetes-preserve-unknown-fields"}


def _schema_nodes(schema: dict, path: str = ""):
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from _schema_nodes(sub, f"{path}.{name}")
    if "items" in schema:
        yield from _schema_nodes(schema["items"], f"{path}[]")


def test_one_crd_per_kind_matching_the_registry():
    assert sorted(CRD_IDS) == sorted(k.kind for k in apis.ALL_KINDS)
    assert len(apis.crd_files()) == 11
    for path in apis.crd_files():
        assert path.name == f"sedna.io_{load_docs(path.read_text())[0]['spec']['names']['plural']}.yaml"


@pytest.mark.parametrize("crd", CRDS, ids=CRD_IDS)
def test_crd_header(crd):
    api = apis.by_kind(crd["spec"]["names"]["kind"])
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == api.crd_name
    spec = crd["spec"]
    assert spec["group"] == "sedna.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": api.kind, "listKind": f"{api.kind}List", "plural": api.plural,
        "singular": api.singular, "categories": ["sedna"],
        **({"shortNames": list(api.short_names)} if api.short_names else {}),
    }
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize("crd", CRDS, ids=CRD_IDS)
def test_schema_is_structural(crd):
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert server_schema.structural_errors(schema) == []
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert schema["required"] == ["spec"]
    for path, node in _schema_nodes(schema):
        assert set(node) <= _SCHEMA_KEYS, path
        assert node.get("type") in _TYPES, f"{path}: missing or bad type"
        assert set(node.get("required", [])) <= set(node.get("properties", {})), path
        assert len(set(node.get("required", []))) == len(node.get("required", [])), path
        assert ("items" in node) == (node["type"] == "array"), path
        if "properties" in node:
            assert node["type"] == "object", path
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert node["type"] == "object" and "properties" not in node, path
        for value in node.get("enum", []):
            assert _TYPES[node["type"]](value), f"{path}: enum value {value!r}"
        if "default" in node:
            assert validate(node, node["default"]) == [], path
        if node.get("format") == "date-time":
            assert node["type"] == "string" and node.get("nullable") is True, path


@pytest.mark.parametrize("crd", CRDS, ids=CRD_IDS)
def test_status_shape(crd):
    api = apis.by_kind(crd["spec"]["names"]["kind"])
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    props = status["properties"]
    assert props["observedGeneration"] == {
        "type": "integer", "format": "int64",
        "description": "The metadata.generation the workers were last built from.",
    }
    for counter in ("active", "failed", "succeeded", "numberOfSamples"):
        if counter in props:
            assert (props[counter]["type"], props[counter]["format"]) == ("integer", "int32")
    if api.condition_types:
        cond = props["conditions"]["items"]
        assert cond["properties"]["type"]["enum"] == list(api.condition_types)
        assert cond["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
        assert cond["required"][:2] == ["type", "status"]
    else:
        assert "conditions" not in props


def test_short_names_and_plurals_are_unique():
    names = [n for c in CRDS for n in (c["spec"]["names"]["plural"], c["spec"]["names"]["singular"],
                                         *c["spec"]["names"].get("shortNames", []))]
    assert len(names) == len(set(names))
    short = sorted(n for c in CRDS for n in c["spec"]["names"].get("shortNames", []))
    assert short == ["fe", "fl", "il", "ji", "ll", "objs", "objt", "reid", "va"]


def _resolve_column(schema: dict, json_path: str) -> dict | None:
    """The schema node a printer-column JSONPath selects; None if it leaves the schema.
    Inside a preserved (free-form) object any path is accepted: the node is returned."""
    if json_path == ".metadata.creationTimestamp":
        return {"type": "string", "format": "date-time"}
    node = schema
    for part in re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)|(\[[^\]]*\])", json_path):
        name, index = part
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return node
        if index:
            if node.get("type") != "array":
                return None
            node = node["items"]
            flt = re.fullmatch(r"\[\?\(@\.([A-Za-z_]\w*)\s*==\s*.+\)\]", index)
            if flt is not None:  # a filter names a field of the items
                if flt.group(1) not in node.get("properties", {}):
                    return None
            elif not re.fullmatch(r"\[-?\d*:?-?\d*\]", index):
                return None
        else:
            node = node.get("properties", {}).get(name)
            if node is None:
                return None
    return node


_COLUMN_TYPES = {"string": ("string", None), "integer": ("integer", None),
                 "number": ("number", None), "boolean": ("boolean", None),
                 "date": ("string", "date-time")}


@pytest.mark.parametrize("crd", CRDS, ids=CRD_IDS)
def test_printer_columns_point_into_the_schema(crd):
    version = crd["spec"]["versions"][0]
    columns = version["additionalPrinterColumns"]
    assert columns[-1] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    assert len({c["name"] for c in columns}) == len(columns)
    for column in columns:
        node = _resolve_column(version["schema"]["openAPIV3Schema"], column["jsonPath"])
        assert node is not None, column["jsonPath"]
        if node.get("x-kubernetes-preserve-unknown-fields"):
            continue
        want_type, want_format = _COLUMN_TYPES[column["type"]]
        assert node["type"] == want_type, column
        if want_format:
            assert node.get("format") == want_format, column


@pytest.mark.parametrize(("kind", "columns"), [
    pytest.param("JointInferenceService", ["Status", "Edge-Node", "Active", "Failed", "Age"], id="ji"),
    pytest.param("FederatedLearningJob", ["Phase", "Active", "Succeeded", "Failed", "Age"], id="fl"),
    pytest.param("Dataset", ["Node", "Format", "Samples", "Age"], id="dataset"),
    pytest.param("Model", ["URL", "Format", "Age"], id="model"),
    pytest.param("IncrementalLearningJob", ["Stage", "Status", "Dataset", "Age"], id="il"),
    pytest.param("LifelongLearningJob", ["Stage", "Status", "Dataset", "Age"], id="ll"),
    pytest.param("ReidJob", ["Phase", "Active", "Succeeded", "Failed", "Age"], id="reid"),
    pytest.param("ObjectSearchService", ["Status", "Active", "Failed", "Age"], id="objs"),
])
def test_printer_column_names(kind, columns):
    crd = apis.crd_manifest(apis.by_kind(kind))
    assert [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]] == columns


EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
EXAMPLE_DOCS = {path: load_docs(path.read_text()) for path in EXAMPLE_FILES}


def _example_docs():
    for path, docs in EXAMPLE_DOCS.items():
        for i, doc in enumerate(docs):
            if doc["apiVersion"] == apis.API_VERSION:
                yield pytest.param(doc, id=f"{path.stem}-{i}-{doc['kind']}")


@pytest.mark.parametrize("doc", list(_example_docs()))
def test_upstream_example_validates(doc):
    assert validate(crd_schema(doc["kind"]), doc) == []
    stored, errors = server_check(doc["kind"], doc)
    assert errors == []
    assert stored == doc  # nothing pruned, nothing defaulted


def test_server_defaults_poll_period():
    job = _example("IncrementalLearningJob")
    del job["spec"]["deploySpec"]["model"]["pollPeriodSeconds"]
    stored, errors = server_check("IncrementalLearningJob", job)
    assert errors == []
    assert stored["spec"]["deploySpec"]["model"]["pollPeriodSeconds"] == 60


def test_examples_cover_the_main_kinds():
    kinds = {d["kind"] for docs in EXAMPLE_DOCS.values() for d in docs}
    assert kinds >= {"Dataset", "Model", "JointInferenceService", "FederatedLearningJob",
                     "IncrementalLearningJob", "LifelongLearningJob",
                     "FeatureExtractionService", "ReidJob", "VideoAnalyticsJob"}


def test_timer_times_stay_strings():
    [job] = [d for d in load_docs((EXAMPLES / "incremental-learning-helmet-detection.yaml").read_text())
             if d["kind"] == "IncrementalLearningJob"]
    assert job["spec"]["trainSpec"]["trigger"]["timer"] == {"start": "02:00", "end": "20:00"}
    assert job["spec"]["dataset"]["trainProb"] == 0.8


def _example(kind: str) -> dict:
    for docs in EXAMPLE_DOCS.values():
        for doc in docs:
            if doc["kind"] == kind:
                return copy.deepcopy(doc)
    raise LookupError(kind)


def _drop(obj: dict, *path: str) -> dict:
    node = obj
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return obj


def _set(obj: dict, value, *path) -> dict:
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return obj


@pytest.mark.parametrize(("kind", "edit", "error", "server_error"), [
    pytest.param("Dataset", lambda o: _drop(o, "spec", "nodeName"), ".spec.nodeName: required",
                 "spec.nodeName: Required value", id="dataset-no-node"),
    pytest.param("Model", lambda o: _set(o, 3, "spec", "url"), ".spec.url: expected string, got int",
                 "spec.url: Invalid value", id="model-url-int"),
    pytest.param("JointInferenceService", lambda o: _drop(o, "spec", "edgeWorker", "hardExampleMining"),
                 ".spec.edgeWorker.hardExampleMining: required",
                 "spec.edgeWorker.hardExampleMining: Required value", id="ji-no-hem"),
    pytest.param("JointInferenceService", lambda o: _set(o, {"minReplicas": 1}, "spec", "cloudWorker", "hpa"),
                 ".spec.cloudWorker.hpa.maxReplicas: required",
                 "spec.cloudWorker.hpa.maxReplicas: Required value", id="ji-hpa-no-max"),
    pytest.param("FederatedLearningJob", lambda o: _set(o, {"s3": {}}, "spec", "transmitter"),
                 ".spec.transmitter.s3.aggDataPath: required",
                 "spec.transmitter.s3.aggDataPath: Required value", id="fl-s3-no-path"),
    pytest.param("IncrementalLearningJob",
                 lambda o: _set(o, "bigger", "spec", "trainSpec", "trigger", "condition", "operator"),
                 ".spec.trainSpec.trigger.condition.operator: 'bigger' not in",
                 "spec.trainSpec.trigger.condition.operator: Unsupported value", id="il-operator"),
    pytest.param("IncrementalLearningJob", lambda o: _set(o, 0, "spec", "deploySpec", "model", "pollPeriodSeconds"),
                 ".spec.deploySpec.model.pollPeriodSeconds: 0 is less than 1",
                 "spec.deploySpec.model.pollPeriodSeconds: Invalid value", id="il-poll-zero"),
    pytest.param("IncrementalLearningJob", lambda o: _set(o, "0.8", "spec", "dataset", "trainProb"),
                 ".spec.dataset.trainProb: expected number, got str",
                 "spec.dataset.trainProb: Invalid value", id="il-trainprob-string"),
    pytest.param("LifelongLearningJob", lambda o: _drop(o, "spec", "outputDir"), ".spec.outputDir: required",
                 "spec.outputDir: Required value", id="ll-no-output"),
    pytest.param("FeatureExtractionService", lambda o: _drop(o, "spec", "selector"), ".spec.selector: required",
                 "spec.selector: Required value", id="fe-no-selector"),
    pytest.param("VideoAnalyticsJob", lambda o: _set(o, "5", "spec", "backoffLimit"),
                 ".spec.backoffLimit: expected integer, got str",
                 "spec.backoffLimit: Invalid value", id="va-backoff-string"),
])
def test_invalid_specs_are_rejected(kind, edit, error, server_error):
    obj = edit(_example(kind))
    errors = validate(crd_schema(kind), obj)
    assert len(errors) == 1 and errors[0].startswith(error), errors
    _, errors = server_check(kind, obj)
    assert len(errors) == 1 and errors[0].startswith(server_error), errors


def test_unknown_spec_fields_are_errors_here_and_pruned_by_the_server():
    job = _set(_example("FederatedLearningJob"), {"name": "m"}, "spec", "aggregationWorker", "modle")
    assert validate(crd_schema("FederatedLearningJob"), job) == [
        ".spec.aggregationWorker.modle: unknown field"]
    stored, errors = server_check("FederatedLearningJob", job)
    assert errors == []
    assert "modle" not in stored["spec"]["aggregationWorker"]


# Status documents as upstream's GM and ours write them.
_T = "2025-03-01T10:00:00Z"
STATUSES = [
    pytest.param("Dataset", {"numberOfSamples": 120, "updateTime": _T, "observedGeneration": 1}, id="dataset"),
    pytest.param("Model", {"updateTime": _T, "metrics": [{"key": "accuracy", "value": "0.9"}]}, id="model"),
    pytest.param("JointInferenceService", {
        "conditions": [{"type": "Running", "status": "True", "lastHeartbeatTime": _T,
                        "lastTransitionTime": _T, "reason": "", "message": ""}],
        "startTime": _T, "active": 2, "failed": 0, "observedGeneration": 3,
        "metrics": [{"key": "inferenceNumber", "value": "240"}]}, id="ji"),
    pytest.param("FederatedLearningJob", {
        "conditions": [{"type": "Training", "status": "True", "lastProbeTime": _T, "lastHeartbeatTime": _T,
                        "reason": "DoTraining", "message": "Round 3 reaches at 2025-03-01 10:02:10"},
                       {"type": "Complete", "status": "True", "lastProbeTime": _T, "lastHeartbeatTime": _T,
                        "lastTransitionTime": _T}],
        "startTime": _T, "completionTime": _T, "active": 0, "succeeded": 3, "failed": 0,
        "phase": "Succeeded", "observedGeneration": 1}, id="fl"),
    pytest.param("IncrementalLearningJob", {
        "conditions": [{"type": "Ready", "status": "True", "stage": "Train", "lastHeartbeatTime": _T,
                        "lastTransitionTime": _T, "message": "reported by lc",
                        "data": '{"input":{"dataURL":"/data/train.txt","outputDir":"/output/train/1"}}'}],
        "startTime": _T, "observedGeneration": 1}, id="il"),
    pytest.param("LifelongLearningJob", {
        "conditions": [{"type": "Waiting", "status": "True", "stage": "Eval", "lastHeartbeatTime": None,
                        "lastTransitionTime": _T}],
        "knowledgeBase": {"AIModels": {"numberOfAIModels": 1, "listOfAIModels": [
            {"modelID": "task-0", "averagePrecision": 0.87, "numberOfTrainSamples": 500}]},
            "AIClasses": {"numberOfAIClasses": 2, "listOfAIClasses": ["hot", "cold"]},
            "samples": {"numberOfLabeledUnseenSample": 500, "numberOfUnseenSample": 0}},
        "startTime": _T}, id="ll"),
    pytest.param("ReidJob", {"conditions": [{"type": "Completed", "status": "True", "data": "{}"}],
                             "phase": "Succeeded", "active": 0, "succeeded": 1, "failed": 0}, id="reid"),
]


@pytest.mark.parametrize(("kind", "status"), STATUSES)
def test_written_status_validates(kind, status):
    obj = {**_example(kind), "status": status}
    assert validate(crd_schema(kind), obj) == []
    stored, errors = server_check(kind, obj)
    assert errors == []
    assert stored["status"] == status


@pytest.mark.parametrize(("kind", "status", "error"), [
    pytest.param("FederatedLearningJob", {"phase": "Done"}, ".status.phase: 'Done' not in", id="fl-phase"),
    pytest.param("JointInferenceService", {"active": "2"}, ".status.active: expected integer", id="ji-active"),
    pytest.param("IncrementalLearningJob", {"conditions": [{"type": "Ready", "status": "True"}]},
                 ".status.conditions[0].stage: required", id="il-no-stage"),
    pytest.param("Dataset", {"numberOfSamples": 1, "updateTime": "yesterday"},
                 ".status.updateTime: 'yesterday' is not a date-time", id="dataset-time"),
    pytest.param("JointInferenceService", {"conditions": [{"type": "Complete", "status": "True"}]},
                 ".status.conditions[0].type: 'Complete' not in", id="ji-type"),
])
def test_invalid_status_is_rejected(kind, status, error):
    obj = {**_example(kind), "status": status}
    errors = validate(crd_schema(kind), obj)
    assert len(errors) == 1 and errors[0].startswith(error), errors
    _, errors = server_check(kind, obj)
    assert len(errors) == 1 and errors[0].startswith(error.lstrip(".").split(":")[0] + ":"), errors


@pytest.mark.parametrize("kind", ["Dataset", "JointInferenceService", "FederatedLearningJob", "Model"])
def test_status_keeps_the_report_order_record(kind):
    """The GM records the last applied report per node in status.lastReports: the schema must
    admit it, or the API server prunes it and every replay would be applied again."""
    obj = _example(kind)
    obj["status"] = {FIELD: [{"node": "edge-node-1", "epoch": "9f2c01d4e5a6b7c8", "seq": 2**40},
                             {"node": "cloud", "time": "2025-03-01 10:00:30"}]}
    if kind == "Dataset":
        obj["status"]["numberOfSamples"] = 3
    assert validate(crd_schema(kind), obj) == []
    stored, errors = server_check(kind, obj)
    assert errors == []
    assert stored["status"] == obj["status"]
    bad = copy.deepcopy(obj)
    bad["status"][FIELD][0]["seq"] = "2"
    assert validate(crd_schema(kind), bad) == [f".status.{FIELD}[0].seq: expected integer, got str"]
