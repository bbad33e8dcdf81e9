"""The GM's caches end to end: one shared informer per child type for every controller, a
Secret change reaching the workers of the CRs that use it, and children made before the
managed-by label adopted as they are."""

from __future__ import annotations

import base64

from gm.kube.resources import DEPLOYMENTS, FL, GVR, HPAS, JI, MODELS, PODS, SECRETS, SERVICES
from gm.workers.owned import MANAGED_BY_LABEL, MANAGED_SELECTOR
from tests.conftest import eventually
from tests.e2e.conftest import load_example

NS = "default"
SECRET = "s3-credential"
JI_NAME = "helmet-detection-inference-example"
FL_NAME = "surface-defect-detection"
CHILD_TYPES = (PODS, DEPLOYMENTS, SERVICES, HPAS)
PLURALS = {"Model": "models", "Dataset": "datasets", "JointInferenceService": "jointinferenceservices",
           "FederatedLearningJob": "federatedlearningjobs"}


def rt(dc, gvr: GVR):
    return dc.store.registry.lookup(group=gvr.group, version=gvr.version, resource=gvr.plural)


def owned(dc, gvr: GVR, uid: str) -> dict[str, dict]:
    items, _ = dc.store.list(rt(dc, gvr), NS)
    return {o["metadata"]["name"]: o for o in items
            if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])}


def secret_env(pod_spec: dict) -> dict[str, str]:
    """The env of every container and init container of a pod spec, merged."""
    out: dict[str, str] = {}
    for c in (*pod_spec.get("initContainers", []), *pod_spec.get("containers", [])):
        out.update({e["name"]: e.get("value") for e in c.get("env", [])})
    return out


def credential(key_id: str) -> dict:
    data = {"ACCESS_KEY_ID": key_id, "SECRET_ACCESS_KEY": f"{key_id}-secret"}
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": SECRET, "annotations": {"s3-endpoint": "minio:9000"}},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


async def create_examples(api, *, s3: bool) -> tuple[dict, dict]:
    """The upstream JI and FL examples; with `s3`, their models are read from S3 with `SECRET`."""
    created: dict[str, dict] = {}
    for obj in (*load_example("joint-inference-helmet-detection.yaml"),
                *load_example("federated-learning-surface-defect.yaml")):
        if obj["kind"] == "Model" and s3:
            obj["spec"].update(url=f"s3://models/{obj['metadata']['name']}.pb", credentialName=SECRET)
        created[obj["kind"]] = await api.create(GVR("sedna.io", "v1alpha1", PLURALS[obj["kind"]]), obj,
                                                namespace=NS)
    return created["JointInferenceService"], created["FederatedLearningJob"]


async def test_one_informer_per_child_type_for_every_controller(gm, api, sedna_cluster):
    dc = sedna_cluster
    ji_ctrl, fl_ctrl = gm.controllers["jointinferenceservice"], gm.controllers["federatedlearningjob"]
    assert ji_ctrl.owned[SERVICES] is fl_ctrl.owned[SERVICES]
    assert ji_ctrl.secrets is fl_ctrl.secrets
    assert ji_ctrl.watched[MODELS] is fl_ctrl.watched[MODELS]
    used = {PODS: [fl_ctrl.owned[PODS]], DEPLOYMENTS: [ji_ctrl.owned[DEPLOYMENTS]],
            SERVICES: [ji_ctrl.owned[SERVICES], fl_ctrl.owned[SERVICES]], HPAS: [ji_ctrl.owned[HPAS]]}
    for gvr, informers in used.items():
        assert {inf.reflector.label_selector for inf in informers} == {MANAGED_SELECTOR}, gvr
    factory = gm.informers.all()
    for gvr in CHILD_TYPES:
        shared = [inf for inf in factory if inf.gvr == gvr and inf.reflector.label_selector == MANAGED_SELECTOR]
        assert len(shared) == 1, gvr
    assert len([inf for inf in factory if inf.gvr == SECRETS]) == 1
    # the watches the cluster serves: one per informer, so one per type for the controllers
    # (the only other Pods informer is the edge sync's, of JI edge pods)
    expected = {gvr: len([inf for inf in factory if inf.gvr == gvr]) for gvr in (*CHILD_TYPES, SECRETS)}
    assert expected == {PODS: 2, DEPLOYMENTS: 1, SERVICES: 1, HPAS: 1, SECRETS: 1}
    await eventually(lambda: gm.informers.has_synced() and all(
        dc.store.watcher_count(rt(dc, gvr)) == n for gvr, n in expected.items()), within=10,
        message="one watch per informer")
    # both controllers are served by the shared caches
    ji, job = await create_examples(api, s3=False)
    await eventually(lambda: len(owned(dc, DEPLOYMENTS, ji["metadata"]["uid"])) == 2
                     and len(owned(dc, PODS, job["metadata"]["uid"])) == 3, within=10)
    for gvr, uid in ((DEPLOYMENTS, ji["metadata"]["uid"]), (SERVICES, ji["metadata"]["uid"]),
                     (PODS, job["metadata"]["uid"]), (SERVICES, job["metadata"]["uid"])):
        for child in owned(dc, gvr, uid).values():
            assert child["metadata"]["labels"][MANAGED_BY_LABEL] == "sedna-gm"
    assert all(dc.store.watcher_count(rt(dc, gvr)) == n for gvr, n in expected.items())


def settled(dc, gm) -> bool:
    """Every worker up and counted in status, and no key queued, in flight or due later
    (a requeue would read the cache anyway): from here only an event brings a reconcile."""
    ji = dc.store.get(rt(dc, JI), NS, JI_NAME).get("status") or {}
    fl = dc.store.get(rt(dc, FL), NS, FL_NAME).get("status") or {}
    idle = all(not (r.queue._dirty or r.queue._processing or r.queue._timers) for r in gm.runners.values())
    return ji.get("active") == 2 and fl.get("active") == 3 and fl.get("phase") == "Running" and idle


