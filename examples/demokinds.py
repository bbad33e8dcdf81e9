"""The kinds examples/demo.py walks through: for each, upstream's example it applies, the worker
whose report it posts and where that report shows in the CR's status, the pod template it edits
and the worker that must show the edit, and the worker pod it deletes by hand.

Data and pure functions only (the demo does the I/O). Every CR is upstream's example as shipped,
except where a note says why: the learning jobs' train triggers are checked every second at any
time of day (the examples' 60 s period and 02:00-20:00 timer would make the demo slow and
clock-dependent), and in the learning jobs of the scenarios one stage's worker runs no simulated
process, because the demo plays that worker: a learning worker's report moves the job's stage,
so a second, simulated one would move it back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

EXAMPLES = Path(__file__).resolve().parent / "upstream"
SUPPORT_KINDS = ("Model", "Dataset", "Secret")
EDIT_ENV = {"name": "DEMO_EDIT", "value": "2"}
# an image the dev cluster's process runtime has no command for: its pods run, no process in them
NO_PROCESS_IMAGE = "sedna-demo/played-by-the-demo:v1"
MARK = 4242  # what the demo's reports carry, to find them in the status

Docs = list[dict[str, Any]]
Status = dict[str, Any]


@dataclass(frozen=True)
class Worker:
    """A worker of a CR: a pod by name, the pods of a Deployment, or a pod whose name starts so."""

    name: str
    deployment: bool = False
    prefix: bool = False

    def matches(self, pod: dict[str, Any]) -> bool:
        name = pod["metadata"]["name"]
        if self.deployment or self.prefix:
            return name.startswith(self.name + ("-" if self.deployment else ""))
        return name == self.name


@dataclass(frozen=True)
class Report:
    """What the demo's worker posts (built from its pod) and how the CR's status shows it."""

    body: Callable[[dict[str, Any]], dict[str, Any]]  # pod -> report body, without name/namespace
    shows: Callable[[Status], bool]
    where: str  # where the status shows it, for the table


@dataclass(frozen=True)
class KindDemo:
    kind: str
    plural: str
    short: str  # kubectl's short name; the namespace is demo-<short>
    example: str
    name: str
    template: str  # JSON pointer to the pod template the edit changes
    edited: Worker
    healed: Worker
    reporter: Worker
    report: Report
    tweak: Callable[[Docs], None] | None = None

    @property
    def namespace(self) -> str:
        return f"demo-{self.short}"

    def docs(self) -> Docs:
        """The example's CR of this kind and the Models/Datasets it needs, tweaked."""
        docs = [d for d in load(self.example) if d["kind"] in SUPPORT_KINDS or d["kind"] == self.kind]
        for doc in docs:  # the namespace is the demo's
            doc["metadata"].pop("namespace", None)
        if self.tweak is not None:
            self.tweak(docs)
        return docs

    def edit_patch(self, docs: Docs) -> list[dict[str, Any]]:
        """A JSON patch adding DEMO_EDIT to the env of the first container of the template."""
        cr = next(d for d in docs if d["kind"] == self.kind)
        container = resolve(cr, self.template + "/spec/containers/0")
        path = f"{self.template}/spec/containers/0/env"
        if container.get("env"):
            return [{"op": "add", "path": path + "/-", "value": EDIT_ENV}]
        return [{"op": "add", "path": path, "value": [EDIT_ENV]}]


def load(example: str) -> Docs:
    return [d for d in yaml.safe_load_all((EXAMPLES / example).read_text(encoding="utf-8")) if d]


def resolve(obj: Any, pointer: str) -> Any:
    for part in pointer.strip("/").split("/"):
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def has_edit(pod_spec: dict[str, Any]) -> bool:
    return EDIT_ENV in ((pod_spec.get("containers") or [{}])[0].get("env") or [])


def env_of(pod: dict[str, Any], name: str) -> str:
    for entry in pod["spec"]["containers"][0].get("env") or ():
        if entry.get("name") == name:
            return str(entry.get("value") or "")
    return ""


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


# -- reports ---------------------------------------------------------------------------


