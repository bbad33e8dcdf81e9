"""Validation of object metadata and of the core and apps kinds (spec §4.8), with the real server's
field paths and messages: labels and selectors, pods and pod templates, Deployments,
ReplicaSets, Services, Leases.

Everything returns a list of `FieldError`s; the store turns a non-empty list into one
422 `Invalid` with `errors.invalid`. `dispatch.py` picks the validators of a kind; the
workload kinds (`workloads.py`) build on the label, selector and pod-spec checks here.
"""

from __future__ import annotations

import re
from typing import Any

from devcluster.machinery import quantity
from devcluster.machinery.errors import FieldError
from devcluster.machinery.fielderrors import (
    as_list,
    as_map,
    go_label_selector,
    go_string_map,
    go_type,
    invalid_value,
    is_int,
    non_negative,
    port_number,
    required_value,
    unique_name,
    unsupported_value,
)
from devcluster.machinery.names import (
    dns1035_label_errors,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    label_value_errors,
    qualified_name_errors,
)
from devcluster.machinery.selectors import label_selector_from_object
from devcluster.strategy import configdata, rbac
from devcluster.strategy.ownerrefs import validate_owner_references

# --------------------------------------------------------------------------- labels

def validate_labels(labels: Any, path: str) -> list[FieldError]:
    """Keys and values of a label map; both kinds of error are reported at the map's path."""
    if labels is None:
        return []
    if not isinstance(labels, dict):
        return [invalid_value(path, go_type(labels), "must be a map of string keys to string values")]
    out: list[FieldError] = []
    for key, value in labels.items():
        out.extend(invalid_value(path, key, m) for m in qualified_name_errors(key))
        if not isinstance(value, str):
            out.append(invalid_value(path, value, "label values must be strings"))
            continue
        out.extend(invalid_value(path, value, m) for m in label_value_errors(value))
    return out


_PROTOCOLS = ("SCTP", "TCP", "UDP")


# --------------------------------------------------------------------------- metadata

# Resources whose names are DNS labels rather than subdomains.
_NAME_CHECKS = {
    ("", "namespaces"): dns1123_label_errors,
    ("", "services"): dns1035_label_errors,
    **rbac.NAME_CHECKS,
}


def validate_metadata(rt: Any, obj: dict) -> list[FieldError]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return [required_value("metadata")]
    errors: list[FieldError] = []
    name = meta.get("name")
    if not name:
        if not meta.get("generateName"):
            errors.append(required_value("metadata.name", "name or generateName is required"))
    elif not isinstance(name, str):
        errors.append(invalid_value("metadata.name", name, "must be a string"))
    else:
        check = _NAME_CHECKS.get((rt.group, rt.resource), dns1123_subdomain_errors)
        errors.extend(invalid_value("metadata.name", name, m) for m in check(name))
    errors.extend(validate_labels(meta.get("labels"), "metadata.labels"))
    errors.extend(_validate_annotations(meta.get("annotations")))
    errors.extend(validate_owner_references(meta.get("ownerReferences")))
    return errors


def _validate_annotations(annotations: Any) -> list[FieldError]:
    if annotations is None:
        return []
    if not isinstance(annotations, dict):
        return [invalid_value("metadata.annotations", go_type(annotations), "must be a map of strings")]
    out = []
    for key, value in annotations.items():
        out.extend(invalid_value("metadata.annotations", key, m) for m in qualified_name_errors(key.lower()))
        if not isinstance(value, str):
            out.append(invalid_value(f"metadata.annotations[{key}]", value, "must be a string"))
    return out


# --------------------------------------------------------------------------- pods


def validate_pod_spec(spec: Any, path: str, *, restart_policies: tuple[str, ...] = ("Always", "OnFailure", "Never"),
                      ) -> list[FieldError]:
    """A PodSpec at `path` (`spec` for pods, `spec.template.spec` for templates)."""
    if not isinstance(spec, dict):
        return [required_value(path)]
    errors: list[FieldError] = []
    names: set[str] = set()
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        errors.append(required_value(f"{path}.containers"))
    for field in ("initContainers", "containers"):
        for i, c in enumerate(as_list(spec.get(field))):
            errors.extend(_validate_container(c, f"{path}.{field}[{i}]", names))
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in restart_policies:
        errors.append(unsupported_value(f"{path}.restartPolicy", policy, restart_policies))
    errors.extend(_unique_names(as_list(spec.get("volumes")), f"{path}.volumes"))
    return errors


