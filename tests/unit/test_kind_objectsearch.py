"""gm.kinds.objectsearch (and the multi-edge rules it shares): children, edits, bad specs,
status and reports, on a pedestrian-search service with two cameras."""

from __future__ import annotations

import copy

import pytest

from gm.config import WorkerConfig
from gm.kindlib import multiedge
from gm.kinds import DECLARATIONS, objectsearch, objecttracking
from gm.kube.resources import DEPLOYMENTS, PODS, SERVICES
from gm.reconcile.declaration import Dependencies, Observed
from gm.reports import ReportInvalid
from gm.workers.owned import MANAGED_BY
from gm.workers.specerrors import InvalidSpec, SpecError
from shared.objects import SPEC_HASH_ANNOTATION, find_condition, spec_hash_of
from tests.crdcheck import crd_schema, server_check, validate

NAME = "pedestrian-search"
NS = "default"
UID = "0b6f1c52-3d7e-4a8f-9c10-2e3d4f5a6b7c"
PREFIX = "objectsearchservice.sedna.io/"
NOW = "2025-03-01T10:00:00Z"
LATER = "2025-03-01T10:05:00Z"
REID_DEP, USER_DEP = f"{NAME}-deployment-reidworker", f"{NAME}-deployment-userworker"
TRACK = (f"{NAME}-trackingworker-0", f"{NAME}-trackingworker-1")


def template(image: str, *, labels: dict | None = None, **spec) -> dict:
    out: dict = {"spec": {"containers": [{"name": "worker", "image": image,
                                          "env": [{"name": "log_level", "value": "info"}]}],
                          **spec}}
    if labels:
        out["metadata"] = {"labels": labels}
    return out


def search_service() -> dict:
    return {
        "apiVersion": "sedna.io/v1alpha1", "kind": "ObjectSearchService",
        "metadata": {"name": NAME, "namespace": NS, "uid": UID, "generation": 1},
        "spec": {
            "userWorker": {"template": template("example/user:v1", nodeName="cloud-node")},
            "trackingWorkers": [
                {"template": template("example/track:v1", nodeName="edge-node-1",
                                      restartPolicy="OnFailure")},
                {"template": template("example/track:v1", nodeName="edge-node-2")},
            ],
            "reidWorkers": {
                "selector": {"matchLabels": {"app": "reid"}},
                "template": template("example/reid:v1", labels={"app": "reid"}, nodeName="cloud-node"),
            },
        },
    }


DEPS = Dependencies(objects={}, secrets={}, children={}, config=WorkerConfig())


def built_by_name(build_fn, cr: dict) -> dict[str, dict[str, dict]]:
    """The children `build_fn` builds for `cr`, as plural -> name -> object."""
    out = build_fn(cr, DEPS)
    return {gvr.plural: {c["metadata"]["name"]: c for c in children} for gvr, children in out.items()}


def build(cr: dict) -> dict[str, dict[str, dict]]:
    return built_by_name(objectsearch.build, cr)


def env(obj: dict) -> list[dict]:
    spec = obj["spec"].get("template", {}).get("spec") or obj["spec"]
    return spec["containers"][0]["env"]


def env_map(obj: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env(obj)}


# -- children ---------------------------------------------------------------------------


def test_children_names_and_types():
    children = build(search_service())
    assert sorted(children) == ["deployments", "pods", "services"]
    assert sorted(children["deployments"]) == [REID_DEP, USER_DEP]
    assert sorted(children["services"]) == [f"{NAME}-reidworker", f"{NAME}-userworker"]
    assert sorted(children["pods"]) == list(TRACK)


def test_every_child_is_controlled_by_the_service_and_marked():
    ref = {"apiVersion": "sedna.io/v1alpha1", "kind": "ObjectSearchService", "name": NAME,
           "uid": UID, "controller": True, "blockOwnerDeletion": True}
    for by_name in build(search_service()).values():
        for child in by_name.values():
            meta = child["metadata"]
            assert meta["namespace"] == NS
            assert meta["ownerReferences"] == [ref]
            assert meta["labels"][f"{PREFIX}name"] == NAME
            assert meta["labels"][f"{PREFIX}uid"] == UID
            assert MANAGED_BY.items() <= meta["labels"].items()
            assert meta["annotations"][SPEC_HASH_ANNOTATION]


