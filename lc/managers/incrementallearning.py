"""Incremental learning: the LC decides when each stage of a job's cycle may start.

On top of the shared loop (lc/managers/learning/) an IncrementalLearningJob's stages
use the Model objects the GM sends with the job (upstream-lc.md sections 4.5.4-4.5.7):
- Train: round 1 starts from `spec.initialModel`; a later round from the newest trained
  model of the initial model's format (and device), or the initial model if there is none
  (a cycle that failed before training completed), where upstream crashes;
- Eval: the newest trained model of the eval model's format and the eval model
  (`spec.evalSpec.initialEvalModel`, else the deploy model), in that order, which is the
  order the eval worker reports metrics in and the deploy trigger reads them;
- Deploy: the deploy trigger over the eval's `[new, deployed]` metrics (a list metric named
  without an index, upstream's `precision_delta > 0.1`, holds when every class's value
  does); when it fires the trained model is copied over the deploy model's file (and over
  the eval model's, if the job has one) unless hot update is enabled, and the stage is
  reported Ready (or Failed if a copy failed); when it does not fire, Completed ("no need
  to deploy"); the report's message quotes the values that decided;
- hot update (section 4.5.9): with `deploySpec.model.hotUpdateEnabled`, once the GM has the
  job in Deploy/Running, the LC on the inference worker's node (`sedna.io/Deploy`, else
  the deploy template's nodeName, else the Dataset's node) copies the trained model next
  to the model config file the worker polls and over the deploy (and eval) model, then
  rewrites the config file with the model's path and the update time, once per Running
  condition; nothing is reported (the worker reports the reload). The config file is the
  one the GM mounts (`sedna.io/model-hot-update-config`, else the path the GM derives); a
  path outside `/var/lib/sedna/model-hot-update` is refused, since the LC writes there and
  removes the job's directory when the job leaves the node.
A copy takes only a regular model file within LC_MODEL_MAX_BYTES, and every file is written
through a temporary file created afresh (lc/files.py).
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
from typing import Any

from lc import files
from lc.errors import LearningError
from lc.files import FileRefused
from lc.managers.learning.kind import LearningKind, Tick
from lc.managers.learning.models import matching_model, model_of
from lc.managers.learning.spec import annotation_of, spec_field
from lc.managers.learning.stages import SILENT, Body, reported_models, stage_body, stage_failed
from lc.managers.learning.triggers import deploy_stats, parse_trigger
from lc.managers.model import ModelInfo, ModelManager
from lc.rootfs import host_to_local

KIND = "IncrementalLearningJob"
HOT_UPDATE_DIR = "/var/lib/sedna/model-hot-update"  # host side of the worker's volume
HOT_UPDATE_MOUNT = "/model-hot-update"  # where the inference worker sees it
HOT_UPDATE_ANNOTATION = "sedna.io/model-hot-update-config"


class IncrementalLearning(LearningKind):
    """IL's stage tasks, reading Models from the node's ModelManager."""

    kind = KIND

    def __init__(self, models: ModelManager) -> None:
        self._models = models

    def _model(self, job: dict[str, Any], *path: str) -> ModelInfo:
        name = spec_field(job, *path)
        where = "spec." + ".".join(path)
        if not isinstance(name, str) or not name:
            raise LearningError(f"{where} must be a non-empty string")
        namespace = (job.get("metadata") or {}).get("namespace", "")
        info = self._models.get(namespace, name)
        if info is None:
            raise LearningError(f"model {namespace}/{name} ({where}) is not on this node")
        return info

    def _eval_model(self, job: dict[str, Any]) -> ModelInfo | None:
        """The job's own eval model, None when it evaluates against the deploy model."""
        if spec_field(job, "evalSpec", "initialEvalModel", "name") is None:
            return None
        return self._model(job, "evalSpec", "initialEvalModel", "name")

    def train_models(self, tick: Tick, round_: int) -> list[dict[str, Any]]:
        initial = self._model(tick.job, "initialModel", "name")
        trained = None
        if round_ > 1:
            trained = matching_model(reported_models(tick.job, "Train"), initial.format,
                                     initial.devices)
        return [trained or model_of(initial.format, initial.url, initial.devices)]

    def eval_input(self, tick: Tick) -> Body | None:
        job = tick.job
        evaluated = self._eval_model(job) or self._model(job, "deploySpec", "model", "name")
        trained = matching_model(reported_models(job, "Train"), evaluated.format,
                                 evaluated.devices)
        if trained is None:
            return stage_failed(job, "Eval", f"no trained model of format {evaluated.format!r} "
                                        f"was reported")
        data = {"models": [trained, model_of(evaluated.format, evaluated.url, evaluated.devices)],
                **tick.data("eval", self.eval_samples(tick))}
        return stage_body("Eval", "Ready", data, reason="TrainedModelFound",
                          message=f"evaluating {trained.get('url', '')} against {evaluated.url}")

    def deploy(self, tick: Tick) -> Body | None:
        job = tick.job
        deployed = self._model(job, "deploySpec", "model", "name")
        trigger = parse_trigger(spec_field(job, "deploySpec", "trigger"), "spec.deploySpec.trigger")
        try:
            stats = deploy_stats(reported_models(job, "Eval"))
        except LearningError as exc:
            return stage_failed(job, "Deploy", str(exc))
        verdict = trigger.decide(stats, tick.now)
        if not verdict.holds:
            return stage_body("Deploy", "Completed", reason="DeployTriggerNotFired",
                              message=f"the trained model is not deployed: {verdict.message}")
        trained = matching_model(reported_models(job, "Train"), deployed.format, deployed.devices)
        if trained is None:
            return stage_failed(job, "Deploy", f"no trained model of format {deployed.format!r} "
                                          f"was reported")
        models = [trained, model_of(deployed.format, deployed.url, deployed.devices)]
        if not self.hot_updates(job):
            try:
                self._replace_models(tick, trained, deployed)
            except LearningError as exc:  # reported with its models, as upstream does
                failed = stage_failed(job, "Deploy", f"{verdict.message}, but {exc}")
                return stage_body("Deploy", "Failed", {"models": models}, reason=failed["reason"],
                                  message=failed["message"])
        return stage_body("Deploy", "Ready", {"models": models}, reason="DeployTriggerFired",
                          message=f"deploying {trained.get('url', '')}: {verdict.message}")

    def hot_updates(self, job: dict[str, Any]) -> bool:
        return bool(spec_field(job, "deploySpec", "model", "hotUpdateEnabled"))

    def hot_update(self, tick: Tick) -> Body | None:
        """Put the trained model where the worker reloads it from, then tell it so."""
        job = tick.job
        deployed = self._model(job, "deploySpec", "model", "name")
        trained = matching_model(reported_models(job, "Train"), deployed.format, deployed.devices)
        if trained is None:
            raise LearningError(f"no trained model of format {deployed.format!r} to hot update")
        config = hot_update_config(job)
        model_file = posixpath.basename(str(trained["url"]).rstrip("/"))
        tick.copy_model(trained["url"], posixpath.join(posixpath.dirname(config), model_file))
        self._replace_models(tick, trained, deployed)
        write_hot_update_config(host_to_local(tick.rootfs, config), model_file,
                                tick.now.isoformat())
        return SILENT

    def forget(self, job: dict[str, Any], rootfs: str) -> None:
        """A hot-updated job's model directory goes with the job."""
        if not self.hot_updates(job) and not annotation_of(job, HOT_UPDATE_ANNOTATION):
            return
        directory = host_to_local(rootfs, posixpath.dirname(hot_update_config(job)))
        try:
            shutil.rmtree(directory)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise LearningError(f"cannot remove {directory}: {exc.strerror}") from None

    def _replace_models(self, tick: Tick, trained: dict[str, Any], deployed: ModelInfo) -> None:
        tick.copy_model(trained["url"], deployed.url, target_credential=deployed.credential)
        evaluated = self._eval_model(tick.job)
        if evaluated is None:
            return
        same = matching_model(reported_models(tick.job, "Train"), evaluated.format,
                              evaluated.devices)
        if same is None:
            raise LearningError(f"no trained model of format {evaluated.format!r} for the "
                                f"eval model")
        tick.copy_model(same["url"], evaluated.url, target_credential=evaluated.credential)


