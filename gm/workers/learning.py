"""IncrementalLearningJob and LifelongLearningJob -> their train, eval and inference Pods.

Env and mounts follow upstream's createPod/createInferPod (spec/upstream-gm.md §3.4, §3.5,
§4.5): the train and eval pods are built from the stage input the LC reported with `Ready`
(`{"input": {"models", "dataURL", "dataIndexURL", "outputDir"}}`), on the host network with
restartPolicy OnFailure unless the template says otherwise. Departures:
- Names are deterministic (`<job>-train-<cycle>`, `<job>-eval-<cycle>`, `<job>-infer`) and
  `WORKER_NAME` is the pod's own name (Downward API), so the GM finds a stage's pod by its
  worker-type label and name instead of parsing random names.
- An input that lacks what the pod needs is an `InvalidSpec("InvalidInput")`, never a crash
  (upstream indexes the model list blindly).
- The inference pod carries the `sedna.io/deploys` annotation: a deploy (without hot
  update) changes it, so the pod is recreated and loads the deployed model.
Env order is fixed, so an unchanged spec and input build byte-identical pods.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gm.workers.children import Owner, build_pod, owner_of
from gm.workers.config import WorkerConfig
from gm.workers.errors import InvalidSpec
from gm.workers.inputs import Secrets, credential, mount_of, ref_name, required, source_url
from gm.workers.jointinference import hem_parameters
from gm.workers.storage import MountURL, WorkerMount, plan_storage
from gm.workers.template import PodKnobs, checked_template, env_field, env_value, render_template
from shared.objects import deep_get

DEPLOYS_ANNOTATION = "sedna.io/deploys"
HOT_UPDATE_HOST_DIR = "/var/lib/sedna/model-hot-update"
HOT_UPDATE_MOUNT = "/model-hot-update"
HOT_UPDATE_VOLUME = "sedna-model-hot-update-volume"
HOT_UPDATE_FILE = "model_config.json"
DEFAULT_POLL_PERIOD = 60


@dataclass(frozen=True, slots=True)
class StageInput:
    """A stage's input as the LC reported it with Ready."""

    model_urls: tuple[str, ...]
    data_url: str
    data_index_url: str
    output_dir: str


def stage_input(data: str, *, needs: tuple[str, ...]) -> StageInput:
    """The `input` of a Ready condition's data; `needs` names the fields the pod cannot do
    without ("models", "dataURL", "outputDir"). InvalidSpec("InvalidInput") otherwise."""
    try:
        parsed = json.loads(data) if data else None
    except ValueError:
        raise InvalidSpec("InvalidInput", "the reported stage data is not JSON") from None
    given = parsed.get("input") if isinstance(parsed, Mapping) else None
    if not isinstance(given, Mapping):
        raise InvalidSpec("InvalidInput", "the reported stage data has no input")
    models = given.get("models") or []
    if not isinstance(models, list) or not all(isinstance(m, Mapping) for m in models):
        raise InvalidSpec("InvalidInput", "input.models must be a list of models")
    urls = tuple(m.get("url") for m in models)
    if not all(isinstance(u, str) and u for u in urls):
        raise InvalidSpec("InvalidInput", "every input model needs a url")
    found = StageInput(model_urls=urls, data_url=_text(given, "dataURL"),
                       data_index_url=_text(given, "dataIndexURL"), output_dir=_text(given, "outputDir"))
    present = {"models": bool(urls), "dataURL": bool(found.data_url), "outputDir": bool(found.output_dir)}
    missing = [n for n in needs if not present[n]]
    if missing:
        raise InvalidSpec("InvalidInput", f"the reported input lacks {', '.join('input.' + m for m in missing)}")
    return found


def _text(given: Mapping[str, Any], key: str) -> str:
    value = given.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidSpec("InvalidInput", f"input.{key} must be a string")
    return value or ""


@dataclass(frozen=True, slots=True)
class LearningJob:
    """What every pod of one job shares, resolved once (`learning_job`)."""

    owner: Owner
    spec: Mapping[str, Any]
    dataset: Mapping[str, Any]
    secrets: Secrets | None
    config: WorkerConfig
    job_secret: Mapping | None  # spec.credentialName: outputs and stage artifacts
    dataset_secret: Mapping | None  # the Dataset's credentialName
    dns_policy: str | None = None  # LL: ClusterFirstWithHostNet

    def original_dataset(self, given: StageInput) -> MountURL:
        """The dataset (or the reported index of it), marked indirect when it is the index."""
        url = source_url(self.dataset, kind="Dataset")
        chosen = given.data_index_url or url
        return MountURL(url=chosen, download=True, indirect=chosen != url, secret=self.dataset_secret)


TEMPLATES = (("trainSpec", "template"), ("evalSpec", "template"), ("deploySpec", "template"))