def test_worker_types_and_service_ports_select_the_right_pods():
    children = build(search_service())
    for worker_type, port in (("reidworker", 9378), ("userworker", 9379)):
        svc = children["services"][f"{NAME}-{worker_type}"]
        assert svc["spec"]["ports"] == [{"name": "tcp-0", "protocol": "TCP", "port": port,
                                         "targetPort": port}]
        dep = children["deployments"][f"{NAME}-deployment-{worker_type}"]
        pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        assert svc["spec"]["selector"].items() <= pod_labels.items()
        assert pod_labels[f"{PREFIX}worker-type"] == worker_type
        assert pod_labels["app.sedna.io"] == f"{NAME}-{worker_type}-svc"
    for pod in children["pods"].values():
        assert pod["metadata"]["labels"][f"{PREFIX}worker-type"] == "trackingworker"


def test_tracking_pod_env_in_fixed_order_after_the_users():
    pod = build(search_service())["pods"][TRACK[1]]
    assert env(pod) == [
        {"name": "log_level", "value": "info"},
        {"name": "NAMESPACE", "value": NS},
        {"name": "SERVICE_NAME", "value": NAME},
        {"name": "WORKER_NAME", "value": TRACK[1]},
        {"name": "USERWORKER_URL", "value": f"{NAME}-userworker.{NS}:9379"},
        {"name": "EDGEMESH_URL", "value": f"{NAME}-reidworker.{NS}:9378"},
    ]
    assert pod["spec"]["nodeName"] == "edge-node-2"


def test_deployment_workers_take_their_pod_name_through_the_downward_api():
    children = build(search_service())
    for name in (REID_DEP, USER_DEP):
        values = env_map(children["deployments"][name])
        assert values["WORKER_NAME"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}
        assert (values["NAMESPACE"], values["SERVICE_NAME"]) == (NS, NAME)
        assert "USERWORKER_URL" not in values


def test_restart_policy_comes_from_the_template_only():
    pods = build(search_service())["pods"]
    assert pods[TRACK[0]]["spec"]["restartPolicy"] == "OnFailure"
    assert "restartPolicy" not in pods[TRACK[1]]["spec"]
    assert "hostNetwork" not in pods[TRACK[0]]["spec"]


def test_reid_replicas_default_to_one_and_the_user_worker_is_one():
    deps = build(search_service())["deployments"]
    assert deps[REID_DEP]["spec"]["replicas"] == 1
    assert deps[USER_DEP]["spec"]["replicas"] == 1


def test_reid_rollout_fields_are_honoured_and_the_users_selector_is_kept():
    cr = search_service()
    cr["spec"]["reidWorkers"].update(
        replicas=3, minReadySeconds=5, revisionHistoryLimit=2, progressDeadlineSeconds=120,
        strategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0}})
    spec = build(cr)["deployments"][REID_DEP]["spec"]
    assert (spec["replicas"], spec["minReadySeconds"], spec["revisionHistoryLimit"],
            spec["progressDeadlineSeconds"]) == (3, 5, 2, 120)
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0}}
    assert spec["selector"] == {"matchLabels": {
        "app": "reid", f"{PREFIX}name": NAME, f"{PREFIX}uid": UID,
        f"{PREFIX}worker-type": "reidworker", "app.sedna.io": f"{NAME}-reidworker-svc"}}
    # the selector selects the pods: they carry the template's labels and the worker labels
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()


def test_reid_selector_expressions_are_kept_and_the_user_worker_selects_by_worker_labels():
    cr = search_service()
    cr["spec"]["reidWorkers"]["selector"]["matchExpressions"] = [
        {"key": "tier", "operator": "DoesNotExist"}, {"key": "app", "operator": "In", "values": ["reid", "r2"]}]
    deployments = build(cr)["deployments"]
    assert deployments[REID_DEP]["spec"]["selector"]["matchExpressions"] == [
        {"key": "tier", "operator": "DoesNotExist"}, {"key": "app", "operator": "In", "values": ["reid", "r2"]}]
    assert deployments[USER_DEP]["spec"]["selector"] == {"matchLabels": {
        f"{PREFIX}name": NAME, f"{PREFIX}uid": UID, f"{PREFIX}worker-type": "userworker",
        "app.sedna.io": f"{NAME}-userworker-svc"}}


