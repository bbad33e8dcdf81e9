"""The Pod Security Standards checks (devcluster/podsecurity.py) against what kube-apiserver v1.33 answered.

podsecurity_cases.yaml holds pods and the real server's answer to each in a namespace enforcing
`baseline` and one enforcing `restricted` (tests/devcluster/record_podsecurity.py records them).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from devcluster.auth.podsecurity import (
    BASELINE,
    PRIVILEGED,
    RESTRICTED,
    LevelVersion,
    Policy,
    check_pod,
    forbidden_detail,
    namespace_policy,
)
from devcluster.machinery.errors import FieldError
from devcluster.strategy.defaults import sync_app_armor

CASES = yaml.safe_load((Path(__file__).parent / "podsecurity_cases.yaml").read_text())
P = "pod-security.kubernetes.io/"


def _answer(case: dict, level: str) -> str:
    """What the dev cluster's checks say, worded as the real server's 403 after `is forbidden: `."""
    pod = {"metadata": {"annotations": copy.deepcopy(case["annotations"])} if "annotations" in case else {},
           "spec": copy.deepcopy(case["spec"])}
    sync_app_armor(pod)  # the real server's create-time sync ran before its check
    violations = check_pod(pod["metadata"], pod["spec"], level)
    return f'violates PodSecurity "{level}:latest": {forbidden_detail(violations)}' if violations else ""


@pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in CASES])
@pytest.mark.parametrize("level", [BASELINE, RESTRICTED])
def test_check_answers_as_the_real_server(case: dict, level: str) -> None:
    assert _answer(case, level) == case[level]


def test_privileged_checks_nothing() -> None:
    spec = {"hostNetwork": True, "containers": [{"name": "c", "securityContext": {"privileged": True}}]}
    assert check_pod({}, spec, PRIVILEGED) == []


def test_cases_cover_every_check_reason() -> None:
    """Each check of each level fails in at least one recorded case."""
    seen = {r.split(" (", 1)[0] for c in CASES for lvl in (BASELINE, RESTRICTED) for r in _reasons(c[lvl])}
    assert seen >= {
        "forbidden AppArmor profile", "forbidden AppArmor profiles", "non-default capabilities", "host namespaces",
        "hostPath volumes", "hostPort", "privileged", "procMount", "seLinuxOptions", "seccompProfile",
        "forbidden sysctls", "hostProcess", "allowPrivilegeEscalation != false", "unrestricted capabilities",
        "restricted volume types", "runAsNonRoot != true", "runAsUser=0"}


def _reasons(answer: str) -> list[str]:
    if not answer:
        return []
    detail = answer.split('": ', 1)[1]
    out, depth, start = [], 0, 0
    for i, ch in enumerate(detail):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(detail[start:i].strip())
            start = i + 1
    return [*out, detail[start:].strip()]


# -- namespace labels ------------------------------------------------------------------------


@pytest.mark.parametrize(("labels", "policy"), [
    pytest.param({}, Policy(LevelVersion(PRIVILEGED), LevelVersion(PRIVILEGED), LevelVersion(PRIVILEGED)),
                 id="unlabelled-is-privileged"),
    pytest.param({P + "enforce": "restricted"},
                 Policy(LevelVersion(RESTRICTED), LevelVersion(RESTRICTED), LevelVersion(RESTRICTED)),
                 id="warn-and-audit-follow-enforce"),
    pytest.param({P + "enforce": "restricted", P + "enforce-version": "v1.25"},
                 Policy(*[LevelVersion(RESTRICTED, "v1.25")] * 3), id="with-its-version"),
    pytest.param({P + "enforce": "restricted", P + "warn": "baseline"},
                 Policy(LevelVersion(RESTRICTED), LevelVersion(RESTRICTED), LevelVersion(BASELINE)),
                 id="warn-of-its-own"),
    pytest.param({P + "enforce": "baseline", P + "warn": "restricted", P + "warn-version": "v1.30"},
                 Policy(LevelVersion(BASELINE), LevelVersion(BASELINE), LevelVersion(RESTRICTED, "v1.30")),
                 id="warn-version"),
    pytest.param({P + "warn": "restricted"},
                 Policy(LevelVersion(PRIVILEGED), LevelVersion(PRIVILEGED), LevelVersion(RESTRICTED)),
                 id="warn-only"),
    pytest.param({P + "enforce-version": "v1.025", P + "audit-version": "v1.99"},
                 Policy(LevelVersion(PRIVILEGED, "v1.25"), LevelVersion(PRIVILEGED, "v1.99"),
                        LevelVersion(PRIVILEGED, "v1.25")), id="versions-without-levels"),
])
def test_namespace_policy(labels: dict, policy: Policy) -> None:
    assert namespace_policy(labels) == (policy, [])


def test_namespace_label_errors_in_the_real_order() -> None:
    """Observed: enforce, enforce-version, audit, audit-version, warn, warn-version."""
    _, errors = namespace_policy({P + "warn": "y", P + "audit-version": "z", P + "enforce": "x"})
    assert [e.message() for e in errors] == [
        'metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "x": '
        "must be one of privileged, baseline, restricted",
        'metadata.labels[pod-security.kubernetes.io/audit-version]: Invalid value: "z": must be "latest" or "v1.x"',
        'metadata.labels[pod-security.kubernetes.io/warn]: Invalid value: "y": '
        "must be one of privileged, baseline, restricted",
    ]
    assert all(isinstance(e, FieldError) and e.reason == "FieldValueInvalid" for e in errors)


@pytest.mark.parametrize("value", ["Restricted", "v2.0", "1.25", "v1.", "v1.x"])
def test_bad_values_are_refused(value: str) -> None:
    key = "enforce" if value == "Restricted" else "enforce-version"
    _, errors = namespace_policy({P + key: value})
    assert len(errors) == 1 and errors[0].field == f"metadata.labels[{P}{key}]"


# -- the create-time AppArmor sync -----------------------------------------------------------


def test_app_armor_sync_both_ways() -> None:
    """Observed on kube-apiserver v1.33: field -> annotation per container (the pod's profile for a
    container without one), annotation -> field unless the pod's profile says the same."""
    pod = {"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined",
                                        "container.apparmor.security.beta.kubernetes.io/d": "runtime/default"}},
           "spec": {"securityContext": {"appArmorProfile": {"type": "Unconfined"}},
                    "containers": [{"name": "c"}, {"name": "d"},
                                   {"name": "e", "securityContext": {"appArmorProfile": {
                                       "type": "Localhost", "localhostProfile": "p"}}},
                                   {"name": "f"}]}}
    sync_app_armor(pod)
    assert pod["metadata"]["annotations"] == {
        "container.apparmor.security.beta.kubernetes.io/c": "unconfined",
        "container.apparmor.security.beta.kubernetes.io/d": "runtime/default",
        "container.apparmor.security.beta.kubernetes.io/e": "localhost/p",
        "container.apparmor.security.beta.kubernetes.io/f": "unconfined"}
    assert [c.get("securityContext") for c in pod["spec"]["containers"]] == [
        None, {"appArmorProfile": {"type": "RuntimeDefault"}},
        {"appArmorProfile": {"type": "Localhost", "localhostProfile": "p"}}, None]


def test_app_armor_sync_leaves_windows_pods() -> None:
    pod = {"metadata": {}, "spec": {"os": {"name": "windows"},
                                    "securityContext": {"appArmorProfile": {"type": "Unconfined"}},
                                    "containers": [{"name": "c"}]}}
    sync_app_armor(pod)
    assert pod["metadata"] == {}
