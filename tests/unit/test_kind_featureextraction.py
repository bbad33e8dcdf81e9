"""gm/kinds/featureextraction: build, status and report of a FeatureExtractionService,
on the pedestrian-tracking example. Built children are also put through the dev cluster's
Deployment/Service validation and the status through the CRD schema, as the API server
would."""

from __future__ import annotations

import base64
import copy

import pytest
import yaml

from devcluster.storage.registry import Registry
from devcluster.strategy import schema as server_schema
from devcluster.strategy.dispatch import validate_object
from gm.config import WorkerConfig
from gm.kinds import featureextraction as fe
from gm.kube.resources import DEPLOYMENTS, PODS, SERVICES
from gm.reconcile.declaration import Dependencies, Observed
from gm.reports import ReportInvalid, metrics_report
from gm.workers.owned import MANAGED_BY_LABEL
from gm.workers.specerrors import InvalidSpec, MissingDependency
from gm.workers.storage import INIT_CONTAINER_NAME
from shared import apis
from shared.objects import SPEC_HASH_ANNOTATION, is_controlled_by, spec_hash_of

NAME = "feature-extraction"
NS = "default"
UID = "2b7e1c4d-5f6a-4b8c-9d0e-1f2a3b4c5d6e"
PREFIX = "featureextractionservice.sedna.io/"
IMAGE = "kubeedge/sedna-example-multi-edge-inference-pedestrian-tracking-feature-extraction:v0.5.0"
MODEL_NAME = "m3l"
NOW = "2026-03-01T10:00:00Z"
LATER = "2026-03-01T10:05:00Z"
CONFIG = WorkerConfig(lc_server="http://lc.sedna:9100")
DEP, SVC = f"{NAME}-deployment-fe", f"{NAME}-fe"
EXAMPLE = apis.CRD_DIR.parents[2] / "examples" / "upstream" / "multi-edge-inference-pedestrian-tracking.yaml"


def service(**spec) -> dict:
    """The upstream example (spec/upstream-gm.md §1.10), with `spec` overrides."""
    base = {
        "kafkaSupport": True,
        "model": {"name": MODEL_NAME},
        "selector": {"matchLabels": {"app": "feature-extraction"}},
        "replicas": 1,
        "template": {
            "metadata": {"labels": {"app": "feature-extraction"}},
            "spec": {
                "nodeName": "cloud-node",
                "containers": [{
                    "image": IMAGE, "name": "feature-extraction", "imagePullPolicy": "Always",
                    "env": [{"name": "input_shape", "value": "256,128"}],
                    "ports": [{"containerPort": 6000, "protocol": "TCP"}],
                    "resources": {"requests": {"memory": "1Gi", "cpu": "500m"},
                                  "limits": {"memory": "4Gi"}},
                }],
            },
        },
    }
    base.update(spec)
    return {"apiVersion": "sedna.io/v1alpha1", "kind": "FeatureExtractionService",
            "metadata": {"name": NAME, "namespace": NS, "uid": UID, "generation": 1},
            "spec": base}


def model(url: str = "/data/ai_models/object_detection/pedestrians/yolox.pth", **spec) -> dict:
    return {"apiVersion": "sedna.io/v1alpha1", "kind": "Model",
            "metadata": {"name": MODEL_NAME, "namespace": NS, "uid": "uid-m3l"},
            "spec": {"url": url, "format": "pth", **spec}}


def deps(*, models=None, secrets=None, deployments=()) -> Dependencies:
    models = (model(),) if models is None else models
    return Dependencies(objects={"models": {m["metadata"]["name"]: m for m in models}},
                        secrets=secrets or {}, children={"deployments": list(deployments)},
                        config=CONFIG, now=NOW)


def built(cr: dict | None = None, **kw) -> tuple[dict, dict]:
    """(Deployment, Service) of `cr`."""
    children = fe.build(cr or service(), deps(**kw))
    assert set(children) == {DEPLOYMENTS, SERVICES}
    (deployment,), (svc,) = children[DEPLOYMENTS], children[SERVICES]
    return deployment, svc


