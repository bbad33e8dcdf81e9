"""JointInferenceService end to end: the GM against the dev cluster, driven like a user."""

from __future__ import annotations

from gm.kube.resources import DEPLOYMENTS, GVR, HPAS, JI, PODS, SERVICES
from shared.metrics import sample
from tests.conftest import eventually
from tests.e2e.conftest import load_example

NS = "default"
SVC = "helmet-detection-inference-example"
EDGE, CLOUD = f"{SVC}-deployment-edge", f"{SVC}-deployment-cloud"


def rt(dc, gvr: GVR):
    return dc.store.registry.lookup(group=gvr.group, version=gvr.version, resource=gvr.plural)


def get(dc, gvr, name):
    try:
        return dc.store.get(rt(dc, gvr), NS, name)
    except Exception:
        return None


def owned(dc, gvr, uid):
    items, _ = dc.store.list(rt(dc, gvr), NS)
    return {o["metadata"]["name"]: o for o in items
            if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])}


def env_of(template: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in template["spec"]["containers"][0].get("env", [])}


async def create_example(api, *, hpa: bool = False) -> dict:
    svc = None
    for obj in load_example("joint-inference-helmet-detection.yaml"):
        plural = {"Model": "models", "JointInferenceService": "jointinferenceservices"}[obj["kind"]]
        if obj["kind"] == "JointInferenceService" and hpa:
            obj["spec"]["edgeWorker"]["hpa"] = {"minReplicas": 1, "maxReplicas": 3}
        created = await api.create(GVR("sedna.io", "v1alpha1", plural), obj, namespace=NS)
        if obj["kind"] == "JointInferenceService":
            svc = created
    return svc


async def test_children_owned_and_cascade_deleted(gm, api, sedna_cluster):
    dc = sedna_cluster
    ji = await create_example(api, hpa=True)
    uid = ji["metadata"]["uid"]
    deps = await eventually(lambda: (d := owned(dc, DEPLOYMENTS, uid)) and len(d) == 2 and d, within=10)
    assert sorted(deps) == sorted([CLOUD, EDGE])
    ref = {"apiVersion": "sedna.io/v1alpha1", "kind": "JointInferenceService", "name": SVC, "uid": uid,
           "controller": True, "blockOwnerDeletion": True}
    for dep in deps.values():
        assert dep["metadata"]["ownerReferences"] == [ref]
    svc = await eventually(lambda: get(dc, SERVICES, f"{SVC}-cloud"), within=5)
    assert svc["metadata"]["ownerReferences"] == [ref]
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(5000, 5000)]
    hpas = await eventually(lambda: owned(dc, HPAS, uid), within=5)
    assert list(hpas) == [f"hpa-{EDGE}"]
    edge_env = env_of(deps[EDGE]["spec"]["template"])
    assert edge_env["BIG_MODEL_IP"] == f"{SVC}-cloud.{NS}"
    assert edge_env["HEM_NAME"] == "IBT"
    # pods come up, status says Running with both workers active
    st = await eventually(lambda: (s := (get(dc, JI, SVC) or {}).get("status")) and s.get("active") == 2
                        and s.get("observedGeneration") == 1 and s, within=10,
                        message="2 active workers at generation 1")
    running = next(c for c in st["conditions"] if c["type"] == "Running")
    assert running["status"] == "True" and running["lastTransitionTime"]
    await api.delete(JI, SVC, namespace=NS)
    await eventually(lambda: not owned(dc, DEPLOYMENTS, uid) and not owned(dc, SERVICES, uid)
                   and not owned(dc, HPAS, uid), within=10, message="children removed by the GC")
    await eventually(lambda: not dc.store.list(rt(dc, PODS), NS)[0], within=10, message="pods removed")


