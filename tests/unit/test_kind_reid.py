"""gm/kinds/reid: the ReidJob's pods (names, owner, labels, env) and its declaration."""

from __future__ import annotations

import copy

import pytest

from gm.kindlib import jobs
from gm.kinds import reid
from gm.kube.resources import PODS
from gm.reconcile.declaration import Dependencies
from gm.reports import metrics_report
from gm.workers.owned import MANAGED_BY
from gm.workers.specerrors import InvalidSpec
from shared.objects import is_controlled_by, spec_hash_of
from tests.jobsim import CONFIG

UID = "2a9d8c7b-6e5f-4a3b-8c1d-0e9f8a7b6c5d"
IMAGE = "kubeedge/sedna-example-multi-edge-inference-pedestrian-tracking-reid:v0.5.0"
PREFIX = "reidjob.sedna.io/"


def pedestrian_reid(**spec) -> dict:
    """Upstream's pedestrian-tracking ReidJob (examples/upstream)."""
    return {
        "apiVersion": "sedna.io/v1alpha1", "kind": "ReidJob",
        "metadata": {"name": "reid", "namespace": "default", "uid": UID, "generation": 1},
        "spec": {"backoffLimit": 5, "kafkaSupport": True, "template": {"spec": {
            "nodeName": "cloud-node", "restartPolicy": "OnFailure",
            "containers": [{"name": "reid", "image": IMAGE, "imagePullPolicy": "Always",
                            "env": [{"name": "query_images", "value": "/data/query/sample.png"},
                                    {"name": "match_threshold", "value": "0.9"}],
                            "volumeMounts": [{"mountPath": "/data/", "name": "vol1"}]}],
            "volumes": [{"name": "vol1", "hostPath": {"path": "/data/", "type": "Directory"}}]}},
            **spec},
    }


def deps(pods=()) -> Dependencies:
    return Dependencies(objects={}, secrets={}, children={"pods": list(pods)}, config=CONFIG,
                        now="2026-03-01T10:00:00Z")


def build_pods(cr: dict, pods=()) -> list[dict]:
    built = reid.build(cr, deps(pods))
    assert set(built) == {PODS}  # no Service: upstream's ReidPort is unused
    return list(built[PODS])


def test_one_pod_named_by_its_index_owned_by_the_job():
    [pod] = build_pods(pedestrian_reid())
    meta = pod["metadata"]
    assert meta["name"] == "reid-reid-0" and meta["namespace"] == "default"
    assert meta["ownerReferences"] == [{
        "apiVersion": "sedna.io/v1alpha1", "kind": "ReidJob", "name": "reid", "uid": UID,
        "controller": True, "blockOwnerDeletion": True}]
    assert is_controlled_by(pod, pedestrian_reid())
    assert meta["labels"] == {f"{PREFIX}name": "reid", f"{PREFIX}uid": UID,
                              f"{PREFIX}worker-type": "reid", **MANAGED_BY}
    assert meta["annotations"][jobs.ATTEMPT_ANNOTATION] == "0"
    assert spec_hash_of(pod)


def test_env_is_upstreams_with_the_pod_name_as_worker_name():
    [pod] = build_pods(pedestrian_reid())
    [container] = pod["spec"]["containers"]
    assert container["env"] == [
        {"name": "query_images", "value": "/data/query/sample.png"},
        {"name": "match_threshold", "value": "0.9"},
        {"name": "WORKER_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
        {"name": "JOB_NAME", "value": "reid"},
        {"name": "NAMESPACE", "value": "default"},
        {"name": "LC_SERVER", "value": CONFIG.lc_server},
        {"name": "KAFKA_ENABLED", "value": "true"},
        {"name": "JOB_COMPLETION_INDEX", "value": "0"},
    ]
    assert container["image"] == IMAGE and container["volumeMounts"] == [{"mountPath": "/data/", "name": "vol1"}]
    assert pod["spec"]["nodeName"] == "cloud-node"
    assert pod["spec"]["restartPolicy"] == "OnFailure"


@pytest.mark.parametrize("kafka", [False, None])
def test_kafka_env_only_when_asked(kafka):
    cr = pedestrian_reid(kafkaSupport=kafka)
    [pod] = build_pods(cr)
    names = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
    assert "KAFKA_ENABLED" not in names


def test_an_unchanged_spec_builds_identical_pods_and_an_edit_changes_the_hash():
    cr = pedestrian_reid()
    assert build_pods(cr) == build_pods(copy.deepcopy(cr))
    edited = copy.deepcopy(cr)
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = IMAGE.replace("v0.5.0", "v0.6.0")
    edited["metadata"]["generation"] = 2
    assert spec_hash_of(build_pods(edited)[0]) != spec_hash_of(build_pods(cr)[0])


def test_knobs_that_do_not_reach_the_pod_leave_its_hash():
    cr = pedestrian_reid()
    knobs = pedestrian_reid(backoffLimit=2, activeDeadlineSeconds=600, ttlSecondsAfterFinished=60)
    assert build_pods(knobs) == build_pods(cr)


@pytest.mark.parametrize(("edit", "reason"), [
    pytest.param(lambda s: s.update(backoffLimit=-1), "InvalidJobSpec", id="negative-backoff"),
    pytest.param(lambda s: s["template"]["spec"].update(containers=[]), "InvalidTemplate", id="no-containers"),
    pytest.param(lambda s: s.pop("template"), "InvalidTemplate", id="no-template"),
    pytest.param(lambda s: s["template"]["spec"]["containers"][0].pop("image"), "InvalidTemplate", id="no-image"),
])
def test_bad_specs_are_spec_errors(edit, reason):
    cr = pedestrian_reid()
    edit(cr["spec"])
    with pytest.raises(InvalidSpec) as err:
        reid.build(cr, deps())
    assert err.value.reason == reason


def test_a_name_too_long_for_a_label_is_refused():
    cr = pedestrian_reid()
    cr["metadata"]["name"] = "r" * 64
    with pytest.raises(InvalidSpec) as err:
        reid.build(cr, deps())
    assert err.value.reason == "NameTooLong"


def test_the_declaration():
    decl = reid.DECLARATION
    assert decl.kind == "ReidJob" and decl.name == "reidjob" and decl.component == "Reid-controller"
    [owns] = decl.owns
    assert (owns.gvr, owns.on_edit, owns.frozen_when_finished) == (PODS, "recreate", True)
    assert decl.watches == ()
    assert decl.finished is jobs.finished and decl.wake is jobs.wake and decl.expired is jobs.expired
    assert decl.report is metrics_report
