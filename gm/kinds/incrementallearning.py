"""IncrementalLearningJob: the stage machine of gm/kinds/learning.py driving train, eval and
inference pods (builders in gm/workers/learning.py).

- The inference pod `<job>-infer` exists from the start (upstream creates it at the first
  sync) and is recreated on every deploy without hot update (Deploy/Ready), so it loads the
  model the LC copied to the deploy Model's URL. With `deploySpec.model.hotUpdateEnabled` it
  is left running: Deploy/Ready -> Starting -> Running once the pod runs; the LC writes the
  new model config and the worker's `deploy` report completes the stage.
- The train pod `<job>-train-<cycle>` and the eval pod `<job>-eval-<cycle>` exist while their
  stage is Starting or Running; they are built from the Ready report's input and recreated
  if deleted or if their template is edited meanwhile.
- The job needs its Dataset, its initial Model, its deploy Model and, when named, its
  initial eval Model (all sent to the edge with it): a missing one is the Failed condition.
- The node annotations `sedna.io/Train|Eval|Deploy` are not written: upstream's GM reads
  them to route the job, our GM places it from the stages and the live pods
  (shared/apis.py), and the LC does not read them. With hot update, the copy of the job sent
  to the edge carries upstream's `sedna.io/model-hot-update-config` annotation (the path of
  the config the LC rewrites and the worker polls), as upstream's LC expects; the CR itself
  is not annotated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gm.kinds import learning
from gm.kube.resources import DATASETS, MODELS, PODS
from gm.reconcile.declaration import (
    Children,
    Dependencies,
    KindDeclaration,
    Observed,
    Owns,
    uses_datasets,
    uses_models,
)
from gm.workers.children import Owner
from gm.workers.inputs import ref_name, required
from gm.workers.learning import (
    ILModels,
    LearningJob,
    hot_update_config_path,
    il_eval_pod,
    il_infer_pod,
    il_train_pod,
    input_check,
    learning_job,
    stage_input,
)
from shared import apis
from shared.objects import deep_get

API = apis.INCREMENTAL_LEARNING
HOT_UPDATE_ANNOTATION = "sedna.io/model-hot-update-config"  # upstream's, on the job the LC gets
KIND = API.kind
NEEDS = {learning.TRAIN: ("models", "dataURL", "outputDir"), learning.EVAL: ("models", "dataURL")}
check_input = input_check(NEEDS)


def hot(cr: dict) -> bool:
    return deep_get(cr, "spec", "deploySpec", "model", "hotUpdateEnabled") is True


def resolve(cr: dict, deps: Dependencies) -> tuple[LearningJob, ILModels]:
    """The job's Dataset and Models (MissingDependency when absent), its templates checked."""
    job = learning_job(cr, kind=KIND, datasets=deps.all(DATASETS), secrets=deps.secrets, config=deps.config)
    spec, ns = job.spec, job.owner.namespace

    def model(*path: str) -> dict:
        name = ref_name(spec, *path, where="spec." + ".".join(path))
        return dict(required(deps.get(MODELS, name), kind="Model", name=name, namespace=ns))

    models = ILModels(initial=model("initialModel"), deploy=model("deploySpec", "model"))
    if deep_get(spec, "evalSpec", "initialEvalModel") is not None:
        model("evalSpec", "initialEvalModel")
    return job, models


def build(cr: dict, deps: Dependencies) -> Children:
    job, models = resolve(cr, deps)
    pos = learning.advanced(cr, deps.observed(PODS), kind=KIND, hot=hot(cr), check=check_input)
    name = job.owner.name
    pods = [il_infer_pod(job, models, name=learning.infer_pod_name(name), deploys=pos.deploys)]
    if pos.running_stage_pod:
        given = stage_input(pos.data, needs=NEEDS[pos.stage])
        builder = il_train_pod if pos.stage == learning.TRAIN else il_eval_pod
        pods.append(builder(job, models, name=learning.stage_pod_name(name, pos.stage, pos.cycle), given=given))
    return {PODS: pods}


def status(cr: dict, observed: Observed) -> dict:
    return learning.learning_status(cr, observed, kind=KIND, hot=hot(cr), check=check_input)


def edge_annotations(cr: Mapping[str, Any]) -> dict[str, str]:
    """Upstream's hot-update annotation on the copy sent down, when the job hot-updates."""
    meta = cr.get("metadata") or {}
    name, namespace = meta.get("name"), meta.get("namespace")
    if not hot(dict(cr)) or not isinstance(name, str) or not isinstance(namespace, str):
        return {}
    owner = Owner(kind=KIND, name=name, namespace=namespace, uid=str(meta.get("uid") or ""))
    return {HOT_UPDATE_ANNOTATION: hot_update_config_path(owner)}


DECLARATION = KindDeclaration(
    api=API,
    owns=(Owns(PODS, on_edit="recreate"),),
    watches=(uses_models(API), uses_datasets(API)),
    build=build,
    status=status,
    controller="incrementallearningjob",
    component="IncrementalLearningJob-controller",
    report=learning.stage_report_rule(),
    edge_annotations=edge_annotations,
)
