"""IncrementalLearningJob: right after creation its child is the inference pod (the train and
eval pods wait on the LC's trigger reports; tests/e2e/test_gm_learning.py drives a cycle)."""

from __future__ import annotations

from tests.e2e.conftest import load_example
from tests.e2e.kindcases import KindCase, env_of

DOCS = load_example("incremental-learning-helmet-detection.yaml")
IL = next(d for d in DOCS if d["kind"] == "IncrementalLearningJob")
# PyYAML reads the unquoted 02:00 as a base-60 integer; Kubernetes keeps it a string
IL["spec"]["trainSpec"]["trigger"]["timer"] = {"start": "02:00", "end": "20:00"}
NAME = IL["metadata"]["name"]
INFER = f"{NAME}-infer"


def _edit(spec: dict) -> None:
    spec["deploySpec"]["hardExampleMining"]["parameters"][0]["value"] = "0.5"


def _unknown_model(spec: dict) -> None:
    spec["initialModel"]["name"] = "no-such-model"


def _current(status: dict) -> tuple[str, str] | None:
    conditions = status.get("conditions") or []
    last = conditions[-1] if conditions else {}
    return (last.get("stage"), last.get("type")) if last.get("status") == "True" else None


CASES = [
    KindCase(
        kind="IncrementalLearningJob",
        manifest=IL,
        prerequisites=tuple(d for d in DOCS if d["kind"] in ("Model", "Dataset")),
        children={"pods": (INFER,)},
        worker=("pods", INFER),
        edit=_edit,
        edited_child=("pods", INFER),
        edited=lambda pod: '"0.5"' in (env_of(pod, "HEM_PARAMETERS") or ""),
        bad_spec=_unknown_model,
        bad_reason="ModelNotFound",
        healthy=lambda status: _current(status) == ("Train", "Waiting"),
        columns=("NAME", "STAGE", "STATUS", "AGE"),
        failed_type="Waiting",
    ),
]