def test_reid_without_a_selector_selects_by_the_worker_labels():
    cr = search_service()
    del cr["spec"]["reidWorkers"]["selector"]
    selector = build(cr)["deployments"][REID_DEP]["spec"]["selector"]
    assert selector == {"matchLabels": {
        f"{PREFIX}name": NAME, f"{PREFIX}uid": UID, f"{PREFIX}worker-type": "reidworker",
        "app.sedna.io": f"{NAME}-reidworker-svc"}}


def test_the_cached_cr_is_not_modified():
    cr = search_service()
    before = copy.deepcopy(cr)
    build(cr)
    assert cr == before


# -- edits ------------------------------------------------------------------------------


def hashes(children: dict) -> dict[str, str]:
    return {name: spec_hash_of(c) for by_name in children.values() for name, c in by_name.items()}


def test_an_unchanged_spec_builds_identical_children():
    assert build(search_service()) == build(search_service())


@pytest.mark.parametrize(("edit", "changed"), [
    pytest.param(lambda s: s["trackingWorkers"][1]["template"]["spec"]["containers"][0].update(
        image="example/track:v2"), {TRACK[1]}, id="one-tracking-worker"),
    pytest.param(lambda s: s["reidWorkers"]["template"]["spec"]["containers"][0].update(
        image="example/reid:v2"), {REID_DEP}, id="reid-template"),
    pytest.param(lambda s: s["reidWorkers"].update(replicas=2), {REID_DEP}, id="reid-replicas"),
    pytest.param(lambda s: s["userWorker"]["template"]["spec"].update(nodeName="cloud-2"),
                 {USER_DEP}, id="user-template"),
])
def test_an_edit_changes_the_hash_of_what_it_reaches_only(edit, changed):
    cr = search_service()
    before = hashes(build(cr))
    edit(cr["spec"])
    after = hashes(build(cr))
    assert {name for name in before if before[name] != after[name]} == changed


def test_a_removed_tracking_worker_is_no_longer_desired():
    cr = search_service()
    del cr["spec"]["trackingWorkers"][1]
    assert sorted(build(cr)["pods"]) == [TRACK[0]]


# -- bad specs --------------------------------------------------------------------------


def _set(path: tuple, value):
    def edit(cr: dict) -> None:
        node = cr
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


def _drop(*path):
    def edit(cr: dict) -> None:
        node = cr
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return edit