async def test_hem_parameter_edit_rolls_the_edge_deployment(gm, api, sedna_cluster):
    dc = sedna_cluster
    ji = await create_example(api)
    uid = ji["metadata"]["uid"]
    before = await eventually(lambda: (d := owned(dc, DEPLOYMENTS, uid)) and len(d) == 2 and d, within=10)
    await eventually(lambda: (get(dc, JI, SVC) or {}).get("status", {}).get("active") == 2, within=10)
    cloud_gen = get(dc, DEPLOYMENTS, CLOUD)["metadata"]["generation"]
    patch = {"spec": {"edgeWorker": {"hardExampleMining": {"name": "IBT", "parameters": [
        {"key": "threshold_img", "value": "0.5"}, {"key": "threshold_box", "value": "0.9"}]}}}}
    await api.patch(JI, SVC, patch, namespace=NS)

    def edge_updated():
        dep = get(dc, DEPLOYMENTS, EDGE)
        return dep and '"0.5"' in env_of(dep["spec"]["template"])["HEM_PARAMETERS"] and dep

    dep = await eventually(edge_updated, within=10, message="edge template updated")
    assert dep["metadata"]["generation"] > before[EDGE]["metadata"]["generation"]
    # the Deployment rolls: a second ReplicaSet (revision 2) becomes the only one with replicas
    rs_rt = dc.store.registry.lookup(group="apps", version="v1", resource="replicasets")

    def rolled():
        rss = [r for r in dc.store.list(rs_rt, NS)[0]
               if any(o.get("uid") == dep["metadata"]["uid"] for o in r["metadata"].get("ownerReferences", []))]
        revs = {r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: r for r in rss}
        return "2" in revs and revs["2"]["status"].get("availableReplicas") == 1 and \
            revs["1"]["spec"]["replicas"] == 0
    await eventually(rolled, within=15, message="rolling update to revision 2")
    # the cloud worker's spec was not touched (its status may move, its generation must not)
    assert get(dc, DEPLOYMENTS, CLOUD)["metadata"]["generation"] == cloud_gen
    await eventually(lambda: get(dc, JI, SVC)["status"].get("observedGeneration") == 2, within=10)


async def test_deleted_pod_is_healed_by_its_deployment(gm, api, sedna_cluster):
    dc = sedna_cluster
    await create_example(api)

    def edge_pods():
        return [p for p in dc.store.list(rt(dc, PODS), NS)[0]
                if p["metadata"]["labels"].get("jointinferenceservice.sedna.io/worker-type") == "edge"
                and not p["metadata"].get("deletionTimestamp")]

    first = await eventually(lambda: (p := edge_pods()) and p[0], within=10)
    await api.delete(PODS, first["metadata"]["name"], namespace=NS)
    await eventually(lambda: (p := edge_pods()) and p[0]["metadata"]["uid"] != first["metadata"]["uid"], within=10,
                   message="replacement pod")


async def test_deleted_deployment_is_recreated(gm, api, sedna_cluster):
    dc = sedna_cluster
    ji = await create_example(api)
    await eventually(lambda: get(dc, DEPLOYMENTS, CLOUD), within=10)
    old = get(dc, DEPLOYMENTS, CLOUD)
    await api.delete(DEPLOYMENTS, CLOUD, namespace=NS)
    new = await eventually(lambda: (d := get(dc, DEPLOYMENTS, CLOUD)) and d["metadata"]["uid"] != old["metadata"]["uid"]
                         and d, within=10, message="cloud deployment recreated")
    assert new["metadata"]["ownerReferences"][0]["uid"] == ji["metadata"]["uid"]