def learning_job(cr: Mapping[str, Any], *, kind: str, datasets: Mapping[str, Mapping[str, Any]],
                 secrets: Secrets | None, config: WorkerConfig, dns_policy: str | None = None) -> LearningJob:
    """The job's shared inputs: its Dataset and named Secrets (MissingDependency when absent),
    its three templates checked, so a bad spec is found before any stage needs it."""
    owner = owner_of(cr, kind=kind)
    spec = cr["spec"]
    ns = owner.namespace
    ds_name = ref_name(spec, "dataset", where="spec.dataset")
    dataset = required(datasets.get(ds_name), kind="Dataset", name=ds_name, namespace=ns)
    for path in TEMPLATES:
        checked_template(deep_get(spec, *path), where="spec." + ".".join(path))
    return LearningJob(
        owner=owner, spec=spec, dataset=dataset, secrets=secrets, config=config,
        job_secret=credential(spec.get("credentialName"), secrets=secrets, namespace=ns),
        dataset_secret=credential(deep_get(dataset, "spec", "credentialName"), secrets=secrets, namespace=ns),
        dns_policy=dns_policy)


def input_check(needs: Mapping[str, tuple[str, ...]]) -> Callable[[str, str], str | None]:
    """Why a stage's Ready data cannot make its pod (None when it can), for the stage machine."""
    def check(stage: str, data: str) -> str | None:
        try:
            stage_input(data, needs=needs[stage])
        except InvalidSpec as exc:
            return exc.message
        return None
    return check


def _pod(job: LearningJob, *, name: str, worker_type: str, template_path: tuple[str, ...],
         env: list[dict[str, Any]], mounts: list[WorkerMount], restart: str | None,
         annotations: Mapping[str, str] | None = None,
         volumes: tuple[dict[str, Any], dict[str, Any]] | None = None) -> dict[str, Any]:
    plan = plan_storage(mounts, image=job.config.storage_initializer_image,
                        pull_policy=job.config.image_pull_policy)
    identity = [env_value("NAMESPACE", job.owner.namespace), env_value("JOB_NAME", job.owner.name),
                env_field("WORKER_NAME", "metadata.name")]
    full_env = [*identity, *env, *(env_value(n, v) for n, v in plan.env)]
    knobs = PodKnobs(host_network=True, restart_policy=restart, dns_policy=job.dns_policy)
    rendered = render_template(deep_get(job.spec, *template_path), where="spec." + ".".join(template_path),
                               env=full_env, storage=plan, knobs=knobs)
    if volumes is not None:
        _add_volume(rendered["spec"], *volumes)
    if annotations:
        rendered["metadata"]["annotations"] = {**rendered["metadata"].get("annotations", {}), **annotations}
    return build_pod(job.owner, name=name, worker_type=worker_type, rendered=rendered)


def _add_volume(spec: dict[str, Any], volume: dict[str, Any], mount: dict[str, Any]) -> None:
    spec["volumes"] = [*(v for v in spec.get("volumes") or [] if v.get("name") != volume["name"]), volume]
    for container in spec["containers"]:
        kept = [m for m in container.get("volumeMounts") or [] if m.get("name") != mount["name"]]
        container["volumeMounts"] = [*kept, dict(mount)]


# -- IncrementalLearningJob -----------------------------------------------------------


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
    return _pod(job, name=name, worker_type="train", template_path=("trainSpec", "template"),
                env=[env_value("LC_SERVER", job.config.lc_server)], mounts=mounts, restart="OnFailure")


def il_eval_pod(job: LearningJob, models: ILModels, *, name: str, given: StageInput) -> dict[str, Any]:
    mounts = [
        WorkerMount("MODEL_URLS", tuple(_input_model(job, models, u) for u in given.model_urls)),
        WorkerMount("TEST_DATASET_URL", (MountURL(given.data_url, download=True, secret=job.dataset_secret),)),
        WorkerMount("ORIGINAL_DATASET_URL", (job.original_dataset(given),)),
    ]
    return _pod(job, name=name, worker_type="eval", template_path=("evalSpec", "template"),
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
    return _pod(job, name=name, worker_type="inference", template_path=("deploySpec", "template"),
                env=env, mounts=[WorkerMount("MODEL_URL", (model,))], restart=None,
                annotations={DEPLOYS_ANNOTATION: str(deploys)}, volumes=volumes)


def _poll_period(deploy: Mapping[str, Any]) -> int:
    value = deep_get(deploy, "model", "pollPeriodSeconds")
    if value is None:
        return DEFAULT_POLL_PERIOD
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidSpec("InvalidSpec", "spec.deploySpec.model.pollPeriodSeconds must be an integer >= 1")
    return value


# -- LifelongLearningJob --------------------------------------------------------------


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
    return _pod(job, name=name, worker_type="train", template_path=("trainSpec", "template"),
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
    return _pod(job, name=name, worker_type="eval", template_path=("evalSpec", "template"),
                env=env, mounts=[m for m in mounts if m.urls[0].url], restart="OnFailure")


def ll_infer_pod(job: LearningJob, *, name: str, deploys: int) -> dict[str, Any]:
    output_dir = job.spec.get("outputDir")
    if not isinstance(output_dir, str) or not output_dir:
        raise InvalidSpec("InvalidSpec", "spec.outputDir is required")
    index = MountURL(f"{output_dir.rstrip('/')}/deploy/index.pkl", download=False, secret=job.job_secret)
    env = [env_value("LC_SERVER", job.config.lc_server), env_value("OUTPUT_URL", output_dir)]
    return _pod(job, name=name, worker_type="inference", template_path=("deploySpec", "template"),
                env=env, mounts=[WorkerMount("MODEL_URLS", (index,))], restart=None,
                annotations={DEPLOYS_ANNOTATION: str(deploys)})
