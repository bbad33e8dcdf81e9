"""The RBAC decision as tables: request attributes from HTTP, rule matching, bindings, 403 text."""

from __future__ import annotations

import pytest

from devcluster.auth import bootstrap_policy
from devcluster.auth.authz import (
    Attributes,
    StaticPolicy,
    UserInfo,
    authorize,
    forbidden,
    request_attributes,
    rules_for,
)

G = "rbac.authorization.k8s.io"
BOT = UserInfo("system:serviceaccount:apps:bot",
               groups=("system:serviceaccounts", "system:serviceaccounts:apps", "system:authenticated"))
ALICE = UserInfo("alice", groups=("devs", "system:authenticated"))


@pytest.mark.parametrize(("method", "path", "query", "want"), [
    pytest.param("GET", "/api/v1/namespaces/apps/pods", {}, Attributes("list", namespace="apps", api_version="v1",
                 resource="pods"), id="list"),
    pytest.param("GET", "/api/v1/namespaces/apps/pods", {"watch": "true"},
                 Attributes("watch", namespace="apps", api_version="v1", resource="pods"), id="watch"),
    pytest.param("GET", "/api/v1/namespaces/apps/pods", {"watch": "1", "fieldSelector": "metadata.name=web"},
                 Attributes("watch", namespace="apps", api_version="v1", resource="pods", name="web"),
                 id="watch-one-by-field-selector"),
    pytest.param("GET", "/api/v1/namespaces/apps/pods/web", {},
                 Attributes("get", namespace="apps", api_version="v1", resource="pods", name="web"), id="get"),
    pytest.param("GET", "/api/v1/namespaces/apps/pods/web/log", {},
                 Attributes("get", namespace="apps", api_version="v1", resource="pods", subresource="log",
                            name="web"), id="subresource"),
    pytest.param("PUT", "/apis/apps/v1/namespaces/apps/deployments/d/scale", {},
                 Attributes("update", namespace="apps", api_group="apps", api_version="v1", resource="deployments",
                            subresource="scale", name="d"), id="scale"),
    pytest.param("PATCH", "/apis/apps/v1/namespaces/apps/deployments/d", {},
                 Attributes("patch", namespace="apps", api_group="apps", api_version="v1", resource="deployments",
                            name="d"), id="patch"),
    pytest.param("POST", "/api/v1/namespaces/apps/configmaps", {},
                 Attributes("create", namespace="apps", api_version="v1", resource="configmaps"), id="create"),
    pytest.param("DELETE", "/api/v1/namespaces/apps/configmaps", {},
                 Attributes("deletecollection", namespace="apps", api_version="v1", resource="configmaps"),
                 id="deletecollection"),
    pytest.param("DELETE", "/api/v1/namespaces/apps/configmaps/c", {},
                 Attributes("delete", namespace="apps", api_version="v1", resource="configmaps", name="c"),
                 id="delete"),
    pytest.param("GET", "/api/v1/namespaces/apps", {},
                 Attributes("get", namespace="apps", api_version="v1", resource="namespaces", name="apps"),
                 id="a-namespace-is-in-itself"),
    pytest.param("PUT", "/api/v1/namespaces/apps/finalize", {},
                 Attributes("update", namespace="apps", api_version="v1", resource="namespaces", name="apps",
                            subresource="finalize"), id="namespace-finalize"),
    pytest.param("GET", "/api/v1/nodes", {}, Attributes("list", api_version="v1", resource="nodes"), id="cluster"),
    pytest.param("GET", "/apis/apps/v1", {}, Attributes("get", resource_request=False, path="/apis/apps/v1"),
                 id="group-discovery-is-a-path"),
    pytest.param("GET", "/healthz", {}, Attributes("get", resource_request=False, path="/healthz"), id="healthz"),
    pytest.param("POST", "/devcluster/faults", {}, Attributes("post", resource_request=False,
                 path="/devcluster/faults"), id="non-resource-verb-is-the-method"),
])
def test_request_attributes(method: str, path: str, query: dict, want: Attributes) -> None:
    got = request_attributes(method, path, query)
    assert got == Attributes(**_with_path(want, path))


