"""The rbac.authorization.k8s.io/v1 API: Role, RoleBinding, ClusterRole, ClusterRoleBinding.

These are ordinary stored resources (CRUD, watch, tables); what makes them special is that
the authorizer (`auth/authz.py`) reads them on every request made with a ServiceAccount token,
so their validation follows the real server closely: a binding that the real server would
refuse must not silently grant or withhold access here. RBAC names are path segments, not
DNS names (`system:discovery` is valid), the `roleRef` of a binding can never change, and
subjects are ServiceAccount, User or Group only. Pure: no store, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from devcluster.machinery.errors import FieldError
from devcluster.machinery.fielderrors import as_list, unsupported_value
from devcluster.machinery.resource import ResourceType

GROUP = "rbac.authorization.k8s.io"
SUBJECT_KINDS = ("ServiceAccount", "User", "Group")


def resource_types() -> list[ResourceType]:
    """The four RBAC resources, with the names a real 1.32 server publishes."""
    return [
        ResourceType(GROUP, "v1", "roles", "Role", True, singular="role"),
        ResourceType(GROUP, "v1", "rolebindings", "RoleBinding", True, singular="rolebinding"),
        ResourceType(GROUP, "v1", "clusterroles", "ClusterRole", False, singular="clusterrole"),
        ResourceType(GROUP, "v1", "clusterrolebindings", "ClusterRoleBinding", False,
                     singular="clusterrolebinding"),
    ]


class _Go:
    """A value printed the way Go's `%#v` prints it in a validation message."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


def _go_strings(values: list[Any]) -> _Go:
    return _Go("[]string{" + ", ".join(f'"{v}"' for v in values) + "}")


def _go_role_ref(ref: dict[str, Any]) -> _Go:
    return _Go(f'rbac.RoleRef{{APIGroup:"{ref.get("apiGroup", "")}", Kind:"{ref.get("kind", "")}", '
               f'Name:"{ref.get("name", "")}"}}')


# -- names --------------------------------------------------------------------------------------

