"""Lifelong learning: the LC decides when each stage of a job's cycle may start.

The shared loop (lc/managers/learning/) with LL's differences (upstream-lc.md section
4.6): no Model objects; a train round's input has no models (the worker starts from the
knowledge base); eval evaluates every model the newest completed training reported, with
an `outputDir` of its own; deploy copies the first model the eval reported to the job's
fixed deploy model `<outputDir>/deploy/index.pkl`. Where upstream sends a `null` report
when no trained model exists, or retries a failed copy silently forever, the stage is
reported Failed so the GM restarts the cycle. Deploy is decided on Deploy/Waiting only, as
for IL: upstream decides on any Deploy condition and relies on a flag it resets only in
Train/Waiting. The copy takes only a regular file within LC_MODEL_MAX_BYTES (lc/files.py).
"""

from __future__ import annotations

from lc.errors import LearningError
from lc.managers.learning.kind import LearningKind, Tick
from lc.managers.learning.models import upstream_model
from lc.managers.learning.stages import Body, reported_models, stage_body, stage_failed

KIND = "LifelongLearningJob"
DEPLOY_MODEL = "deploy/index.pkl"  # under outputDir; what the inference worker loads


class LifelongLearning(LearningKind):
    """LL's stage tasks."""

    kind = KIND

    def eval_input(self, tick: Tick) -> Body | None:
        models = [upstream_model(m) for m in reported_models(tick.job, "Train")]
        if not models:
            return stage_failed(tick.job, "Eval", "no trained model was reported")
        data = {"models": models, **tick.data("eval", self.eval_samples(tick)),
                "outputDir": f"{tick.out}/eval/{tick.state.rounds}"}
        return stage_body("Eval", "Ready", data, reason="TrainedModelFound",
                          message=f"evaluating the models of train round {tick.state.rounds}: "
                                  f"{len(models)}")

    def deploy(self, tick: Tick) -> Body | None:
        models = reported_models(tick.job, "Eval")
        if not models:
            return stage_body("Deploy", "Completed", reason="NoEvaluatedModel",
                              message="the eval reported no model to deploy")
        first = models[0]
        try:
            tick.copy_model(str(first.get("url", "")), f"{tick.out}/{DEPLOY_MODEL}")
        except LearningError as exc:
            return stage_failed(tick.job, "Deploy", str(exc))
        model = {"format": first.get("format", ""), "url": first.get("url", ""), "classes": None}
        return stage_body("Deploy", "Ready", {"models": [model]}, reason="EvaluatedModelFound",
                          message=f"deploying {model['url']} to {tick.out}/{DEPLOY_MODEL}")