def _with_path(a: Attributes, path: str) -> dict:
    return {f: getattr(a, f) for f in Attributes.__slots__} | {"path": path}


def role(name: str, *rules: dict, namespace: str | None = None) -> dict:
    meta = {"name": name} | ({"namespace": namespace} if namespace else {})
    return {"kind": "Role" if namespace else "ClusterRole", "metadata": meta, "rules": list(rules)}


def binding(name: str, ref: str, *subjects: dict, namespace: str | None = None, ref_kind: str = "") -> dict:
    meta = {"name": name} | ({"namespace": namespace} if namespace else {})
    kind = ref_kind or ("Role" if namespace else "ClusterRole")
    return {"kind": "RoleBinding" if namespace else "ClusterRoleBinding", "metadata": meta,
            "roleRef": {"apiGroup": G, "kind": kind, "name": ref}, "subjects": list(subjects)}


def sa(name: str, namespace: str | None = None) -> dict:
    return {"kind": "ServiceAccount", "name": name} | ({"namespace": namespace} if namespace else {})


def rule(verbs: list, resources: list, groups: list | None = None, names: list | None = None) -> dict:
    out = {"verbs": verbs, "apiGroups": groups if groups is not None else [""], "resources": resources}
    return out | ({"resourceNames": names} if names else {})


POLICY = StaticPolicy([
    *bootstrap_policy.objects(),
    role("pod-reader", rule(["get", "list", "watch"], ["pods", "pods/log"]), namespace="apps"),
    binding("bot-reads-pods", "pod-reader", sa("bot"), namespace="apps"),
    role("scaler", rule(["get", "update"], ["deployments/scale"], ["apps"])),
    binding("bot-scales", "scaler", sa("bot", "apps"), namespace="apps", ref_kind="ClusterRole"),
    role("status-writer", rule(["patch"], ["*/status"], ["*"])),
    binding("devs-write-status", "status-writer", {"kind": "Group", "name": "devs", "apiGroup": G}),
    role("one-config", rule(["get", "update"], ["configmaps"], names=["settings"]), namespace="apps"),
    binding("alice-one-config", "one-config", {"kind": "User", "name": "alice", "apiGroup": G}, namespace="apps"),
    role("metrics", {"verbs": ["get"], "nonResourceURLs": ["/metrics", "/logs/*"]}),
    binding("alice-metrics", "metrics", {"kind": "User", "name": "alice", "apiGroup": G}),
    binding("dangling", "no-such-role", sa("bot"), namespace="apps"),
])


def res(verb: str, resource: str, *, ns: str = "apps", group: str = "", sub: str = "", name: str = "") -> Attributes:
    return Attributes(verb, namespace=ns, api_group=group, resource=resource, subresource=sub, name=name)


def url(verb: str, p: str) -> Attributes:
    return Attributes(verb, resource_request=False, path=p)


