"""gm.kinds.objecttracking: ObjectSearch's reid and tracking workers without the user worker,
under the kind's own name, labels and declaration."""

from __future__ import annotations

import copy

import pytest

from gm.config import WorkerConfig
from gm.kinds import objecttracking
from gm.reconcile.declaration import Dependencies, Observed
from gm.workers.specerrors import InvalidSpec
from shared.objects import find_condition, spec_hash_of
from tests.crdcheck import crd_schema, server_check, validate
from tests.unit.test_kind_objectsearch import DEPS, built_by_name, env

NAME = "pedestrian-tracking"
NS = "edge-apps"
UID = "7a1e2d3c-4b5a-4f6e-8d7c-9b0a1f2e3d4c"
PREFIX = "objecttrackingservice.sedna.io/"
NOW = "2025-03-01T10:00:00Z"
REID_DEP = f"{NAME}-deployment-reidworker"
TRACK = tuple(f"{NAME}-trackingworker-{i}" for i in range(3))


def tracking_service() -> dict:
    def template(image: str, node: str) -> dict:
        return {"spec": {"nodeName": node, "containers": [{"name": "worker", "image": image}]}}
    return {
        "apiVersion": "sedna.io/v1alpha1", "kind": "ObjectTrackingService",
        "metadata": {"name": NAME, "namespace": NS, "uid": UID, "generation": 2},
        "spec": {
            "trackingWorkers": [{"template": template("example/track:v1", f"edge-node-{i}")}
                                for i in range(3)],
            "reidWorkers": {"replicas": 2, "selector": {"matchLabels": {}},
                            "template": template("example/reid:v1", "cloud-node")},
        },
    }


def build(cr: dict) -> dict[str, dict[str, dict]]:
    return built_by_name(objecttracking.build, cr)


def test_children_are_the_reid_pair_and_the_tracking_pods():
    children = build(tracking_service())
    assert {plural: sorted(names) for plural, names in children.items()} == {
        "deployments": [REID_DEP], "services": [f"{NAME}-reidworker"], "pods": list(TRACK)}
    dep = children["deployments"][REID_DEP]
    assert dep["spec"]["replicas"] == 2
    assert children["services"][f"{NAME}-reidworker"]["spec"]["ports"][0]["port"] == 9378


def test_children_are_owned_by_the_tracking_service_with_its_labels():
    ref = {"apiVersion": "sedna.io/v1alpha1", "kind": "ObjectTrackingService", "name": NAME,
           "uid": UID, "controller": True, "blockOwnerDeletion": True}
    for by_name in build(tracking_service()).values():
        for child in by_name.values():
            assert child["metadata"]["ownerReferences"] == [ref]
            assert child["metadata"]["namespace"] == NS
            assert child["metadata"]["labels"][f"{PREFIX}uid"] == UID
    pod = build(tracking_service())["pods"][TRACK[2]]
    assert pod["metadata"]["labels"][f"{PREFIX}worker-type"] == "trackingworker"
    assert pod["spec"]["nodeName"] == "edge-node-2"


def test_tracking_workers_reach_the_reid_service_and_get_no_user_worker_url():
    pod = build(tracking_service())["pods"][TRACK[0]]
    assert env(pod) == [
        {"name": "NAMESPACE", "value": NS},
        {"name": "SERVICE_NAME", "value": NAME},
        {"name": "WORKER_NAME", "value": TRACK[0]},
        {"name": "EDGEMESH_URL", "value": f"{NAME}-reidworker.{NS}:9378"},
    ]


def test_an_unchanged_spec_builds_identical_children_and_an_edit_reaches_one_pod():
    cr = tracking_service()
    first = build(cr)
    assert build(copy.deepcopy(cr)) == first
    cr["spec"]["trackingWorkers"][2]["template"]["spec"]["containers"][0]["image"] = "example/track:v2"
    second = build(cr)
    changed = {name for plural in first for name in first[plural]
               if spec_hash_of(first[plural][name]) != spec_hash_of(second[plural][name])}
    assert changed == {TRACK[2]}
    assert second["pods"][TRACK[2]]["spec"]["containers"][0]["image"] == "example/track:v2"