BAD_SPECS = [
    pytest.param(_set(("spec", "trackingWorkers"), []), "InvalidSpec", "spec.trackingWorkers needs",
                 id="no-tracking-workers"),
    pytest.param(_set(("spec", "trackingWorkers"), [{"template": {"spec": {"containers": []}}}]),
                 "InvalidTemplate", "spec.trackingWorkers[0].template.spec.containers", id="no-containers"),
    pytest.param(_set(("spec", "trackingWorkers"), ["camera"]), "InvalidSpec",
                 "spec.trackingWorkers[0] is not an object", id="worker-not-object"),
    pytest.param(_drop("spec", "userWorker"), "InvalidSpec", "spec.userWorker", id="no-user-worker"),
    pytest.param(_drop("spec", "userWorker", "template"), "InvalidTemplate",
                 "spec.userWorker.template", id="no-user-template"),
    pytest.param(_drop("spec", "reidWorkers"), "InvalidSpec", "spec.reidWorkers", id="no-reid-workers"),
    pytest.param(_set(("spec", "reidWorkers"), ["template"]), "InvalidSpec",
                 "spec.reidWorkers must be a DeploymentSpec object", id="reid-not-object"),
    pytest.param(_set(("spec", "reidWorkers", "replicas"), -1), "InvalidDeploymentSpec",
                 "spec.reidWorkers.replicas must be an integer >= 0", id="negative-replicas"),
    pytest.param(_set(("spec", "reidWorkers", "replicas"), True), "InvalidDeploymentSpec",
                 "spec.reidWorkers.replicas", id="bool-replicas"),
    pytest.param(_set(("spec", "reidWorkers", "strategy"), "fast"), "InvalidDeploymentSpec",
                 "spec.reidWorkers.strategy must be an object", id="strategy-not-object"),
    pytest.param(_set(("spec", "reidWorkers", "progressDeadlineSeconds"), 0), "InvalidDeploymentSpec",
                 "spec.reidWorkers.progressDeadlineSeconds must be an integer >= 1", id="deadline-zero"),
    pytest.param(_set(("spec", "reidWorkers", "paused"), "yes"), "InvalidDeploymentSpec",
                 "spec.reidWorkers.paused must be true or false", id="paused-not-bool"),
    pytest.param(_set(("spec", "reidWorkers", "selector"), {"matchLabels": {"app": "other"}}),
                 "InvalidSelector", "spec.reidWorkers.selector does not select the labels of "
                 "spec.reidWorkers.template: matchLabels app=other, template has app=reid",
                 id="selector-mismatch"),
    pytest.param(_set(("spec", "reidWorkers", "selector"), {"matchExpressions": [
        {"key": "app", "operator": "NotIn", "values": ["reid"]}]}), "InvalidSelector",
                 "matchExpressions app NotIn (reid), template has app=reid",
                 id="selector-expression-mismatch"),
    pytest.param(_set(("spec", "reidWorkers", "selector"), {"matchExpressions": [
        {"key": "app", "operator": "Gt", "values": ["1"]}]}), "InvalidSelector",
                 "spec.reidWorkers.selector.matchExpressions[0].operator must be one of",
                 id="selector-bad-operator"),
    pytest.param(_set(("spec", "reidWorkers", "selector"), {"matchLabels": ["app"]}), "InvalidSelector",
                 "spec.reidWorkers.selector.matchLabels must map names to string values",
                 id="selector-labels-not-map"),
    pytest.param(_set(("metadata", "name"), "p" * 60), "NameTooLong", "app.sedna.io label value",
                 id="name-too-long"),
    pytest.param(_set(("kind",), "ObjectTrackingService"), "InvalidObject", "expected a ObjectSearchService",
                 id="wrong-kind"),
]


@pytest.mark.parametrize(("edit", "reason", "message"), BAD_SPECS)
def test_bad_specs_are_spec_errors_with_a_clear_reason(edit, reason, message):
    cr = search_service()
    edit(cr)
    with pytest.raises(SpecError) as caught:
        objectsearch.build(cr, DEPS)
    assert isinstance(caught.value, InvalidSpec)
    assert caught.value.reason == reason
    assert message in caught.value.message


def with_deployments(*deployments: dict) -> Dependencies:
    """Dependencies as the reconciler passes them once the CR's Deployments exist."""
    return Dependencies(objects={}, secrets={}, children={"deployments": list(deployments)},
                        config=WorkerConfig())


def test_a_reid_selector_edit_after_the_deployment_exists_is_refused():
    current = build(search_service())["deployments"][REID_DEP]
    cr = search_service()
    cr["spec"]["reidWorkers"]["selector"]["matchLabels"]["tier"] = "gpu"
    cr["spec"]["reidWorkers"]["template"]["metadata"]["labels"]["tier"] = "gpu"
    assert build(cr)["deployments"][REID_DEP]["spec"]["selector"] != current["spec"]["selector"]
    with pytest.raises(InvalidSpec) as err:
        objectsearch.build(cr, with_deployments(current))
    assert err.value.reason == "SelectorImmutable"
    assert err.value.message == (
        f"spec.reidWorkers.selector changed, but the selector of Deployment {REID_DEP} cannot "
        "change; restore it, or delete and recreate the ObjectSearchService")


def test_edits_that_keep_the_reid_selector_or_a_leaving_deployment_are_no_obstacle():
    children = build(search_service())
    current = children["deployments"][REID_DEP]
    cr = search_service()
    cr["spec"]["reidWorkers"]["replicas"] = 4
    live = [current, children["deployments"][USER_DEP]]
    assert objectsearch.build(cr, with_deployments(*live))[DEPLOYMENTS][0]["spec"]["replicas"] == 4
    cr["spec"]["reidWorkers"]["selector"]["matchLabels"]["tier"] = "gpu"
    cr["spec"]["reidWorkers"]["template"]["metadata"]["labels"]["tier"] = "gpu"
    leaving = copy.deepcopy(current)
    leaving["metadata"]["deletionTimestamp"] = NOW
    built = objectsearch.build(cr, with_deployments(leaving))[DEPLOYMENTS][0]
    assert built["spec"]["selector"]["matchLabels"]["tier"] == "gpu"


