"""The GM converges through restarts, API errors and dropped watches, without duplicates."""

from __future__ import annotations

import copy

from gm.kube.resources import DEPLOYMENTS, FL, GVR, JI, PODS
from shared.metrics import sample
from tests.conftest import eventually
from tests.e2e.conftest import load_example

NS = "default"
MODELS = GVR("sedna.io", "v1alpha1", "models")
DATASETS = GVR("sedna.io", "v1alpha1", "datasets")


def rt(dc, gvr: GVR):
    return dc.store.registry.lookup(group=gvr.group, version=gvr.version, resource=gvr.plural)


async def create_dependencies(api) -> tuple[dict, dict]:
    fl_docs = load_example("federated-learning-surface-defect.yaml")
    ji_docs = load_example("joint-inference-helmet-detection.yaml")
    for doc in fl_docs + ji_docs:
        if doc["kind"] == "Model":
            await api.create(MODELS, doc, namespace=NS)
        elif doc["kind"] == "Dataset":
            await api.create(DATASETS, doc, namespace=NS)
    fl = next(d for d in fl_docs if d["kind"] == "FederatedLearningJob")
    ji = next(d for d in ji_docs if d["kind"] == "JointInferenceService")
    return fl, ji


def named(obj: dict, name: str) -> dict:
    out = copy.deepcopy(obj)
    out["metadata"]["name"] = name
    return out


def counts(dc) -> tuple[int, int]:
    pods = [p for p in dc.store.list(rt(dc, PODS), NS)[0]
            if p["metadata"]["labels"].get("federatedlearningjob.sedna.io/name")]
    deps = dc.store.list(rt(dc, DEPLOYMENTS), NS)[0]
    return len(pods), len(deps)


def all_converged(dc, kinds: tuple[GVR, ...], n: int) -> bool:
    for gvr in kinds:
        items = dc.store.list(rt(dc, gvr), NS)[0]
        if len(items) != n:
            return False
        for obj in items:
            st = obj.get("status") or {}
            if st.get("observedGeneration") != obj["metadata"]["generation"]:
                return False
    return True


async def test_restart_mid_way_converges_without_duplicates(start_gm, api, sedna_cluster):
    dc = sedna_cluster
    fl, ji = await create_dependencies(api)
    gm = await start_gm()
    for i in range(5):
        await api.create(FL, named(fl, f"fl-{i}"), namespace=NS)
        await api.create(JI, named(ji, f"ji-{i}"), namespace=NS)
    await eventually(lambda: counts(dc)[0] >= 3, within=10, message="some pods created")
    await gm.stop()
    await start_gm()
    await eventually(lambda: all_converged(dc, (FL, JI), 5), within=20, message="all converged after restart")
    pods, deps = counts(dc)
    assert (pods, deps) == (15, 10)
    names = [p["metadata"]["name"] for p in dc.store.list(rt(dc, PODS), NS)[0]
             if p["metadata"]["labels"].get("federatedlearningjob.sedna.io/name")]
    assert len(names) == len(set(names))


async def test_fifty_jobs_converge_with_api_errors_and_watch_drops(start_gm, api, sedna_cluster):
    dc = sedna_cluster
    fl, ji = await create_dependencies(api)
    dc.faults.configure({"errors": [{"rate": 0.1}], "watch_drop_after": 1.0, "seed": 7})
    gm = await start_gm()
    for i in range(25):
        for gvr, obj, name in ((FL, fl, f"fl-{i}"), (JI, ji, f"ji-{i}")):
            while True:  # the test's own client sees the injected errors too
                try:
                    await api.create(gvr, named(obj, name), namespace=NS)
                    break
                except Exception as exc:
                    if "already exists" in str(exc):
                        break
    await eventually(lambda: all_converged(dc, (FL, JI), 25), within=60, interval=0.1,
                   message="50 jobs converged under faults")
    dc.faults.reset()
    assert counts(dc) == (75, 50)
    errors = reconciles(gm, "federatedlearningjob", "error") + \
        reconciles(gm, "jointinferenceservice", "error")
    assert errors > 0  # the faults really hit the reconcilers


def reconciles(gm, controller: str, result: str) -> float:
    return sample(gm.registry, "sedna_gm_reconcile_total", controller=controller, result=result)
