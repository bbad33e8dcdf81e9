"""FeatureExtractionService for the shared end-to-end body: upstream's pedestrian-tracking
example (examples/upstream/multi-edge-inference-pedestrian-tracking.yaml) with `replicas`
left out, which crashes upstream's GM and gives one replica here."""

from __future__ import annotations

import copy
from typing import Any

from tests.e2e.conftest import load_example
from tests.e2e.kindcases import KindCase, env_of, image_of

DOCS = load_example("multi-edge-inference-pedestrian-tracking.yaml")
FE = copy.deepcopy(next(d for d in DOCS if d["kind"] == "FeatureExtractionService"))
FE["spec"].pop("replicas")
NAME = FE["metadata"]["name"]
MODEL = FE["spec"]["model"]["name"]
DEPLOYMENT = f"{NAME}-deployment-fe"
EDITED_IMAGE = "kubeedge/sedna-example-multi-edge-inference-pedestrian-tracking-feature-extraction:v0.6.0"


def _edit(spec: dict[str, Any]) -> None:
    spec["template"]["spec"]["containers"][0]["image"] = EDITED_IMAGE


def _edited(deployment: dict[str, Any]) -> bool:
    return image_of(deployment) == EDITED_IMAGE and env_of(deployment, "SERVICE_NAME") == NAME


def _foreign_selector(spec: dict[str, Any]) -> None:
    """A selector the template's labels do not satisfy."""
    spec["selector"] = {"matchLabels": {"app": "someone-else"}}


def _running(status: dict[str, Any]) -> bool:
    running = [c for c in status.get("conditions") or () if c.get("type") == "Running"]
    return status.get("active") == 1 and bool(running) and running[0].get("status") == "True"


CASES = [
    KindCase(
        kind="FeatureExtractionService",
        manifest=FE,
        prerequisites=tuple(d for d in DOCS if d["kind"] == "Model" and d["metadata"]["name"] == MODEL),
        children={"deployments": (DEPLOYMENT,), "services": (f"{NAME}-fe",)},
        worker=("deployments", DEPLOYMENT),
        edit=_edit,
        edited_child=("deployments", DEPLOYMENT),
        edited=_edited,
        bad_spec=_foreign_selector,
        bad_reason="InvalidSelector",
        healthy=_running,
        columns=("NAME", "STATUS", "ACTIVE", "FAILED", "AGE"),
        notes=("replicas is left out: the Deployment gets 1",),
    ),
]