@pytest.mark.parametrize(("user", "attrs", "allowed"), [
    pytest.param(BOT, res("list", "pods"), True, id="role-binding-grants-in-its-namespace"),
    pytest.param(BOT, res("list", "pods", ns="other"), False, id="not-in-another-namespace"),
    pytest.param(BOT, res("list", "pods", ns=""), False, id="not-cluster-wide"),
    pytest.param(BOT, res("delete", "pods", name="p"), False, id="verb-not-granted"),
    pytest.param(BOT, res("get", "pods", sub="log", name="p"), True, id="subresource-granted"),
    pytest.param(BOT, res("get", "pods", sub="exec", name="p"), False, id="other-subresource-not"),
    pytest.param(BOT, res("update", "deployments", group="apps", sub="scale", name="d"), True,
                 id="cluster-role-through-role-binding"),
    pytest.param(BOT, res("update", "deployments", group="apps", name="d"), False, id="scale-is-not-the-object"),
    pytest.param(BOT, res("get", "pods", group="apps"), False, id="api-group-must-match"),
    pytest.param(ALICE, res("patch", "deployments", group="apps", sub="status", name="d"), True,
                 id="group-subject-and-star-subresource"),
    pytest.param(ALICE, res("patch", "deployments", group="apps", name="d"), False, id="star-status-not-main"),
    pytest.param(ALICE, res("get", "configmaps", name="settings"), True, id="resource-name-granted"),
    pytest.param(ALICE, res("get", "configmaps", name="other"), False, id="other-name-not"),
    pytest.param(ALICE, res("list", "configmaps"), False, id="resource-names-never-grant-list"),
    pytest.param(ALICE, url("get", "/metrics"), True, id="non-resource-url"),
    pytest.param(ALICE, url("get", "/logs/kubelet.log"), True, id="non-resource-prefix"),
    pytest.param(ALICE, url("post", "/metrics"), False, id="non-resource-verb"),
    pytest.param(BOT, url("get", "/api"), True, id="discovery-for-everyone-authenticated"),
    pytest.param(BOT, url("get", "/apis/apps/v1"), True, id="group-discovery"),
    pytest.param(BOT, url("get", "/version"), True, id="version"),
    pytest.param(BOT, url("get", "/healthz"), True, id="healthz"),
    pytest.param(BOT, url("get", "/devcluster/faults"), False, id="admin-paths-not"),
    pytest.param(BOT, res("create", "selfsubjectaccessreviews", group="authorization.k8s.io", ns=""), True,
                 id="basic-user-self-review"),
    pytest.param(BOT, res("create", "subjectaccessreviews", group="authorization.k8s.io", ns=""), False,
                 id="not-others-review"),
    pytest.param(UserInfo("system:serviceaccount:other:bot", groups=("system:authenticated",)),
                 res("list", "pods"), False, id="same-sa-name-other-namespace"),
    pytest.param(UserInfo("root", groups=("system:masters",)), res("delete", "nodes", ns=""), True, id="masters"),
])
def test_decision(user: UserInfo, attrs: Attributes, allowed: bool) -> None:
    assert authorize(user, attrs, POLICY).allowed is allowed


def test_allowed_reason_names_the_binding() -> None:
    got = authorize(BOT, res("list", "pods"), POLICY)
    assert got.reason == 'RBAC: allowed by RoleBinding "bot-reads-pods/apps" of Role "pod-reader" to ServiceAccount "bot/apps"'


def test_denial_names_a_missing_role() -> None:
    got = authorize(BOT, res("delete", "pods", name="p"), POLICY)
    assert got == type(got)(False, f'RBAC: role.{G} "no-such-role" not found')


@pytest.mark.parametrize(("attrs", "message", "details"), [
    pytest.param(res("list", "pods"), 'pods is forbidden: User "alice" cannot list resource "pods" in API group "" '
                 'in the namespace "apps"', {"kind": "pods"}, id="collection"),
    pytest.param(res("get", "deployments", group="apps", sub="scale", name="d"),
                 'deployments.apps "d" is forbidden: User "alice" cannot get resource "deployments/scale" in API '
                 'group "apps" in the namespace "apps"', {"name": "d", "group": "apps", "kind": "deployments"},
                 id="named-subresource"),
    pytest.param(res("list", "nodes", ns=""), 'nodes is forbidden: User "alice" cannot list resource "nodes" in API '
                 'group "" at the cluster scope', {"kind": "nodes"}, id="cluster-scope"),
    pytest.param(url("get", "/metrics/x"), 'forbidden: User "alice" cannot get path "/metrics/x"', {}, id="path"),
])
def test_forbidden_status(attrs: Attributes, message: str, details: dict) -> None:
    status = forbidden(ALICE, attrs).status()
    assert (status["code"], status["reason"], status["message"], status["details"]) == (403, "Forbidden", message,
                                                                                       details)


def test_rules_for_lists_what_applies() -> None:
    got = rules_for(ALICE, "apps", POLICY)
    assert rule(["get", "update"], ["configmaps"], names=["settings"]) in got
    assert rule(["patch"], ["*/status"], ["*"]) in got
    assert not any("pods" in (r.get("resources") or []) for r in got)