async def test_missing_model_is_a_pending_wait_not_a_failure(gm, api, sedna_cluster):
    dc = sedna_cluster
    docs = load_example("joint-inference-helmet-detection.yaml")
    ji = next(d for d in docs if d["kind"] == "JointInferenceService")
    await api.create(JI, ji, namespace=NS)

    def true_condition(type_: str):
        st = (get(dc, JI, SVC) or {}).get("status") or {}
        return next((c for c in st.get("conditions", []) if c["type"] == type_ and c["status"] == "True"), None)

    cond = await eventually(lambda: true_condition("Pending"), within=10, message="Pending condition")
    assert cond["reason"] == "ModelNotFound" and "does not exist" in cond["message"], cond
    assert true_condition("Failed") is None
    ev_rt = dc.store.registry.lookup(group="", version="v1", resource="events")
    await eventually(lambda: any(e["reason"] == "ModelNotFound" and e["type"] == "Warning"
                               for e in dc.store.list(ev_rt, NS)[0]), within=5, message="Warning event")
    for m in (d for d in docs if d["kind"] == "Model"):
        await api.create(GVR("sedna.io", "v1alpha1", "models"), m, namespace=NS)
    await eventually(lambda: get(dc, DEPLOYMENTS, EDGE), within=10, message="deployments after the fix")
    await eventually(lambda: (c := true_condition("Pending")) is None or c["reason"] != "ModelNotFound", within=10)
    assert true_condition("Failed") is None


async def test_kubectl_get_ji_fl_is_informative(gm, api, sedna_cluster, kubectl):
    dc = sedna_cluster
    await create_example(api)
    await eventually(lambda: (get(dc, JI, SVC) or {}).get("status", {}).get("active") == 2, within=10)
    rc, out, err = await kubectl("get", "ji")
    assert rc == 0, err
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "STATUS", "ACTIVE", "FAILED", "AGE"]
    assert row.split()[:4] == [SVC, "Running", "2", "0"]


async def test_unchanged_spec_never_rolls(gm, api, sedna_cluster):
    dc = sedna_cluster
    await create_example(api)
    await eventually(lambda: (get(dc, JI, SVC) or {}).get("status", {}).get("active") == 2, within=10)
    before = {n: get(dc, DEPLOYMENTS, n)["metadata"]["generation"] for n in (EDGE, CLOUD)}
    runs = reconciles(gm, "jointinferenceservice", "success")
    # a metadata-only change triggers reconciles but is not a spec change
    await api.patch(JI, SVC, {"metadata": {"labels": {"team": "vision"}}}, namespace=NS)
    await eventually(lambda: reconciles(gm, "jointinferenceservice", "success") > runs,
                   within=10, message="a reconcile after the label change")
    assert {n: get(dc, DEPLOYMENTS, n)["metadata"]["generation"] for n in (EDGE, CLOUD)} == before


async def test_edit_rejected_by_the_api_server_is_a_condition_not_a_retry_loop(gm, api, sedna_cluster):
    dc = sedna_cluster
    await create_example(api)
    await eventually(lambda: get(dc, DEPLOYMENTS, EDGE), within=10, message="edge deployment")
    patch = [{"op": "add", "path": "/spec/edgeWorker/template/spec/containers/0/ports",
              "value": [{"containerPort": 0}]}]  # the API server's template validation refuses it
    await api.patch(JI, SVC, patch, namespace=NS, patch_type="json")

    def failed():
        st = (get(dc, JI, SVC) or {}).get("status") or {}
        return next((c for c in st.get("conditions", []) if c["type"] == "Failed" and c["status"] == "True"), None)

    cond = await eventually(failed, within=10, message="Failed condition")
    assert cond["reason"] == "WorkerRejected"
    assert cond["message"].startswith(f"the API server rejected deployment {NS}/{EDGE} (422 Invalid): ")
    assert "containerPort" in cond["message"]
    ev_rt = dc.store.registry.lookup(group="", version="v1", resource="events")
    await eventually(lambda: any(e["reason"] == "WorkerRejected" and e["type"] == "Warning"
                               for e in dc.store.list(ev_rt, NS)[0]), within=5, message="Warning event")
    await eventually(lambda: reconciles(gm, "jointinferenceservice", "permanent") >= 1, within=5)
    assert reconciles(gm, "jointinferenceservice", "error") == 0
    container = get(dc, DEPLOYMENTS, EDGE)["spec"]["template"]["spec"]["containers"][0]
    assert "ports" not in container  # the running Deployment keeps the last accepted template


def reconciles(gm, controller: str, result: str) -> float:
    return sample(gm.registry, "sedna_gm_reconcile_total", controller=controller, result=result)
