"""Models the GM sent to this node, kept for the training-job managers that copy them.

Upstream's LC only caches Model objects (format, URL, devices) for incremental learning,
which reads them when it builds train/eval/deploy inputs; nothing about a model is
reported upstream and workers never report on one. This manager keeps the same view,
validated, so a model whose spec is unusable is logged once when it arrives instead of
failing later inside a job. A Model on S3 keeps the credential it carries
(`sedna.io/credential`, from its `credentialName`), which an IL deploy signs its copy over
the Model's file with; a Model without one is written with the job's (as upstream's LC
does for every Model). Nothing else of the annotation is kept.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from lc.errors import StorageError
from lc.managers.base import Outgoing
from lc.report import WorkerReport
from lc.s3 import S3Credential, is_s3
from shared.logs import event

log = logging.getLogger(__name__)

KIND = "Model"


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """The parts of a Model spec the LC uses."""

    format: str
    url: str
    devices: tuple[str, ...]
    credential: S3Credential | None = None  # its own, for an s3 URL (its repr hides the keys)


def model_info(obj: dict[str, Any]) -> ModelInfo:
    """Extract format/url/devices; raise ValueError naming the bad field."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise ValueError("spec must be an object")
    url, fmt = spec.get("url"), spec.get("format", "")
    if not isinstance(url, str) or not url:
        raise ValueError("spec.url must be a non-empty string")
    if not isinstance(fmt, str):
        raise ValueError("spec.format must be a string")
    devices = spec.get("device_soc_versions") or []
    if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
        raise ValueError("spec.device_soc_versions must be a list of strings")
    credential = None
    if is_s3(url):
        meta = obj.get("metadata")
        notes = meta.get("annotations") if isinstance(meta, dict) else None
        try:
            credential = S3Credential.from_annotations(notes if isinstance(notes, dict) else None)
        except StorageError as exc:
            raise ValueError(str(exc)) from None
    return ModelInfo(fmt, url, tuple(devices), credential)


class ModelManager:
    """Keeps the latest valid ModelInfo per model."""

    kind = KIND
    takes_reports = False

    def __init__(self) -> None:
        self._models: dict[tuple[str, str], ModelInfo] = {}

    def get(self, namespace: str, name: str) -> ModelInfo | None:
        """The model's info, or None if this node has no valid copy."""
        return self._models.get((namespace, name))

    async def upsert(self, namespace: str, name: str, obj: dict[str, Any]) -> None:
        try:
            self._models[(namespace, name)] = model_info(obj)
        except ValueError as exc:
            self._models.pop((namespace, name), None)
            event(log, "model spec unusable", level=logging.ERROR,
                  key=f"{namespace}/{name}", error=str(exc))

    async def delete(self, namespace: str, name: str) -> None:
        self._models.pop((namespace, name), None)

    def report_entries(self, report: WorkerReport, *, namespace: str,
                       name: str) -> list[Outgoing]:
        return []  # upstream ignores worker reports about models

    async def stop(self) -> None:
        """No tasks to stop."""
