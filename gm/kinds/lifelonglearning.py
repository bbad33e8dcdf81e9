"""LifelongLearningJob: the stage machine of gm/kinds/learning.py without Models or hot update
(builders in gm/workers/learning.py).

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

from gm.kinds import learning
from gm.kube.resources import DATASETS, PODS
from gm.reconcile.declaration import (
    Children,
    Dependencies,
    KindDeclaration,
    Observed,
    Owns,
    uses_datasets,
)
from gm.workers.learning import (
    LearningJob,
    input_check,
    learning_job,
    ll_eval_pod,
    ll_infer_pod,
    ll_train_pod,
    stage_input,
)
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
