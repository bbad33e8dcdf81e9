"""The reconciler framework on its own: a toy kind declared here, with no controller code.

`Widget` (widgets.sedna.io, a CRD this test installs) owns a Deployment, updated in place,
and one Pod per `spec.workers`, recreated on an edit; its status counts its running
workers; it is placed on the nodes its workers run on. Everything it does, the generic
reconciler and the edge (gm/controllers/reconciler.py, gm/edge/objects.py) do from this
declaration, which is all a new kind is.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gm.app import GlobalManager
from gm.config import parse_config
from gm.kindlib.conditions import exclusive, pod_counts
from gm.kube.apierrors import NotFound
from gm.kube.resources import DEPLOYMENTS, GVR, PODS
from gm.reconcile.declaration import Children, Dependencies, KindDeclaration, Observed, Owns
from gm.workers.owned import build_deployment, build_pod, owner_of
from gm.workers.specerrors import InvalidSpec
from gm.workers.storage import StoragePlan
from gm.workers.template import env_field, render_template
from shared import apis
from tests.conftest import eventually
from tests.e2e.conftest import gm_config

NS = "default"
KIND = "Widget"
WIDGETS = GVR(apis.GROUP, apis.VERSION, "widgets")
WIDGET = apis.SednaKind(
    kind=KIND, plural="widgets", short_names=("wd",), worker_types=("worker",),
    placement=apis.pinned_and_worker_nodes(KIND, (("spec", "nodeName"),), ("worker",)))


def _template(spec: dict[str, Any], **pod: Any) -> dict[str, Any]:
    return render_template({"spec": {"containers": [{"name": "main", "image": spec["image"]}], **pod}},
                           where="spec", env=[env_field("WORKER_NAME", "metadata.name")], storage=StoragePlan())


def build(cr: dict, deps: Dependencies) -> Children:
    owner = owner_of(cr, kind=KIND)
    spec = cr["spec"]
    if not isinstance(spec.get("image"), str) or not isinstance(spec.get("workers"), int):
        raise InvalidSpec("InvalidSpec", "spec.image (a string) and spec.workers (an integer) are required")
    server = build_deployment(owner, name=f"{owner.name}-server", worker_type="server", app_label=owner.name,
                              rendered=_template(spec))
    workers = [build_pod(owner, name=f"{owner.name}-worker-{i}", worker_type="worker",
                         rendered=_template(spec, restartPolicy="Never")) for i in range(spec["workers"])]
    return {DEPLOYMENTS: [server], PODS: workers}


def status(cr: dict, observed: Observed) -> dict:
    new = dict(cr.get("status") or {})
    active, _succeeded, _failed = pod_counts(observed.wanted(PODS))
    new["workers"] = active
    if observed.problem is not None:
        reason, message = observed.problem
        new["conditions"] = exclusive(new.get("conditions") or [], ("Ready", "Failed"), "Failed",
                                      reason=reason, message=message, now=observed.now)
    elif observed.all_present(PODS):
        new["conditions"] = exclusive(new.get("conditions") or [], ("Ready", "Failed"), "Ready",
                                      reason="WorkersCreated", message="every worker exists", now=observed.now)
    return new


TOY = KindDeclaration(api=WIDGET, owns=(Owns(DEPLOYMENTS), Owns(PODS, on_edit="recreate")),
                      build=build, status=status, controller="widget", component="widget-controller")

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.sedna.io"},
    "spec": {"group": "sedna.io", "scope": "Namespaced",
             "names": {"plural": "widgets", "singular": "widget", "kind": KIND, "shortNames": ["wd"]},
             "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                           "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}


@pytest.fixture
async def toy_gm(sedna_cluster, tmp_path):
    crd = tmp_path / "widgets.yaml"
    crd.write_text(yaml.safe_dump(CRD))
    sedna_cluster.apply_manifests(crd)
    gm = GlobalManager(parse_config(gm_config(tmp_path / "kubeconfig")), declarations=(TOY,))
    await gm.start()
    yield gm
    await gm.stop()


async def read(api, gvr: GVR, name: str) -> dict | None:
    try:
        return await api.get(gvr, name, namespace=NS)
    except NotFound:
        return None


def widget(**spec: Any) -> dict:
    return {"apiVersion": apis.API_VERSION, "kind": KIND, "metadata": {"name": "w", "namespace": NS},
            "spec": {"image": "toy:v1", "workers": 2, **spec}}


async def test_a_declared_kind_gets_children_rolls_recreation_status_and_placement(toy_gm, api):
    cr = await api.create(WIDGETS, widget(), namespace=NS)
    pods = await eventually(lambda: _all(api, PODS, "w-worker-0", "w-worker-1"), within=10, message="workers")
    server = await eventually(lambda: read(api, DEPLOYMENTS, "w-server"), within=10, message="server")
    for child in (*pods, server):
        assert child["metadata"]["ownerReferences"][0]["uid"] == cr["metadata"]["uid"]
        assert child["metadata"]["ownerReferences"][0]["kind"] == KIND
    status = await eventually(lambda: _status_if(api, lambda s: s.get("workers") == 2
                                                 and s.get("observedGeneration") == 1),
                              within=10, message="status from the toy's status function")
    assert [c["type"] for c in status["conditions"] if c["status"] == "True"] == ["Ready"]

    # placement: the object belongs where its live workers run
    nodes = await eventually(lambda: _bound_nodes(api), within=10, message="workers bound")
    await eventually(lambda: toy_gm.edge.nodes_of(KIND, NS, "w") == nodes, within=10, message="placement")

    # an edit: the Deployment is updated in place (it rolls), the pods are recreated by name
    await api.patch(WIDGETS, "w", {"spec": {"image": "toy:v2"}}, namespace=NS)
    old = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    await eventually(lambda: _edited(api, old), within=10, message="workers recreated with toy:v2")
    rolled = await eventually(lambda: _image_is(api, "toy:v2"), within=10, message="server rolled")
    assert rolled["metadata"]["uid"] == server["metadata"]["uid"]
    await eventually(lambda: _status_if(api, lambda s: s.get("observedGeneration") == 2), within=10)

    # a worker deleted by hand comes back under its name
    before = await read(api, PODS, "w-worker-1")
    await api.delete(PODS, "w-worker-1", namespace=NS)
    await eventually(lambda: _replaced(api, "w-worker-1", before["metadata"]["uid"]), within=10,
                     message="deleted worker back")

    # a bad spec is the kind's Failed condition
    await api.patch(WIDGETS, "w", {"spec": {"workers": "many"}}, namespace=NS)
    status = await eventually(lambda: _status_if(api, lambda s: any(
        c["type"] == "Failed" and c["status"] == "True" for c in s.get("conditions") or ())), within=10)
    assert next(c for c in status["conditions"] if c["type"] == "Failed")["reason"] == "InvalidSpec"


async def _all(api, gvr: GVR, *names: str) -> list[dict] | None:
    found = [await read(api, gvr, n) for n in names]
    return found if all(found) else None


async def _status_if(api, predicate) -> dict | None:
    status = ((await read(api, WIDGETS, "w")) or {}).get("status") or {}
    return status if predicate(status) else None


async def _bound_nodes(api) -> frozenset[str] | None:
    pods = await _all(api, PODS, "w-worker-0", "w-worker-1")
    nodes = frozenset(p["spec"].get("nodeName") for p in pods or ())
    return nodes if pods and all(nodes) else None


async def _edited(api, old: dict[str, str]) -> bool:
    pods = await _all(api, PODS, *old)
    return bool(pods) and all(p["metadata"]["uid"] != old[p["metadata"]["name"]]
                              and p["spec"]["containers"][0]["image"] == "toy:v2" for p in pods)


async def _image_is(api, image: str) -> dict | None:
    dep = await read(api, DEPLOYMENTS, "w-server")
    return dep if dep and dep["spec"]["template"]["spec"]["containers"][0]["image"] == image else None


async def _replaced(api, name: str, uid: str) -> bool:
    pod = await read(api, PODS, name)
    return pod is not None and pod["metadata"]["uid"] != uid
