"""RBAC authorization: who may do what, decided from the stored Roles and bindings.

Three pure steps, each testable on its own:

- `request_attributes(method, path, query)`: what a request asks to do, as the API server's
  request-info parsing sees it (verb from the method, `get` vs `list` vs `watch`,
  `deletecollection`, the namespace of `/api/v1/namespaces/<ns>` itself, subresources,
  non-resource paths such as `/healthz` and discovery).
- `authorize(user, attrs, policy)`: the RBAC decision. `system:masters` may do anything (as
  on a real server, before RBAC is consulted); otherwise a ClusterRoleBinding anywhere or a
  RoleBinding in the request's namespace must bind the user (as ServiceAccount, User or one
  of its Groups) to a Role/ClusterRole with a rule granting the verb on the resource.
- `forbidden(user, attrs, reason)`: the 403 Status with the real server's message.

`Policy` is where the Roles and bindings come from: `StorePolicy` reads the store (what the
API server uses), `StaticPolicy` takes a list of objects (for tables of decisions).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from devcluster.machinery.errors import ApiError
from devcluster.strategy.rbac import GROUP

MASTERS = "system:masters"
_METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch",
                 "DELETE": "delete"}
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


@dataclass(frozen=True, slots=True)
class UserInfo:
    """An authenticated user: what TokenReview and SelfSubjectReview report."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"username": self.name}
        if self.uid:
            out["uid"] = self.uid
        out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out


@dataclass(frozen=True, slots=True)
class Attributes:
    """What one request asks to do (a resource request, or a non-resource path)."""

    verb: str
    resource_request: bool = True
    namespace: str = ""
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    path: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""


class Policy(Protocol):
    """Read access to the RBAC objects a decision needs."""

    def cluster_role_bindings(self) -> Iterable[dict[str, Any]]: ...

    def role_bindings(self, namespace: str) -> Iterable[dict[str, Any]]: ...

    def cluster_role(self, name: str) -> dict[str, Any] | None: ...

    def role(self, namespace: str, name: str) -> dict[str, Any] | None: ...


# -- request attributes -----------------------------------------------------------------------

def request_attributes(method: str, path: str, query: Mapping[str, str]) -> Attributes:
    """The authorization attributes of an HTTP request, as the real request-info parser builds them."""
    parts = [p for p in path.strip("/").split("/")] if path.strip("/") else []
    verb = _METHOD_VERBS.get(method.upper(), method.lower())
    if parts[:1] == ["api"] and len(parts) >= 3:
        return _resource_attributes(verb, "", parts[1], parts[2:], query, path)
    if parts[:1] == ["apis"] and len(parts) >= 4:
        return _resource_attributes(verb, parts[1], parts[2], parts[3:], query, path)
    return Attributes(verb=method.lower(), resource_request=False, path=path)


def _resource_attributes(verb: str, group: str, version: str, parts: list[str], query: Mapping[str, str],
                         path: str) -> Attributes:
    if parts[0] == "watch" and len(parts) > 1:
        verb, parts = "watch", parts[1:]
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) > 1 else ""
    subresource = parts[2] if len(parts) > 2 else ""
    if not name and verb == "get":
        verb = "watch" if query.get("watch") in ("1", "t", "T", "true", "TRUE", "True") else "list"
    elif not name and verb == "delete":
        verb = "deletecollection"
    if verb in ("list", "watch") and not name:
        name = _name_from_field_selector(query.get("fieldSelector"))
    return Attributes(verb=verb, namespace=namespace, api_group=group, api_version=version, resource=resource,
                      subresource=subresource, name=name, path=path)


def _name_from_field_selector(text: str | None) -> str:
    """`metadata.name=x` in a list/watch field selector names the object (kubectl get x -w)."""
    for term in (text or "").split(","):
        key, sep, value = term.partition("==") if "==" in term else term.partition("=")
        if sep and not key.endswith("!") and key.strip() == "metadata.name":
            return value.strip()
    return ""


