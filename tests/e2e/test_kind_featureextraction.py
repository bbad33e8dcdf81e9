"""FeatureExtractionService beyond the shared body (test_kinds.py): worker reports become
`status.metrics` through the real report handler and API server, and survive the GM's own
status writes; the Deployment honours the embedded DeploymentSpec on the dev cluster."""

from __future__ import annotations

import copy
from typing import Any

from gm.edge.order import FIELD
from gm.edge.pipeline import StatusPipeline
from gm.edge.status import UpstreamStatus
from gm.kube.apierrors import NotFound
from gm.kube.resources import DEPLOYMENTS, sedna_gvr
from gm.kube.statuswriter import StatusWriter
from proto import Message, Op
from shared import apis
from tests.conftest import eventually
from tests.e2e.kindcases import image_of
from tests.e2e.kindcases.featureextraction import CASES, DEPLOYMENT, EDITED_IMAGE, NAME

NS = "default"
NODE = "cloud-node"
EPOCH = "0123456789abcdef"
CASE = CASES[0]
FE = sedna_gvr(apis.FEATURE_EXTRACTION)


async def create(api, **spec: Any) -> dict:
    for obj in CASE.prerequisites:
        await api.create(sedna_gvr(apis.require(obj["kind"])), copy.deepcopy(obj), namespace=NS)
    manifest = copy.deepcopy(CASE.manifest)
    manifest["spec"].update(spec)
    return await api.create(FE, manifest, namespace=NS)


async def status_of(api) -> dict:
    return (await api.get(FE, NAME, namespace=NS)).get("status") or {}


def body(frames: int) -> dict:
    return {"phase": "inference", "status": "running", "output": {"ownerInfo": {
        "startTime": "2026-01-01 09:00:00", "updateTime": "2026-01-01 10:00:00",
        "frames": frames, "featureDim": "2048"}}}


async def test_reports_become_metrics_and_outlive_reconciles(gm, api):
    await create(api)
    await eventually(lambda: _at_generation(api, 1), within=15, message="Running at generation 1")
    handler = UpstreamStatus(StatusPipeline(StatusWriter(api)))
    await handler.handle_status(NODE, Message(Op.STATUS, 7, CASE.kind, NS, NAME, body(40)), epoch=EPOCH)
    status = await status_of(api)
    assert status["metrics"] == [{"key": "featureDim", "value": "2048"}, {"key": "frames", "value": "40"}]
    [record] = status[FIELD]
    assert record.pop("appliedAt").endswith("Z")  # when the GM applied it (gm/edge/order.py)
    assert record == {"node": NODE, "epoch": EPOCH, "seq": 7, "time": "2026-01-01 10:00:00"}
    # the GM's next status writes (an edit, its rollout) keep what the workers reported
    cr = await api.get(FE, NAME, namespace=NS)
    cr["spec"]["template"]["spec"]["containers"][0]["image"] = EDITED_IMAGE
    await api.replace(FE, NAME, cr, namespace=NS)
    status = await eventually(lambda: _at_generation(api, 2), within=15, message="Running at generation 2")
    assert status["metrics"][1] == {"key": "frames", "value": "40"}
    # a replayed report changes nothing
    await handler.handle_status(NODE, Message(Op.STATUS, 7, CASE.kind, NS, NAME, body(3)), epoch=EPOCH)
    assert (await status_of(api))["metrics"][1] == {"key": "frames", "value": "40"}


async def _at_generation(api, generation: int) -> dict | None:
    status = await status_of(api)
    if status.get("observedGeneration") == generation and CASE.healthy(status):
        return status
    return None


async def test_the_deployment_honours_the_embedded_deployment_spec(gm, api):
    await create(api, replicas=2, minReadySeconds=1, revisionHistoryLimit=3,
                 strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}})

    async def rolled_out() -> dict | None:
        try:
            dep = await api.get(DEPLOYMENTS, DEPLOYMENT, namespace=NS)
        except NotFound:
            return None
        return dep if (dep.get("status") or {}).get("availableReplicas") == 2 else None

    dep = await eventually(rolled_out, within=15, message="2 available replicas")
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate",
                                       "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    assert (dep["spec"]["minReadySeconds"], dep["spec"]["revisionHistoryLimit"]) == (1, 3)
    assert dep["spec"]["selector"]["matchLabels"]["app"] == "feature-extraction"
    status = await eventually(lambda: _at_generation(api, 1), within=15, message="Running")
    running = next(c for c in status["conditions"] if c["type"] == "Running")
    assert running["message"] == "2/2 replicas available"
    # an edit of the selector cannot reach a Deployment: it is a condition, the workers stay
    cr = await api.get(FE, NAME, namespace=NS)
    cr["spec"]["selector"]["matchLabels"]["tier"] = "gpu"
    cr["spec"]["template"]["metadata"]["labels"]["tier"] = "gpu"
    await api.replace(FE, NAME, cr, namespace=NS)

    async def refused() -> dict | None:
        conditions = (await status_of(api)).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Failed" and c["status"] == "True"), None)

    cond = await eventually(refused, within=15, message="SelectorImmutable condition")
    assert cond["reason"] == "SelectorImmutable"
    after = await api.get(DEPLOYMENTS, DEPLOYMENT, namespace=NS)
    assert after["metadata"]["uid"] == dep["metadata"]["uid"]
    assert image_of(after) == image_of(dep) and "tier" not in after["spec"]["selector"]["matchLabels"]
