"""FederatedLearningJob end to end: the GM against the dev cluster, driven like a user."""

from __future__ import annotations

import orjson

from gm.controllers.common import FL, PODS
from gm.kube.resources import GVR
from tests.conftest import wait_for
from tests.e2e.conftest import load_example

JOB = "surface-defect-detection"
NS = "default"
TRAINERS = [f"{JOB}-trainworker-0", f"{JOB}-trainworker-1"]
AGG = f"{JOB}-aggworker"


def rt(dc, gvr: GVR):
    return dc.store.registry.lookup(group=gvr.group, version=gvr.version, resource=gvr.plural)


def pods_of(dc, job_uid: str) -> dict[str, dict]:
    items, _ = dc.store.list(rt(dc, PODS), NS)
    return {p["metadata"]["name"]: p for p in items
            if any(r.get("uid") == job_uid for r in p["metadata"].get("ownerReferences") or [])}


def env_of(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}


async def create_example(api) -> dict:
    job = None
    for obj in load_example("federated-learning-surface-defect.yaml"):
        kind = obj["kind"]
        plural = {"Dataset": "datasets", "Model": "models", "FederatedLearningJob": "federatedlearningjobs"}[kind]
        created = await api.create(GVR("sedna.io", "v1alpha1", plural), obj, namespace=NS)
        if kind == "FederatedLearningJob":
            job = created
    return job


async def test_children_owned_named_and_cascade_deleted(gm, api, sedna_cluster):
    dc = sedna_cluster
    job = await create_example(api)
    uid = job["metadata"]["uid"]
    pods = await wait_for(lambda: (p := pods_of(dc, uid)) and len(p) == 3 and p, within=10,
                          message="aggregator and two trainers")
    assert sorted(pods) == sorted([AGG, *TRAINERS])
    for name, pod in pods.items():
        refs = pod["metadata"]["ownerReferences"]
        assert refs == [{"apiVersion": "sedna.io/v1alpha1", "kind": "FederatedLearningJob", "name": JOB,
                         "uid": uid, "controller": True, "blockOwnerDeletion": True}]
        assert env_of(pod)["WORKER_NAME"] == name
        assert pod["spec"].get("restartPolicy") == "OnFailure"
    assert pods[TRAINERS[0]]["spec"]["hostNetwork"] is True
    assert env_of(pods[TRAINERS[0]])["PARTICIPANTS_COUNT"] == "2"
    status = await wait_for(lambda: (s := dc.store.get(rt(dc, FL), NS, JOB).get("status")) and
                            s.get("phase") == "Running" and s.get("active") == 3 and s,
                            within=10, message="job Running with 3 active")
    assert status["observedGeneration"] == 1
    await api.delete(FL, JOB, namespace=NS)
    await wait_for(lambda: not pods_of(dc, uid), within=10, message="pods removed by the GC")


async def test_trainer_env_patch_recreates_that_trainer_with_same_name(gm, api, sedna_cluster, kubectl):
    dc = sedna_cluster
    job = await create_example(api)
    uid = job["metadata"]["uid"]
    before = await wait_for(lambda: (p := pods_of(dc, uid)) and len(p) == 3 and p, within=10)
    patch = [{"op": "replace", "path": "/spec/trainingWorkers/0/template/spec/containers/0/env/0/value",
              "value": "16"}]
    rc, out, err = await kubectl("patch", "federatedlearningjob", JOB, "--type=json", "-p",
                                 orjson.dumps(patch).decode())
    assert rc == 0, err

    def recreated():
        pods = pods_of(dc, uid)
        pod = pods.get(TRAINERS[0])
        return pod and pod["metadata"]["uid"] != before[TRAINERS[0]]["metadata"]["uid"] and pods

    pods = await wait_for(recreated, within=10, message="trainer 0 recreated")
    assert env_of(pods[TRAINERS[0]])["batch_size"] == "16"
    assert env_of(pods[TRAINERS[0]])["WORKER_NAME"] == TRAINERS[0]
    # the other workers were not touched
    assert pods[TRAINERS[1]]["metadata"]["uid"] == before[TRAINERS[1]]["metadata"]["uid"]
    assert pods[AGG]["metadata"]["uid"] == before[AGG]["metadata"]["uid"]
    await wait_for(lambda: dc.store.get(rt(dc, FL), NS, JOB).get("status", {}).get("observedGeneration") == 2,
                   within=10, message="observedGeneration 2")


async def test_deleted_trainer_comes_back_with_same_name(gm, api, sedna_cluster):
    dc = sedna_cluster
    job = await create_example(api)
    uid = job["metadata"]["uid"]
    before = await wait_for(lambda: (p := pods_of(dc, uid)) and len(p) == 3 and p, within=10)
    await api.delete(PODS, TRAINERS[1], namespace=NS)
    pods = await wait_for(lambda: (p := pods_of(dc, uid)).get(TRAINERS[1]) and
                          p[TRAINERS[1]]["metadata"]["uid"] != before[TRAINERS[1]]["metadata"]["uid"] and p,
                          within=10, message="trainer 1 back")
    assert len(pods) == 3


