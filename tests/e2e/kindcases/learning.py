"""The two kinds that came first, JointInferenceService and FederatedLearningJob, held to the
same promises as every other kind (their own deeper tests are test_gm_ji.py and test_gm_fl.py)."""

from __future__ import annotations

from tests.e2e.conftest import load_example
from tests.e2e.kindcases import KindCase, env_of, image_of

JI_DOCS = load_example("joint-inference-helmet-detection.yaml")
JI = next(d for d in JI_DOCS if d["kind"] == "JointInferenceService")
JI_NAME = JI["metadata"]["name"]
FL_DOCS = load_example("federated-learning-surface-defect.yaml")
FL = next(d for d in FL_DOCS if d["kind"] == "FederatedLearningJob")
FL_NAME = FL["metadata"]["name"]


def _ji_edit(spec: dict) -> None:
    spec["edgeWorker"]["hardExampleMining"]["parameters"][0]["value"] = "0.5"


def _ji_unknown_model(spec: dict) -> None:
    spec["edgeWorker"]["model"]["name"] = "no-such-model"


def _fl_edit(spec: dict) -> None:
    spec["trainingWorkers"][0]["template"]["spec"]["containers"][0]["image"] = "example/trainer:v2"


def _fl_no_trainers(spec: dict) -> None:
    spec["trainingWorkers"] = []


def _conditions(status: dict) -> set[str]:
    return {c["type"] for c in status.get("conditions") or () if c.get("status") == "True"}


CASES = [
    KindCase(
        kind="JointInferenceService",
        manifest=JI,
        prerequisites=tuple(d for d in JI_DOCS if d["kind"] == "Model"),
        children={"deployments": (f"{JI_NAME}-deployment-edge", f"{JI_NAME}-deployment-cloud"),
                  "services": (f"{JI_NAME}-cloud",)},
        worker=("deployments", f"{JI_NAME}-deployment-edge"),
        edit=_ji_edit,
        edited_child=("deployments", f"{JI_NAME}-deployment-edge"),
        edited=lambda dep: '"0.5"' in (env_of(dep, "HEM_PARAMETERS") or ""),
        bad_spec=_ji_unknown_model,
        bad_reason="ModelNotFound",
        healthy=lambda status: "Running" in _conditions(status),
        columns=("NAME", "STATUS", "ACTIVE", "FAILED", "AGE"),
        failed_type="Pending",
    ),
    KindCase(
        kind="FederatedLearningJob",
        manifest=FL,
        prerequisites=tuple(d for d in FL_DOCS if d["kind"] in ("Model", "Dataset")),
        children={"pods": (f"{FL_NAME}-aggworker", f"{FL_NAME}-trainworker-0", f"{FL_NAME}-trainworker-1"),
                  "services": (f"{FL_NAME}-aggregation",)},
        worker=("pods", f"{FL_NAME}-trainworker-1"),
        edit=_fl_edit,
        edited_child=("pods", f"{FL_NAME}-trainworker-0"),
        edited=lambda pod: image_of(pod) == "example/trainer:v2",
        bad_spec=_fl_no_trainers,
        bad_reason="InvalidSpec",
        healthy=lambda status: status.get("phase") == "Running",
        columns=("NAME", "PHASE", "ACTIVE", "SUCCEEDED", "FAILED", "AGE"),
    ),
]
