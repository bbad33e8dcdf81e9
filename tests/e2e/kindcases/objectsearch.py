"""ObjectSearchService for the shared kind test: reid and user Deployments with their
Services, two tracking worker pods on the edge nodes."""

from __future__ import annotations

from typing import Any

from tests.e2e.kindcases import KindCase, image_of

NAME = "pedestrian-search"
TRACK_IMAGE = "example/pedestrian-tracking:v1"
EDITED_IMAGE = "example/pedestrian-tracking:v2"


def _template(image: str, node: str, **labels: str) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"nodeName": node, "containers": [
        {"name": "worker", "image": image, "env": [{"name": "log_level", "value": "info"}]}]}}
    if labels:
        template["metadata"] = {"labels": labels}
    return template


MANIFEST = {
    "apiVersion": "sedna.io/v1alpha1",
    "kind": "ObjectSearchService",
    "metadata": {"name": NAME, "namespace": "default"},
    "spec": {
        "userWorker": {"template": _template("example/pedestrian-search-user:v1", "cloud-node")},
        "trackingWorkers": [{"template": _template(TRACK_IMAGE, "edge-node-1")},
                            {"template": _template(TRACK_IMAGE, "edge-node-2")}],
        "reidWorkers": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "reid"}},
            "template": _template("example/pedestrian-search-reid:v1", "cloud-node", app="reid"),
        },
    },
}


def _edit(spec: dict[str, Any]) -> None:
    spec["trackingWorkers"][0]["template"]["spec"]["containers"][0]["image"] = EDITED_IMAGE


def _bad(spec: dict[str, Any]) -> None:
    spec["trackingWorkers"] = []


def running(status: dict[str, Any]) -> bool:
    """A Running condition is True (both multi-edge kinds once their workers are up)."""
    return any(c.get("type") == "Running" and c.get("status") == "True"
               for c in status.get("conditions") or ())


CASE = KindCase(
    kind="ObjectSearchService",
    manifest=MANIFEST,
    children={
        "deployments": (f"{NAME}-deployment-reidworker", f"{NAME}-deployment-userworker"),
        "services": (f"{NAME}-reidworker", f"{NAME}-userworker"),
        "pods": (f"{NAME}-trackingworker-0", f"{NAME}-trackingworker-1"),
    },
    worker=("pods", f"{NAME}-trackingworker-1"),
    edit=_edit,
    edited_child=("pods", f"{NAME}-trackingworker-0"),
    edited=lambda pod: image_of(pod) == EDITED_IMAGE,
    bad_spec=_bad,
    bad_reason="InvalidSpec",
    healthy=running,
    columns=("NAME", "STATUS", "ACTIVE", "FAILED", "AGE"),
    notes=("a tracking worker is a Pod: the edit recreates it under the same name",),
)

CASES = (CASE,)
