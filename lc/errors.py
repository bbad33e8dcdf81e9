"""The LocalController's error hierarchy.

Every failure the LC expects is one of these classes, so callers decide with one `except`
what it means: a bad setting stops start-up with a message, a bad worker report becomes a
4xx reply, a store failure becomes a 503 and a logged error. Nothing here does I/O.
"""

from __future__ import annotations


class LCError(Exception):
    """Base class of every error the LocalController raises on purpose."""


class ConfigError(LCError):
    """An environment variable has a value the LC cannot use."""


class StoreError(LCError):
    """The SQLite state store failed or is unusable."""


class StoreOpenError(StoreError):
    """The database file cannot be opened or created (path, permissions)."""


class StoreCorruptError(StoreError):
    """The database file exists but is not a healthy SQLite database."""


class StoreBusyError(StoreError):
    """Too many writes are waiting for a commit; the caller should retry later."""


class StoreClosedError(StoreError):
    """The store was closed; no more reads or writes are accepted."""


class ReportError(LCError):
    """A worker report that the API refuses; `status` is the HTTP status to answer."""

    def __init__(self, message: str, *, status: int = 400, reason: str = "invalid") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason


class DatasetError(LCError):
    """A dataset index cannot be read or counted (missing file, bad format, bad URL)."""


class PathEscapeError(DatasetError):
    """A host path would resolve outside the root filesystem mount."""


class LearningError(LCError):
    """A learning job cannot take its next step: bad trigger or spec, missing model, I/O."""


class ResourceError(LCError):
    """A downstream object the LC cannot take: unknown kind, or no namespace/name."""