def hot_update_config(job: dict[str, Any]) -> str:
    """The host path of the model config file the job's inference worker polls."""
    meta = job.get("metadata") or {}
    path = annotation_of(job, HOT_UPDATE_ANNOTATION) or posixpath.join(
        HOT_UPDATE_DIR, str(meta.get("namespace", "")), KIND, str(meta.get("name", "")),
        "model_config.json").lower()
    path = posixpath.normpath(path)
    job_dir = posixpath.relpath(posixpath.dirname(path), HOT_UPDATE_DIR)
    if not path.startswith(HOT_UPDATE_DIR + "/") or len(job_dir.split("/")) != 3:
        raise LearningError(f"model hot update config {path} is not in a job's directory "
                            f"{HOT_UPDATE_DIR}/<namespace>/<kind>/<name>")
    return path


def write_hot_update_config(path: str, model_file: str, when: str) -> None:
    """Replace the config file whole (the worker may read it at any moment)."""
    config = {"model_config": {"model_path": f"{HOT_UPDATE_MOUNT}/{model_file}",
                               "model_update_time": when}}
    data = json.dumps(config, indent=1, sort_keys=True).encode()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        files.replace_file(path, [data], what="model hot update config")
    except OSError as exc:
        raise LearningError(f"cannot write model hot update config {path}: "
                            f"{exc.strerror}") from None
    except FileRefused as exc:
        raise LearningError(str(exc)) from None
