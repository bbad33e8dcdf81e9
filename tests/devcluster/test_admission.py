"""ServiceAccount and PodSecurity admission inside the dev cluster: what its own controllers meet when
they create pods (FailedCreate events, ReplicaFailure conditions, as kube-controller-manager reports
them), the `default` ServiceAccount of a brand-new namespace, and the pure parts of admission.py.
The request/answer wording on both clusters is in conformance/cases/admission.yaml."""

from __future__ import annotations

from typing import Any

import pytest

from devcluster.auth.admission import existing_pod_warnings, significant_pod_update
from devcluster.auth.podsecurity import RESTRICTED, LevelVersion
from devcluster.machinery.errors import ApiError
from tests.conftest import eventually
from tests.devcluster.helpers import deployment, pod, rt

P = "pod-security.kubernetes.io/"
RESTRICTED_REFUSAL = (
    'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "c" must set '
    'securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "c" must set '
    'securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "c" must set '
    'securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set '
    'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")')


def _label(store: Any, ns: str, **labels: str) -> list[str]:
    warnings: list[str] = []
    store.patch(rt(store, "namespaces"), None, ns, "merge",
                {"metadata": {"labels": {P + k: v for k, v in labels.items()}}}, warnings=warnings)
    return warnings


def _events(store: Any, obj: dict[str, Any], reason: str) -> list[dict[str, Any]]:
    events, _ = store.list(rt(store, "events"), obj["metadata"]["namespace"])
    return [e for e in events if e["involvedObject"].get("uid") == obj["metadata"]["uid"] and e["reason"] == reason]


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


async def test_refused_replicas_are_failed_create_events_and_replica_failure_until_allowed(live) -> None:
    store = live.store
    _label(store, "default", enforce="restricted")
    d = store.create(rt(store, "deployments", "apps"), "default", deployment("web", replicas=2))
    events = await eventually(lambda: [e for e in _events_of_kind(store, "ReplicaSet") if e["reason"] == "FailedCreate"],
                              "FailedCreate on the ReplicaSet")
    assert events[0]["type"] == "Warning" and events[0]["source"] == {"component": "replicaset-controller"}
    assert events[0]["message"].startswith('Error creating: pods "web-')
    assert events[0]["message"].endswith(f'" is forbidden: {RESTRICTED_REFUSAL}')

    rs_cond = await eventually(lambda: _condition(_only_rs(store), "ReplicaFailure"), "the RS's ReplicaFailure")
    assert (rs_cond["status"], rs_cond["reason"]) == ("True", "FailedCreate")
    assert rs_cond["message"].endswith(f'" is forbidden: {RESTRICTED_REFUSAL}') and rs_cond["lastTransitionTime"]
    d_cond = await eventually(lambda: _condition(store.get(rt(store, "deployments", "apps"), "default", "web"),
                                                 "ReplicaFailure"), "the Deployment's ReplicaFailure")
    assert d_cond == {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                      "message": rs_cond["message"], "lastUpdateTime": rs_cond["lastTransitionTime"],
                      "lastTransitionTime": rs_cond["lastTransitionTime"]}
    assert store.controlled_by(rt(store, "pods"), _only_rs(store)["metadata"]["uid"]) == []

    _label(store, "default", enforce="privileged")
    await eventually(lambda: len(store.controlled_by(rt(store, "pods"), _only_rs(store)["metadata"]["uid"])) == 2,
                     "both replicas once the namespace allows them", within=10)
    await eventually(lambda: _condition(_only_rs(store), "ReplicaFailure") is None, "the RS's condition removed")
    await eventually(lambda: _condition(store.get(rt(store, "deployments", "apps"), "default", "web"),
                                        "ReplicaFailure") is None, "the Deployment's condition removed")
    assert d["metadata"]["uid"]


def _events_of_kind(store: Any, kind: str) -> list[dict[str, Any]]:
    events, _ = store.list(rt(store, "events"), "default")
    return [e for e in events if e["involvedObject"].get("kind") == kind]


def _only_rs(store: Any) -> dict[str, Any]:
    items, _ = store.list(rt(store, "replicasets", "apps"), "default")
    assert len(items) == 1
    return items[0]


async def test_job_and_daemonset_pods_refused_are_failed_create_events(live) -> None:
    store = live.store
    _label(store, "default", enforce="baseline")
    privileged = {"containers": [{"name": "c", "image": "busybox:1", "securityContext": {"privileged": True}}]}
    job = store.create(rt(store, "jobs", "batch"), "default", {
        "metadata": {"name": "j"}, "spec": {"template": {"spec": {"restartPolicy": "Never", **privileged}}}})
    ds = store.create(rt(store, "daemonsets", "apps"), "default", {
        "metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {
            "metadata": {"labels": {"app": "d"}}, "spec": privileged}}})
    refusal = ('is forbidden: violates PodSecurity "baseline:latest": '
               'privileged (container "c" must not set securityContext.privileged=true)')
    for owner, prefix, component in ((job, "j-", "job-controller"), (ds, "d-", "daemonset-controller")):
        events = await eventually(lambda o=owner: _events(store, o, "FailedCreate"), f"FailedCreate on {prefix}")
        assert events[0]["source"] == {"component": component}
        assert events[0]["message"].startswith(f'Error creating: pods "{prefix}')
        assert events[0]["message"].endswith(refusal)
    pods, _ = store.list(rt(store, "pods"), "default")
    assert pods == []