# -- status -----------------------------------------------------------------------------


def available(dep: dict) -> dict:
    return {**dep, "status": {"replicas": 1, "availableReplicas": 1,
                              "conditions": [{"type": "Available", "status": "True"}]}}


def failed_deployment(dep: dict) -> dict:
    return {**dep, "status": {"conditions": [
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
         "message": "ReplicaSet has timed out progressing."}]}}


def with_phase(pod: dict, phase: str, **status) -> dict:
    return {**pod, "status": {"phase": phase, **status}}


def observe(cr: dict, *, deployments=(), pods=(), now: str = NOW,
            problem: tuple[str, str] | None = None) -> Observed:
    desired = None if problem else build(cr)
    return Observed(children={"deployments": list(deployments), "pods": list(pods), "services": []},
                    desired=desired, converged=problem is None, now=now, problem=problem)


def running_children(cr: dict):
    children = build(cr)
    deps = [available(d) for d in children["deployments"].values()]
    pods = [with_phase(p, "Running") for p in children["pods"].values()]
    return deps, pods


def true_conditions(status: dict) -> list[tuple[str, str]]:
    return [(c["type"], c["reason"]) for c in status["conditions"] if c["status"] == "True"]


def test_status_without_children_is_pending_and_has_no_start_time():
    cr = search_service()
    status = objectsearch.DECLARATION.status(cr, observe(cr))
    assert (status["active"], status["failed"]) == (0, 0)
    assert "startTime" not in status
    assert true_conditions(status) == [("Pending", "WorkersStarting")]
    assert find_condition(status["conditions"], "Pending")["message"] == "0/4 workers available"


def test_status_counts_available_deployments_and_running_pods():
    cr = search_service()
    deps, pods = running_children(cr)
    pods[1] = with_phase(pods[1], "Pending")
    status = objectsearch.DECLARATION.status(cr, observe(cr, deployments=deps, pods=pods))
    assert (status["active"], status["failed"]) == (3, 0)
    assert status["startTime"] == NOW
    assert true_conditions(status) == [("Pending", "WorkersStarting")]


def test_status_running_once_every_worker_is_up():
    cr = search_service()
    cr["status"] = objectsearch.DECLARATION.status(cr, observe(cr))
    deps, pods = running_children(cr)
    status = objectsearch.DECLARATION.status(cr, observe(cr, deployments=deps, pods=pods))
    assert (status["active"], status["failed"]) == (4, 0)
    assert true_conditions(status) == [("Running", "WorkersAvailable")]
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [("Pending", "False"), ("Running", "True")]


def test_a_failed_tracking_pod_fails_the_service_and_it_recovers():
    cr = search_service()
    deps, pods = running_children(cr)
    cr["status"] = objectsearch.DECLARATION.status(cr, observe(cr, deployments=deps, pods=pods))
    pods[0] = with_phase(pods[0], "Failed", reason="Error", message="camera unreachable")
    cr["status"] = failed = objectsearch.DECLARATION.status(
        cr, observe(cr, deployments=deps, pods=pods, now=LATER))
    assert (failed["active"], failed["failed"]) == (3, 1)
    assert true_conditions(failed) == [("Failed", "PodFailed")]
    cond = find_condition(failed["conditions"], "Failed")
    assert cond["message"] == f"tracking worker {TRACK[0]} failed: camera unreachable"
    assert cond["lastTransitionTime"] == LATER
    assert failed["startTime"] == NOW  # set once
    _, pods = running_children(cr)  # the failed pod deleted and recreated
    recovered = objectsearch.DECLARATION.status(cr, observe(cr, deployments=deps, pods=pods, now=LATER))
    assert true_conditions(recovered) == [("Running", "WorkersAvailable")]
    assert sorted((c["type"], c["status"]) for c in recovered["conditions"]) == [
        ("Failed", "False"), ("Running", "True")]


def test_a_failed_deployment_fails_the_service():
    cr = search_service()
    deps, pods = running_children(cr)
    deps[0] = failed_deployment(deps[0])
    status = objectsearch.DECLARATION.status(cr, observe(cr, deployments=deps, pods=pods))
    assert (status["active"], status["failed"]) == (3, 1)
    assert true_conditions(status) == [("Failed", "DeploymentFailed")]
    assert REID_DEP in find_condition(status["conditions"], "Failed")["message"]