def metrics(owner_kind: str, counts: dict[str, int], **extra: Any) -> Report:
    """A statistics report (inference and job workers): its ownerInfo becomes status.metrics."""
    def body(pod: dict[str, Any]) -> dict[str, Any]:
        return {"ownerKind": owner_kind, "kind": "inference", **extra,
                "ownerInfo": {"startTime": stamp(), "updateTime": stamp(), **counts}}

    def shows(status: Status) -> bool:
        shown = {m.get("key"): m.get("value") for m in status.get("metrics") or ()}
        return all(shown.get(k) == str(v) for k, v in counts.items())
    return Report(body, shows, "status.metrics")


def training_round(round_: int) -> Report:
    """A federated trainer's round report: the Training condition names the round."""
    def body(pod: dict[str, Any]) -> dict[str, Any]:
        return {"ownerKind": "federatedlearningjob", "kind": "train", "status": "running",
                "results": [{"format": "pb", "url": "/model/model.pb", "metrics": {"loss": [0.42]}}],
                "ownerInfo": {"currentRound": round_, "sampleCount": 1200, "startTime": stamp(),
                              "updateTime": stamp()}}

    def shows(status: Status) -> bool:
        return any(c.get("type") == "Training" and str(c.get("message", "")).startswith(f"Round {round_} ")
                   for c in status.get("conditions") or ())
    return Report(body, shows, "the Training condition")


def node_path(pod: dict[str, Any], value: str) -> str:
    """A path the GM gave the worker, as the worker library reports it: without DATA_PATH_PREFIX."""
    prefix = env_of(pod, "DATA_PATH_PREFIX").rstrip("/")
    value = value.rstrip("/")
    return value[len(prefix):] if prefix and value.startswith(prefix + "/") else value


def completed(stage: str) -> Callable[[Status], bool]:
    """A `<stage>` Completed condition carrying the demo's mark."""
    def shows(status: Status) -> bool:
        return any(c.get("stage") == stage and c.get("type") == "Completed" and str(MARK) in json.dumps(c)
                   for c in status.get("conditions") or ())
    return shows


def il_train_completed(pod: dict[str, Any]) -> dict[str, Any]:
    """The IL train worker's completion: the model it wrote under MODEL_URL (pb and ckpt)."""
    out = node_path(pod, env_of(pod, "MODEL_URL"))
    metrics_ = {"loss": MARK / 10000}
    return {"ownerKind": "incrementallearningjob", "kind": "train", "status": "completed",
            "results": [{"format": "pb", "url": f"{out}/model.pb", "metrics": metrics_},
                        {"format": "ckpt", "url": out, "metrics": metrics_}]}


def ll_eval_completed(pod: dict[str, Any]) -> dict[str, Any]:
    """The LL eval worker's completion: a score for each model of MODEL_URLS."""
    score = MARK / 10000
    results = [{"format": "pkl", "url": node_path(pod, url), "metrics": {"precision_score": [score]},
                "current_metric": {"task0": {"precision_score": score}},
                "classes": ["comfortable", "neutral", "uncomfortable"], "number_of_labeled_unseen_sample": 0}
               for url in env_of(pod, "MODEL_URLS").split(";") if url]
    return {"ownerKind": "lifelonglearningjob", "kind": "eval", "status": "completed", "results": results}


# -- tweaks ----------------------------------------------------------------------------


def fast_trigger(docs: Docs, kind: str) -> dict[str, Any]:
    """The train trigger checked every second, at any time of day; the job's spec."""
    spec = next(d for d in docs if d["kind"] == kind)["spec"]
    trigger = spec["trainSpec"]["trigger"]
    trigger["checkPeriodSeconds"] = 1
    trigger.pop("timer", None)
    return spec


def il_cycle(docs: Docs) -> None:
    """Upstream's IL example for a whole cycle: fast train trigger, the deploy Model polled every
    second; the deploy trigger as shipped (`precision_delta`, a list, named without an index)."""
    fast_trigger(docs, "IncrementalLearningJob")["deploySpec"]["model"]["pollPeriodSeconds"] = 1


def il_scenarios(docs: Docs) -> None:
    """The demo plays the train worker (its report is the one to see), in an output dir of its own."""
    spec = fast_trigger(docs, "IncrementalLearningJob")
    spec["trainSpec"]["template"]["spec"]["containers"][0]["image"] = NO_PROCESS_IMAGE
    spec["outputDir"] = "/output/demo-scenarios"


def ll_scenarios(docs: Docs) -> None:
    """The demo plays the eval worker (its report is the one to see)."""
    spec = fast_trigger(docs, "LifelongLearningJob")
    spec["evalSpec"]["template"]["spec"]["containers"][0]["image"] = NO_PROCESS_IMAGE


