"""The chart: CRDs are structural and match the registry, upstream manifests validate,
and every template renders into the objects a cluster needs.

Objects are checked twice: by the dev cluster's schema code (defaulting, pruning and
validation as the API server does them) and by a strict local validator that also calls
unknown fields errors, so a field upstream users write that our schema lacks is caught
instead of silently pruned.

There is no helm binary here, so templates are rendered by a tiny interpreter of the
template forms the chart allows (see `render`); anything else fails the test.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from devcluster.cluster import KubeYamlLoader
from devcluster.strategy import schema as server_schema
from gm.config import parse_config
from gm.edge.order import FIELD
from gm.kinds import DECLARATIONS
from gm.reconcile.declaration import KindDeclaration
from lc.config import load as load_lc_config
from shared import apis

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sedna"
EXAMPLES = ROOT / "examples" / "upstream"


# --- YAML as Kubernetes reads it -------------------------------------------------------------


# (KubeYamlLoader, from devcluster.cluster: the dev cluster reads manifests the same way)


def load_docs(text: str) -> list[dict]:
    return [d for d in yaml.load_all(text, Loader=KubeYamlLoader) if d is not None]


# --- a small validator for the schema subset the CRDs use ------------------------------------

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def _is_datetime(value: str) -> bool:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return "T" in value


def validate(schema: dict, value, path: str = "") -> list[str]:
    """Errors of `value` against `schema`, as "path: problem"; unknown fields are errors
    (what kubectl's strict field validation reports) unless the schema preserves them."""
    if value is None:
        return [] if schema.get("nullable") else [f"{path}: must not be null"]
    typ = schema["type"]
    if not _TYPES[typ](value):
        return [f"{path}: expected {typ}, got {type(value).__name__}"]
    errors = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{path}: {value} is less than {schema['minimum']}")
    if schema.get("format") == "date-time" and not _is_datetime(value):
        errors.append(f"{path}: {value!r} is not a date-time")
    if typ == "array":
        for i, item in enumerate(value):
            errors += validate(schema["items"], item, f"{path}[{i}]")
    if typ == "object":
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{path}.{name}: required")
        for name, item in value.items():
            if name in props:
                errors += validate(props[name], item, f"{path}.{name}")
            elif not schema.get("x-kubernetes-preserve-unknown-fields") and path != ".metadata":
                errors.append(f"{path}.{name}: unknown field")
    return errors


# --- CRD structure ---------------------------------------------------------------------------

CRDS = apis.crd_manifests()
CRD_IDS = [c["spec"]["names"]["kind"] for c in CRDS]
_SCHEMAS = {c["spec"]["names"]["kind"]: c["spec"]["versions"][0]["schema"]["openAPIV3Schema"] for c in CRDS}


def crd_schema(kind: str) -> dict:
    return _SCHEMAS[kind]

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


# --- upstream manifests validate -------------------------------------------------------------

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
EXAMPLE_DOCS = {path: load_docs(path.read_text()) for path in EXAMPLE_FILES}


def _example_docs():
    for path, docs in EXAMPLE_DOCS.items():
        for i, doc in enumerate(docs):
            if doc["apiVersion"] == apis.API_VERSION:
                yield pytest.param(doc, id=f"{path.stem}-{i}-{doc['kind']}")


def server_check(kind: str, obj: dict) -> tuple[dict, list[str]]:
    """What the API server stores for `obj` (defaulted, pruned) and its validation errors."""
    schema = crd_schema(kind)
    stored = server_schema.prune(schema, server_schema.apply_defaults(schema, obj))
    return stored, [e.message() for e in server_schema.validate(schema, stored)]


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


# --- chart templates -------------------------------------------------------------------------

RELEASE = {"Namespace": "sedna", "Name": "sedna", "Service": "Helm"}
_ACTION = re.compile(r"(\n?[ \t]*)?\{\{(-?)\s*(.*?)\s*(-?)\}\}")


def _go_string(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "<no value>"
    return str(value)


def _lookup(expr: str, scope: dict):
    root, *keys = expr.lstrip(".").split(".")
    node = scope[root]
    for key in keys:
        node = node[key]
    return node


def _pipeline(text: str, scope: dict) -> str:
    head, *funcs = [p.strip() for p in text.split("|")]
    if not head.startswith("."):
        raise ValueError(f"unsupported template expression {text!r}")
    value = _lookup(head, scope)
    for func in funcs:
        if func != "quote":
            raise ValueError(f"unsupported template function {func!r}")
        value = '"' + _go_string(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
    return _go_string(value)


def render(template: str, values: dict, chart: dict) -> str:
    """Render the Helm template subset the chart uses: `{{ .Values.x }}`, `.Release.*`,
    `.Chart.*`, `| quote`, `{{- if .Values.x }} ... [{{- else }} ...] {{- end }}` and `-` trimming."""
    scope = {"Values": values, "Release": RELEASE, "Chart": {k[0].upper() + k[1:]: v for k, v in chart.items()}}
    out, pos, stack = [], 0, []
    for m in _ACTION.finditer(template):
        lead, trim_left, body, trim_right = m.group(1) or "", m.group(2), m.group(3), m.group(4)
        text = template[pos:m.start()]
        if not trim_left:
            text += lead
        if all(stack):
            out.append(text)
        pos = m.end()
        if trim_right:
            while pos < len(template) and template[pos] in " \t\n":
                pos += 1
        if body.startswith("if "):
            stack.append(bool(_lookup(body[3:].strip(), scope)) and all(stack))
        elif body == "else":
            stack[-1] = all(stack[:-1]) and not stack[-1]
        elif body == "end":
            stack.pop()
        elif all(stack):
            out.append(_pipeline(body, scope))
    assert not stack, "unterminated if"
    out.append(template[pos:])
    return "".join(out)


def _chart_meta() -> dict:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())


def render_chart(**overrides) -> dict[str, list[dict]]:
    """The chart rendered by the real `helm template` (top-level values replaced by
    `overrides`), as template file name -> documents."""
    from tests.helm.helmbin import helm_template

    rendered = {path.name: [] for path in sorted((CHART / "templates").glob("*.yaml"))}
    for name, text in helm_template(CHART, overrides, namespace=RELEASE["Namespace"]).items():
        rendered[name] = load_docs(text)
    return rendered


def _one(rendered: dict, kind: str) -> dict:
    [obj] = [d for docs in rendered.values() for d in docs if d["kind"] == kind]
    return obj


def test_chart_metadata():
    meta = _chart_meta()
    assert (meta["apiVersion"], meta["name"], meta["type"]) == ("v2", "sedna", "application")
    assert meta["appVersion"] == "0.1.0"


def test_templates_render_to_the_expected_kinds():
    rendered = render_chart()
    kinds = {name: [d["kind"] for d in docs] for name, docs in rendered.items()}
    assert kinds == {
        "gm-configmap.yaml": ["ConfigMap"],
        "gm-deployment.yaml": ["Deployment"],
        "gm-pdb.yaml": ["PodDisruptionBudget"],
        "gm-service.yaml": ["Service"],
        "lc-daemonset.yaml": ["DaemonSet"],
        "namespace.yaml": ["Namespace", "Namespace"],
        "node-tokens-secret.yaml": [],  # auth.nodeTokens.create
        "rbac.yaml": ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"],
        "serviceaccount.yaml": ["ServiceAccount", "ServiceAccount"],
        "dashboards.yaml": [],  # dashboards.enabled
        "servicemonitor.yaml": [],  # serviceMonitor.enabled
    }
    for docs in rendered.values():
        for doc in docs:
            if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding", "Namespace"):
                lc = (doc["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "lc"
                assert doc["metadata"]["namespace"] == ("sedna-lc" if lc else "sedna"), doc["metadata"]


def test_namespace_is_optional():
    gm_ns, lc_ns = render_chart()["namespace.yaml"]
    assert (gm_ns["metadata"]["name"], lc_ns["metadata"]["name"]) == ("sedna", "sedna-lc")
    assert gm_ns["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    [lc_only] = render_chart(createNamespace=False)["namespace.yaml"]
    assert lc_only["metadata"]["name"] == "sedna-lc"


def test_unsupported_template_forms_fail():
    with pytest.raises(ValueError, match="unsupported template function"):
        render("{{ .Values.a | toYaml }}", {"a": 1}, {})


def test_gm_config_is_what_the_gm_loads():
    cm = _one(render_chart(), "ConfigMap")
    assert cm["metadata"]["name"] == "gm-config"
    cfg = parse_config(cm["data"]["sedna-gm.yaml"])
    assert (cfg.kubeConfig, cfg.master, cfg.namespace) == ("", "", "")
    assert (cfg.websocket.address, cfg.websocket.port) == ("0.0.0.0", 9000)
    assert cfg.localController.server == "http://localhost:9100"
    assert cfg.knowledgeBaseServer.server == "http://kb.sedna:9020"
    assert cfg.minResyncPeriodSeconds == 30
    assert (cfg.kubeClient.qps, cfg.kubeClient.burst, cfg.kubeClient.statusQps, cfg.kubeClient.eventQps) == (200.0, 400, 1000.0, 50.0)
    assert cfg.workers == 4
    assert (cfg.leaderElection.enabled, cfg.leaderElection.leaseName,
            cfg.leaderElection.leaseNamespace) == (True, "sedna-gm", "sedna")
    assert (cfg.log.level, cfg.log.format) == ("info", "json")


def test_gm_deployment_and_service():
    rendered = render_chart()
    deploy, svc = _one(rendered, "Deployment"), _one(rendered, "Service")
    pod = deploy["spec"]["template"]
    assert deploy["spec"]["selector"]["matchLabels"] == {"sedna": "gm"}
    assert pod["metadata"]["labels"]["sedna"] == "gm"
    assert pod["spec"]["serviceAccountName"] == rendered["serviceaccount.yaml"][0]["metadata"]["name"] == "sedna"
    [container] = pod["spec"]["containers"]
    assert container["image"] == "sedna-py:0.1.0"
    assert container["command"] == ["sedna-gm", "--config", "/config/sedna-gm.yaml"]
    assert container["ports"] == [{"name": "websocket", "containerPort": 9000, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "websocket"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "websocket"}
    assert container["volumeMounts"] == [{"name": "config", "mountPath": "/config", "readOnly": True}]
    assert pod["spec"]["volumes"] == [{"name": "config", "configMap": {"name": "gm-config"}}]
    [term] = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert term == {"matchExpressions": [{"key": "node-role.kubernetes.io/edge", "operator": "DoesNotExist"}]}
    assert svc["metadata"]["name"] == "gm"
    assert svc["spec"]["selector"] == {"sedna": "gm"}
    assert svc["spec"]["ports"] == [{"name": "tcp-0", "port": 9000, "targetPort": "websocket", "protocol": "TCP"}]


def test_lc_daemonset():
    ds = _one(render_chart(), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/edge": ""}
    assert (pod["hostNetwork"], pod["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    [container] = pod["containers"]
    assert container["command"] == ["sedna-lc"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODENAME"] == {"name": "NODENAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    plain = {name: e["value"] for name, e in env.items() if "value" in e}
    assert plain == {"GM_ADDRESS": "gm.sedna:9000", "BIND_PORT": "9100", "ROOTFS_MOUNT_DIR": "/rootfs",
                     "LOG_LEVEL": "info", "LOG_FORMAT": "json", "GM_TOKEN_FILE": "/var/run/secrets/sedna/token"}
    cfg = load_lc_config({**plain, "NODENAME": "edge-node-1"})
    assert (cfg.gm_url, cfg.node_name, cfg.bind_port, cfg.rootfs) == (
        "ws://gm.sedna:9000/", "edge-node-1", 9100, "/rootfs")
    assert container["ports"] == [{"name": "worker-api", "containerPort": 9100, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "worker-api"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "worker-api"}
    assert container["volumeMounts"][0] == {"name": "rootfs", "mountPath": "/rootfs"}
    assert pod["volumes"][0] == {"name": "rootfs", "hostPath": {"path": "/"}}


def _allowed(role: dict, group: str, resource: str) -> set[str]:
    return {verb for rule in role["rules"] if group in rule["apiGroups"] and resource in rule["resources"]
            for verb in rule["verbs"]}


def test_cluster_role_covers_what_the_gm_does():
    """The kinds and children the GM works with; tests/helm/test_rbac_rules.py derives the exact
    set from the GM's code."""
    rendered = render_chart()
    role, binding = _one(rendered, "ClusterRole"), _one(rendered, "ClusterRoleBinding")
    for api in apis.ALL_KINDS:
        assert _allowed(role, "sedna.io", api.plural) >= {"get", "list", "watch"}
        assert _allowed(role, "sedna.io", f"{api.plural}/status") == {"patch"}
    for decl in DECLARATIONS:  # owners of children with blockOwnerDeletion
        assert _allowed(role, "sedna.io", f"{decl.api.plural}/finalizers") == {"update"}
    # children: cached by list+watch, relabelled (patch) when an older GM made them
    assert _allowed(role, "", "pods") == {"create", "get", "list", "watch", "delete", "patch"}
    assert _allowed(role, "apps", "deployments") == {"create", "get", "list", "watch", "delete", "update",
                                                     "patch"}
    assert _allowed(role, "autoscaling", "horizontalpodautoscalers") == {"create", "get", "list", "watch",
                                                                         "update", "delete", "patch"}
    assert _allowed(role, "", "services") == {"create", "get", "list", "watch", "update", "delete", "patch"}
    assert _allowed(role, "", "secrets") == {"list", "watch"}  # the Secret informer
    assert _allowed(role, "", "events") == {"create", "patch"}
    assert _allowed(role, "coordination.k8s.io", "leases") == set()  # the Role's, in its namespace
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sedna", "namespace": "sedna"}]
    lease_role, lease_binding = _one(rendered, "Role"), _one(rendered, "RoleBinding")
    assert lease_role["metadata"]["namespace"] == lease_binding["metadata"]["namespace"] == "sedna"
    assert _allowed(lease_role, "coordination.k8s.io", "leases") == {"create", "get", "update"}
    assert lease_binding["subjects"] == binding["subjects"]


def test_cluster_role_lets_the_gm_delete_the_kinds_that_expire():
    """A kind declaring `expired` (ttlSecondsAfterFinished) is deleted by the GM itself."""
    role = _one(render_chart(), "ClusterRole")
    never = next(f.default for f in dataclasses.fields(KindDeclaration) if f.name == "expired")
    expiring = [d.api for d in DECLARATIONS if d.expired is not never]
    assert expiring, "no kind declares expired: the test checks nothing"
    for api in expiring:
        assert "delete" in _allowed(role, "sedna.io", api.plural), api.kind


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