async def test_rotated_secret_reaches_ji_and_fl_workers_without_resync(start_gm, api, sedna_cluster):
    dc = sedna_cluster
    gm = await start_gm(minResyncPeriodSeconds=3600)  # nothing but the Secret's own event can bring it
    await api.create(SECRETS, credential("old-key"), namespace=NS)
    ji, job = await create_examples(api, s3=True)
    ji_uid, fl_uid = ji["metadata"]["uid"], job["metadata"]["uid"]
    cloud = f"{JI_NAME}-deployment-cloud"

    def keys() -> tuple[str | None, set[str | None]]:
        deps, pods = owned(dc, DEPLOYMENTS, ji_uid), owned(dc, PODS, fl_uid)
        ji_key = secret_env(deps[cloud]["spec"]["template"]["spec"]).get("ACCESS_KEY_ID") if cloud in deps else None
        live = [p for p in pods.values() if not p["metadata"].get("deletionTimestamp")]
        return ji_key, {secret_env(p["spec"]).get("ACCESS_KEY_ID") for p in live} if len(live) == 3 else set()

    await eventually(lambda: keys() == ("old-key", {"old-key"}), within=10, message="workers with the first key")
    await eventually(lambda: settled(dc, gm), within=15, message="both CRs running, nothing left to reconcile")
    old_pods = {p["metadata"]["uid"] for p in owned(dc, PODS, fl_uid).values()}
    await api.patch(SECRETS, SECRET, {"data": credential("new-key")["data"]}, namespace=NS)
    await eventually(lambda: keys() == ("new-key", {"new-key"}), within=15, message="workers with the rotated key")
    assert not old_pods & {p["metadata"]["uid"] for p in owned(dc, PODS, fl_uid).values()}


async def test_children_without_the_managed_by_label_are_adopted_not_recreated(start_gm, api, sedna_cluster):
    """What a GM from before the label finds after an upgrade: its children, unlabelled."""
    dc = sedna_cluster
    first = await start_gm()
    ji, job = await create_examples(api, s3=False)
    ji_uid, fl_uid = ji["metadata"]["uid"], job["metadata"]["uid"]
    await eventually(lambda: len(owned(dc, DEPLOYMENTS, ji_uid)) == 2 and len(owned(dc, PODS, fl_uid)) == 3
                     and owned(dc, SERVICES, fl_uid) and owned(dc, SERVICES, ji_uid), within=10)
    await eventually(lambda: (dc.store.get(rt(dc, FL), NS, FL_NAME).get("status") or {}).get("active") == 3,
                     within=10, message="FL job running")
    await first.stop()
    children = [(gvr, name) for gvr, uid in ((DEPLOYMENTS, ji_uid), (SERVICES, ji_uid), (PODS, fl_uid),
                                             (SERVICES, fl_uid)) for name in owned(dc, gvr, uid)]
    for gvr, name in children:
        await api.patch(gvr, name, {"metadata": {"labels": {MANAGED_BY_LABEL: None}}}, namespace=NS)
    before = {(gvr, name): dc.store.get(rt(dc, gvr), NS, name) for gvr, name in children}
    assert not any(MANAGED_BY_LABEL in obj["metadata"]["labels"] for obj in before.values())

    await start_gm()

    def labelled() -> bool:
        return all(dc.store.get(rt(dc, gvr), NS, name)["metadata"]["labels"].get(MANAGED_BY_LABEL) == "sedna-gm"
                   for gvr, name in children)

    await eventually(labelled, within=15, message="every old child relabelled")
    for (gvr, name), old in before.items():
        now = dc.store.get(rt(dc, gvr), NS, name)
        assert now["metadata"]["uid"] == old["metadata"]["uid"], name  # adopted, not recreated
        assert now.get("spec") == old.get("spec"), name  # nothing rolled
        assert not now["metadata"].get("deletionTimestamp"), name
    assert len(owned(dc, PODS, fl_uid)) == 3
    for gvr, name in children:
        if gvr == DEPLOYMENTS:
            dep = dc.store.get(rt(dc, gvr), NS, name)
            assert dep["metadata"]["generation"] == before[(gvr, name)]["metadata"]["generation"], name
    ji_status = dc.store.get(rt(dc, JI), NS, JI_NAME).get("status") or {}
    assert ji_status.get("observedGeneration") == 1


async def test_a_foreign_object_under_a_child_name_is_a_name_conflict_left_alone(gm, api, sedna_cluster):
    """Not the GM's child (no label, not controlled by the job): never relabelled or taken over."""
    dc = sedna_cluster
    name = f"{FL_NAME}-aggregation"
    foreign = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": {"team": "x"}},
               "spec": {"ports": [{"port": 80}]}}
    await api.create(SERVICES, foreign, namespace=NS)
    _, job = await create_examples(api, s3=False)
    await eventually(lambda: len(owned(dc, PODS, job["metadata"]["uid"])) == 3, within=10)
    ev_rt = dc.store.registry.lookup(group="", version="v1", resource="events")
    event = await eventually(lambda: next((e for e in dc.store.list(ev_rt, NS)[0] if e["reason"] == "NameConflict"
                                           and e["involvedObject"]["name"] == FL_NAME), None),
                             within=10, message="NameConflict event on the job")
    assert event["type"] == "Warning" and name in event["message"]
    svc = dc.store.get(rt(dc, SERVICES), NS, name)
    assert svc["metadata"]["labels"] == {"team": "x"}
    assert not svc["metadata"].get("ownerReferences")
