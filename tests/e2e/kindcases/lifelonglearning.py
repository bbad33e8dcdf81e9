"""LifelongLearningJob: it has no pod until its first deploy, so the case reports Deploy/Ready
as the LC would once the job waits; its child is then the inference pod (a whole cycle is
tests/e2e/test_gm_learning.py)."""

from __future__ import annotations

from typing import Any

from gm.kinds import lifelonglearning
from gm.kube.apierrors import Conflict
from gm.kube.resources import sedna_gvr
from shared import apis
from shared.objects import now_rfc3339
from tests.conftest import eventually
from tests.e2e.conftest import load_example
from tests.e2e.kindcases import KindCase, env_of

DOCS = load_example("lifelong-learning-atcii.yaml")
LL = next(d for d in DOCS if d["kind"] == "LifelongLearningJob")
# PyYAML reads the unquoted 02:00 as a base-60 integer; Kubernetes keeps it a string
LL["spec"]["trainSpec"]["trigger"]["timer"] = {"start": "02:00", "end": "24:00"}
NAME = LL["metadata"]["name"]
INFER = f"{NAME}-infer"
GVR = sedna_gvr(apis.LIFELONG_LEARNING)
DEPLOY_READY = {"phase": "deploy", "status": "ready",
                "input": {"models": [{"format": "pkl", "url": "/output/eval/1/index.pkl"}]}, "output": None}


async def report_deploy_ready(api: Any, cr: dict[str, Any]) -> None:
    """Once the GM has the job waiting, apply the LC's Deploy/Ready report through the kind's
    own report rule (a status write, as the GM's report handler makes)."""
    ns = cr["metadata"]["namespace"]

    async def waiting() -> dict | None:
        now = await api.get(GVR, NAME, namespace=ns)
        return now if (now.get("status") or {}).get("conditions") else None

    mutate = lifelonglearning.DECLARATION.report(DEPLOY_READY, now_rfc3339())
    for _ in range(10):
        current = await eventually(waiting, within=15.0, message="the GM's first status")
        current["status"] = mutate(dict(current["status"]))
        try:
            await api.replace(GVR, NAME, current, namespace=ns, subresource="status")
            return
        except Conflict:
            continue
    raise AssertionError("could not write the Deploy/Ready report: conflicts")


def _edit(spec: dict) -> None:
    spec["deploySpec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = "/ut_saved_url_v2"


def _no_dataset(spec: dict) -> None:
    spec["dataset"]["name"] = "no-such-dataset"


CASES = [
    KindCase(
        kind="LifelongLearningJob",
        manifest=LL,
        prerequisites=tuple(d for d in DOCS if d["kind"] == "Dataset"),
        children={"pods": (INFER,)},
        worker=("pods", INFER),
        edit=_edit,
        edited_child=("pods", INFER),
        edited=lambda pod: env_of(pod, "UT_SAVED_URL") == "/ut_saved_url_v2",
        bad_spec=_no_dataset,
        bad_reason="DatasetNotFound",
        healthy=lambda status: (status.get("deploys") or 0) >= 1,
        columns=("NAME", "STAGE", "STATUS", "AGE"),
        failed_type="Waiting",
        started=report_deploy_ready,
    ),
]
