"""gm/controllers/problems.py: one mapping from what stops a reconcile to its outcome."""

from __future__ import annotations

import pytest

from gm.controllers.problems import MAX_MESSAGE, ChildRejected, Problem, problem_of
from gm.controllers.runner import PermanentError, TemporaryError
from gm.kube.errors import Invalid
from gm.workers import InvalidSpec, MissingDependency


@pytest.mark.parametrize("exc, expected, outcome", [
    pytest.param(InvalidSpec("InvalidTemplate", "spec.trainingWorkers[1]: no containers"),
                 Problem("InvalidTemplate", "spec.trainingWorkers[1]: no containers", retryable=False),
                 PermanentError, id="invalid-spec-waits-for-a-change"),
    pytest.param(MissingDependency("Dataset", "d1", namespace="ns"),
                 Problem("DatasetNotFound", "Dataset ns/d1 does not exist", retryable=True),
                 TemporaryError, id="missing-dependency-backs-off"),
    pytest.param(ChildRejected(kind="pod", namespace="ns", name="job-trainworker-1", verb="create",
                               error=Invalid(422, "Invalid", 'Pod "job-trainworker-1" is invalid: '
                                             "spec.containers[0].ports[0].containerPort: Invalid value")),
                 Problem("WorkerRejected", "the API server rejected pod ns/job-trainworker-1 (422 Invalid): "
                         'Pod "job-trainworker-1" is invalid: spec.containers[0].ports[0].containerPort: '
                         "Invalid value", retryable=False),
                 PermanentError, id="server-rejection-quotes-the-server"),
])
def test_problem_of(exc, expected, outcome):
    problem = problem_of(exc)
    assert problem == expected
    assert type(problem.outcome()) is outcome
    assert str(problem.outcome()) == f"{expected.reason}: {expected.message}"


def test_long_server_messages_are_clipped():
    exc = ChildRejected(kind="pod", namespace="ns", name="p", verb="update",
                        error=Invalid(422, "Invalid", "x" * 5000))
    assert len(problem_of(exc).message) == MAX_MESSAGE
    assert problem_of(exc).message.endswith("...")


def test_other_exceptions_are_not_problems():
    with pytest.raises(TypeError):
        problem_of(RuntimeError("bug"))