def _validate_container(c: Any, path: str, seen: set[str]) -> list[FieldError]:
    if not isinstance(c, dict):
        return [invalid_value(path, go_type(c), "must be an object")]
    errors: list[FieldError] = []
    name = c.get("name")
    if not name:
        errors.append(required_value(f"{path}.name"))
    elif not isinstance(name, str):
        errors.append(invalid_value(f"{path}.name", name, "must be a string"))
    elif name in seen:
        errors.append(FieldError(f"{path}.name", "Duplicate value", "", name, True))
    else:
        seen.add(name)
        errors.extend(invalid_value(f"{path}.name", name, m) for m in dns1123_label_errors(name))
    if not c.get("image"):
        errors.append(required_value(f"{path}.image"))
    for j, port in enumerate(as_list(c.get("ports"))):
        errors.extend(_validate_container_port(port, f"{path}.ports[{j}]"))
    for j, env in enumerate(as_list(c.get("env"))):
        if not as_map(env).get("name"):
            errors.append(required_value(f"{path}.env[{j}].name"))
    return errors + _requests_within_limits(as_map(c.get("resources")), f"{path}.resources.requests")


def _requests_within_limits(resources: dict, path: str) -> list[FieldError]:
    """A request above its own limit (limits alone default the requests, so equal is fine).
    kube-apiserver lists these in Go map order; here in the order of the names."""
    requests, limits = as_map(resources.get("requests")), as_map(resources.get("limits"))
    errors: list[FieldError] = []
    for name in sorted(set(requests) & set(limits)):
        try:
            over = quantity.parse(requests[name])[0] > quantity.parse(limits[name])[0]
        except quantity.QuantityError:
            continue  # reported where the quantity was decoded
        if over:
            errors.append(invalid_value(path, quantity.canonical(requests[name]), f"must be less than or equal to "
                                   f"{name} limit of {quantity.canonical(limits[name])}"))
    return errors


def _validate_container_port(port: Any, path: str) -> list[FieldError]:
    port = as_map(port)
    errors = port_number(port.get("containerPort"), f"{path}.containerPort")
    protocol = port.get("protocol")
    if protocol is not None and protocol not in _PROTOCOLS:
        errors.append(unsupported_value(f"{path}.protocol", protocol, _PROTOCOLS))
    return errors


def _unique_names(items: list, path: str) -> list[FieldError]:
    seen: set[str] = set()
    return [e for i, item in enumerate(items) for e in unique_name(as_map(item).get("name"), f"{path}[{i}].name", seen)]


def _validate_pod(obj: dict) -> list[FieldError]:
    return validate_pod_spec(obj.get("spec"), "spec")


_POD_UPDATE_DETAIL = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def _validate_pod_update(obj: dict, old: dict) -> list[FieldError]:
    new_spec, old_spec = as_map(obj.get("spec")), as_map(old.get("spec"))
    if _masked_pod_spec(new_spec, old_spec) != old_spec:
        return [FieldError("spec", "Forbidden", _POD_UPDATE_DETAIL)]
    return []


def _masked_pod_spec(new: dict, old: dict) -> dict:
    """`new` with every field a pod update may change set back to its value in `old`."""
    masked = dict(new)
    for field in ("containers", "initContainers"):
        new_list, old_list = as_list(new.get(field)), as_list(old.get(field))
        if len(new_list) == len(old_list) and new_list:
            masked[field] = [_with_image(n, o) for n, o in zip(new_list, old_list, strict=True)]
    for field in ("activeDeadlineSeconds", "terminationGracePeriodSeconds"):
        _restore(masked, old, field)
    old_tol, new_tol = as_list(old.get("tolerations")), as_list(new.get("tolerations"))
    if all(t in new_tol for t in old_tol):
        _restore(masked, old, "tolerations")
    if not old.get("nodeName"):  # binding an unscheduled pod is the one allowed nodeName change
        _restore(masked, old, "nodeName")
    return masked


