"""Why a reconcile cannot converge, as one value the shared path turns into status.

Two sources stop a reconcile on something the user (or time) must fix:
- the worker builders' `SpecError`: the CR, or an object it names, is wrong or missing;
- `ChildRejected`: the API server refused a child the GM built from the spec (400 or 422,
  i.e. server-side validation such as a `memory: lots` resource or a bad label value in a
  worker template). Retrying the same body cannot succeed, so this is not a temporary
  error: it is the spec's problem, quoted from the server. An admission plugin's 403 (a
  pod that violates its namespace's Pod Security level, a ServiceAccount that does not
  exist) is one too, `WorkerForbidden`, but retried with backoff: relabelling the namespace
  or creating the account fixes it without an edit of the CR.

Both become a `Problem` (a CamelCase reason, a message, whether time alone can fix it);
`executor.report_problem` writes it as a condition and a Warning event, then ends the
reconcile with its outcome: a retryable problem backs off, any other waits for a change.
The status says the same: a retryable problem is shown as the kind's waiting state
(`Pending`, or its `Waiting` condition) with the reason, since it clears by itself once
what is missing appears; any other as `Failed`. (Upstream writes a missing Model at
creation as a terminal `Failed`, spec/upstream-gm.md section 6 items 3 and 14: it never
writes `Pending`.)
"""

from __future__ import annotations

from dataclasses import dataclass

from gm.errors import GMError, PermanentError, TemporaryError
from gm.kube.apierrors import ApiError
from gm.workers.specerrors import SpecError

MAX_MESSAGE = 512  # a condition message quotes the server; keep it readable


@dataclass(frozen=True, slots=True)
class Problem:
    reason: str
    message: str
    retryable: bool

    def outcome(self) -> Exception:
        """The runner outcome: back off when time can fix it, else wait for a change."""
        text = f"{self.reason}: {self.message}"
        return TemporaryError(text) if self.retryable else PermanentError(text)


class ChildRejected(GMError):
    """The API server refused to create or update a child built from the spec."""

    def __init__(self, *, kind: str, namespace: str, name: str, verb: str, error: ApiError,
                 admission: bool = False):
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.verb = verb
        self.error = error
        self.admission = admission  # refused by an admission plugin (403), not by validation
        super().__init__(f"{verb} {kind} {namespace}/{name}: {error}")

    @property
    def problem(self) -> Problem:
        message = (f"the API server rejected {self.kind} {self.namespace}/{self.name} "
                   f"({self.error.code} {self.error.reason}): {self.error.message}")
        if self.admission:
            return Problem("WorkerForbidden", _clip(message), retryable=True)
        return Problem("WorkerRejected", _clip(message), retryable=False)


PROBLEMS: tuple[type[Exception], ...] = (SpecError, ChildRejected)
"""The exceptions `problem_of` maps; catch these around build and converge."""


def problem_of(exc: Exception) -> Problem:
    if isinstance(exc, ChildRejected):
        return exc.problem
    if isinstance(exc, SpecError):
        return Problem(exc.reason, _clip(exc.message), retryable=exc.retryable)
    raise TypeError(f"not a reconcile problem: {type(exc).__name__}")


def _clip(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 3] + "..."
