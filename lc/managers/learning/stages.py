"""Where a learning job stands and what the LC says about it: the stage read from the job's
latest condition, the models earlier stages reported (the GM keeps them in the conditions'
`data`), and the stage reports the LC makes (upstream-lc.md sections 4.5-4.7)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import orjson

from shared.logs import event
from shared.text import clip

log = logging.getLogger("lc.managers.learning")

Body = dict[str, Any]
SILENT: Body = {}  # a decision carried out with nothing to report (a hot model update)
MAX_MESSAGE = 1000  # characters of a decision's message in its report
STAGE_FAILED = "StageFailed"


@dataclass(frozen=True, slots=True)
class Stage:
    """The job's latest condition: where the GM's state machine stands."""

    stage: str  # Train, Eval or Deploy
    type: str  # Waiting, Ready, Starting, Running, Completed or Failed
    token: str  # identifies this condition among the job's history


def _conditions(job: dict[str, Any]) -> list[dict[str, Any]]:
    status = job.get("status")
    conds = status.get("conditions") if isinstance(status, dict) else None
    return [c for c in conds if isinstance(c, dict)] if isinstance(conds, list) else []


def current_stage(job: dict[str, Any]) -> Stage | None:
    """The latest condition's stage and type (capitalised), None without conditions."""
    conds = _conditions(job)
    if not conds:
        return None
    last = conds[-1]
    stage, kind = str(last.get("stage", "")).capitalize(), str(last.get("type", "")).capitalize()
    token = f"{len(conds)}|{stage}|{kind}|{last.get('lastTransitionTime', '')}"
    return Stage(stage, kind, token)


def reported_models(job: dict[str, Any], stage: str) -> list[dict[str, Any]]:
    """`output.models` of the newest `<stage>`/Completed condition that carries models."""
    for cond in reversed(_conditions(job)):
        if (str(cond.get("stage", "")).lower(), str(cond.get("type", "")).lower()) != \
                (stage.lower(), "completed"):
            continue
        models = _data_models(cond.get("data"))
        if models:
            return models
    return []


def _data_models(data: Any) -> list[dict[str, Any]]:
    if isinstance(data, str):
        try:
            data = orjson.loads(data)
        except orjson.JSONDecodeError:
            return []
    output = data.get("output") if isinstance(data, dict) else None
    models = output.get("models") if isinstance(output, dict) else None
    return [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []


def stage_body(phase: str, status: str, data: dict[str, Any] | None = None, *,
               reason: str = "", message: str = "") -> Body:
    """An LC-originated status report: `input` only when it has something, `output` null,
    and, when given, the decision's `reason` and `message` (the GM makes them the condition's;
    upstream's GM ignores keys it does not know)."""
    body: Body = {"phase": phase, "status": status}
    if data:
        body["input"] = data
    body["output"] = None
    if reason:
        body["reason"] = reason
    if message:
        body["message"] = clip(message, MAX_MESSAGE)
    return body


def stage_failed(job: dict[str, Any], stage: str, why: str) -> Body:
    """The stage reported Failed (the GM restarts the cycle), saying why; logged here too."""
    meta = job.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    event(log, "learning stage failed", level=logging.WARNING, kind=job.get("kind", ""),
          key=f"{meta.get('namespace', '')}/{meta.get('name', '')}", stage=stage, error=why)
    return stage_body(stage, "Failed", reason=STAGE_FAILED, message=why)
