"""LifelongLearningJob: the stage machine of gm/kindlib/learning.py without Models or hot update
(the pods shared with IL in gm/kindlib/learningpods.py, its own below).

- No inference pod at the start: `<job>-infer` is created by the first deploy (Deploy/Ready)
  and recreated by every later one, so it loads the knowledge base index the LC copied to
  `<outputDir>/deploy/index.pkl`.
- The train pod `<job>-train-<cycle>` gets `HAS_COMPLETED_INITIAL_TRAINING` and, after the
  first training, `CLOUD_KB_INDEX` = the first output model of the last Train/Completed
  report; the eval pod `<job>-eval-<cycle>` the reported models. Both use the host network
  with dnsPolicy ClusterFirstWithHostNet unless the template sets one.
- Reports also rewrite `status.knowledgeBase` from the output models (below), in a fixed
  order: upstream picks a metric in Go's random map order, so its KB churns.
- Node annotations are not written (see gm/kinds/incrementallearning.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gm.kindlib import learning
from gm.kindlib.learningpods import (
    DEPLOYS_ANNOTATION,
    LearningJob,
    StageInput,
    input_check,
    learning_job,
    learning_pod,
    stage_input,
)
from gm.kube.resources import DATASETS, PODS
from gm.reconcile.declaration import (
    Children,
    Dependencies,
    KindDeclaration,
    Observed,
    Owns,
    uses_datasets,
)
from gm.workers.specerrors import InvalidSpec
from gm.workers.storage import MountURL, WorkerMount
from gm.workers.template import env_value
from shared import apis
from shared.objects import deep_get

API = apis.LIFELONG_LEARNING
KIND = API.kind
NEEDS = {learning.TRAIN: ("dataURL", "outputDir"), learning.EVAL: ("models", "dataURL")}
check_input = input_check(NEEDS)


def resolve(cr: dict, deps: Dependencies) -> LearningJob:
    return learning_job(cr, kind=KIND, datasets=deps.all(DATASETS), secrets=deps.secrets, config=deps.config,
                        dns_policy="ClusterFirstWithHostNet")


def kb_index(status: Mapping[str, Any] | None) -> str | None:
    """The first output model URL of the last Train/Completed report (the cloud KB index)."""
    models = deep_get(learning.completed_data(status, learning.TRAIN), "output", "models") or []
    first = models[0] if isinstance(models, list) and models else None
    url = first.get("url") if isinstance(first, Mapping) else None
    return url if isinstance(url, str) and url else None


def build(cr: dict, deps: Dependencies) -> Children:
    job = resolve(cr, deps)
    pos = learning.advanced(cr, deps.observed(PODS), kind=KIND, hot=False, check=check_input)
    name = job.owner.name
    pods = []
    if pos.deploys > 0:
        pods.append(ll_infer_pod(job, name=learning.infer_pod_name(name), deploys=pos.deploys))
    if pos.running_stage_pod:
        given = stage_input(pos.data, needs=NEEDS[pos.stage])
        pod_name = learning.stage_pod_name(name, pos.stage, pos.cycle)
        if pos.stage == learning.TRAIN:
            old = cr.get("status")
            pods.append(ll_train_pod(job, name=pod_name, given=given, kb_index=kb_index(old),
                                     initial_done=learning.has_completed(old, learning.TRAIN)))
        else:
            pods.append(ll_eval_pod(job, name=pod_name, given=given))
    return {PODS: pods}


def status(cr: dict, observed: Observed) -> dict:
    return learning.learning_status(cr, observed, kind=KIND, hot=False, check=check_input)


def knowledge_base(models: tuple[Mapping[str, Any], ...]) -> dict[str, Any]:
    """`status.knowledgeBase` from a report's output models: classes from the first model; one
    AI model per (model, task) of `current_metric`, sorted by task name, its precision the
    task's first metric by name; the labeled unseen samples summed."""
    ai_models = []
    for model in models:
        samples = model.get("number_of_labeled_unseen_sample") or 0
        current = model.get("current_metric") or {}
        for task in sorted(current) if isinstance(current, Mapping) else ():
            metrics = current[task] if isinstance(current[task], Mapping) else {}
            values = [metrics[k] for k in sorted(metrics) if _number(metrics[k])]
            ai_models.append({"modelID": str(task), "averagePrecision": float(values[0]) if values else 0.0,
                              "numberOfTrainSamples": samples})
    classes = list(models[0].get("classes") or []) if models else []
    return {
        "AIModels": {"numberOfAIModels": len(ai_models), "listOfAIModels": ai_models},
        "AIClasses": {"numberOfAIClasses": len(classes), "listOfAIClasses": classes},
        "samples": {"numberOfLabeledUnseenSample": sum(m.get("number_of_labeled_unseen_sample") or 0
                                                       for m in models),
                    "numberOfUnseenSample": 0},
    }


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def with_knowledge_base(status: dict[str, Any], report: learning.StageReport) -> dict[str, Any]:
    if report.models:
        status["knowledgeBase"] = knowledge_base(report.models)
    return status


