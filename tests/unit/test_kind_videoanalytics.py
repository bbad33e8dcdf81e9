"""gm/kinds/videoanalytics: the VideoAnalyticsJob's pods with their Model, its Service, its
declaration, and the job rules with the Service beside the pods."""

from __future__ import annotations

import copy

import pytest

from gm.kindlib import jobs
from gm.kinds import videoanalytics
from gm.kube.resources import PODS, SERVICES
from gm.reconcile.declaration import Dependencies
from gm.reports import metrics_report
from gm.workers.owned import MANAGED_BY
from gm.workers.specerrors import InvalidSpec, MissingDependency
from shared.objects import spec_hash_of
from tests.jobsim import CONFIG, JobSim

UID = "5c4b3a29-1807-4f6e-9d5c-4b3a29180706"
IMAGE = "kubeedge/sedna-example-multi-edge-inference-pedestrian-tracking-videoanalytics:v0.5.0"
PREFIX = "videoanalyticsjob.sedna.io/"
MODEL_PATH = "/data/ai_models/object_detection/pedestrians/yolox.pth"


def model(url: str = MODEL_PATH) -> dict:
    return {"apiVersion": "sedna.io/v1alpha1", "kind": "Model",
            "metadata": {"name": "m3l", "namespace": "default", "uid": "m-1"},
            "spec": {"format": "pth", "url": url}}


def video_analytics(**spec) -> dict:
    """Upstream's pedestrian-tracking VideoAnalyticsJob (examples/upstream)."""
    return {
        "apiVersion": "sedna.io/v1alpha1", "kind": "VideoAnalyticsJob",
        "metadata": {"name": "video-analytics", "namespace": "default", "uid": UID, "generation": 1},
        "spec": {"backoffLimit": 5, "kafkaSupport": True, "model": {"name": "m3l"},
                 "template": {"spec": {
                     "nodeName": "edge-node-1", "restartPolicy": "OnFailure",
                     "containers": [{"name": "detection", "image": IMAGE, "imagePullPolicy": "Always",
                                     "env": [{"name": "video_address", "value": "rtsp://7.182.9.110:8554/video"}],
                                     "resources": {"limits": {"memory": "2Gi"},
                                                   "requests": {"cpu": "500m", "memory": "512Mi"}}}]}},
                 **spec},
    }


def deps(models=None, pods=()) -> Dependencies:
    models = [model()] if models is None else models
    return Dependencies(objects={"models": {m["metadata"]["name"]: m for m in models}}, secrets={},
                        children={"pods": list(pods)}, config=CONFIG, now="2026-03-01T10:00:00Z")


