"""The default ClusterRoles and ClusterRoleBindings every real cluster starts with.

Without them a ServiceAccount token could not even read discovery: kubectl and client-go
fetch `/api`, `/apis` and `/version` before anything else, and `kubectl auth can-i` /
`kubectl auth whoami` create SelfSubjectAccessReviews / SelfSubjectReviews. A real API
server reconciles these objects at startup (label `kubernetes.io/bootstrapping:
rbac-defaults`); here `ensure` creates the ones missing, so a state file that already holds
them (or edits of them) is left alone.
"""

from __future__ import annotations

from typing import Any

import orjson

from devcluster.machinery.errors import ApiError
from devcluster.strategy.rbac import GROUP


def _meta(name: str) -> dict[str, Any]:
    return {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}}


_PUBLIC_INFO = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
_DISCOVERY = ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz",
              "/version", "/version/"]

CLUSTER_ROLES: dict[str, list[dict[str, Any]]] = {
    "cluster-admin": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                      {"nonResourceURLs": ["*"], "verbs": ["*"]}],
    "system:discovery": [{"nonResourceURLs": _DISCOVERY, "verbs": ["get"]}],
    "system:public-info-viewer": [{"nonResourceURLs": _PUBLIC_INFO, "verbs": ["get"]}],
    "system:basic-user": [
        {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
         "verbs": ["create"]},
        {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
    ],
}
# binding name (= role name) -> the groups it binds
CLUSTER_ROLE_BINDINGS: dict[str, list[str]] = {
    "cluster-admin": ["system:masters"],
    "system:discovery": ["system:authenticated"],
    "system:public-info-viewer": ["system:authenticated", "system:unauthenticated"],
    "system:basic-user": ["system:authenticated"],
}


def objects() -> list[dict[str, Any]]:
    """The bootstrap ClusterRoles, then their bindings, as API objects."""
    roles = [{"apiVersion": f"{GROUP}/v1", "kind": "ClusterRole", "metadata": _meta(name),
              "rules": rules} for name, rules in CLUSTER_ROLES.items()]
    bindings = [{"apiVersion": f"{GROUP}/v1", "kind": "ClusterRoleBinding", "metadata": _meta(name),
                 "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": name},
                 "subjects": [{"apiGroup": GROUP, "kind": "Group", "name": g} for g in groups]}
                for name, groups in CLUSTER_ROLE_BINDINGS.items()]
    return orjson.loads(orjson.dumps(roles + bindings))  # fresh dicts: the store owns what it is given


def ensure(store: Any) -> None:
    """Create every bootstrap object the store does not hold yet."""
    for obj in objects():
        rt = store.registry.for_kind(obj["apiVersion"], obj["kind"])
        try:
            store.get(rt, None, obj["metadata"]["name"])
        except ApiError:
            store.create(rt, None, obj)
