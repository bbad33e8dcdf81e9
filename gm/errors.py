"""The GlobalManager's error hierarchy, and what a reconcile does about each error.

Every error the GM raises on purpose derives from `GMError`, so callers decide with one
`except` what it means. The classes live with the code that raises them (a pure module
never imports a server to name its errors); this module holds the root, the categories
several parts share, and `retry_of`, the one table from an error to retry behaviour:

    GMError
    +-- ConfigError (also ValueError)    a setting the GM cannot use: start-up stops (exit 2)
    |   +-- AuthConfigError              gm/edge/auth.py: a node token table
    +-- KubeConfigError                  gm/kube/kubeconfig.py: no usable cluster configuration
    +-- ApiError                         gm/kube/apierrors.py: an API call failed (by status)
    +-- InformerFailed, CacheSyncTimeout gm/kube/informer.py
    +-- LeaseBlocked                     gm/kube/leader.py
    +-- LeadershipLost                   gm/app.py
    +-- SpecError                        gm/workers/specerrors.py: a CR's workers cannot be built
    +-- ChildRejected                    gm/reconcile/problems.py: the API server refused a child
    +-- AuthError                        gm/edge/auth.py: an LC's identity
    +-- ReportError                      gm/reports.py: an edge report refused or deferred
    +-- ReconcileOutcome                 how a reconcile ends when it does not converge:
        +-- TemporaryError               retry with backoff (or after `delay`)
        +-- PermanentError               no retry until the object changes
        +-- OwnerGone                    the object went away mid-reconcile: nothing to do

A reconcile turns what it meets into an outcome where it knows the meaning (an API error
in gm/reconcile/executor.py, a spec problem in gm/reconcile/problems.py); the runner asks
`retry_of` what to do with the key. Nothing here does I/O.
"""

from __future__ import annotations

import enum


class GMError(Exception):
    """Base class of every error the GlobalManager raises on purpose."""


class ConfigError(GMError, ValueError):
    """The configuration cannot be used; the message names the key."""


class KubeConfigError(GMError):
    """No usable cluster configuration (missing file, bad kubeconfig, not in a pod)."""


class ReconcileOutcome(GMError):
    """How a reconcile ends when it does not simply converge (see `retry_of`)."""


class TemporaryError(ReconcileOutcome):
    """Retry with backoff (or after `delay` seconds when given)."""

    def __init__(self, message: str, *, delay: float | None = None):
        super().__init__(message)
        self.delay = delay


class PermanentError(ReconcileOutcome):
    """Do not retry: only a new change to the object can help."""


class OwnerGone(ReconcileOutcome):
    """The reconciled object was deleted (or replaced by a new one of that name) while the
    reconcile ran: stop without retrying; the delete event already said all there is."""


class Retry(enum.Enum):
    """What becomes of a key whose reconcile raised."""

    BACKOFF = "backoff"  # requeue with per-key exponential backoff, or after the error's delay
    WAIT_FOR_CHANGE = "permanent"  # forget the key: only a new event brings it back
    GONE = "gone"  # the object is gone: forget the key, nothing to log above debug
    UNEXPECTED = "crash"  # a bug or an unforeseen failure: backoff, logged with its traceback


def retry_of(exc: BaseException) -> tuple[Retry, float | None]:
    """The one table from a reconcile's error to its retry behaviour (and the delay, if any)."""
    if isinstance(exc, OwnerGone):
        return Retry.GONE, None
    if isinstance(exc, PermanentError):
        return Retry.WAIT_FOR_CHANGE, None
    if isinstance(exc, TemporaryError):
        return Retry.BACKOFF, exc.delay
    return Retry.UNEXPECTED, None
