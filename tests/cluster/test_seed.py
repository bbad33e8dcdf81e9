"""The GM's seed scenarios on a real cluster (`make test-cluster`): CRDs served, JI and FL
children with controller owner references, status, a spec edit reaching the workers,
self-heal of a deleted worker pod, and cascade delete through the cluster's garbage collector.

The example manifests are used as written, moved into the run's namespace and onto the
cluster's own nodes. Worker images need not be pullable: the scenarios check objects, not
running containers.
"""

from __future__ import annotations

import json

import yaml

from tests.cluster.conftest import ROOT, get_json, kubectl
from tests.conftest import eventually

EXAMPLES = ROOT / "examples" / "upstream"
JI, FL = "helmet-detection-inference-example", "surface-defect-detection"
WITHIN = 90.0


async def _node_map() -> dict[str, str]:
    """The examples' node names -> this cluster's nodes (same name when it exists)."""
    nodes = sorted(n["metadata"]["name"] for n in (await get_json("nodes"))["items"])
    wanted = ("edge-node-1", "edge-node-2", "cloud-node")
    return {w: w if w in nodes else nodes[i % len(nodes)] for i, w in enumerate(wanted)}


def _retarget(text: str, namespace: str, nodes: dict[str, str]) -> str:
    docs = []
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        doc["metadata"]["namespace"] = namespace
        docs.append(yaml.safe_dump(doc))
    out = "---\n".join(docs)
    for old, new in nodes.items():
        out = out.replace(f"nodeName: {old}", f"nodeName: {new}")
    return out


async def _apply_example(name: str, namespace: str) -> None:
    text = _retarget((EXAMPLES / name).read_text(), namespace, await _node_map())
    await kubectl("apply", "-f", "-", stdin=text)


async def _owned(resource: str, ns: str, owner: dict) -> list[dict]:
    items = (await get_json(resource, "-n", ns))["items"]
    return [o for o in items if any(r.get("uid") == owner["metadata"]["uid"]
                                    for r in o["metadata"].get("ownerReferences") or [])]


def _controller_ref(child: dict, owner: dict) -> dict:
    [ref] = [r for r in child["metadata"]["ownerReferences"] if r.get("controller")]
    assert (ref["apiVersion"], ref["kind"], ref["name"], ref["uid"]) == (
        "sedna.io/v1alpha1", owner["kind"], owner["metadata"]["name"], owner["metadata"]["uid"])
    assert ref["blockOwnerDeletion"] is True
    return ref


async def test_crds_are_served(crds):
    resources = await kubectl("api-resources", "--api-group=sedna.io", "-o", "name")
    for crd in crds:
        assert crd in resources.split()
        cond = {c["type"]: c["status"] for c in (await get_json("crd", crd))["status"]["conditions"]}
        assert cond["Established"] == "True"


async def test_joint_inference_children_status_edit_and_cascade(gm, seed_ns):
    await _apply_example("joint-inference-helmet-detection.yaml", seed_ns)
    ji = await get_json("jointinferenceservice", JI, "-n", seed_ns)

    async def two_deployments():
        found = await _owned("deployments", seed_ns, ji)
        return len(found) == 2 and found
    deployments = await eventually(two_deployments, "the JI's edge and cloud Deployments", within=WITHIN, interval=1)
    for d in deployments:
        _controller_ref(d, ji)

    async def status():
        return (await get_json("jointinferenceservice", JI, "-n", seed_ns)).get("status", {}).get("conditions")
    await eventually(status, "the JI's status written by the GM", within=WITHIN, interval=1)

    # a spec edit reaches the edge worker's Deployment template
    patch = [{"op": "add", "path": "/spec/edgeWorker/template/spec/containers/0/env/-",
              "value": {"name": "SEED_EDIT", "value": "1"}}]
    await kubectl("patch", "jointinferenceservice", JI, "-n", seed_ns, "--type=json", "-p", json.dumps(patch))

    async def edited():
        for d in await _owned("deployments", seed_ns, ji):
            env = d["spec"]["template"]["spec"]["containers"][0].get("env") or []
            if {"name": "SEED_EDIT", "value": "1"} in env:
                return True
        return False
    await eventually(edited, "the edit in the edge Deployment", within=WITHIN, interval=1)

    # cascade: the garbage collector removes the children of a deleted service
    await kubectl("delete", "jointinferenceservice", JI, "-n", seed_ns, "--wait=false")

    async def gone():
        return not await _owned("deployments", seed_ns, ji)
    await eventually(gone, "the JI's Deployments deleted by the garbage collector", within=WITHIN, interval=1)


async def test_federated_learning_children_self_heal_and_status(gm, seed_ns):
    await _apply_example("federated-learning-surface-defect.yaml", seed_ns)
    fl = await get_json("federatedlearningjob", FL, "-n", seed_ns)

    async def three_pods():
        found = await _owned("pods", seed_ns, fl)
        return len(found) == 3 and found
    pods = await eventually(three_pods, "the FL's aggregation and training pods", within=WITHIN, interval=1)
    for p in pods:
        _controller_ref(p, fl)
        env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0].get("env") or []}
        assert env.get("WORKER_NAME") in (None, p["metadata"]["name"])

    async def status():
        return (await get_json("federatedlearningjob", FL, "-n", seed_ns)).get("status", {}).get("conditions")
    await eventually(status, "the FL's status written by the GM", within=WITHIN, interval=1)

    # self-heal: a deleted training pod of a running job comes back
    victim = next(p for p in pods if "trainworker" in p["metadata"]["name"])
    # no `--wait`: kubectl's wait for the delete lists the pod by name, and when the GM has already
    # recreated it (kwok deletes at once, the GM recreates within milliseconds) it waits for the
    # new pod to go too, until its timeout; `healed` below waits for a new uid instead
    await kubectl("delete", "pod", victim["metadata"]["name"], "-n", seed_ns, "--wait=false")

    async def healed():
        again = [p for p in await _owned("pods", seed_ns, fl) if p["metadata"]["name"] == victim["metadata"]["name"]]
        return again and again[0]["metadata"]["uid"] != victim["metadata"]["uid"]
    await eventually(healed, "the deleted training pod recreated", within=WITHIN, interval=1)
