"""Models as upstream's LC hands them to workers: the entry's shape, the model of a format
(and device) among those reported, and copying a model file between host paths."""

from __future__ import annotations

import os
import threading
from typing import Any
from urllib.parse import urlsplit

from lc import files
from lc.errors import LearningError
from lc.files import DEFAULT_LIMITS, Caps, FileRefused
from lc.rootfs import host_to_local

_MODEL_HEAD = ("format", "url", "device_soc_versions", "metrics", "history_metric", "current_metric")
_MODEL_TAIL = ("number_of_labeled_unseen_sample", "number_of_model", "number_of_unseen_sample")


def upstream_model(model: dict[str, Any]) -> dict[str, Any]:
    """A model in the key order and with the fields of upstream's Model struct: empty
    optional fields left out, `classes` always present (null when empty)."""
    out = {k: model[k] for k in _MODEL_HEAD if model.get(k) or k in ("format", "url")}
    out["classes"] = model.get("classes") or None
    out.update((k, model[k]) for k in _MODEL_TAIL if model.get(k))
    return out


def model_of(fmt: str, url: str, devices: tuple[str, ...] = ()) -> dict[str, Any]:
    """A Model CR's format/url/devices as an upstream model entry."""
    return upstream_model({"format": fmt, "url": url, "device_soc_versions": list(devices)})


def matching_model(models: list[dict[str, Any]], fmt: str,
                   devices: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """The first model of format `fmt`; if `devices` is set, a candidate naming exactly one
    device must name one of them (upstream-lc.md section 4.5.4 step 5)."""
    for model in models:
        if model.get("format") != fmt:
            continue
        theirs = model.get("device_soc_versions") or []
        if devices and isinstance(theirs, list) and len(theirs) == 1 and theirs[0] not in devices:
            continue
        return upstream_model(model)
    return None


def copy_model(source: str, target: str, rootfs: str, *, caps: Caps = DEFAULT_LIMITS.model,
               stop: threading.Event | None = None) -> None:
    """Copy a model file between host paths under the rootfs, replacing the target whole; the
    source must be a regular file within `caps`."""
    for url in (source, target):
        if urlsplit(url).scheme:  # s3 URLs are copied by lc/managers/learning/storage.py
            raise LearningError(f"model URL {url} is not a local path")
    src, dst = host_to_local(rootfs, source), host_to_local(rootfs, target)
    try:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        files.copy_file(src, dst, caps, what="model", names=(source, target), stop=stop)
    except OSError as exc:
        raise LearningError(f"cannot copy model {source} to {target}: {exc.strerror}") from None
    except FileRefused as exc:
        raise LearningError(f"cannot copy model {source} to {target}: {exc}") from None
