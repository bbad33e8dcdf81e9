"""FederatedLearningJob end to end: the GM against the dev cluster, driven like a user."""

from __future__ import annotations

import copy

import orjson

from gm.kube.resources import FL, GVR, NODES, PODS
from gm.reconcile.executor import BATCH
from shared.metrics import sample
from tests.conftest import eventually
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
    pods = await eventually(lambda: (p := pods_of(dc, uid)) and len(p) == 3 and p, within=10,
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
    status = await eventually(lambda: (s := dc.store.get(rt(dc, FL), NS, JOB).get("status")) and
                            s.get("phase") == "Running" and s.get("active") == 3 and s,
                            within=10, message="job Running with 3 active")
    assert status["observedGeneration"] == 1
    await api.delete(FL, JOB, namespace=NS)
    await eventually(lambda: not pods_of(dc, uid), within=10, message="pods removed by the GC")


async def test_trainer_env_patch_recreates_that_trainer_with_same_name(gm, api, sedna_cluster, kubectl):
    dc = sedna_cluster
    job = await create_example(api)
    uid = job["metadata"]["uid"]
    before = await eventually(lambda: (p := pods_of(dc, uid)) and len(p) == 3 and p, within=10)
    patch = [{"op": "replace", "path": "/spec/trainingWorkers/0/template/spec/containers/0/env/0/value",
              "value": "16"}]
    rc, out, err = await kubectl("patch", "federatedlearningjob", JOB, "--type=json", "-p",
                                 orjson.dumps(patch).decode())
    assert rc == 0, err

    def recreated():
        pods = pods_of(dc, uid)
        pod = pods.get(TRAINERS[0])
        return pod and pod["metadata"]["uid"] != before[TRAINERS[0]]["metadata"]["uid"] and pods

    pods = await eventually(recreated, within=10, message="trainer 0 recreated")
    assert env_of(pods[TRAINERS[0]])["batch_size"] == "16"
    assert env_of(pods[TRAINERS[0]])["WORKER_NAME"] == TRAINERS[0]
    # the other workers were not touched
    assert pods[TRAINERS[1]]["metadata"]["uid"] == before[TRAINERS[1]]["metadata"]["uid"]
    assert pods[AGG]["metadata"]["uid"] == before[AGG]["metadata"]["uid"]
    await eventually(lambda: dc.store.get(rt(dc, FL), NS, JOB).get("status", {}).get("observedGeneration") == 2,
                   within=10, message="observedGeneration 2")


async def test_deleted_trainer_comes_back_with_same_name(gm, api, sedna_cluster):
    dc = sedna_cluster
    job = await create_example(api)
    uid = job["metadata"]["uid"]
    before = await eventually(lambda: (p := pods_of(dc, uid)) and len(p) == 3 and p, within=10)
    await api.delete(PODS, TRAINERS[1], namespace=NS)
    pods = await eventually(lambda: (p := pods_of(dc, uid)).get(TRAINERS[1]) and
                          p[TRAINERS[1]]["metadata"]["uid"] != before[TRAINERS[1]]["metadata"]["uid"] and p,
                          within=10, message="trainer 1 back")
    assert len(pods) == 3


async def test_deleting_job_while_pods_are_deleted_leaves_nothing(gm, api, sedna_cluster):
    dc = sedna_cluster
    job = await create_example(api)
    uid = job["metadata"]["uid"]
    await eventually(lambda: len(pods_of(dc, uid)) == 3, within=10)
    for name in TRAINERS:
        await api.delete(PODS, name, namespace=NS)
    await api.delete(FL, JOB, namespace=NS)
    await eventually(lambda: not pods_of(dc, uid), within=10, message="no pods left")
    # and none come back afterwards: give the GM a few reconcile rounds
    for _ in range(20):
        await gm.runners["federatedlearningjob"].queue._idle.wait()
    assert pods_of(dc, uid) == {}


async def test_missing_dataset_is_a_wait_then_recovers(gm, api, sedna_cluster):
    dc = sedna_cluster
    docs = load_example("federated-learning-surface-defect.yaml")
    model = next(d for d in docs if d["kind"] == "Model")
    job = next(d for d in docs if d["kind"] == "FederatedLearningJob")
    datasets = [d for d in docs if d["kind"] == "Dataset"]
    await api.create(GVR("sedna.io", "v1alpha1", "models"), model, namespace=NS)
    created = await api.create(FL, job, namespace=NS)

    def status():
        return dc.store.get(rt(dc, FL), NS, JOB).get("status") or {}

    def true_condition(type_: str):
        return next((c for c in status().get("conditions", []) if c["type"] == type_ and c["status"] == "True"), None)

    cond = await eventually(lambda: true_condition("Waiting"), within=10, message="Waiting condition")
    assert cond["reason"] == "DatasetNotFound"
    assert "Dataset default/edge1-surface-defect-detection-dataset does not exist" in cond["message"]
    assert status()["phase"] == "Pending" and true_condition("Failed") is None
    for ds in datasets:
        await api.create(GVR("sedna.io", "v1alpha1", "datasets"), ds, namespace=NS)
    await eventually(lambda: len(pods_of(dc, created["metadata"]["uid"])) == 3, within=10, message="pods after fix")
    await eventually(lambda: true_condition("Waiting") is None, within=10, message="Waiting cleared")
    assert true_condition("Failed") is None


async def test_reject_policy_leaves_workers_and_says_why(start_gm, api, sedna_cluster):
    dc = sedna_cluster
    await start_gm(federatedLearning="{specEditPolicy: reject}")
    job = await create_example(api)
    uid = job["metadata"]["uid"]
    before = await eventually(lambda: (p := pods_of(dc, uid)) and len(p) == 3 and p, within=10)
    await eventually(lambda: dc.store.get(rt(dc, FL), NS, JOB).get("status", {}).get("observedGeneration") == 1,
                   within=10)
    patch = [{"op": "replace", "path": "/spec/trainingWorkers/0/template/spec/containers/0/env/0/value",
              "value": "16"}]
    await api.patch(FL, JOB, patch, namespace=NS, patch_type="json")

    def rejected():
        st = dc.store.get(rt(dc, FL), NS, JOB).get("status") or {}
        return next((c for c in st.get("conditions", []) if c.get("reason") == "SpecEditRejected"), None)

    cond = await eventually(rejected, within=10, message="SpecEditRejected condition")
    assert TRAINERS[0] in cond["message"]
    ev_rt = dc.store.registry.lookup(group="", version="v1", resource="events")
    await eventually(lambda: any(e["reason"] == "SpecEditRejected" and e["type"] == "Warning"
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

    cond = await eventually(failed, within=10, message="Failed condition")
    assert cond["reason"] == "InvalidTemplate"
    assert "trainingWorkers[1]" in cond["message"]
    job = dc.store.get(rt(dc, FL), NS, JOB)
    assert pods_of(dc, job["metadata"]["uid"]) == {}
    # the user's to fix: waits for a change instead of retrying with backoff
    await eventually(lambda: reconciles(gm, "federatedlearningjob", "permanent") >= 1, within=5)
    assert reconciles(gm, "federatedlearningjob", "error") == 0


# -- large jobs, server rejections, waits -------------------------------------------------


async def create_inputs(api) -> dict:
    """Create the example's Datasets and Model; return its FederatedLearningJob manifest."""
    job = None
    for obj in load_example("federated-learning-surface-defect.yaml"):
        if obj["kind"] == "FederatedLearningJob":
            job = obj
        else:
            await api.create(GVR("sedna.io", "v1alpha1", obj["kind"].lower() + "s"), obj, namespace=NS)
    return job


def fl_status(dc) -> dict:
    return dc.store.get(rt(dc, FL), NS, JOB).get("status") or {}


def condition(dc, type_: str) -> dict | None:
    return next((c for c in fl_status(dc).get("conditions", []) if c["type"] == type_), None)


async def test_deleting_a_large_job_mid_creation_stops_the_creates(gm, api, sedna_cluster):
    dc = sedna_cluster
    job = await create_inputs(api)
    job["spec"]["trainingWorkers"] = [copy.deepcopy(job["spec"]["trainingWorkers"][0]) for _ in range(300)]
    added: list[str] = []
    at_delete: list[int] = []

    def listen(ev) -> None:  # called synchronously at each commit: exact order of writes
        if ev.type == "ADDED" and ev.rt.key == rt(dc, PODS).key and \
                ev.obj["metadata"]["labels"].get("federatedlearningjob.sedna.io/name") == JOB:
            added.append(ev.obj["metadata"]["name"])
        if ev.type == "DELETED" and ev.rt.key == rt(dc, FL).key:
            at_delete.append(len(added))

    unsubscribe = dc.store.add_listener(listen)
    try:
        dc.faults.configure({"latency": 0.01})
        await api.create(FL, job, namespace=NS)
        # progress: the status shows pods while the create loop is far from done
        status = await eventually(lambda: (s := fl_status(dc)).get("active") and s, within=30,
                                message="progress status during creation")
        assert len(added) < 300 and status["phase"] == "Running"
        await api.delete(FL, JOB, namespace=NS)
        await eventually(lambda: reconciles(gm, "federatedlearningjob", "gone") >= 1, within=30,
                       message="the reconcile noticed its job is gone")
        await eventually(lambda: not [p for p in dc.store.list(rt(dc, PODS), NS)[0]
                                    if p["metadata"]["labels"].get("federatedlearningjob.sedna.io/name")],
                       within=60, message="the GC removed every pod")
    finally:
        dc.faults.reset()
        unsubscribe()
    assert at_delete and at_delete[0] < 300
    # at most one batch in flight when the job went; nothing after the reconcile stopped
    assert len(added) - at_delete[0] <= BATCH, (len(added), at_delete[0])
    assert len(added) == len(set(added))


async def test_template_rejected_by_the_api_server_is_a_condition_and_event(gm, api, sedna_cluster):
    dc = sedna_cluster
    job = await create_inputs(api)
    container = job["spec"]["trainingWorkers"][1]["template"]["spec"]["containers"][0]
    container["ports"] = [{"containerPort": 70000}]  # the API server's pod validation refuses it
    await api.create(FL, job, namespace=NS)

    cond = await eventually(lambda: (c := condition(dc, "Failed")) and c["status"] == "True" and c,
                          within=10, message="Failed condition")
    assert cond["reason"] == "WorkerRejected"
    assert f"pod {NS}/{TRAINERS[1]}" in cond["message"]
    assert "422 Invalid" in cond["message"] and "containerPort" in cond["message"]
    ev_rt = dc.store.registry.lookup(group="", version="v1", resource="events")
    event = await eventually(lambda: next((e for e in dc.store.list(ev_rt, NS)[0]
                                         if e["reason"] == "WorkerRejected"), None),
                           within=5, message="Warning event")
    assert event["type"] == "Warning" and "containerPort" in event["message"]
    await eventually(lambda: reconciles(gm, "federatedlearningjob", "permanent") >= 1, within=5)
    assert reconciles(gm, "federatedlearningjob", "error") == 0  # not a retry loop
    # fixing the template clears it
    patch = [{"op": "remove", "path": "/spec/trainingWorkers/1/template/spec/containers/0/ports"}]
    await api.patch(FL, JOB, patch, namespace=NS, patch_type="json")
    await eventually(lambda: len(pods_of(dc, dc.store.get(rt(dc, FL), NS, JOB)["metadata"]["uid"])) == 3,
                   within=10, message="pods after the fix")
    await eventually(lambda: (c := condition(dc, "Failed")) is None or c["status"] == "False", within=10,
                   message="Failed cleared")


async def test_trainer_on_a_missing_node_is_waiting_not_running(gm, api, sedna_cluster):
    dc = sedna_cluster
    job = await create_inputs(api)
    job["spec"]["trainingWorkers"][1]["template"]["spec"]["nodeName"] = "edge-node-9"
    created = await api.create(FL, job, namespace=NS)
    cond = await eventually(lambda: (c := condition(dc, "Waiting")) and c["status"] == "True" and c,
                          within=10, message="Waiting condition")
    assert cond["reason"] == "NodeNotFound"
    assert f"pod {TRAINERS[1]} is bound to node edge-node-9, which does not exist since " in cond["message"]
    pod = pods_of(dc, created["metadata"]["uid"])[TRAINERS[1]]
    assert pod["metadata"]["creationTimestamp"] in cond["message"]
    await eventually(lambda: fl_status(dc).get("active") == 2, within=10, message="two workers active")
    assert fl_status(dc)["active"] == 2  # the stranded trainer is not counted


async def test_pod_stuck_terminating_on_a_gone_node_is_a_waiting_condition(gm, api, sedna_cluster):
    dc = sedna_cluster
    job = await create_inputs(api)
    created = await api.create(FL, job, namespace=NS)
    uid = created["metadata"]["uid"]
    await eventually(lambda: fl_status(dc).get("active") == 3, within=10, message="3 active")
    await api.delete(NODES, "edge-node-2")  # no kubelet will ever confirm its pods' deletion
    patch = [{"op": "replace", "path": "/spec/trainingWorkers/1/template/spec/containers/0/env/0/value",
              "value": "16"}]
    await api.patch(FL, JOB, patch, namespace=NS, patch_type="json")
    cond = await eventually(lambda: (c := condition(dc, "Waiting")) and c["status"] == "True"
                          and c["reason"] == "PodTerminating" and c, within=10, message="Waiting condition")
    pod = pods_of(dc, uid)[TRAINERS[1]]
    assert f"pod {TRAINERS[1]} is terminating (its node edge-node-2 does not exist) since " \
           f"{pod['metadata']['deletionTimestamp']}" in cond["message"]
    # the old pod is still there and no replacement runs beside it
    assert pods_of(dc, uid)[TRAINERS[1]]["metadata"]["uid"] == pod["metadata"]["uid"]
    assert fl_status(dc)["observedGeneration"] == 1


async def test_memory_lots_is_an_invalid_template_not_a_retry_loop(gm, api, sedna_cluster):
    dc = sedna_cluster
    job = await create_inputs(api)
    job["spec"]["trainingWorkers"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"memory": "lots"}}
    await api.create(FL, job, namespace=NS)
    cond = await eventually(lambda: (c := condition(dc, "Failed")) and c["status"] == "True" and c,
                          within=10, message="Failed condition")
    assert cond["reason"] == "InvalidTemplate"
    assert "resources.limits.memory: 'lots' is not a quantity" in cond["message"]
    await eventually(lambda: reconciles(gm, "federatedlearningjob", "permanent") >= 1, within=5)
    assert reconciles(gm, "federatedlearningjob", "error") == 0
    assert pods_of(dc, dc.store.get(rt(dc, FL), NS, JOB)["metadata"]["uid"]) == {}


async def test_job_replaced_mid_creation_gets_only_its_own_pods_and_status(gm, api, sedna_cluster):
    dc = sedna_cluster
    job = await create_inputs(api)
    small = copy.deepcopy(job)
    job["spec"]["trainingWorkers"] = [copy.deepcopy(job["spec"]["trainingWorkers"][0]) for _ in range(200)]
    dc.faults.configure({"latency": 0.01})
    try:
        old = await api.create(FL, job, namespace=NS)
        await eventually(lambda: fl_status(dc).get("active"), within=30, message="progress status")
        await api.delete(FL, JOB, namespace=NS)
        new = await api.create(FL, small, namespace=NS)
    finally:
        dc.faults.reset()
    uid = new["metadata"]["uid"]
    await eventually(lambda: not pods_of(dc, old["metadata"]["uid"]), within=60, message="old pods collected")
    pods = await eventually(lambda: (p := pods_of(dc, uid)) and len(p) == 3 and p, within=30,
                          message="the new job's three pods")
    assert sorted(pods) == sorted([AGG, *TRAINERS])
    status = await eventually(lambda: (s := fl_status(dc)).get("active") == 3 and s.get("observedGeneration") == 1
                            and s, within=10, message="the new job's status")
    assert status["phase"] == "Running"


def reconciles(gm, controller: str, result: str) -> float:
    return sample(gm.registry, "sedna_gm_reconcile_total", controller=controller, result=result)
