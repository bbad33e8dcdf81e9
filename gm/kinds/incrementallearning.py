"""IncrementalLearningJob: the stage machine of gm/kindlib/learning.py driving train, eval and
inference pods (the pods shared with LL in gm/kindlib/learningpods.py, its own below).

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

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
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
from gm.workers.gojson import hem_parameters
from gm.workers.inputs import mount_of, ref_name, required
from gm.workers.owned import Owner
from gm.workers.specerrors import InvalidSpec
from gm.workers.storage import MountURL, WorkerMount
from gm.workers.template import env_value
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


# -- the pods -----------------------------------------------------------------------

HOT_UPDATE_HOST_DIR = "/var/lib/sedna/model-hot-update"
HOT_UPDATE_MOUNT = "/model-hot-update"
HOT_UPDATE_VOLUME = "sedna-model-hot-update-volume"
HOT_UPDATE_FILE = "model_config.json"
DEFAULT_POLL_PERIOD = 60


@dataclass(frozen=True, slots=True)
class ILModels:
    """The Models an IL job names, found."""

    initial: Mapping[str, Any]
    deploy: Mapping[str, Any]


def _input_model(job: LearningJob, models: ILModels, url: str) -> MountURL:
    """An input model URL: the initial Model's Secret when it is the initial Model, else the job's."""
    initial = mount_of(models.initial, kind="Model", secrets=job.secrets, namespace=job.owner.namespace)
    secret = initial.secret if url == initial.url else job.job_secret
    return MountURL(url=url, download=True, secret=secret)


def il_train_pod(job: LearningJob, models: ILModels, *, name: str, given: StageInput) -> dict[str, Any]:
    mounts = [
        WorkerMount("BASE_MODEL_URL", (_input_model(job, models, given.model_urls[0]),)),
        WorkerMount("MODEL_URL", (MountURL(given.output_dir, download=False, secret=job.job_secret),)),
        WorkerMount("TRAIN_DATASET_URL", (MountURL(given.data_url, download=True, secret=job.job_secret),)),
        WorkerMount("ORIGINAL_DATASET_URL", (job.original_dataset(given),)),
    ]
    return learning_pod(job, name=name, worker_type="train", template_path=("trainSpec", "template"),
                env=[env_value("LC_SERVER", job.config.lc_server)], mounts=mounts, restart="OnFailure")


def il_eval_pod(job: LearningJob, models: ILModels, *, name: str, given: StageInput) -> dict[str, Any]:
    mounts = [
        WorkerMount("MODEL_URLS", tuple(_input_model(job, models, u) for u in given.model_urls)),
        WorkerMount("TEST_DATASET_URL", (MountURL(given.data_url, download=True, secret=job.dataset_secret),)),
        WorkerMount("ORIGINAL_DATASET_URL", (job.original_dataset(given),)),
    ]
    return learning_pod(job, name=name, worker_type="eval", template_path=("evalSpec", "template"),
                env=[env_value("LC_SERVER", job.config.lc_server)], mounts=mounts, restart="OnFailure")


def hot_update_config_path(owner: Owner) -> str:
    """Where the LC writes the model config a hot-updating inference worker polls (§4.5)."""
    return posixpath.join(HOT_UPDATE_HOST_DIR, owner.namespace, owner.kind, owner.name, HOT_UPDATE_FILE).lower()


def il_infer_pod(job: LearningJob, models: ILModels, *, name: str, deploys: int) -> dict[str, Any]:
    deploy = job.spec.get("deploySpec") or {}
    hem = deploy.get("hardExampleMining")
    if not isinstance(hem, Mapping) or not isinstance(hem.get("name"), str) or not hem["name"]:
        raise InvalidSpec("InvalidSpec", "spec.deploySpec.hardExampleMining.name is required")
    model = mount_of(models.deploy, kind="Model", secrets=job.secrets, namespace=job.owner.namespace)
    env = [env_value("HEM_NAME", hem["name"]), env_value("HEM_PARAMETERS", hem_parameters(hem.get("parameters"))),
           env_value("LC_SERVER", job.config.lc_server)]
    volumes = None
    if deep_get(deploy, "model", "hotUpdateEnabled") is True:
        env += [env_value("MODEL_HOT_UPDATE", "true"),
                env_value("MODEL_POLL_PERIOD_SECONDS", str(_poll_period(deploy))),
                env_value("MODEL_HOT_UPDATE_CONFIG", posixpath.join(HOT_UPDATE_MOUNT, HOT_UPDATE_FILE))]
        host_dir = posixpath.dirname(hot_update_config_path(job.owner)) + "/"
        volumes = ({"name": HOT_UPDATE_VOLUME, "hostPath": {"path": host_dir, "type": "DirectoryOrCreate"}},
                   {"name": HOT_UPDATE_VOLUME, "mountPath": HOT_UPDATE_MOUNT})
    return learning_pod(job, name=name, worker_type="inference", template_path=("deploySpec", "template"),
                env=env, mounts=[WorkerMount("MODEL_URL", (model,))], restart=None,
                annotations={DEPLOYS_ANNOTATION: str(deploys)}, volumes=volumes)


def _poll_period(deploy: Mapping[str, Any]) -> int:
    value = deep_get(deploy, "model", "pollPeriodSeconds")
    if value is None:
        return DEFAULT_POLL_PERIOD
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidSpec("InvalidSpec", "spec.deploySpec.model.pollPeriodSeconds must be an integer >= 1")
    return value


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