def container(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]["containers"][0]


def env_of(deployment: dict) -> dict[str, object]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(deployment)["env"]}


def server_errors(resource: str, group: str, obj: dict) -> list[str]:
    rt = Registry.with_builtins().lookup(group=group, version="v1", resource=resource)
    return [e.message() for e in validate_object(rt, obj)]


# -- build: names, owner, labels, env, port ------------------------------------------------


def test_names_owner_and_labels():
    deployment, svc = built()
    assert deployment["metadata"]["name"] == DEP and svc["metadata"]["name"] == SVC
    owner = {"apiVersion": "sedna.io/v1alpha1", "kind": "FeatureExtractionService",
             "metadata": {"name": NAME, "uid": UID}}
    for child in (deployment, svc):
        assert child["metadata"]["namespace"] == NS
        assert child["metadata"]["ownerReferences"] == [{
            "apiVersion": "sedna.io/v1alpha1", "kind": "FeatureExtractionService", "name": NAME,
            "uid": UID, "controller": True, "blockOwnerDeletion": True}]
        assert is_controlled_by(child, owner)
        assert child["metadata"]["labels"][MANAGED_BY_LABEL] == "sedna-gm"
        assert spec_hash_of(child)
    worker = {f"{PREFIX}name": NAME, f"{PREFIX}uid": UID, f"{PREFIX}worker-type": "fe"}
    assert deployment["metadata"]["labels"] == {**worker, "app.sedna.io": f"{NAME}-fe-svc",
                                                MANAGED_BY_LABEL: "sedna-gm"}
    assert deployment["spec"]["template"]["metadata"]["labels"] == {
        "app": "feature-extraction", **worker, "app.sedna.io": f"{NAME}-fe-svc"}
    assert svc["spec"]["selector"] == worker


def test_service_on_port_6000():
    _, svc = built()
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"] == [{"name": "tcp-0", "protocol": "TCP", "port": 6000,
                                     "targetPort": 6000}]
    assert server_errors("services", "", svc) == []


def test_env_in_a_fixed_order_after_the_users():
    deployment, _ = built()
    assert [e["name"] for e in container(deployment)["env"]] == [
        "input_shape", "DATA_PATH_PREFIX", "NAMESPACE", "SERVICE_NAME", "JOB_NAME", "WORKER_NAME",
        "LC_SERVER", "MODEL_URL", "KAFKA_ENABLED"]
    env = env_of(deployment)
    assert env["NAMESPACE"] == NS and env["SERVICE_NAME"] == NAME and env["JOB_NAME"] == NAME
    assert env["WORKER_NAME"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}
    assert env["LC_SERVER"] == "http://lc.sedna:9100"
    assert env["MODEL_URL"] == "/home/data/data/ai_models/object_detection/pedestrians/yolox.pth"
    assert env["KAFKA_ENABLED"] == "true"
    assert container(deployment)["volumeMounts"] == [{
        "name": "data-ai-models-object-detection-pedestriansz",
        "mountPath": "/home/data/data/ai_models/object_detection/pedestrians/"}]


@pytest.mark.parametrize("kafka", [pytest.param(False, id="false"), pytest.param(None, id="omitted")])
def test_no_kafka_env_without_kafka_support(kafka):
    cr = service(kafkaSupport=kafka)
    if kafka is None:
        del cr["spec"]["kafkaSupport"]
    assert "KAFKA_ENABLED" not in env_of(built(cr)[0])


def test_s3_model_is_downloaded_with_its_credential():
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "s3", "namespace": NS, "annotations": {"s3-endpoint": "minio:9000"}},
              "data": {"ACCESS_KEY_ID": base64.b64encode(b"ak").decode(),
                       "SECRET_ACCESS_KEY": base64.b64encode(b"sk").decode()}}
    deployment, _ = built(models=(model("s3://models/fe/yolox.pth", credentialName="s3"),),
                          secrets={"s3": secret})
    pod = deployment["spec"]["template"]["spec"]
    assert env_of(deployment)["MODEL_URL"] == "/downloads/models/fe/yolox.pth"
    (init,) = pod["initContainers"]
    assert init["name"] == INIT_CONTAINER_NAME
    assert init["args"] == ["s3://models/fe/yolox.pth", "/downloads/models/fe/"]
    assert {e["name"]: e["value"] for e in init["env"]}["S3_ENDPOINT_URL"] == "https://minio:9000"
    assert server_errors("deployments", "apps", deployment) == []