def il_cycle_docs() -> Docs:
    docs = load("incremental-learning-helmet-detection.yaml")
    for doc in docs:
        doc["metadata"].pop("namespace", None)
    il_cycle(docs)
    return docs


# -- the kinds -------------------------------------------------------------------------

JI = "helmet-detection-inference-example"
FL = "surface-defect-detection"
IL = "helmet-detection-demo"
LL = "atcii-classifier-demo"
PEDESTRIAN = "multi-edge-inference-pedestrian-tracking.yaml"

KINDS: tuple[KindDemo, ...] = (
    KindDemo("JointInferenceService", "jointinferenceservices", "ji", "joint-inference-helmet-detection.yaml", JI,
             "/spec/edgeWorker/template", Worker(f"{JI}-deployment-edge", deployment=True),
             Worker(f"{JI}-deployment-edge", deployment=True), Worker(f"{JI}-deployment-edge", deployment=True),
             metrics("jointinferenceservice", {"inferenceNumber": MARK, "hardExampleNumber": 42}, results=[])),
    KindDemo("FederatedLearningJob", "federatedlearningjobs", "fl", "federated-learning-surface-defect.yaml", FL,
             "/spec/trainingWorkers/0/template", Worker(f"{FL}-trainworker-0"), Worker(f"{FL}-trainworker-1"),
             Worker(f"{FL}-trainworker-0"), training_round(42)),
    KindDemo("IncrementalLearningJob", "incrementallearningjobs", "il", "incremental-learning-helmet-detection.yaml",
             IL, "/spec/deploySpec/template", Worker(f"{IL}-infer"), Worker(f"{IL}-infer"),
             Worker(f"{IL}-train-", prefix=True),
             Report(il_train_completed, completed("Train"), "the Train/Completed condition"), il_scenarios),
    KindDemo("LifelongLearningJob", "lifelonglearningjobs", "ll", "lifelong-learning-atcii.yaml", LL,
             "/spec/deploySpec/template", Worker(f"{LL}-infer"), Worker(f"{LL}-infer"),
             Worker(f"{LL}-eval-", prefix=True),
             Report(ll_eval_completed, completed("Eval"), "the Eval/Completed condition"), ll_scenarios),
    KindDemo("FeatureExtractionService", "featureextractionservices", "fe", PEDESTRIAN, "feature-extraction",
             "/spec/template", Worker("feature-extraction-deployment-fe", deployment=True),
             Worker("feature-extraction-deployment-fe", deployment=True),
             Worker("feature-extraction-deployment-fe", deployment=True),
             metrics("featureextractionservice", {"frameNumber": MARK, "featureNumber": 42})),
    KindDemo("ObjectSearchService", "objectsearchservices", "objs", "object-search-pedestrian.yaml",
             "pedestrian-search", "/spec/trackingWorkers/0/template", Worker("pedestrian-search-trackingworker-0"),
             Worker("pedestrian-search-trackingworker-1"), Worker("pedestrian-search-trackingworker-0"),
             metrics("objectsearchservice", {"trackedObjects": MARK})),
    KindDemo("ObjectTrackingService", "objecttrackingservices", "objt", "object-tracking-pedestrian.yaml",
             "pedestrian-tracking", "/spec/trackingWorkers/0/template",
             Worker("pedestrian-tracking-trackingworker-0"), Worker("pedestrian-tracking-trackingworker-1"),
             Worker("pedestrian-tracking-trackingworker-0"), metrics("objecttrackingservice", {"trackedObjects": MARK})),
    KindDemo("ReidJob", "reidjobs", "reid", PEDESTRIAN, "reid", "/spec/template", Worker("reid-reid-0"),
             Worker("reid-reid-0"), Worker("reid-reid-0"),
             metrics("reidjob", {"queryNumber": MARK, "matchNumber": 42}, status="running")),
    KindDemo("VideoAnalyticsJob", "videoanalyticsjobs", "va", PEDESTRIAN, "video-analytics", "/spec/template",
             Worker("video-analytics-videoanalytics-0"), Worker("video-analytics-videoanalytics-0"),
             Worker("video-analytics-videoanalytics-0"),
             metrics("videoanalyticsjob", {"frameNumber": MARK, "detectionNumber": 42}, status="running")),
)