def path_segment_errors(name: str) -> list[str]:
    """What is wrong with `name` as an RBAC (path segment) name."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in "/%" if c in name]


NAME_CHECKS: dict[tuple[str, str], Callable[[str], list[str]]] = {
    (GROUP, rt.resource): path_segment_errors for rt in resource_types()}


# -- defaulting ---------------------------------------------------------------------------------

def default_binding(obj: dict[str, Any]) -> None:
    """v1 defaulting: a User or Group subject without apiGroup gets the RBAC group."""
    for subject in obj.get("subjects") or []:
        if isinstance(subject, dict) and not subject.get("apiGroup") and subject.get("kind") in ("User", "Group"):
            subject["apiGroup"] = GROUP


DEFAULTERS: dict[tuple[str, str], Callable[[dict[str, Any]], None]] = {
    (GROUP, "rolebindings"): default_binding,
    (GROUP, "clusterrolebindings"): default_binding,
}


# -- validation ---------------------------------------------------------------------------------

def _rule_errors(rule: Any, path: str, namespaced: bool) -> list[FieldError]:
    rule = rule if isinstance(rule, dict) else {}
    errors = []
    if not as_list(rule.get("verbs")):
        errors.append(FieldError(f"{path}.verbs", "Required value", "verbs must contain at least one value"))
    urls = as_list(rule.get("nonResourceURLs"))
    if urls:
        if namespaced:
            errors.append(FieldError(f"{path}.nonResourceURLs", "Invalid value",
                                     "namespaced rules cannot apply to non-resource URLs", _go_strings(urls), True))
        if any(as_list(rule.get(k)) for k in ("apiGroups", "resources", "resourceNames")):
            errors.append(FieldError(f"{path}.nonResourceURLs", "Invalid value",
                                     "rules cannot apply to both regular resources and non-resource URLs",
                                     _go_strings(urls), True))
        return errors
    if not as_list(rule.get("apiGroups")):
        errors.append(FieldError(f"{path}.apiGroups", "Required value",
                                 "resource rules must supply at least one api group"))
    if not as_list(rule.get("resources")):
        errors.append(FieldError(f"{path}.resources", "Required value",
                                 "resource rules must supply at least one resource"))
    return errors


def _rules_errors(obj: dict[str, Any], namespaced: bool) -> list[FieldError]:
    return [e for i, rule in enumerate(as_list(obj.get("rules"))) for e in _rule_errors(rule, f"rules[{i}]", namespaced)]


def validate_role(obj: dict[str, Any]) -> list[FieldError]:
    return _rules_errors(obj, namespaced=True)


def validate_cluster_role(obj: dict[str, Any]) -> list[FieldError]:
    return _rules_errors(obj, namespaced=False)


def _role_ref_errors(ref: Any, kinds: tuple[str, ...]) -> list[FieldError]:
    ref = ref if isinstance(ref, dict) else {}
    errors = []
    if ref.get("apiGroup") != GROUP:
        errors.append(unsupported_value("roleRef.apiGroup", ref.get("apiGroup") or "", (GROUP,)))
    if ref.get("kind") not in kinds:
        errors.append(unsupported_value("roleRef.kind", ref.get("kind") or "", kinds))
    name = ref.get("name")
    if not name:
        errors.append(FieldError("roleRef.name", "Required value"))
    else:
        errors += [FieldError("roleRef.name", "Invalid value", m, name, True) for m in path_segment_errors(name)]
    return errors


def _subject_errors(subject: Any, path: str, namespaced: bool) -> list[FieldError]:
    s = subject if isinstance(subject, dict) else {}
    errors = [] if s.get("name") else [FieldError(f"{path}.name", "Required value")]
    kind, group = s.get("kind"), s.get("apiGroup") or ""
    if kind == "ServiceAccount":
        if group:
            errors.append(unsupported_value(f"{path}.apiGroup", group, ("",)))
        if not namespaced and not s.get("namespace"):
            errors.append(FieldError(f"{path}.namespace", "Required value"))
    elif kind in ("User", "Group"):
        if group != GROUP:
            errors.append(unsupported_value(f"{path}.apiGroup", group, (GROUP,)))
    else:
        errors.append(unsupported_value(f"{path}.kind", kind or "", SUBJECT_KINDS))
    return errors


def _binding_errors(obj: dict[str, Any], namespaced: bool) -> list[FieldError]:
    kinds = ("Role", "ClusterRole") if namespaced else ("ClusterRole",)
    errors = _role_ref_errors(obj.get("roleRef"), kinds)
    for i, subject in enumerate(as_list(obj.get("subjects"))):
        errors += _subject_errors(subject, f"subjects[{i}]", namespaced)
    return errors


def validate_role_binding(obj: dict[str, Any]) -> list[FieldError]:
    return _binding_errors(obj, namespaced=True)


def validate_cluster_role_binding(obj: dict[str, Any]) -> list[FieldError]:
    return _binding_errors(obj, namespaced=False)


def validate_binding_update(obj: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    """A binding's roleRef is immutable: to bind another role, delete and recreate the binding."""
    new_ref, old_ref = obj.get("roleRef") or {}, old.get("roleRef") or {}
    if new_ref == old_ref or not isinstance(new_ref, dict):
        return []
    return [FieldError("roleRef", "Invalid value", "cannot change roleRef", _go_role_ref(new_ref), True)]


VALIDATORS: dict[tuple[str, str], Callable[[dict[str, Any]], list[FieldError]]] = {
    (GROUP, "roles"): validate_role,
    (GROUP, "clusterroles"): validate_cluster_role,
    (GROUP, "rolebindings"): validate_role_binding,
    (GROUP, "clusterrolebindings"): validate_cluster_role_binding,
}
UPDATE_VALIDATORS: dict[tuple[str, str], Callable[[dict[str, Any], dict[str, Any]], list[FieldError]]] = {
    (GROUP, "rolebindings"): validate_binding_update,
    (GROUP, "clusterrolebindings"): validate_binding_update,
}


# -- tables -------------------------------------------------------------------------------------

def binding_cells(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    """ROLE, USERS, GROUPS, SERVICEACCOUNTS cells of a binding's table row (as kubectl shows them)."""
    ref = obj.get("roleRef") or {}
    by_kind: dict[str, list[str]] = {k: [] for k in SUBJECT_KINDS}
    for s in as_list(obj.get("subjects")):
        if isinstance(s, dict) and s.get("kind") in by_kind:
            name = s.get("name", "")
            if s["kind"] == "ServiceAccount":
                name = f"{s.get('namespace', '')}/{name}"
            by_kind[s["kind"]].append(name)
    return (f"{ref.get('kind', '')}/{ref.get('name', '')}", ", ".join(by_kind["User"]),
            ", ".join(by_kind["Group"]), ", ".join(by_kind["ServiceAccount"]))