def test_the_example_builds_a_deployment_the_api_server_accepts():
    deployment, _ = built()
    assert server_errors("deployments", "apps", deployment) == []


def test_the_upstream_example_builds_as_written():
    with open(EXAMPLE, encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    example = next(d for d in docs if d["kind"] == fe.KIND)
    found = next(d for d in docs if d["kind"] == "Model")
    example["metadata"].update(namespace=NS, uid=UID)
    found["metadata"].update(namespace=NS)
    deployment, svc = built(example, models=(found,))
    assert (deployment["metadata"]["name"], svc["metadata"]["name"]) == (DEP, SVC)
    assert deployment["spec"]["selector"]["matchLabels"]["app"] == "feature-extraction"
    assert env_of(deployment)["KAFKA_ENABLED"] == "true"
    assert server_errors("deployments", "apps", deployment) == []


def test_the_cr_is_not_mutated():
    cr = service()
    before = copy.deepcopy(cr)
    built(cr)
    assert cr == before


# -- build: the embedded DeploymentSpec ---------------------------------------------------


def test_replicas_default_to_one_and_omitting_equals_writing_one():
    omitted = service()
    del omitted["spec"]["replicas"]
    deployment, _ = built(omitted)
    assert deployment["spec"]["replicas"] == 1
    assert deployment == built(service(replicas=1))[0]
    assert built(service(replicas=3))[0]["spec"]["replicas"] == 3


def test_selector_kept_with_the_worker_labels_added():
    expressions = [{"key": "tier", "operator": "In", "values": ["gpu", "cpu"]},
                   {"key": "canary", "operator": "DoesNotExist"}]
    cr = service(selector={"matchLabels": {"app": "feature-extraction"},
                           "matchExpressions": expressions})
    cr["spec"]["template"]["metadata"]["labels"]["tier"] = "gpu"
    deployment, _ = built(cr)
    assert deployment["spec"]["selector"] == {
        "matchLabels": {"app": "feature-extraction", f"{PREFIX}name": NAME, f"{PREFIX}uid": UID,
                        f"{PREFIX}worker-type": "fe", "app.sedna.io": f"{NAME}-fe-svc"},
        "matchExpressions": expressions}
    assert server_errors("deployments", "apps", deployment) == []


def test_rollout_knobs_honoured():
    knobs = {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
             "minReadySeconds": 5, "revisionHistoryLimit": 2, "progressDeadlineSeconds": 120,
             "paused": True}
    deployment, _ = built(service(**knobs))
    assert {k: deployment["spec"][k] for k in knobs} == knobs
    assert server_errors("deployments", "apps", deployment) == []


def test_without_knobs_the_deployment_has_only_replicas_selector_template():
    assert set(built()[0]["spec"]) == {"replicas", "selector", "template"}


# -- build: what an edit changes -----------------------------------------------------------


def test_an_unchanged_spec_builds_identical_children():
    first = fe.build(service(), deps())
    assert fe.build(copy.deepcopy(service()), deps()) == first


def _image(spec):
    spec["template"]["spec"]["containers"][0]["image"] = "fe:v2"


def _user_env(spec):
    spec["template"]["spec"]["containers"][0]["env"][0]["value"] = "128,64"


@pytest.mark.parametrize("edit", [
    pytest.param(_image, id="image"),
    pytest.param(_user_env, id="env"),
    pytest.param(lambda s: s.update(replicas=2), id="replicas"),
    pytest.param(lambda s: s.update(kafkaSupport=False), id="kafka"),
    pytest.param(lambda s: s.update(strategy={"type": "Recreate"}), id="strategy"),
    pytest.param(lambda s: s.update(paused=True), id="paused"),
])
def test_an_edit_changes_the_deployment_hash_only(edit):
    before_dep, before_svc = built()
    cr = service()
    edit(cr["spec"])
    after_dep, after_svc = built(cr)
    assert spec_hash_of(after_dep) != spec_hash_of(before_dep)
    assert after_dep["metadata"]["name"] == DEP
    assert after_svc == before_svc


def test_a_new_model_url_rolls_the_deployment():
    before, _ = built()
    after, _ = built(models=(model("/data/models/v2/yolox.pth"),))
    assert spec_hash_of(after) != spec_hash_of(before)
    assert env_of(after)["MODEL_URL"] == "/home/data/data/models/v2/yolox.pth"


def test_hash_annotation_is_the_only_annotation_of_the_deployment():
    deployment, _ = built()
    assert list(deployment["metadata"]["annotations"]) == [SPEC_HASH_ANNOTATION]


# -- build: bad specs ----------------------------------------------------------------------


def _template_labels(**labels):
    def edit(spec):
        spec["template"]["metadata"]["labels"] = labels
    return edit


def _no_containers(spec):
    spec["template"]["spec"]["containers"] = []


BAD = [
    pytest.param(_template_labels(app="other"), "InvalidSelector",
                 "spec.selector does not select the labels of spec.template: matchLabels "
                 "app=feature-extraction, template has app=other", id="selector-labels"),
    pytest.param(lambda s: s.update(selector={"matchExpressions": [
        {"key": "tier", "operator": "In", "values": ["gpu"]}]}), "InvalidSelector",
                 "matchExpressions tier In (gpu), template has no label tier", id="selector-expression"),
    pytest.param(lambda s: s.update(selector={"matchExpressions": [
        {"key": "app", "operator": "NotIn", "values": ["feature-extraction"]}]}), "InvalidSelector",
                 "app NotIn (feature-extraction), template has app=feature-extraction", id="selector-notin"),
    pytest.param(lambda s: s.update(selector={"matchLabels": {f"{PREFIX}worker-type": "reid"}}),
                 "InvalidSelector", f"matchLabels {PREFIX}worker-type=reid, template has "
                 f"{PREFIX}worker-type=fe", id="selector-against-generated-label"),
    pytest.param(lambda s: s.update(selector={"matchExpressions": [{"key": "app", "operator": "Like"}]}),
                 "InvalidSelector", "spec.selector.matchExpressions[0].operator must be one of",
                 id="selector-operator"),
    pytest.param(lambda s: s.update(selector={"matchExpressions": [{"key": "app", "operator": "In"}]}),
                 "InvalidSelector", "values must not be empty with operator In", id="selector-in-empty"),
    pytest.param(lambda s: s.update(selector={"matchLabels": {"app": 3}}), "InvalidSelector",
                 "spec.selector.matchLabels must map names to string values", id="selector-value"),
    pytest.param(lambda s: s.update(selector="app=fe"), "InvalidSelector",
                 "spec.selector must be an object", id="selector-string"),
    pytest.param(lambda s: s.update(replicas=-1), "InvalidDeploymentSpec",
                 "spec.replicas must be an integer >= 0, not -1", id="replicas-negative"),
    pytest.param(lambda s: s.update(replicas="2"), "InvalidDeploymentSpec",
                 "spec.replicas must be an integer >= 0, not '2'", id="replicas-string"),
    pytest.param(lambda s: s.update(paused="yes"), "InvalidDeploymentSpec",
                 "spec.paused must be true or false", id="paused"),
    pytest.param(lambda s: s.update(strategy={"type": "BlueGreen"}), "InvalidDeploymentSpec",
                 "spec.strategy.type must be Recreate or RollingUpdate", id="strategy-type"),
    pytest.param(lambda s: s.update(strategy={"type": "Recreate", "rollingUpdate": {}}),
                 "InvalidDeploymentSpec", "only with type RollingUpdate", id="strategy-recreate-rolling"),
    pytest.param(lambda s: s.update(minReadySeconds=30, progressDeadlineSeconds=30),
                 "InvalidDeploymentSpec", "progressDeadlineSeconds must be greater than",
                 id="deadline-not-after-ready"),
    pytest.param(lambda s: s.update(revisionHistoryLimit=True), "InvalidDeploymentSpec",
                 "spec.revisionHistoryLimit must be an integer >= 0", id="history-bool"),
    pytest.param(lambda s: s.update(kafkaSupport="yes"), "InvalidSpec",
                 "spec.kafkaSupport must be true or false", id="kafka"),
    pytest.param(lambda s: s.update(model={}), "InvalidSpec", "spec.model.name is required", id="no-model"),
    pytest.param(lambda s: s.pop("template"), "InvalidTemplate", "spec.template is missing",
                 id="no-template"),
    pytest.param(_no_containers, "InvalidTemplate", "spec.template.spec.containers has no container",
                 id="no-containers"),
]


@pytest.mark.parametrize(("edit", "reason", "message"), BAD)
def test_bad_spec_is_an_invalid_spec_with_a_clear_reason(edit, reason, message):
    cr = service()
    edit(cr["spec"])
    with pytest.raises(InvalidSpec) as err:
        fe.build(cr, deps())
    assert err.value.reason == reason
    assert message in err.value.message


def test_a_name_too_long_for_the_labels_is_refused():
    cr = service()
    cr["metadata"]["name"] = "f" * 58
    with pytest.raises(InvalidSpec) as err:
        fe.build(cr, deps())
    assert err.value.reason == "NameTooLong"
    assert "app.sedna.io label value" in err.value.message


def test_a_missing_model_is_a_missing_dependency():
    with pytest.raises(MissingDependency) as err:
        fe.build(service(), deps(models=()))
    assert (err.value.reason, err.value.message) == ("ModelNotFound", f"Model {NS}/{MODEL_NAME} does not exist")


def test_a_model_without_url_is_invalid():
    with pytest.raises(InvalidSpec) as err:
        fe.build(service(), deps(models=(model(url=""),)))
    assert err.value.reason == "InvalidModel"


def test_a_selector_edit_after_the_deployment_exists_is_refused():
    current, _ = built()
    cr = service(selector={"matchLabels": {"app": "feature-extraction", "tier": "gpu"}})
    cr["spec"]["template"]["metadata"]["labels"]["tier"] = "gpu"
    assert built(cr)[0]["spec"]["selector"] != current["spec"]["selector"]  # fine while none exists
    with pytest.raises(InvalidSpec) as err:
        fe.build(cr, deps(deployments=[current]))
    assert err.value.reason == "SelectorImmutable"
    assert f"Deployment {DEP} cannot change" in err.value.message
    # an edit that keeps the selector, or a Deployment on its way out, is no obstacle
    assert built(service(replicas=4), deployments=[current])[0]["spec"]["replicas"] == 4
    leaving = copy.deepcopy(current)
    leaving["metadata"]["deletionTimestamp"] = NOW
    assert built(cr, deployments=[leaving])[0]["spec"]["selector"]["matchLabels"]["tier"] == "gpu"


# -- status --------------------------------------------------------------------------------


def observed_deployment(*, available: int = 0, replicas: int = 1, conditions=(), deleting=False) -> dict:
    dep, _ = built(service(replicas=replicas))
    dep = copy.deepcopy(dep)
    dep["status"] = {"replicas": replicas, "availableReplicas": available,
                     "conditions": list(conditions)}
    if deleting:
        dep["metadata"]["deletionTimestamp"] = NOW
    return dep


def observe(deployments=(), *, problem=None, retrying=False, now=NOW) -> Observed:
    desired = None if problem else {"deployments": {DEP: {}}, "services": {SVC: {}}}
    return Observed(children={"deployments": list(deployments), "services": []}, desired=desired,
                    converged=problem is None, now=now, problem=problem, retrying=retrying)


def conditions(status: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def true_ones(status: dict) -> list[str]:
    return [c["type"] for c in status["conditions"] if c["status"] == "True"]


def test_status_before_the_deployment_exists():
    status = fe.status(service(), observe())
    assert (status["active"], status["failed"]) == (0, 0)
    assert "startTime" not in status
    assert status["conditions"] == [{"type": "Pending", "status": "True", "reason": "WorkersCreating",
                                     "message": "the worker Deployment is being created",
                                     "lastHeartbeatTime": NOW, "lastTransitionTime": NOW}]


def test_status_while_the_pods_start():
    status = fe.status(service(), observe([observed_deployment(replicas=2)]))
    assert (status["active"], status["failed"], status["startTime"]) == (0, 0, NOW)
    assert conditions(status) == {"Pending": ("True", "WorkersStarting")}
    assert status["conditions"][0]["message"] == "0/2 replicas available"


def test_status_running_once_a_replica_is_available():
    cr = service()
    cr["status"] = fe.status(cr, observe([observed_deployment()]))
    status = fe.status(cr, observe([observed_deployment(available=1)], now=LATER))
    assert (status["active"], status["failed"], status["startTime"]) == (1, 0, NOW)
    assert conditions(status) == {"Pending": ("False", "WorkersAvailable"), "Running": ("True", "WorkersAvailable")}
    pending = next(c for c in status["conditions"] if c["type"] == "Pending")
    assert pending["message"] == "Running instead: 1/1 replicas available"
    running = next(c for c in status["conditions"] if c["type"] == "Running")
    assert running["lastTransitionTime"] == LATER and running["message"] == "1/1 replicas available"


@pytest.mark.parametrize("cond", [
    pytest.param({"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                  "message": "ReplicaSet has timed out progressing"}, id="deadline"),
    pytest.param({"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                  "message": "pods are forbidden"}, id="replica-failure"),
])
def test_a_failing_deployment_is_failed_then_recovers(cond):
    cr = service()
    cr["status"] = fe.status(cr, observe([observed_deployment(available=1)]))
    cr["status"] = fe.status(cr, observe([observed_deployment(available=1, conditions=[cond])], now=LATER))
    assert (cr["status"]["active"], cr["status"]["failed"]) == (1, 1)
    assert true_ones(cr["status"]) == ["Failed"]
    failed = next(c for c in cr["status"]["conditions"] if c["type"] == "Failed")
    assert (failed["reason"], failed["message"]) == ("WorkerFailed", f"deployment {DEP}: {cond['message']}")
    healed = fe.status(cr, observe([observed_deployment(available=1)], now=LATER))
    assert true_ones(healed) == ["Running"]
    assert conditions(healed)["Failed"] == ("False", "WorkersAvailable")
    assert [c["type"] for c in healed["conditions"]] == ["Running", "Failed"]  # upserted, never appended


@pytest.mark.parametrize(("problem", "retrying", "shown"), [
    pytest.param(("ModelNotFound", f"Model {NS}/{MODEL_NAME} does not exist"), True, "Pending",
                 id="missing-model-waits"),
    pytest.param(("InvalidSpec", "spec.model.name must be a non-empty string"), False, "Failed",
                 id="bad-spec-fails"),
])
def test_a_problem_is_shown_with_its_reason_and_not_terminal(problem, retrying, shown):
    cr = service()
    cr["status"] = fe.status(cr, observe([observed_deployment(available=1)]))
    bad = fe.status(cr, observe([observed_deployment(available=1)], problem=problem, retrying=retrying))
    assert true_ones(bad) == [shown]
    current = next(c for c in bad["conditions"] if c["type"] == shown)
    assert (current["reason"], current["message"]) == problem
    cr["status"] = bad
    assert true_ones(fe.status(cr, observe([observed_deployment(available=1)], now=LATER))) == ["Running"]
    assert not fe.DECLARATION.finished(cr)


def test_a_terminating_deployment_is_not_active():
    status = fe.status(service(), observe([observed_deployment(available=1, deleting=True)]))
    assert status["active"] == 0
    assert true_ones(status) == ["Pending"]


def test_status_keeps_reported_metrics_and_is_stable():
    cr = service()
    cr["status"] = {"metrics": [{"key": "fps", "value": "12"}], "lastReports": [{"node": "cloud-node", "seq": 3}]}
    first = fe.status(cr, observe([observed_deployment(available=1)]))
    assert first["metrics"] == [{"key": "fps", "value": "12"}]
    assert first["lastReports"] == [{"node": "cloud-node", "seq": 3}]
    cr["status"] = first
    assert fe.status(cr, observe([observed_deployment(available=1)], now=LATER)) == first


def test_the_status_written_survives_the_crd_schema():
    """What `status` writes (plus a report's metrics and order record) is neither pruned nor
    refused by the API server."""
    cr = service()
    cr["status"] = {"metrics": [{"key": "fps", "value": "12"}],
                    "lastReports": [{"node": "cloud-node", "epoch": "9f2c01d4", "seq": 3}]}
    cr["status"] = fe.status(cr, observe([observed_deployment(available=1)]))
    cr["status"] = fe.status(cr, observe([observed_deployment(available=1)],
                                         problem=("InvalidSelector", "no match"), now=LATER))
    cr["status"]["observedGeneration"] = 1
    crd = next(c for c in apis.crd_manifests() if c["spec"]["names"]["kind"] == fe.KIND)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    stored = server_schema.prune(schema, server_schema.apply_defaults(schema, cr))
    assert [e.message() for e in server_schema.validate(schema, stored)] == []
    assert stored["status"] == cr["status"]


def test_printer_columns_show_the_status():
    crd = next(c for c in apis.crd_manifests() if c["spec"]["names"]["kind"] == fe.KIND)
    columns = {c["name"]: c["jsonPath"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert columns["Status"] == '.status.conditions[?(@.status=="True")].type'
    assert (columns["Active"], columns["Failed"]) == (".status.active", ".status.failed")
    assert columns["Model"] == ".spec.model.name"


# -- reports -------------------------------------------------------------------------------


def test_a_report_sets_sorted_metrics_without_its_times():
    body = {"phase": "inference", "status": "running", "output": {"ownerInfo": {
        "startTime": "2026-03-01 10:00:00", "updateTime": "2026-03-01 10:01:00",
        "fps": 12, "inferenceNumber": "40", "latency": {"p50": 0.5}}}}
    mutate = fe.DECLARATION.report(body, NOW)
    assert mutate is not None
    status = mutate({"active": 1})
    assert status == {"active": 1, "metrics": [{"key": "fps", "value": "12"},
                                               {"key": "inferenceNumber", "value": "40"},
                                               {"key": "latency", "value": '{"p50":0.5}'}]}
    assert mutate(copy.deepcopy(status)) == status  # applying it again changes nothing


def test_a_report_without_owner_info_changes_nothing():
    assert fe.DECLARATION.report({"phase": "inference", "status": "running", "output": {"models": []}}, NOW) is None
    assert fe.DECLARATION.report({}, NOW) is None


@pytest.mark.parametrize("body", [
    pytest.param({"output": "done"}, id="output-string"),
    pytest.param({"output": {"ownerInfo": [1, 2]}}, id="owner-info-list"),
])
def test_a_malformed_report_is_invalid(body):
    with pytest.raises(ReportInvalid):
        fe.DECLARATION.report(body, NOW)


# -- declaration ---------------------------------------------------------------------------


def test_declaration():
    decl = fe.DECLARATION
    assert decl.kind == "FeatureExtractionService"
    assert (decl.name, decl.component) == ("featureextractionservice", "featureextractionservice-controller")
    assert [(o.gvr, o.on_edit) for o in decl.owns] == [(DEPLOYMENTS, "update"), (SERVICES, "update")]
    assert decl.owned(PODS) is None  # the Deployment's pods belong to its ReplicaSets
    (models,) = decl.watches
    assert models.gvr.plural == "models"
    assert list(models.refs(service())) == [MODEL_NAME]
    assert decl.report is metrics_report  # JI's rule: ownerInfo less its times -> metrics
