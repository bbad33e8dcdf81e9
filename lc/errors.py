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


class StorageError(LCError):
    """An object storage (s3://) operation failed; `reason` is one CamelCase word for a status
    condition (the words of lc/files.py where they mean the same), `attempts` how many requests
    were made for it. Messages name the object and the endpoint, never the secret key."""

    reason = "StorageError"

    def __init__(self, message: str, *, attempts: int = 1) -> None:
        super().__init__(message)
        self.attempts = attempts


class StorageConfigError(StorageError):
    """An s3:// URL or a `sedna.io/credential` the LC cannot use; nothing was sent."""

    reason = "InvalidStorage"


class StorageDenied(StorageError):
    """The server refused the credential or its rights (401/403): never retried."""

    reason = "AccessDenied"


class StorageNotFound(StorageError):
    """No such bucket or key (404): never retried."""

    reason = "NotFound"


class StorageTooLarge(StorageError):
    """An object over the LC's cap for its use: refused by its size, or once more was read."""

    reason = "TooLarge"


class StorageUnavailable(StorageError):
    """The server could not be reached or kept failing (timeouts, 5xx, throttling) through
    every attempt; a later try may succeed."""

    reason = "StorageUnavailable"


class StorageChanged(StorageUnavailable):
    """The object was replaced while it was read (its ETag changed between two parts, or a
    copy's source no longer matched): reading it again from the start may succeed."""

    reason = "StorageChanged"


class StorageCredentialMissing(StorageConfigError):
    """An s3:// URL on an object that carries no `sedna.io/credential` (its `credentialName`
    is unset, or the GM could not read the Secret): nothing was sent."""

    reason = "CredentialMissing"