# -- the decision -----------------------------------------------------------------------------

def authorize(user: UserInfo, attrs: Attributes, policy: Policy) -> Decision:
    """Allowed when the user is in system:masters or a binding grants the request (RBAC)."""
    if MASTERS in user.groups:
        return Decision(True)
    errors: list[str] = []
    for binding in policy.cluster_role_bindings():
        found = _grant(user, attrs, binding, "", policy, errors)
        if found:
            return Decision(True, found)
    if attrs.namespace:
        for binding in policy.role_bindings(attrs.namespace):
            found = _grant(user, attrs, binding, attrs.namespace, policy, errors)
            if found:
                return Decision(True, found)
    return Decision(False, _denial_reason(errors))


def _denial_reason(errors: list[str]) -> str:
    if not errors:
        return ""
    return "RBAC: " + (errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")


def _grant(user: UserInfo, attrs: Attributes, binding: dict[str, Any], namespace: str, policy: Policy,
           errors: list[str]) -> str:
    """The "allowed by" reason when `binding` binds the user to a role granting `attrs`, else ""."""
    subject = next((s for s in binding.get("subjects") or [] if _applies(s, user, namespace)), None)
    if subject is None:
        return ""
    ref = binding.get("roleRef") or {}
    role = _role(ref, namespace, policy)
    if role is None:
        kind = "role" if ref.get("kind") == "Role" else "clusterrole"
        errors.append(f'{kind}.{GROUP} "{ref.get("name", "")}" not found')
        return ""
    if not any(rule_allows(attrs, rule) for rule in role.get("rules") or []):
        return ""
    return "RBAC: allowed by " + _describe(binding, namespace, subject)


def _role(ref: dict[str, Any], namespace: str, policy: Policy) -> dict[str, Any] | None:
    if ref.get("kind") == "Role":
        return policy.role(namespace, ref.get("name", "")) if namespace else None
    return policy.cluster_role(ref.get("name", ""))


def _applies(subject: dict[str, Any], user: UserInfo, namespace: str) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return subject.get("name") == user.name
    if kind == "Group":
        return subject.get("name") in user.groups
    if kind == "ServiceAccount":
        sa_namespace = subject.get("namespace") or namespace
        return bool(sa_namespace) and user.name == f"system:serviceaccount:{sa_namespace}:{subject.get('name')}"
    return False


def _describe(binding: dict[str, Any], namespace: str, subject: dict[str, Any]) -> str:
    ref, name = binding.get("roleRef") or {}, binding["metadata"]["name"]
    who = f'{subject.get("kind")} "{subject.get("name")}"'
    if subject.get("kind") == "ServiceAccount":
        who = f'ServiceAccount "{subject.get("name")}/{subject.get("namespace") or namespace}"'
    if namespace:
        return f'RoleBinding "{name}/{namespace}" of {ref.get("kind")} "{ref.get("name")}" to {who}'
    return f'ClusterRoleBinding "{name}" of {ref.get("kind")} "{ref.get("name")}" to {who}'


def rule_allows(attrs: Attributes, rule: dict[str, Any]) -> bool:
    """Whether one PolicyRule grants the request."""
    if not _has(rule.get("verbs"), attrs.verb):
        return False
    if not attrs.resource_request:
        return any(_url_matches(u, attrs.path) for u in rule.get("nonResourceURLs") or [])
    if not _has(rule.get("apiGroups"), attrs.api_group):
        return False
    if not _resource_matches(rule.get("resources") or [], attrs.resource, attrs.subresource):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def _has(values: Any, wanted: str) -> bool:
    return isinstance(values, list) and ("*" in values or wanted in values)


def _resource_matches(resources: list[str], resource: str, subresource: str) -> bool:
    combined = f"{resource}/{subresource}" if subresource else resource
    for r in resources:
        if r == "*" or r == combined or (subresource and r == f"*/{subresource}"):
            return True
    return False


def _url_matches(rule_url: str, path: str) -> bool:
    if rule_url == "*" or rule_url == path:
        return True
    return rule_url.endswith("*") and path.startswith(rule_url[:-1])


# -- the 403 ----------------------------------------------------------------------------------

def forbidden(user: UserInfo, attrs: Attributes, reason: str = "") -> ApiError:
    """The real server's 403: `<resource>.<group> "<name>" is forbidden: User "<u>" cannot ...`."""
    if not attrs.resource_request:
        message = f'forbidden: User "{user.name}" cannot {attrs.verb} path "{attrs.path}"'
        return ApiError(403, "Forbidden", message + (f": {reason}" if reason else ""), {})
    resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    where = (f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope")
    why = (f'User "{user.name}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.api_group}" '
           f"{where}" + (f": {reason}" if reason else ""))
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    head = f'{qualified} "{attrs.name}" is forbidden' if attrs.name else f"{qualified} is forbidden"
    details: dict[str, Any] = {}
    if attrs.name:
        details["name"] = attrs.name
    if attrs.api_group:
        details["group"] = attrs.api_group
    details["kind"] = attrs.resource
    return ApiError(403, "Forbidden", f"{head}: {why}", details)


# -- policies ---------------------------------------------------------------------------------

class StorePolicy:
    """The RBAC objects of a store (what the API server authorizes with)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        reg = store.registry
        self._crb, self._rb, self._cr, self._r = (
            reg.lookup(group=GROUP, version="v1", resource=r)
            for r in ("clusterrolebindings", "rolebindings", "clusterroles", "roles"))

    def cluster_role_bindings(self) -> Iterable[dict[str, Any]]:
        return self._store.list(self._crb, None)[0]

    def role_bindings(self, namespace: str) -> Iterable[dict[str, Any]]:
        return self._store.list(self._rb, namespace)[0]

    def cluster_role(self, name: str) -> dict[str, Any] | None:
        return self._get(self._cr, None, name)

    def role(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(self._r, namespace, name)

    def _get(self, rt: Any, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self._store.get(rt, namespace, name)
        except ApiError:
            return None


class StaticPolicy:
    """Policy from a list of RBAC objects (kind + metadata), for pure decision tables."""

    def __init__(self, objects: Iterable[dict[str, Any]]) -> None:
        self._objects = list(objects)

    def _of(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [o for o in self._objects if o.get("kind") == kind
                and (namespace is None or (o.get("metadata") or {}).get("namespace") == namespace)]

    def cluster_role_bindings(self) -> Iterable[dict[str, Any]]:
        return self._of("ClusterRoleBinding")

    def role_bindings(self, namespace: str) -> Iterable[dict[str, Any]]:
        return self._of("RoleBinding", namespace)

    def cluster_role(self, name: str) -> dict[str, Any] | None:
        return next((o for o in self._of("ClusterRole") if o["metadata"]["name"] == name), None)

    def role(self, namespace: str, name: str) -> dict[str, Any] | None:
        return next((o for o in self._of("Role", namespace) if o["metadata"]["name"] == name), None)


def rules_for(user: UserInfo, namespace: str, policy: Policy) -> list[dict[str, Any]]:
    """Every rule granted to the user cluster-wide or in `namespace` (a SelfSubjectRulesReview)."""
    out: list[dict[str, Any]] = []
    scopes: list[tuple[Iterable[dict[str, Any]], str]] = [(policy.cluster_role_bindings(), "")]
    if namespace:
        scopes.append((policy.role_bindings(namespace), namespace))
    for bindings, ns in scopes:
        for binding in bindings:
            if not any(_applies(s, user, ns) for s in binding.get("subjects") or []):
                continue
            role = _role(binding.get("roleRef") or {}, ns, policy)
            out += (role or {}).get("rules") or []
    return out
