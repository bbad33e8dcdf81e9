"""gm/controllers/problems.py: one mapping from what stops a reconcile to its outcome."""

from __future__ import annotations

import pytest

from gm.errors import PermanentError, TemporaryError
from gm.kube.apierrors import Forbidden, Invalid
from gm.reconcile.problems import MAX_MESSAGE, ChildRejected, Problem, problem_of
from gm.workers.specerrors import InvalidSpec, MissingDependency


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
    pytest.param(ChildRejected(kind="pod", namespace="ns", name="p", verb="create", admission=True,
                               error=Forbidden(403, "Forbidden", 'pods "p" is forbidden: violates PodSecurity '
                                               '"restricted:latest": privileged')),
                 Problem("WorkerForbidden", 'the API server rejected pod ns/p (403 Forbidden): pods "p" is '
                         'forbidden: violates PodSecurity "restricted:latest": privileged', retryable=True),
                 TemporaryError, id="admission-refusal-backs-off"),
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


@pytest.mark.parametrize("message, admission", [
    ('pods "p" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)', True),
    ('pods "p" is forbidden: error looking up service account ns/sa: serviceaccount "sa" not found', True),
    ('pods is forbidden: User "system:serviceaccount:sedna:sedna" cannot create resource "pods" in API group ""'
     ' in the namespace "ns"', False),
])
def test_a_403_is_the_specs_problem_unless_it_is_an_authorization_denial(message, admission):
    from gm.kube.resources import PODS
    from gm.reconcile.executor import _refused_by_admission

    exc = Forbidden(403, "Forbidden", message)
    if admission:
        with pytest.raises(ChildRejected) as info:
            _refused_by_admission(exc, PODS, "ns", "p", "create")
        assert info.value.problem.reason == "WorkerForbidden"
    else:
        _refused_by_admission(exc, PODS, "ns", "p", "create")  # the caller retries it as temporary
