"""Fields of a learning job object: spec paths, annotations, the output directory and
trainProb, checked where the LC depends on them. Pure."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from lc.errors import LearningError, StorageError
from lc.managers.learning.triggers import number
from lc.s3 import S3Url, is_s3


def output_dir(job: dict[str, Any]) -> str:
    """`spec.outputDir` as a host path or an s3:// prefix, without trailing `/`; other
    schemes refused."""
    out = _spec(job).get("outputDir")
    if not isinstance(out, str) or not out:
        raise LearningError("spec.outputDir must be a non-empty string")
    if is_s3(out):
        try:
            S3Url.parse(out)
        except StorageError as exc:
            raise LearningError(f"outputDir: {exc}") from None
        return out.rstrip("/")
    if urlsplit(out).scheme:
        raise LearningError(f"outputDir {out} is neither a local path nor an s3:// URL")
    return out.rstrip("/") or "/"


def _spec(job: dict[str, Any]) -> dict[str, Any]:
    spec = job.get("spec")
    return spec if isinstance(spec, dict) else {}


def spec_field(job: dict[str, Any], *path: str) -> Any:
    value: Any = _spec(job)
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def annotation_of(job: dict[str, Any], name: str) -> str:
    meta = job.get("metadata")
    notes = meta.get("annotations") if isinstance(meta, dict) else None
    value = notes.get(name) if isinstance(notes, dict) else None
    return value if isinstance(value, str) else ""


def train_prob(job: dict[str, Any]) -> float:
    prob = number(spec_field(job, "dataset", "trainProb"))
    if prob is None or not 0.0 <= prob <= 1.0:
        raise LearningError("spec.dataset.trainProb must be a number in [0, 1]")
    return prob