@pytest.mark.parametrize(("edit", "reason", "message"), [
    pytest.param(lambda s: s.update(trackingWorkers=[]), "InvalidSpec", "spec.trackingWorkers needs",
                 id="no-tracking-workers"),
    pytest.param(lambda s: s["trackingWorkers"][1]["template"]["spec"].update(containers=[]),
                 "InvalidTemplate", "spec.trackingWorkers[1].template.spec.containers", id="no-containers"),
    pytest.param(lambda s: s["reidWorkers"].pop("template"), "InvalidTemplate",
                 "spec.reidWorkers.template", id="no-reid-template"),
    pytest.param(lambda s: s["reidWorkers"].update(paused="yes"), "InvalidDeploymentSpec",
                 "spec.reidWorkers.paused must be true or false", id="paused-not-bool"),
    pytest.param(lambda s: s["reidWorkers"].update(selector={"matchLabels": {"app": "tracking"}}),
                 "InvalidSelector", "spec.reidWorkers.selector does not select the labels of "
                 "spec.reidWorkers.template: matchLabels app=tracking, template has no label app",
                 id="selector-mismatch"),
])
def test_bad_specs(edit, reason, message):
    cr = tracking_service()
    edit(cr["spec"])
    with pytest.raises(InvalidSpec) as caught:
        objecttracking.build(cr, DEPS)
    assert (caught.value.reason, message in caught.value.message) == (reason, True)


def test_the_reid_selector_is_the_users_plus_the_worker_labels_and_cannot_change():
    cr = tracking_service()
    cr["spec"]["reidWorkers"]["selector"] = {"matchLabels": {"app": "tracking"}}
    cr["spec"]["reidWorkers"]["template"]["metadata"] = {"labels": {"app": "tracking"}}
    current = build(cr)["deployments"][REID_DEP]
    assert current["spec"]["selector"] == {"matchLabels": {
        "app": "tracking", f"{PREFIX}name": NAME, f"{PREFIX}uid": UID,
        f"{PREFIX}worker-type": "reidworker", "app.sedna.io": f"{NAME}-reidworker-svc"}}
    cr["spec"]["reidWorkers"]["selector"] = {}
    live = Dependencies(objects={}, secrets={}, children={"deployments": [current]},
                        config=WorkerConfig())
    with pytest.raises(InvalidSpec) as caught:
        objecttracking.build(cr, live)
    assert caught.value.reason == "SelectorImmutable"
    assert caught.value.message.endswith("delete and recreate the ObjectTrackingService")


def test_a_user_worker_in_the_spec_is_not_built():
    cr = tracking_service()
    cr["spec"]["userWorker"] = {"template": {"spec": {"containers": [{"name": "u", "image": "u"}]}}}
    assert sorted(build(cr)["deployments"]) == [REID_DEP]


def test_status_counts_the_reid_deployment_and_tracking_pods():
    cr = tracking_service()
    children = build(cr)
    deps = [{**d, "status": {"availableReplicas": 2}} for d in children["deployments"].values()]
    pods = [{**p, "status": {"phase": "Running"}} for p in children["pods"].values()]
    observed = Observed(children={"deployments": deps, "pods": pods}, desired=children,
                        converged=True, now=NOW)
    status = objecttracking.DECLARATION.status(cr, observed)
    assert (status["active"], status["failed"], status["startTime"]) == (4, 0, NOW)
    assert find_condition(status["conditions"], "Running")["reason"] == "WorkersAvailable"
    obj = {**cr, "status": {**status, "observedGeneration": 2}}
    obj["metadata"] = {"name": NAME, "namespace": NS}
    assert validate(crd_schema("ObjectTrackingService"), obj) == []
    stored, errors = server_check("ObjectTrackingService", obj)
    assert (errors, stored["status"]) == ([], obj["status"])


def test_a_report_sets_metrics():
    mutate = objecttracking.DECLARATION.report({"output": {"ownerInfo": {"tracks": 3}}}, NOW)
    assert mutate({})["metrics"] == [{"key": "tracks", "value": "3"}]
