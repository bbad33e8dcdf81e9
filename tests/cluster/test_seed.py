"""The GM's seed scenarios on both clusters of the tier: CRDs served, JI and FL children with
controller owner references, status, a spec edit reaching the workers, self-heal of a deleted
worker pod, and cascade delete through the cluster's garbage collector.

The example manifests are used as written, moved into the test's namespace. Worker images need
not be pullable: the scenarios check objects, not running containers.
"""

from __future__ import annotations

import json

import yaml

from tests.cluster.conftest import WITHIN
from tests.cluster.plugin import ROOT, Cluster
from tests.conftest import eventually

EXAMPLES = ROOT / "examples" / "upstream"
JI, FL = "helmet-detection-inference-example", "surface-defect-detection"


async def _apply_example(target: Cluster, name: str, namespace: str) -> None:
    docs = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    await target.kubectl("apply", "-f", "-", stdin="---\n".join(yaml.safe_dump(d) for d in docs))


async def _owned(target: Cluster, resource: str, ns: str, owner: dict) -> list[dict]:
    items = (await target.get_json(resource, "-n", ns))["items"]
    return [o for o in items if any(r.get("uid") == owner["metadata"]["uid"]
                                    for r in o["metadata"].get("ownerReferences") or [])]


def _controller_ref(child: dict, owner: dict) -> dict:
    [ref] = [r for r in child["metadata"]["ownerReferences"] if r.get("controller")]
    assert (ref["apiVersion"], ref["kind"], ref["name"], ref["uid"]) == (
        "sedna.io/v1alpha1", owner["kind"], owner["metadata"]["name"], owner["metadata"]["uid"])
    assert ref["blockOwnerDeletion"] is True
    return ref


async def test_crds_are_served(target):
    resources = await target.kubectl("api-resources", "--api-group=sedna.io", "-o", "name")
    assert target.crds
    for crd in target.crds:
        assert crd in resources.split()
        cond = {c["type"]: c["status"] for c in (await target.get_json("crd", crd))["status"]["conditions"]}
        assert cond["Established"] == "True"


async def test_joint_inference_children_status_edit_and_cascade(target, gm, ns):
    await _apply_example(target, "joint-inference-helmet-detection.yaml", ns)
    ji = await target.get_json("jointinferenceservice", JI, "-n", ns)

    async def two_deployments():
        found = await _owned(target, "deployments", ns, ji)
        return len(found) == 2 and found
    deployments = await eventually(two_deployments, "the JI's edge and cloud Deployments", within=WITHIN, interval=0.5)
    for d in deployments:
        _controller_ref(d, ji)

    async def status():
        return (await target.get_json("jointinferenceservice", JI, "-n", ns)).get("status", {}).get("conditions")
    await eventually(status, "the JI's status written by the GM", within=WITHIN, interval=0.5)

    # a spec edit reaches the edge worker's Deployment template
    patch = [{"op": "add", "path": "/spec/edgeWorker/template/spec/containers/0/env/-",
              "value": {"name": "SEED_EDIT", "value": "1"}}]
    await target.kubectl("patch", "jointinferenceservice", JI, "-n", ns, "--type=json", "-p", json.dumps(patch))

    async def edited():
        for d in await _owned(target, "deployments", ns, ji):
            env = d["spec"]["template"]["spec"]["containers"][0].get("env") or []
            if {"name": "SEED_EDIT", "value": "1"} in env:
                return True
        return False
    await eventually(edited, "the edit in the edge Deployment", within=WITHIN, interval=0.5)

    # cascade: the garbage collector removes the children of a deleted service
    await target.kubectl("delete", "jointinferenceservice", JI, "-n", ns, "--wait=false")

    async def gone():
        return not await _owned(target, "deployments", ns, ji)
    await eventually(gone, "the JI's Deployments deleted by the garbage collector", within=WITHIN, interval=0.5)


async def test_federated_learning_children_self_heal_and_status(target, gm, ns):
    await _apply_example(target, "federated-learning-surface-defect.yaml", ns)
    fl = await target.get_json("federatedlearningjob", FL, "-n", ns)

    async def three_pods():
        found = await _owned(target, "pods", ns, fl)
        return len(found) == 3 and found
    pods = await eventually(three_pods, "the FL's aggregation and training pods", within=WITHIN, interval=0.5)
    for p in pods:
        _controller_ref(p, fl)
        env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0].get("env") or []}
        assert env.get("WORKER_NAME") in (None, p["metadata"]["name"])

    async def status():
        return (await target.get_json("federatedlearningjob", FL, "-n", ns)).get("status", {}).get("conditions")
    await eventually(status, "the FL's status written by the GM", within=WITHIN, interval=0.5)

    # self-heal: a deleted training pod of a running job comes back
    victim = next(p for p in pods if "trainworker" in p["metadata"]["name"])
    # no `--wait`: kubectl's wait for the delete lists the pod by name, and when the GM has already
    # recreated it (kwok deletes at once, the GM recreates within milliseconds) it waits for the
    # new pod to go too, until its timeout; `healed` below waits for a new uid instead
    await target.kubectl("delete", "pod", victim["metadata"]["name"], "-n", ns, "--wait=false")

    async def healed():
        again = [p for p in await _owned(target, "pods", ns, fl) if p["metadata"]["name"] == victim["metadata"]["name"]]
        return again and again[0]["metadata"]["uid"] != victim["metadata"]["uid"]
    await eventually(healed, "the deleted training pod recreated", within=WITHIN, interval=0.5)
