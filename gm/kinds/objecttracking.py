"""ObjectTrackingService -> the reid Deployment with its Service, and one tracking worker
Pod per `spec.trackingWorkers` entry.

Upstream has a CRD for the kind but no controller (spec/upstream-gm.md §1.9, §3.10): its
objects sit there. It is ObjectSearchService without the user worker, so this module builds
exactly that, with the rules of gm/kindlib/multiedge.py. The choices made where upstream is
silent:

- Children: reid Deployment `<name>-deployment-reidworker` and Service `<name>-reidworker`
  on 9378, tracking pods `<name>-trackingworker-<i>`; worker types `reidworker` and
  `trackingworker`, the labels the placement rule in shared/apis.py looks for.
- Tracking worker env: `NAMESPACE`, `SERVICE_NAME`, `WORKER_NAME` (the pod's name) and
  `EDGEMESH_URL=<name>-reidworker.<ns>:9378`, as ObjectSearch's. There is no user worker, so
  there is no `USERWORKER_URL`: it is left out rather than pointed at a Service that does not
  exist (a worker image that needs it fails visibly instead of retrying a dead address).
- Controller name `objecttrackingservice`, event component `objecttracking-controller`
  (ObjectSearch's naming; upstream has none to follow).
- Status and conditions (Pending/Running/Failed) as ObjectSearch's; reports become
  `status.metrics` as ObjectSearch's (upstream has no handler at all: it drops them).
"""

from __future__ import annotations

from typing import Any

from gm.kindlib import multiedge
from gm.kube.resources import DEPLOYMENTS, PODS, SERVICES
from gm.reconcile.declaration import Children, Dependencies
from shared import apis

KIND = apis.OBJECT_TRACKING.kind


def build(cr: dict[str, Any], deps: Dependencies) -> Children:
    """The desired children; reads the CR and its Deployments now (a reid selector edit is
    refused against the live Deployment); the kind names no Model or Secret."""
    owner = multiedge.checked_owner(cr, kind=KIND)
    spec = cr["spec"]
    reid_deployment, reid_service = multiedge.reid_children(owner, spec,
                                                            deps.observed(DEPLOYMENTS))
    return {
        DEPLOYMENTS: [reid_deployment],
        SERVICES: [reid_service],
        PODS: multiedge.tracking_pods(owner, spec, [multiedge.reid_url(owner)]),
    }


DECLARATION = multiedge.declaration(apis.OBJECT_TRACKING, build, controller="objecttrackingservice",
                                     component="objecttracking-controller")
