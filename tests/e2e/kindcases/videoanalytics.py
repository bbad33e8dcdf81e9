"""VideoAnalyticsJob for the shared end-to-end body: the pedestrian-tracking example's
VideoAnalyticsJob and its Model (examples/upstream/multi-edge-inference-pedestrian-tracking.yaml)
on the dev cluster.

Its pod runs until the test ends it (the dev cluster's `devcluster.sedna.io/phase`
annotation), so the job stays Running while the body deletes, edits and breaks it."""

from __future__ import annotations

import copy
from typing import Any

from tests.e2e.kindcases import KindCase, env_of, image_of
from tests.e2e.kindcases.reid import JOB_COLUMNS, running_job, set_image

NAME = "video-analytics"
MODEL = "m3l"
POD = f"{NAME}-videoanalytics-0"
SERVICE = f"{NAME}-videoanalytics"
IMAGE = "kubeedge/sedna-example-multi-edge-inference-pedestrian-tracking-videoanalytics:v0.5.0"
EDITED_IMAGE = IMAGE.replace("v0.5.0", "v0.6.0")

_MODEL = {
    "apiVersion": "sedna.io/v1alpha1", "kind": "Model",
    "metadata": {"name": MODEL, "namespace": "default"},
    "spec": {"url": "/data/ai_models/object_detection/pedestrians/yolox.pth", "format": "pth"},
}

_JOB = {
    "apiVersion": "sedna.io/v1alpha1", "kind": "VideoAnalyticsJob",
    "metadata": {"name": NAME, "namespace": "default"},
    "spec": {
        "backoffLimit": 5,
        "kafkaSupport": True,
        "model": {"name": MODEL},
        "template": {"spec": {
            "nodeName": "edge-node-1",
            "restartPolicy": "OnFailure",
            "containers": [{
                "name": "detection", "image": IMAGE, "imagePullPolicy": "Always",
                "env": [{"name": "video_address", "value": "rtsp://7.182.9.110:8554/video"},
                        {"name": "stream_dispatcher_url", "value": "http://7.182.9.110:7000/stream"}],
                "resources": {"limits": {"memory": "2Gi"},
                              "requests": {"cpu": "500m", "memory": "512Mi"}},
            }],
        }},
    },
}


def _edited(pod: dict[str, Any]) -> bool:
    return (image_of(pod) == EDITED_IMAGE and env_of(pod, "MODEL_NAME") == MODEL
            and env_of(pod, "MODEL_URL") == "/home/data" + _MODEL["spec"]["url"])


def _bad_spec(spec: dict[str, Any]) -> None:
    """A pod template without containers."""
    spec["template"]["spec"]["containers"] = []


CASES = [
    KindCase(
        kind="VideoAnalyticsJob",
        manifest=copy.deepcopy(_JOB),
        children={"pods": (POD,), "services": (SERVICE,)},
        worker=("pods", POD),
        edit=set_image(EDITED_IMAGE),
        edited_child=("pods", POD),
        edited=_edited,
        bad_spec=_bad_spec,
        bad_reason="InvalidTemplate",
        prerequisites=(copy.deepcopy(_MODEL),),
        healthy=running_job,
        columns=JOB_COLUMNS,
        notes=("the Model is a local path: MODEL_URL is its hostPath mount under /home/data",),
    ),
]
