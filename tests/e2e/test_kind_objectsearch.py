"""ObjectSearchService beyond the shared body (test_kinds.py): the reid workers' embedded
DeploymentSpec reaches the Deployment with the user's selector kept, and an edit of that
selector is a condition that leaves the running Deployment as it is, on the dev cluster."""

from __future__ import annotations

import copy

from gm.kube.apierrors import NotFound
from gm.kube.resources import DEPLOYMENTS, sedna_gvr
from shared import apis
from tests.conftest import eventually
from tests.e2e.kindcases.objectsearch import CASES, NAME, running

NS = "default"
CASE = CASES[0]
SEARCH = sedna_gvr(apis.OBJECT_SEARCH)
REID_DEPLOYMENT = f"{NAME}-deployment-reidworker"


async def status_of(api) -> dict:
    return (await api.get(SEARCH, NAME, namespace=NS)).get("status") or {}


async def reid_available(api) -> dict | None:
    try:
        dep = await api.get(DEPLOYMENTS, REID_DEPLOYMENT, namespace=NS)
    except NotFound:
        return None
    return dep if (dep.get("status") or {}).get("availableReplicas") == 1 else None


async def true_condition(api, kind: str) -> dict | None:
    conditions = (await status_of(api)).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind and c["status"] == "True"), None)


async def running_at(api, generation: int) -> bool:
    status = await status_of(api)
    return status.get("observedGeneration") == generation and running(status)


async def test_a_reid_selector_edit_is_refused_and_the_deployment_stays(gm, api):
    await api.create(SEARCH, copy.deepcopy(CASE.manifest), namespace=NS)
    dep = await eventually(lambda: reid_available(api), within=15, message="reid Deployment available")
    assert dep["spec"]["selector"]["matchLabels"]["app"] == "reid"
    await eventually(lambda: running_at(api, 1), within=15, message="Running at generation 1")

    cr = await api.get(SEARCH, NAME, namespace=NS)
    reid = cr["spec"]["reidWorkers"]
    reid["selector"]["matchLabels"]["tier"] = "gpu"
    reid["template"]["metadata"]["labels"]["tier"] = "gpu"
    reid["template"]["spec"]["containers"][0]["image"] = "example/pedestrian-search-reid:v2"
    await api.replace(SEARCH, NAME, cr, namespace=NS)

    cond = await eventually(lambda: true_condition(api, "Failed"), within=15,
                            message="SelectorImmutable condition")
    assert cond["reason"] == "SelectorImmutable"
    assert REID_DEPLOYMENT in cond["message"]
    after = await api.get(DEPLOYMENTS, REID_DEPLOYMENT, namespace=NS)
    assert after["metadata"]["uid"] == dep["metadata"]["uid"]
    assert after["spec"] == dep["spec"]

    # restoring the selector lets the rest of the edit through, and the service recovers
    cr = await api.get(SEARCH, NAME, namespace=NS)
    del cr["spec"]["reidWorkers"]["selector"]["matchLabels"]["tier"]
    await api.replace(SEARCH, NAME, cr, namespace=NS)

    async def rolled() -> dict | None:
        current = await api.get(DEPLOYMENTS, REID_DEPLOYMENT, namespace=NS)
        containers = current["spec"]["template"]["spec"]["containers"]
        return current if containers[0]["image"] == "example/pedestrian-search-reid:v2" else None

    rolled_dep = await eventually(rolled, within=15, message="reid Deployment rolled")
    assert rolled_dep["metadata"]["uid"] == dep["metadata"]["uid"]
    assert rolled_dep["spec"]["selector"] == dep["spec"]["selector"]
    await eventually(lambda: true_condition(api, "Running"), within=15, message="Running again")

