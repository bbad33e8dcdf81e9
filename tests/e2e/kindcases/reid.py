"""ReidJob for the shared end-to-end body: the pedestrian-tracking example's ReidJob
(examples/upstream/multi-edge-inference-pedestrian-tracking.yaml) on the dev cluster.

Its pod runs until the test ends it (the dev cluster's `devcluster.sedna.io/phase`
annotation), so the job stays Running while the body deletes, edits and breaks it."""

from __future__ import annotations

import copy
from typing import Any

from tests.e2e.kindcases import KindCase, env_of, image_of

NAME = "reid"
POD = f"{NAME}-reid-0"
IMAGE = "kubeedge/sedna-example-multi-edge-inference-pedestrian-tracking-reid:v0.5.0"
EDITED_IMAGE = IMAGE.replace("v0.5.0", "v0.6.0")

_JOB = {
    "apiVersion": "sedna.io/v1alpha1", "kind": "ReidJob",
    "metadata": {"name": NAME, "namespace": "default"},
    "spec": {
        "backoffLimit": 5,
        "kafkaSupport": True,
        "template": {"spec": {
            "nodeName": "cloud-node",
            "restartPolicy": "OnFailure",
            "containers": [{
                "name": "reid", "image": IMAGE, "imagePullPolicy": "Always",
                "env": [{"name": "query_images", "value": "/data/query/sample.png"},
                        {"name": "match_threshold", "value": "0.9"}],
            }],
        }},
    },
}


def set_image(image: str):
    """The edit both job cases make: the template's image (the running pod is recreated)."""
    def edit(spec: dict[str, Any]) -> None:
        spec["template"]["spec"]["containers"][0]["image"] = image
    return edit


def _edited(pod: dict[str, Any]) -> bool:
    return image_of(pod) == EDITED_IMAGE and env_of(pod, "JOB_NAME") == NAME


def _bad_spec(spec: dict[str, Any]) -> None:
    spec["backoffLimit"] = -1


def running_job(status: dict[str, Any]) -> bool:
    """One active pod, phase Running and the Running condition True (both job cases)."""
    running = [c for c in status.get("conditions") or () if c.get("type") == "Running"]
    return (status.get("phase") == "Running" and status.get("active") == 1
            and bool(running) and running[0].get("status") == "True")


JOB_COLUMNS = ("NAME", "PHASE", "ACTIVE", "SUCCEEDED", "FAILED", "AGE")


CASES = [
    KindCase(
        kind="ReidJob",
        manifest=copy.deepcopy(_JOB),
        children={"pods": (POD,)},
        worker=("pods", POD),
        edit=set_image(EDITED_IMAGE),
        edited_child=("pods", POD),
        edited=_edited,
        bad_spec=_bad_spec,
        bad_reason="InvalidJobSpec",
        healthy=running_job,
        columns=JOB_COLUMNS,
        notes=("the pod keeps restartPolicy OnFailure; unset or Always would become Never",),
    ),
]