async def test_deleting_job_while_pods_are_deleted_leaves_nothing(gm, api, sedna_cluster):
    dc = sedna_cluster
    job = await create_example(api)
    uid = job["metadata"]["uid"]
    await wait_for(lambda: len(pods_of(dc, uid)) == 3, within=10)
    for name in TRAINERS:
        await api.delete(PODS, name, namespace=NS)
    await api.delete(FL, JOB, namespace=NS)
    await wait_for(lambda: not pods_of(dc, uid), within=10, message="no pods left")
    # and none come back afterwards: give the GM a few reconcile rounds
    for _ in range(20):
        await gm.runners["federatedlearningjob"].queue._idle.wait()
    assert pods_of(dc, uid) == {}


async def test_missing_dataset_sets_condition_then_recovers(gm, api, sedna_cluster):
    dc = sedna_cluster
    docs = load_example("federated-learning-surface-defect.yaml")
    model = next(d for d in docs if d["kind"] == "Model")
    job = next(d for d in docs if d["kind"] == "FederatedLearningJob")
    datasets = [d for d in docs if d["kind"] == "Dataset"]
    await api.create(GVR("sedna.io", "v1alpha1", "models"), model, namespace=NS)
    created = await api.create(FL, job, namespace=NS)

    def failed_condition():
        st = dc.store.get(rt(dc, FL), NS, JOB).get("status") or {}
        return next((c for c in st.get("conditions", []) if c["type"] == "Failed" and c["status"] == "True"), None)

    cond = await wait_for(failed_condition, within=10, message="Failed condition")
    assert cond["reason"] == "DatasetNotFound"
    assert "edge1-surface-defect-detection-dataset" in cond["message"]
    for ds in datasets:
        await api.create(GVR("sedna.io", "v1alpha1", "datasets"), ds, namespace=NS)
    await wait_for(lambda: len(pods_of(dc, created["metadata"]["uid"])) == 3, within=10, message="pods after fix")
    await wait_for(lambda: failed_condition() is None, within=10, message="Failed cleared")


async def test_reject_policy_leaves_workers_and_says_why(start_gm, api, sedna_cluster):
    dc = sedna_cluster
    await start_gm(federatedLearning="{specEditPolicy: reject}")
    job = await create_example(api)
    uid = job["metadata"]["uid"]
    before = await wait_for(lambda: (p := pods_of(dc, uid)) and len(p) == 3 and p, within=10)
    await wait_for(lambda: dc.store.get(rt(dc, FL), NS, JOB).get("status", {}).get("observedGeneration") == 1,
                   within=10)
    patch = [{"op": "replace", "path": "/spec/trainingWorkers/0/template/spec/containers/0/env/0/value",
              "value": "16"}]
    await api.patch(FL, JOB, patch, namespace=NS, patch_type="json")

    def rejected():
        st = dc.store.get(rt(dc, FL), NS, JOB).get("status") or {}
        return next((c for c in st.get("conditions", []) if c.get("reason") == "SpecEditRejected"), None)

    cond = await wait_for(rejected, within=10, message="SpecEditRejected condition")
    assert TRAINERS[0] in cond["message"]
    ev_rt = dc.store.registry.lookup(group="", version="v1", resource="events")
    await wait_for(lambda: any(e["reason"] == "SpecEditRejected" and e["type"] == "Warning"
                               for e in dc.store.list(ev_rt, NS)[0]), within=5, message="Warning event")
    pods = pods_of(dc, uid)
    assert {n: p["metadata"]["uid"] for n, p in pods.items()} == \
        {n: p["metadata"]["uid"] for n, p in before.items()}
    assert env_of(pods[TRAINERS[0]])["batch_size"] == "32"
    assert dc.store.get(rt(dc, FL), NS, JOB)["status"]["observedGeneration"] == 1


async def test_invalid_template_is_a_condition_not_a_crash(gm, api, sedna_cluster):
    dc = sedna_cluster
    docs = load_example("federated-learning-surface-defect.yaml")
    for doc in docs:
        if doc["kind"] == "FederatedLearningJob":
            doc["spec"]["trainingWorkers"][1]["template"]["spec"]["containers"] = []
    for obj in docs:
        plural = {"Dataset": "datasets", "Model": "models", "FederatedLearningJob": "federatedlearningjobs"}
        await api.create(GVR("sedna.io", "v1alpha1", plural[obj["kind"]]), obj, namespace=NS)

    def failed():
        st = dc.store.get(rt(dc, FL), NS, JOB).get("status") or {}
        return next((c for c in st.get("conditions", []) if c["type"] == "Failed" and c["status"] == "True"), None)

    cond = await wait_for(failed, within=10, message="Failed condition")
    assert cond["reason"] == "InvalidTemplate"
    assert "trainingWorkers[1]" in cond["message"]
    job = dc.store.get(rt(dc, FL), NS, JOB)
    assert pods_of(dc, job["metadata"]["uid"]) == {}
    # the user's to fix: waits for a change instead of retrying with backoff
    metrics = gm.reconcile_metrics.total
    await wait_for(lambda: metrics.value("federatedlearningjob", "permanent") >= 1, within=5)
    assert metrics.value("federatedlearningjob", "error") == 0