def test_pod_and_service_names_owner_and_labels():
    built = videoanalytics.build(video_analytics(), deps())
    [pod], [svc] = built[PODS], built[SERVICES]
    assert pod["metadata"]["name"] == "video-analytics-videoanalytics-0"
    assert svc["metadata"]["name"] == "video-analytics-videoanalytics"
    labels = {f"{PREFIX}name": "video-analytics", f"{PREFIX}uid": UID, f"{PREFIX}worker-type": "videoanalytics"}
    for child in (pod, svc):
        assert child["metadata"]["labels"] == {**labels, **MANAGED_BY}
        [ref] = child["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("VideoAnalyticsJob", UID, True)
    assert svc["spec"]["selector"] == labels
    assert svc["spec"]["ports"] == [{"name": "tcp-0", "protocol": "TCP", "port": 4000, "targetPort": 4000}]


def test_env_carries_the_model():
    [pod] = videoanalytics.build(video_analytics(), deps())[PODS]
    [container] = pod["spec"]["containers"]
    env = [(e["name"], e.get("value")) for e in container["env"]]
    assert env == [
        ("video_address", "rtsp://7.182.9.110:8554/video"),
        ("DATA_PATH_PREFIX", "/home/data"),
        ("WORKER_NAME", None),
        ("JOB_NAME", "video-analytics"),
        ("NAMESPACE", "default"),
        ("MODEL_NAME", "m3l"),
        ("LC_SERVER", CONFIG.lc_server),
        ("KAFKA_ENABLED", "true"),
        ("JOB_COMPLETION_INDEX", "0"),
        ("MODEL_URL", "/home/data" + MODEL_PATH),
    ]
    assert container["env"][2]["valueFrom"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}
    model_dir = MODEL_PATH.rsplit("/", 1)[0] + "/"
    [mount] = container["volumeMounts"]
    assert mount["mountPath"] == "/home/data" + model_dir  # the Model's directory, from the host
    assert pod["spec"]["volumes"] == [{"name": mount["name"],
                                       "hostPath": {"path": model_dir, "type": "Directory"}}]


def test_a_remote_model_is_downloaded_by_the_storage_initializer():
    [pod] = videoanalytics.build(video_analytics(), deps(models=[model("https://models.example/yolox.pth")]))[PODS]
    [init] = pod["spec"]["initContainers"]
    assert init["image"] == CONFIG.storage_initializer_image
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["MODEL_URL"].startswith("/downloads/")


def test_a_model_edit_recreates_the_pods_and_leaves_the_service():
    before = videoanalytics.build(video_analytics(), deps())
    after = videoanalytics.build(video_analytics(), deps(models=[model("/data/other/yolox.pth")]))
    assert spec_hash_of(after[PODS][0]) != spec_hash_of(before[PODS][0])
    assert after[SERVICES] == before[SERVICES]
    assert videoanalytics.build(copy.deepcopy(video_analytics()), deps()) == before


def test_a_missing_model_is_a_missing_dependency():
    with pytest.raises(MissingDependency) as err:
        videoanalytics.build(video_analytics(), deps(models=()))
    assert err.value.reason == "ModelNotFound" and "default/m3l" in err.value.message


@pytest.mark.parametrize(("edit", "reason"), [
    pytest.param(lambda s: s.pop("model"), "InvalidSpec", id="no-model"),
    pytest.param(lambda s: s.update(model={"name": ""}), "InvalidSpec", id="empty-model"),
    pytest.param(lambda s: s.update(completions=0), "InvalidJobSpec", id="no-completions"),
    pytest.param(lambda s: s["template"].pop("spec"), "InvalidTemplate", id="no-pod-spec"),
])
def test_bad_specs_are_spec_errors(edit, reason):
    cr = video_analytics()
    edit(cr["spec"])
    with pytest.raises(InvalidSpec) as err:
        videoanalytics.build(cr, deps())
    assert err.value.reason == reason


def test_a_name_too_long_for_the_service_is_refused():
    cr = video_analytics()
    cr["metadata"]["name"] = "v" * 50  # the Service name <name>-videoanalytics exceeds 63
    with pytest.raises(InvalidSpec) as err:
        videoanalytics.build(cr, deps())
    assert err.value.reason == "InvalidName"


def test_a_finished_job_keeps_its_service_and_no_longer_needs_its_model():
    sim = JobSim(videoanalytics.DECLARATION, video_analytics(parallelism=2),
                 objects={"models": {"m3l": model()}})
    sim.reconcile()
    assert sorted(sim.pods) == ["video-analytics-videoanalytics-0", "video-analytics-videoanalytics-1"]
    assert list(sim.store["services"]) == ["video-analytics-videoanalytics"]
    for name in list(sim.pods):
        sim.end(name, "Succeeded")
    assert sim.settle()["phase"] == "Succeeded"
    sim.objects = {"models": {}}
    status = sim.settle()
    assert status["phase"] == "Succeeded" and len(sim.pods) == 2
    assert list(sim.store["services"]) == ["video-analytics-videoanalytics"]


def test_the_declaration():
    decl = videoanalytics.DECLARATION
    assert (decl.kind, decl.name, decl.component) == (
        "VideoAnalyticsJob", "videoanalyticsjob", "VideoAnalytics-controller")
    pods, services = decl.owns
    assert (pods.gvr, pods.on_edit, pods.frozen_when_finished) == (PODS, "recreate", True)
    assert (services.gvr, services.on_edit, services.frozen_when_finished) == (SERVICES, "update", False)
    [watch] = decl.watches
    assert watch.gvr.plural == "models" and list(watch.refs(video_analytics())) == ["m3l"]
    assert decl.finished is jobs.finished and decl.report is metrics_report
