"""FeatureExtractionService for the shared end-to-end body: the pedestrian-tracking example
(examples/upstream/multi-edge-inference-pedestrian-tracking.yaml) on the dev cluster."""

from __future__ import annotations

import copy
from typing import Any

from tests.e2e.kindcases import KindCase, env_of, image_of

NAME = "feature-extraction"
MODEL = "m3l"
DEPLOYMENT = f"{NAME}-deployment-fe"
EDITED_IMAGE = "kubeedge/sedna-example-multi-edge-inference-pedestrian-tracking-feature-extraction:v0.6.0"

_MODEL = {
    "apiVersion": "sedna.io/v1alpha1", "kind": "Model",
    "metadata": {"name": MODEL, "namespace": "default"},
    "spec": {"url": "/data/ai_models/object_detection/pedestrians/yolox.pth", "format": "pth"},
}

_SERVICE = {
    "apiVersion": "sedna.io/v1alpha1", "kind": "FeatureExtractionService",
    "metadata": {"name": NAME, "namespace": "default"},
    "spec": {
        "kafkaSupport": True,
        "model": {"name": MODEL},
        "selector": {"matchLabels": {"app": NAME}},
        # replicas omitted on purpose: upstream's GM crashes on it, ours defaults to 1
        "template": {
            "metadata": {"labels": {"app": NAME}},
            "spec": {
                "nodeName": "cloud-node",
                "containers": [{
                    "name": "feature-extraction",
                    "image": "kubeedge/sedna-example-multi-edge-inference-pedestrian-tracking-feature-extraction:v0.5.0",
                    "env": [{"name": "input_shape", "value": "256,128"}],
                    "ports": [{"containerPort": 6000, "protocol": "TCP"}],
                }],
            },
        },
    },
}


def _edit(spec: dict[str, Any]) -> None:
    spec["template"]["spec"]["containers"][0]["image"] = EDITED_IMAGE


def _edited(deployment: dict[str, Any]) -> bool:
    return image_of(deployment) == EDITED_IMAGE and env_of(deployment, "SERVICE_NAME") == NAME


def _bad_spec(spec: dict[str, Any]) -> None:
    """A selector the template labels do not satisfy."""
    spec["selector"] = {"matchLabels": {"app": "someone-else"}}


def _healthy(status: dict[str, Any]) -> bool:
    running = [c for c in status.get("conditions") or () if c.get("type") == "Running"]
    return status.get("active") == 1 and bool(running) and running[0].get("status") == "True"


CASE = KindCase(
    kind="FeatureExtractionService",
    manifest=copy.deepcopy(_SERVICE),
    children={"deployments": (DEPLOYMENT,), "services": (f"{NAME}-fe",)},
    worker=("deployments", DEPLOYMENT),
    edit=_edit,
    edited_child=("deployments", DEPLOYMENT),
    edited=_edited,
    bad_spec=_bad_spec,
    bad_reason="InvalidSelector",
    prerequisites=(copy.deepcopy(_MODEL),),
    healthy=_healthy,
    columns=("NAME", "STATUS", "ACTIVE", "FAILED", "AGE"),
    notes=("replicas is omitted: the Deployment gets 1",),
)