def test_a_bad_spec_is_a_failed_condition_with_its_reason():
    cr = search_service()
    deps, pods = running_children(cr)
    status = objectsearch.DECLARATION.status(cr, observe(
        cr, deployments=deps, pods=pods, problem=("InvalidSpec", "spec.trackingWorkers needs at least one worker")))
    assert true_conditions(status) == [("Failed", "InvalidSpec")]
    assert find_condition(status["conditions"], "Failed")["message"] == \
        "spec.trackingWorkers needs at least one worker"


def test_status_is_stable_when_nothing_changes():
    cr = search_service()
    deps, pods = running_children(cr)
    cr["status"] = objectsearch.DECLARATION.status(cr, observe(cr, deployments=deps, pods=pods))
    again = objectsearch.DECLARATION.status(cr, observe(cr, deployments=deps, pods=pods, now=LATER))
    assert again == cr["status"]


def test_terminating_and_unwanted_children_are_not_counted():
    cr = search_service()
    deps, pods = running_children(cr)
    extra = copy.deepcopy(pods[1])
    extra["metadata"]["name"] = f"{NAME}-trackingworker-7"  # no longer in the spec
    pods[1]["metadata"] = {**pods[1]["metadata"], "deletionTimestamp": NOW}
    status = objectsearch.DECLARATION.status(cr, observe(cr, deployments=deps, pods=[*pods, extra]))
    assert status["active"] == 3
    assert true_conditions(status) == [("Pending", "WorkersStarting")]


def test_written_status_fits_the_crd_and_is_not_pruned():
    cr = search_service()
    deps, pods = running_children(cr)
    status = objectsearch.DECLARATION.status(cr, observe(cr, deployments=deps, pods=pods))
    status = objectsearch.DECLARATION.report(
        {"output": {"ownerInfo": {"inferenceNumber": 12}}}, NOW)(status)
    status["observedGeneration"] = 1
    status["lastReports"] = [{"node": "edge-node-1", "epoch": "9f2c01d4", "seq": 3}]
    obj = {"apiVersion": "sedna.io/v1alpha1", "kind": "ObjectSearchService",
           "metadata": {"name": NAME, "namespace": NS}, "spec": search_service()["spec"],
           "status": status}
    assert validate(crd_schema("ObjectSearchService"), obj) == []
    stored, errors = server_check("ObjectSearchService", obj)
    assert errors == []
    assert stored["status"] == status


# -- reports and declaration ------------------------------------------------------------


def test_a_report_sets_metrics_from_owner_info_without_times():
    mutate = objectsearch.DECLARATION.report({"phase": "inference", "status": "active", "output": {
        "ownerInfo": {"startTime": NOW, "updateTime": LATER, "tracked": 7, "ids": ["a", "b"]}}}, LATER)
    assert mutate({"active": 4}) == {"active": 4, "metrics": [
        {"key": "ids", "value": '["a","b"]'}, {"key": "tracked", "value": "7"}]}


def test_a_report_without_owner_info_changes_nothing():
    assert objectsearch.DECLARATION.report({"phase": "inference", "output": {"models": []}}, NOW) is None


def test_a_malformed_report_is_refused():
    with pytest.raises(ReportInvalid, match="output.ownerInfo must be an object"):
        objectsearch.DECLARATION.report({"output": {"ownerInfo": [1]}}, NOW)


@pytest.mark.parametrize(("decl", "kind", "controller", "component"), [
    pytest.param(objectsearch.DECLARATION, "ObjectSearchService", "objectsearchservice",
                 "objectsearch-controller", id="search"),
    pytest.param(objecttracking.DECLARATION, "ObjectTrackingService", "objecttrackingservice",
                 "objecttracking-controller", id="tracking"),
])
def test_declarations(decl, kind, controller, component):
    assert (decl.kind, decl.name, decl.component) == (kind, controller, component)
    assert {o.gvr: o.on_edit for o in decl.owns} == {
        DEPLOYMENTS: "update", SERVICES: "update", PODS: "recreate"}
    assert decl.watches == ()
    assert multiedge.CONDITION_TYPES == decl.api.condition_types
    assert decl in DECLARATIONS
