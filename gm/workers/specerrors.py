"""Why a CR's workers cannot be built: the one error family the worker builders raise.

A reconciler maps these to a status condition in one place: `InvalidSpec` is the user's
to fix (no retry until the spec changes), and so is its `ForbiddenSpec`, a spec refused on
purpose; `MissingDependency` may resolve by itself when the named object appears (retry
with backoff). All carry a CamelCase `reason` and a human `message` ready for the
condition.
"""

from __future__ import annotations

from gm.errors import GMError


class SpecError(GMError):
    """Base: the desired workers of a CR cannot be computed."""

    retryable = False

    def __init__(self, reason: str, message: str):
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class InvalidSpec(SpecError):
    """The CR (or an object it names) is malformed; nothing changes until it is edited."""


class MissingDependency(SpecError):
    """An object the CR names (Model, Dataset, Secret) does not exist (yet)."""

    retryable = True

    def __init__(self, kind: str, name: str, *, namespace: str = ""):
        where = f"{namespace}/{name}" if namespace else name
        super().__init__(f"{kind}NotFound", f"{kind} {where} does not exist")
        self.kind = kind
        self.name = name
        self.namespace = namespace


class ForbiddenSpec(InvalidSpec):
    """The CR asks the GM for something it never does on a CR author's behalf (a worker
    running as the GM's own ServiceAccount): well-formed, refused, and like any invalid spec
    nothing changes until it is edited."""
