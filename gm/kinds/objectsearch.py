"""ObjectSearchService -> the reid and user Deployments with their Services, and one
tracking worker Pod per `spec.trackingWorkers` entry.

Upstream's ObjectSearch controller (spec/upstream-gm.md §3.7) creates, in order: the reid
Deployment `<name>-deployment-reidworker` and Service `<name>-reidworker` (9378), the user
Deployment `<name>-deployment-userworker` (replicas 1) and Service `<name>-userworker`
(9379), then the tracking pods, which find the other two through `USERWORKER_URL` and
`EDGEMESH_URL`. This module keeps those names, ports and env; what it does differently (pod
names, `WORKER_NAME`, the embedded DeploymentSpec honoured, failure not terminal) is written in
gm/kindlib/multiedge.py, which ObjectTrackingService shares.

Reports: upstream registers a no-op handler for the kind. Here a report's
`output.ownerInfo` (less its times) becomes `status.metrics`, as for JointInferenceService,
so whatever a worker chooses to report is visible to the user instead of dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gm.kindlib import multiedge
from gm.kindlib.multiedge import USER
from gm.kube.resources import DEPLOYMENTS, PODS, SERVICES
from gm.reconcile.declaration import Children, Dependencies
from gm.workers.deployspec import InlineDeployment
from gm.workers.specerrors import InvalidSpec
from shared import apis

KIND = apis.OBJECT_SEARCH.kind
USER_PORT = 9379


def build(cr: dict[str, Any], deps: Dependencies) -> Children:
    """The desired children; reads the CR and its Deployments now (a reid selector edit is
    refused against the live Deployment); the kind names no Model or Secret."""
    owner = multiedge.checked_owner(cr, kind=KIND)
    spec = cr["spec"]
    user = spec.get("userWorker")
    if not isinstance(user, Mapping):
        raise InvalidSpec("InvalidSpec", "spec.userWorker must be an object with a template")
    reid_deployment, reid_service = multiedge.reid_children(owner, spec,
                                                            deps.observed(DEPLOYMENTS))
    user_deployment = multiedge.worker_deployment(
        owner, USER, user.get("template"), where="spec.userWorker.template",
        inline=InlineDeployment(where="spec.userWorker"))
    urls = [("USERWORKER_URL", multiedge.service_host(owner, USER, USER_PORT)),
            multiedge.reid_url(owner)]
    return {
        DEPLOYMENTS: [reid_deployment, user_deployment],
        SERVICES: [reid_service, multiedge.worker_service(owner, USER, USER_PORT)],
        PODS: multiedge.tracking_pods(owner, spec, urls),
    }


DECLARATION = multiedge.declaration(apis.OBJECT_SEARCH, build, controller="objectsearchservice",
                                     component="objectsearch-controller")