async def test_pod_template_naming_a_missing_service_account_fails_its_creates(live) -> None:
    store = live.store
    d = deployment("bot", replicas=1)
    d["spec"]["template"]["spec"]["serviceAccountName"] = "robot"
    store.create(rt(store, "deployments", "apps"), "default", d)
    events = await eventually(lambda: [e for e in _events_of_kind(store, "ReplicaSet") if e["reason"] == "FailedCreate"],
                              "FailedCreate on the ReplicaSet")
    assert events[0]["message"].endswith(
        '" is forbidden: error looking up service account default/robot: serviceaccount "robot" not found')
    store.create(rt(store, "serviceaccounts"), "default", {"metadata": {"name": "robot"}})
    await eventually(lambda: store.list(rt(store, "pods"), "default")[0], "the pod once the account exists", within=10)


async def test_a_new_namespace_admits_pods_at_once(live) -> None:
    """The real admission waits for the controller manager's `default` ServiceAccount; here it is
    made on the spot, so a pod created in the same breath as its namespace is admitted."""
    store = live.store
    store.create(rt(store, "namespaces"), None, {"metadata": {"name": "fresh"}})
    created = store.create(rt(store, "pods"), "fresh", {**pod("p"), "metadata": {"name": "p"}})
    assert created["spec"]["serviceAccountName"] == "default"
    assert store.get(rt(store, "serviceaccounts"), "fresh", "default")


async def test_a_terminating_namespace_refuses_pods_and_makes_no_service_account(live) -> None:
    store = live.store
    store.create(rt(store, "namespaces"), None, {"metadata": {"name": "going"}})
    store.create(rt(store, "configmaps"), "going", {"metadata": {"name": "keep", "finalizers": ["x.io/y"]}})
    store.delete(rt(store, "namespaces"), None, "going")
    with pytest.raises(ApiError) as err:
        store.create(rt(store, "pods"), "going", {**pod("p"), "metadata": {"generateName": "g-"}})
    # as kube-apiserver v1.33's NamespaceLifecycle admission answers
    assert err.value.status() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 403, "reason": "Forbidden",
        "message": 'pods "g-" is forbidden: unable to create new content in namespace going because it is being '
                   "terminated",
        "details": {"name": "g-", "kind": "pods", "causes": [{
            "reason": "NamespaceTerminating", "message": "namespace going is being terminated",
            "field": "metadata.namespace"}]}}
    defaults = live.controller("namespace-defaults")
    assert defaults.ensure_service_account("going") is None
    assert defaults.ensure_service_account("absent") is None


async def test_controllers_writing_pods_are_not_refused_for_old_violations(live) -> None:
    """A pod admitted before its namespace turned restricted keeps running: status writes, finalizer
    and label edits of the pod are not re-checked (only a changed image or container count is)."""
    store = live.store
    store.create(rt(store, "pods"), "default", {**pod("old", nodeName="edge-node-1"), "metadata": {"name": "old"}})
    warnings = _label(store, "default", enforce="restricted")
    assert warnings == ['existing pods in namespace "default" violate the new PodSecurity enforce level '
                        '"restricted:latest"',
                        "old: allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, "
                        "seccompProfile"]
    await eventually(lambda: store.get(rt(store, "pods"), "default", "old")["status"].get("phase") == "Running",
                     "the kubelet's status writes")
    store.mutate(rt(store, "pods"), "default", "old", lambda p: p["metadata"].setdefault("labels", {}).update(x="y"))


# -- pure parts ------------------------------------------------------------------------------


@pytest.mark.parametrize(("new", "old", "significant"), [
    pytest.param({"containers": [{"image": "a"}]}, {"containers": [{"image": "a"}]}, False, id="same"),
    pytest.param({"containers": [{"image": "b"}]}, {"containers": [{"image": "a"}]}, True, id="image"),
    pytest.param({"initContainers": [{"image": "b"}]}, {"initContainers": [{"image": "a"}]}, True, id="init-image"),
    pytest.param({"containers": [{"image": "a"}, {"image": "a"}]}, {"containers": [{"image": "a"}]}, True, id="count"),
    pytest.param({"containers": [{"image": "a"}], "activeDeadlineSeconds": 5, "tolerations": [{"key": "k"}]},
                 {"containers": [{"image": "a"}]}, False, id="mutable-fields"),
    pytest.param({"ephemeralContainers": [{"name": "e", "image": "a"}]}, {}, True, id="ephemeral-added"),
])
def test_significant_pod_update(new: dict, old: dict, significant: bool) -> None:
    assert significant_pod_update(new, old) is significant


def test_existing_pod_warnings_group_pods_by_reasons_in_name_order() -> None:
    """As observed on kube-apiserver v1.33 for pods a-hn, b-priv, c-bare, d-priv, e-bare..."""
    def p(name: str, **spec: Any) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}], **spec}}

    priv = {"containers": [{"name": "c", "image": "x", "securityContext": {"privileged": True}}]}
    pods = [p("a-hn", hostNetwork=True), p("b-priv", **priv), p("c-bare"), p("d-priv", **priv), p("e-bare"),
            p("f-priv", **priv)]
    rest = "allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile"
    assert existing_pod_warnings("ns", LevelVersion(RESTRICTED), pods) == [
        'existing pods in namespace "ns" violate the new PodSecurity enforce level "restricted:latest"',
        f"a-hn: host namespaces, {rest}",
        f"b-priv (and 2 other pods): privileged, {rest}",
        f"c-bare (and 1 other pod): {rest}",
    ]
    assert existing_pod_warnings("ns", LevelVersion(RESTRICTED), []) == []
