"""What the pods of IncrementalLearningJobs and LifelongLearningJobs share: the job's inputs
resolved once, the stage input the LC reported, and the pod every stage is built as (the
kind modules build their train, eval and inference pods on it).

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gm.config import WorkerConfig
from gm.workers.inputs import Secrets, credential, ref_name, required, source_url
from gm.workers.owned import Owner, build_pod, owner_of
from gm.workers.specerrors import InvalidSpec
from gm.workers.storage import MountURL, WorkerMount, plan_storage
from gm.workers.template import PodKnobs, checked_template, env_field, env_value, render_template
from shared.objects import deep_get

DEPLOYS_ANNOTATION = "sedna.io/deploys"


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


def learning_pod(job: LearningJob, *, name: str, worker_type: str, template_path: tuple[str, ...],
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
