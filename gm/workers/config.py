"""The GM settings that reach worker objects (env values, images)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

DEFAULT_LC_SERVER = "http://localhost:9100"
DEFAULT_KB_SERVER = "http://localhost:9020"
DEFAULT_STORAGE_INITIALIZER_IMAGE = "kubeedge/sedna-storage-initializer:v0.3.0"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Knobs of the worker builders; defaults are upstream's (`localController.server`,
    `knowledgeBaseServer.server`, the hard-coded storage-initializer image)."""

    lc_server: str = DEFAULT_LC_SERVER
    kb_server: str = DEFAULT_KB_SERVER
    storage_initializer_image: str = DEFAULT_STORAGE_INITIALIZER_IMAGE
    image_pull_policy: str = "IfNotPresent"

    def __post_init__(self) -> None:
        for field in ("lc_server", "kb_server"):
            url = urlparse(getattr(self, field))
            if url.scheme not in ("http", "https") or not url.netloc:
                raise ValueError(f"WorkerConfig.{field} must be an http(s) URL, "
                                 f"not {getattr(self, field)!r}")
        if not self.storage_initializer_image.strip():
            raise ValueError("WorkerConfig.storage_initializer_image must not be empty")
        if self.image_pull_policy not in ("Always", "IfNotPresent", "Never"):
            raise ValueError(f"WorkerConfig.image_pull_policy {self.image_pull_policy!r} is "
                             "not Always, IfNotPresent or Never")