def _with_image(new: Any, old: Any) -> Any:
    if isinstance(new, dict) and isinstance(old, dict):
        out = dict(new)
        _restore(out, old, "image")
        return out
    return new


def _restore(target: dict, source: dict, field: str) -> None:
    if field in source:
        target[field] = source[field]
    else:
        target.pop(field, None)


# --------------------------------------------------------------------------- deployments, replicasets

_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def validate_label_selector(sel: Any, path: str) -> list[FieldError]:
    """A metav1.LabelSelector object at `path`."""
    if not isinstance(sel, dict):
        return [invalid_value(path, go_type(sel), "must be an object")]
    errors = validate_labels(sel.get("matchLabels"), f"{path}.matchLabels")
    for i, expr in enumerate(as_list(sel.get("matchExpressions"))):
        errors.extend(_validate_requirement(as_map(expr), f"{path}.matchExpressions[{i}]"))
    return errors


def _validate_requirement(expr: dict, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    key = expr.get("key")
    if not isinstance(key, str) or not key:
        errors.append(required_value(f"{path}.key"))
    else:
        errors.extend(invalid_value(f"{path}.key", key, m) for m in qualified_name_errors(key))
    op, values = expr.get("operator"), expr.get("values")
    if op in ("In", "NotIn") and not values:
        errors.append(required_value(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
    elif op in ("Exists", "DoesNotExist") and values:
        errors.append(FieldError(f"{path}.values", "Forbidden",
                                 "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
    elif op not in _SELECTOR_OPERATORS:
        errors.append(invalid_value(f"{path}.operator", op, "not a valid selector operator"))
    return errors


def selector_is_empty(sel: dict) -> bool:
    return not sel.get("matchLabels") and not sel.get("matchExpressions")


def _validate_workload(obj: dict, kind_word: str) -> list[FieldError]:
    """Shared by Deployment and ReplicaSet: replicas, selector, template."""
    spec = as_map(obj.get("spec"))
    errors = non_negative(spec.get("replicas"), "spec.replicas")
    errors += non_negative(spec.get("minReadySeconds"), "spec.minReadySeconds")
    sel = spec.get("selector")
    if sel is None:
        errors.append(required_value("spec.selector"))
    else:
        sel_errors = validate_label_selector(sel, "spec.selector")
        errors += sel_errors
        if isinstance(sel, dict) and selector_is_empty(sel):
            errors.append(invalid_value("spec.selector", go_label_selector(sel), f"empty selector is invalid for {kind_word}"))
        elif not sel_errors:
            errors += template_matches(sel, spec.get("template"))
    errors += _validate_template(spec.get("template"))
    return errors


def template_matches(sel: dict, template: Any) -> list[FieldError]:
    labels = as_map(template).get("metadata", {}).get("labels") if isinstance(template, dict) else None
    if not label_selector_from_object(sel).matches(labels if isinstance(labels, dict) else None):
        shown = go_string_map(labels if isinstance(labels, dict) else None)
        return [invalid_value("spec.template.metadata.labels", shown, "`selector` does not match template `labels`")]
    return []


def _validate_template(template: Any) -> list[FieldError]:
    if not isinstance(template, dict):
        return [required_value("spec.template")]
    errors = validate_labels(as_map(template.get("metadata")).get("labels"), "spec.template.metadata.labels")
    spec = template.get("spec")
    errors += validate_pod_spec(spec, "spec.template.spec", restart_policies=("Always",))
    if isinstance(spec, dict) and spec.get("activeDeadlineSeconds") is not None:
        errors.append(FieldError("spec.template.spec.activeDeadlineSeconds", "Forbidden",
                                 "activeDeadlineSeconds in ReplicaSet is not Supported"))
    return errors


_STRATEGIES = ("Recreate", "RollingUpdate")


def _validate_deployment(obj: dict) -> list[FieldError]:
    errors = _validate_workload(obj, "deployment")
    spec = as_map(obj.get("spec"))
    errors += non_negative(spec.get("revisionHistoryLimit"), "spec.revisionHistoryLimit")
    strategy = as_map(spec.get("strategy"))
    kind = strategy.get("type")
    if kind is not None and kind not in _STRATEGIES:
        errors.append(unsupported_value("spec.strategy.type", kind, _STRATEGIES))
    if kind == "Recreate" and strategy.get("rollingUpdate") is not None:
        errors.append(FieldError("spec.strategy.rollingUpdate", "Forbidden",
                                 "may not be specified when strategy `type` is 'Recreate'"))
    return errors


def _validate_replicaset(obj: dict) -> list[FieldError]:
    # The real server words the empty-selector error "for deployment" for ReplicaSets too.
    return _validate_workload(obj, "deployment")


def _validate_selector_update(obj: dict, old: dict) -> list[FieldError]:
    new_sel = as_map(obj.get("spec")).get("selector")
    if new_sel != as_map(old.get("spec")).get("selector"):
        return [invalid_value("spec.selector", go_label_selector(new_sel), "field is immutable")]
    return []


# --------------------------------------------------------------------------- services, leases

_SERVICE_TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
_IANA_SVC_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


def _validate_service(obj: dict) -> list[FieldError]:
    spec = as_map(obj.get("spec"))
    errors: list[FieldError] = []
    kind = spec.get("type", "ClusterIP")
    if kind not in _SERVICE_TYPES:
        errors.append(unsupported_value("spec.type", kind, _SERVICE_TYPES))
    ports = as_list(spec.get("ports"))
    if not ports and kind != "ExternalName" and spec.get("clusterIP") != "None":
        errors.append(required_value("spec.ports"))
    if kind == "ExternalName" and not spec.get("externalName"):
        errors.append(required_value("spec.externalName"))
    names: set[str] = set()
    for i, port in enumerate(ports):
        errors += _validate_service_port(as_map(port), f"spec.ports[{i}]", names, require_name=len(ports) > 1)
    return errors


def _validate_service_port(port: dict, path: str, names: set[str], *, require_name: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    name = port.get("name")
    if not name:
        if require_name:
            errors.append(required_value(f"{path}.name"))
    elif name in names:
        errors.append(FieldError(f"{path}.name", "Duplicate value", "", name, True))
    else:
        names.add(name)
        errors += [invalid_value(f"{path}.name", name, m) for m in dns1123_label_errors(name)]
    errors += port_number(port.get("port"), f"{path}.port")
    protocol = port.get("protocol")
    if protocol is not None and protocol not in _PROTOCOLS:
        errors.append(unsupported_value(f"{path}.protocol", protocol, _PROTOCOLS))
    target = port.get("targetPort")
    if isinstance(target, str):
        if not (len(target) <= 15 and _IANA_SVC_NAME.fullmatch(target) and re.search("[a-z]", target)):
            errors.append(invalid_value(f"{path}.targetPort", target, "must contain only alpha-numeric characters "
                                   "(a-z, 0-9), and hyphens (-), at most 15 characters, and at least one letter"))
    elif target is not None and target != 0:
        errors += port_number(target, f"{path}.targetPort")
    return errors


def _validate_lease(obj: dict) -> list[FieldError]:
    spec = as_map(obj.get("spec"))
    errors: list[FieldError] = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not is_int(duration) or duration <= 0):
        errors.append(invalid_value("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    errors += non_negative(spec.get("leaseTransitions"), "spec.leaseTransitions")
    return errors


# --------------------------------------------------------------------------- by kind

VALIDATORS = {
    ("", "pods"): _validate_pod,
    ("apps", "deployments"): _validate_deployment,
    ("apps", "replicasets"): _validate_replicaset,
    ("", "services"): _validate_service,
    ("coordination.k8s.io", "leases"): _validate_lease,
    configdata.SECRET_KEY: configdata.validate_secret,
    **rbac.VALIDATORS,
}
UPDATE_VALIDATORS = {
    ("", "pods"): _validate_pod_update,
    ("apps", "deployments"): _validate_selector_update,
    ("apps", "replicasets"): _validate_selector_update,
    **rbac.UPDATE_VALIDATORS,
}
