"""ObjectTrackingService for the shared kind test: the reid Deployment with its Service and
two tracking worker pods on the edge nodes (no user worker)."""

from __future__ import annotations

from typing import Any

from tests.e2e.kindcases import KindCase, image_of
from tests.e2e.kindcases.objectsearch import running

NAME = "pedestrian-tracking"
TRACK_IMAGE = "example/pedestrian-tracking:v1"
EDITED_IMAGE = "example/pedestrian-tracking:v2"


def _template(image: str, node: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "tracking"}},
            "spec": {"nodeName": node, "containers": [{"name": "worker", "image": image}]}}


MANIFEST = {
    "apiVersion": "sedna.io/v1alpha1",
    "kind": "ObjectTrackingService",
    "metadata": {"name": NAME, "namespace": "default"},
    "spec": {
        "trackingWorkers": [{"template": _template(TRACK_IMAGE, "edge-node-1")},
                            {"template": _template(TRACK_IMAGE, "edge-node-2")}],
        "reidWorkers": {
            "selector": {"matchLabels": {"app": "tracking"}},
            "template": _template("example/pedestrian-tracking-reid:v1", "cloud-node"),
        },
    },
}


def _edit(spec: dict[str, Any]) -> None:
    spec["trackingWorkers"][1]["template"]["spec"]["containers"][0]["image"] = EDITED_IMAGE


def _bad(spec: dict[str, Any]) -> None:
    spec["trackingWorkers"][0]["template"]["spec"]["containers"] = []


CASE = KindCase(
    kind="ObjectTrackingService",
    manifest=MANIFEST,
    children={
        "deployments": (f"{NAME}-deployment-reidworker",),
        "services": (f"{NAME}-reidworker",),
        "pods": (f"{NAME}-trackingworker-0", f"{NAME}-trackingworker-1"),
    },
    worker=("pods", f"{NAME}-trackingworker-0"),
    edit=_edit,
    edited_child=("pods", f"{NAME}-trackingworker-1"),
    edited=lambda pod: image_of(pod) == EDITED_IMAGE,
    bad_spec=_bad,
    bad_reason="InvalidTemplate",
    healthy=running,
    columns=("NAME", "STATUS", "ACTIVE", "FAILED", "AGE"),
    notes=("no user worker: the tracking pods get EDGEMESH_URL but no USERWORKER_URL",),
)

CASES = (CASE,)