# -- the pods -----------------------------------------------------------------------


def ll_train_pod(job: LearningJob, *, name: str, given: StageInput, kb_index: str | None,
                 initial_done: bool) -> dict[str, Any]:
    env = [env_value("HAS_COMPLETED_INITIAL_TRAINING", "true" if initial_done else "false"),
           env_value("LC_SERVER", job.config.lc_server), env_value("KB_SERVER", job.config.kb_server)]
    if initial_done and kb_index:
        env.append(env_value("CLOUD_KB_INDEX", kb_index))
    mounts = [
        WorkerMount("OUTPUT_URL", (MountURL(given.output_dir, download=False, secret=job.job_secret),)),
        WorkerMount("TRAIN_DATASET_URL", (MountURL(given.data_url, download=True, secret=job.job_secret),)),
        WorkerMount("ORIGINAL_DATASET_URL", (job.original_dataset(given),)),
    ]
    return learning_pod(job, name=name, worker_type="train", template_path=("trainSpec", "template"),
                env=env, mounts=mounts, restart="OnFailure")


def ll_eval_pod(job: LearningJob, *, name: str, given: StageInput) -> dict[str, Any]:
    mounts = [
        WorkerMount("MODEL_URLS", tuple(MountURL(u, download=True, secret=job.job_secret)
                                        for u in given.model_urls)),
        WorkerMount("OUTPUT_URL", (MountURL(given.output_dir, download=False, secret=job.job_secret),)),
        WorkerMount("TEST_DATASET_URL", (MountURL(given.data_url, download=True, secret=job.dataset_secret),)),
        WorkerMount("ORIGINAL_DATASET_URL", (job.original_dataset(given),)),
    ]
    env = [env_value("LC_SERVER", job.config.lc_server), env_value("KB_SERVER", job.config.kb_server)]
    return learning_pod(job, name=name, worker_type="eval", template_path=("evalSpec", "template"),
                env=env, mounts=[m for m in mounts if m.urls[0].url], restart="OnFailure")


def ll_infer_pod(job: LearningJob, *, name: str, deploys: int) -> dict[str, Any]:
    output_dir = job.spec.get("outputDir")
    if not isinstance(output_dir, str) or not output_dir:
        raise InvalidSpec("InvalidSpec", "spec.outputDir is required")
    index = MountURL(f"{output_dir.rstrip('/')}/deploy/index.pkl", download=False, secret=job.job_secret)
    env = [env_value("LC_SERVER", job.config.lc_server), env_value("OUTPUT_URL", output_dir)]
    return learning_pod(job, name=name, worker_type="inference", template_path=("deploySpec", "template"),
                env=env, mounts=[WorkerMount("MODEL_URLS", (index,))], restart=None,
                annotations={DEPLOYS_ANNOTATION: str(deploys)})


DECLARATION = KindDeclaration(
    api=API,
    owns=(Owns(PODS, on_edit="recreate"),),
    watches=(uses_datasets(API),),
    build=build,
    status=status,
    controller="lifelonglearningjob",
    component="LifelongLearningJob-controller",
    report=learning.stage_report_rule(with_knowledge_base),
)
