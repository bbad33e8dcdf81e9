"""Built-in object validation (spec §4.8), with the real server's field paths and messages.

Everything returns a list of `FieldError`s; the store turns a non-empty list into one
422 `Invalid` with `errors.invalid`. The name-syntax checks at the top are shared with
the selector parser, which reports bad keys and values with the same words.
"""

from __future__ import annotations

import re
from typing import Any

from devcluster import configdata, quantity, rbac
from devcluster.errors import FieldError
from devcluster.ownerrefs import validate_owner_references
from devcluster.schema import structural_field_errors

# --------------------------------------------------------------------------- name syntax

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = "(" + _QNAME_FMT + ")?"

_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1035_LABEL_RE = re.compile(_DNS1035_LABEL_FMT)
_QNAME_RE = re.compile(_QNAME_FMT)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)

_QNAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character"
)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """The apimachinery wording: examples are each followed by `, ` and joined by ` or `."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def dns1123_label_errors(value: str) -> list[str]:
    errs = [_max_len(63)] if len(value) > 63 else []
    if not _DNS1123_LABEL_RE.fullmatch(value):
        errs.append(_regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
            "and must start and end with an alphanumeric character",
            _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def dns1123_subdomain_errors(value: str) -> list[str]:
    errs = [_max_len(253)] if len(value) > 253 else []
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(_regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
            "or '.', and must start and end with an alphanumeric character",
            _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def dns1035_label_errors(value: str) -> list[str]:
    errs = [_max_len(63)] if len(value) > 63 else []
    if not _DNS1035_LABEL_RE.fullmatch(value):
        errs.append(_regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
            "an alphabetic character, and end with an alphanumeric character",
            _DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errs


def qualified_name_errors(value: str) -> list[str]:
    """Label keys, annotation keys: `[prefix/]name` (apimachinery IsQualifiedName)."""
    parts = value.split("/")
    errs: list[str] = []
    if len(parts) > 2:
        return ["a qualified name " + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in dns1123_subdomain_errors(prefix))
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + _max_len(63))
    if not _QNAME_RE.fullmatch(name):
        errs.append("name part " + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def label_value_errors(value: str) -> list[str]:
    errs = [_max_len(63)] if len(value) > 63 else []
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append(_regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
            "or '.', and must start and end with an alphanumeric character",
            _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def validate_labels(labels: Any, path: str) -> list[FieldError]:
    """Keys and values of a label map; both kinds of error are reported at the map's path."""
    if labels is None:
        return []
    if not isinstance(labels, dict):
        return [_invalid(path, _go_type(labels), "must be a map of string keys to string values")]
    out: list[FieldError] = []
    for key, value in labels.items():
        out.extend(_invalid(path, key, m) for m in qualified_name_errors(key))
        if not isinstance(value, str):
            out.append(_invalid(path, value, "label values must be strings"))
            continue
        out.extend(_invalid(path, value, m) for m in label_value_errors(value))
    return out


def _invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, "Invalid value", detail, value, True)


def _go_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(type(value), "number")


# --------------------------------------------------------------------------- Go-style values


class GoRepr:
    """A value already rendered as Go's `%#v` would print it (maps, structs in messages)."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GoRepr) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def _q(value: Any) -> str:
    """Go `%q` of a string (ASCII-safe approximation)."""
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{text}"'


def go_string_map(labels: dict | None) -> GoRepr:
    """`map[string]string{"a":"b"}`, keys sorted as fmt prints them; nil when absent."""
    if labels is None:
        return GoRepr("map[string]string(nil)")
    inner = ", ".join(f"{_q(k)}:{_q(v)}" for k, v in sorted(labels.items()))
    return GoRepr(f"map[string]string{{{inner}}}")


def go_label_selector(sel: dict | None) -> GoRepr:
    """A metav1.LabelSelector as `%#v` prints it, for selector error messages."""
    sel = sel or {}
    exprs = sel.get("matchExpressions")
    if exprs:
        items = []
        for e in exprs:
            e = e if isinstance(e, dict) else {}
            values = e.get("values")
            vals = ("[]string{" + ", ".join(_q(v) for v in values) + "}") if values else "[]string(nil)"
            items.append(f"v1.LabelSelectorRequirement{{Key:{_q(e.get('key', ''))}, "
                         f"Operator:{_q(e.get('operator', ''))}, Values:{vals}}}")
        expr_text = "[]v1.LabelSelectorRequirement{" + ", ".join(items) + "}"
    else:
        expr_text = "[]v1.LabelSelectorRequirement(nil)"
    labels = sel.get("matchLabels")
    return GoRepr(f"v1.LabelSelector{{MatchLabels:{go_string_map(labels or None)}, MatchExpressions:{expr_text}}}")


# --------------------------------------------------------------------------- small checks


def _required(path: str, detail: str = "") -> FieldError:
    return FieldError(path, "Required value", detail)


def _unsupported(path: str, value: Any, supported: tuple[str, ...]) -> FieldError:
    listed = ", ".join(f'"{s}"' for s in supported)
    return FieldError(path, "Unsupported value", f"supported values: {listed}", value, True)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _non_negative(value: Any, path: str) -> list[FieldError]:
    if value is None:
        return []
    if not _is_int(value):
        return [_invalid(path, value, "must be an integer")]
    return [_invalid(path, value, "must be greater than or equal to 0")] if value < 0 else []


def _port_number(value: Any, path: str) -> list[FieldError]:
    if not _is_int(value) or not 1 <= value <= 65535:
        return [_invalid(path, value, "must be between 1 and 65535, inclusive")]
    return []


def _map(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


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
        return [_required("metadata")]
    errors: list[FieldError] = []
    name = meta.get("name")
    if not name:
        if not meta.get("generateName"):
            errors.append(_required("metadata.name", "name or generateName is required"))
    elif not isinstance(name, str):
        errors.append(_invalid("metadata.name", name, "must be a string"))
    else:
        check = _NAME_CHECKS.get((rt.group, rt.resource), dns1123_subdomain_errors)
        errors.extend(_invalid("metadata.name", name, m) for m in check(name))
    errors.extend(validate_labels(meta.get("labels"), "metadata.labels"))
    errors.extend(_validate_annotations(meta.get("annotations")))
    errors.extend(validate_owner_references(meta.get("ownerReferences")))
    return errors


def _validate_annotations(annotations: Any) -> list[FieldError]:
    if annotations is None:
        return []
    if not isinstance(annotations, dict):
        return [_invalid("metadata.annotations", _go_type(annotations), "must be a map of strings")]
    out = []
    for key, value in annotations.items():
        out.extend(_invalid("metadata.annotations", key, m) for m in qualified_name_errors(key.lower()))
        if not isinstance(value, str):
            out.append(_invalid(f"metadata.annotations[{key}]", value, "must be a string"))
    return out


# --------------------------------------------------------------------------- pods


def validate_pod_spec(spec: Any, path: str, *, restart_policies: tuple[str, ...] = ("Always", "OnFailure", "Never"),
                      ) -> list[FieldError]:
    """A PodSpec at `path` (`spec` for pods, `spec.template.spec` for templates)."""
    if not isinstance(spec, dict):
        return [_required(path)]
    errors: list[FieldError] = []
    names: set[str] = set()
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        errors.append(_required(f"{path}.containers"))
    for field in ("initContainers", "containers"):
        for i, c in enumerate(_list(spec.get(field))):
            errors.extend(_validate_container(c, f"{path}.{field}[{i}]", names))
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in restart_policies:
        errors.append(_unsupported(f"{path}.restartPolicy", policy, restart_policies))
    errors.extend(_unique_names(_list(spec.get("volumes")), f"{path}.volumes"))
    return errors


def _validate_container(c: Any, path: str, seen: set[str]) -> list[FieldError]:
    if not isinstance(c, dict):
        return [_invalid(path, _go_type(c), "must be an object")]
    errors: list[FieldError] = []
    name = c.get("name")
    if not name:
        errors.append(_required(f"{path}.name"))
    elif not isinstance(name, str):
        errors.append(_invalid(f"{path}.name", name, "must be a string"))
    elif name in seen:
        errors.append(FieldError(f"{path}.name", "Duplicate value", "", name, True))
    else:
        seen.add(name)
        errors.extend(_invalid(f"{path}.name", name, m) for m in dns1123_label_errors(name))
    if not c.get("image"):
        errors.append(_required(f"{path}.image"))
    for j, port in enumerate(_list(c.get("ports"))):
        errors.extend(_validate_container_port(port, f"{path}.ports[{j}]"))
    for j, env in enumerate(_list(c.get("env"))):
        if not _map(env).get("name"):
            errors.append(_required(f"{path}.env[{j}].name"))
    return errors + _requests_within_limits(_map(c.get("resources")), f"{path}.resources.requests")


def _requests_within_limits(resources: dict, path: str) -> list[FieldError]:
    """A request above its own limit (limits alone default the requests, so equal is fine).
    kube-apiserver lists these in Go map order; here in the order of the names."""
    requests, limits = _map(resources.get("requests")), _map(resources.get("limits"))
    errors: list[FieldError] = []
    for name in sorted(set(requests) & set(limits)):
        try:
            over = quantity.parse(requests[name])[0] > quantity.parse(limits[name])[0]
        except quantity.QuantityError:
            continue  # reported where the quantity was decoded
        if over:
            errors.append(_invalid(path, quantity.canonical(requests[name]), f"must be less than or equal to "
                                   f"{name} limit of {quantity.canonical(limits[name])}"))
    return errors


def _validate_container_port(port: Any, path: str) -> list[FieldError]:
    port = _map(port)
    errors = _port_number(port.get("containerPort"), f"{path}.containerPort")
    protocol = port.get("protocol")
    if protocol is not None and protocol not in _PROTOCOLS:
        errors.append(_unsupported(f"{path}.protocol", protocol, _PROTOCOLS))
    return errors


def _unique_names(items: list, path: str) -> list[FieldError]:
    errors, seen = [], set()
    for i, item in enumerate(items):
        name = _map(item).get("name")
        if not name:
            errors.append(_required(f"{path}[{i}].name"))
        elif name in seen:
            errors.append(FieldError(f"{path}[{i}].name", "Duplicate value", "", name, True))
        else:
            seen.add(name)
    return errors


def _validate_pod(obj: dict) -> list[FieldError]:
    return validate_pod_spec(obj.get("spec"), "spec")


_POD_UPDATE_DETAIL = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def _validate_pod_update(obj: dict, old: dict) -> list[FieldError]:
    new_spec, old_spec = _map(obj.get("spec")), _map(old.get("spec"))
    if _masked_pod_spec(new_spec, old_spec) != old_spec:
        return [FieldError("spec", "Forbidden", _POD_UPDATE_DETAIL)]
    return []


def _masked_pod_spec(new: dict, old: dict) -> dict:
    """`new` with every field a pod update may change set back to its value in `old`."""
    masked = dict(new)
    for field in ("containers", "initContainers"):
        new_list, old_list = _list(new.get(field)), _list(old.get(field))
        if len(new_list) == len(old_list) and new_list:
            masked[field] = [_with_image(n, o) for n, o in zip(new_list, old_list, strict=True)]
    for field in ("activeDeadlineSeconds", "terminationGracePeriodSeconds"):
        _restore(masked, old, field)
    old_tol, new_tol = _list(old.get("tolerations")), _list(new.get("tolerations"))
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
        return [_invalid(path, _go_type(sel), "must be an object")]
    errors = validate_labels(sel.get("matchLabels"), f"{path}.matchLabels")
    for i, expr in enumerate(_list(sel.get("matchExpressions"))):
        errors.extend(_validate_requirement(_map(expr), f"{path}.matchExpressions[{i}]"))
    return errors


def _validate_requirement(expr: dict, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    key = expr.get("key")
    if not isinstance(key, str) or not key:
        errors.append(_required(f"{path}.key"))
    else:
        errors.extend(_invalid(f"{path}.key", key, m) for m in qualified_name_errors(key))
    op, values = expr.get("operator"), expr.get("values")
    if op in ("In", "NotIn") and not values:
        errors.append(_required(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
    elif op in ("Exists", "DoesNotExist") and values:
        errors.append(FieldError(f"{path}.values", "Forbidden",
                                 "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
    elif op not in _SELECTOR_OPERATORS:
        errors.append(_invalid(f"{path}.operator", op, "not a valid selector operator"))
    return errors


def _selector_is_empty(sel: dict) -> bool:
    return not sel.get("matchLabels") and not sel.get("matchExpressions")


def _validate_workload(obj: dict, kind_word: str) -> list[FieldError]:
    """Shared by Deployment and ReplicaSet: replicas, selector, template."""
    spec = _map(obj.get("spec"))
    errors = _non_negative(spec.get("replicas"), "spec.replicas")
    errors += _non_negative(spec.get("minReadySeconds"), "spec.minReadySeconds")
    sel = spec.get("selector")
    if sel is None:
        errors.append(_required("spec.selector"))
    else:
        sel_errors = validate_label_selector(sel, "spec.selector")
        errors += sel_errors
        if isinstance(sel, dict) and _selector_is_empty(sel):
            errors.append(_invalid("spec.selector", go_label_selector(sel), f"empty selector is invalid for {kind_word}"))
        elif not sel_errors:
            errors += _template_matches(sel, spec.get("template"))
    errors += _validate_template(spec.get("template"))
    return errors


def _template_matches(sel: dict, template: Any) -> list[FieldError]:
    from devcluster.selectors import label_selector_from_object  # selectors imports this module

    labels = _map(template).get("metadata", {}).get("labels") if isinstance(template, dict) else None
    if not label_selector_from_object(sel).matches(labels if isinstance(labels, dict) else None):
        shown = go_string_map(labels if isinstance(labels, dict) else None)
        return [_invalid("spec.template.metadata.labels", shown, "`selector` does not match template `labels`")]
    return []


def _validate_template(template: Any) -> list[FieldError]:
    if not isinstance(template, dict):
        return [_required("spec.template")]
    errors = validate_labels(_map(template.get("metadata")).get("labels"), "spec.template.metadata.labels")
    spec = template.get("spec")
    errors += validate_pod_spec(spec, "spec.template.spec", restart_policies=("Always",))
    if isinstance(spec, dict) and spec.get("activeDeadlineSeconds") is not None:
        errors.append(FieldError("spec.template.spec.activeDeadlineSeconds", "Forbidden",
                                 "activeDeadlineSeconds in ReplicaSet is not Supported"))
    return errors


_STRATEGIES = ("Recreate", "RollingUpdate")


def _validate_deployment(obj: dict) -> list[FieldError]:
    errors = _validate_workload(obj, "deployment")
    spec = _map(obj.get("spec"))
    errors += _non_negative(spec.get("revisionHistoryLimit"), "spec.revisionHistoryLimit")
    strategy = _map(spec.get("strategy"))
    kind = strategy.get("type")
    if kind is not None and kind not in _STRATEGIES:
        errors.append(_unsupported("spec.strategy.type", kind, _STRATEGIES))
    if kind == "Recreate" and strategy.get("rollingUpdate") is not None:
        errors.append(FieldError("spec.strategy.rollingUpdate", "Forbidden",
                                 "may not be specified when strategy `type` is 'Recreate'"))
    return errors


def _validate_replicaset(obj: dict) -> list[FieldError]:
    # The real server words the empty-selector error "for deployment" for ReplicaSets too.
    return _validate_workload(obj, "deployment")


def _validate_selector_update(obj: dict, old: dict) -> list[FieldError]:
    new_sel = _map(obj.get("spec")).get("selector")
    if new_sel != _map(old.get("spec")).get("selector"):
        return [_invalid("spec.selector", go_label_selector(new_sel), "field is immutable")]
    return []


# --------------------------------------------------------------------------- services, leases

_SERVICE_TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
_IANA_SVC_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


def _validate_service(obj: dict) -> list[FieldError]:
    spec = _map(obj.get("spec"))
    errors: list[FieldError] = []
    kind = spec.get("type", "ClusterIP")
    if kind not in _SERVICE_TYPES:
        errors.append(_unsupported("spec.type", kind, _SERVICE_TYPES))
    ports = _list(spec.get("ports"))
    if not ports and kind != "ExternalName" and spec.get("clusterIP") != "None":
        errors.append(_required("spec.ports"))
    if kind == "ExternalName" and not spec.get("externalName"):
        errors.append(_required("spec.externalName"))
    names: set[str] = set()
    for i, port in enumerate(ports):
        errors += _validate_service_port(_map(port), f"spec.ports[{i}]", names, require_name=len(ports) > 1)
    return errors


def _validate_service_port(port: dict, path: str, names: set[str], *, require_name: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    name = port.get("name")
    if not name:
        if require_name:
            errors.append(_required(f"{path}.name"))
    elif name in names:
        errors.append(FieldError(f"{path}.name", "Duplicate value", "", name, True))
    else:
        names.add(name)
        errors += [_invalid(f"{path}.name", name, m) for m in dns1123_label_errors(name)]
    errors += _port_number(port.get("port"), f"{path}.port")
    protocol = port.get("protocol")
    if protocol is not None and protocol not in _PROTOCOLS:
        errors.append(_unsupported(f"{path}.protocol", protocol, _PROTOCOLS))
    target = port.get("targetPort")
    if isinstance(target, str):
        if not (len(target) <= 15 and _IANA_SVC_NAME.fullmatch(target) and re.search("[a-z]", target)):
            errors.append(_invalid(f"{path}.targetPort", target, "must contain only alpha-numeric characters "
                                   "(a-z, 0-9), and hyphens (-), at most 15 characters, and at least one letter"))
    elif target is not None and target != 0:
        errors += _port_number(target, f"{path}.targetPort")
    return errors


def _validate_lease(obj: dict) -> list[FieldError]:
    spec = _map(obj.get("spec"))
    errors: list[FieldError] = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not _is_int(duration) or duration <= 0):
        errors.append(_invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    errors += _non_negative(spec.get("leaseTransitions"), "spec.leaseTransitions")
    return errors


# --------------------------------------------------------------------------- dispatch

_VALIDATORS = {
    ("", "pods"): _validate_pod,
    ("apps", "deployments"): _validate_deployment,
    ("apps", "replicasets"): _validate_replicaset,
    ("", "services"): _validate_service,
    ("coordination.k8s.io", "leases"): _validate_lease,
    configdata.SECRET_KEY: configdata.validate_secret,
    **rbac.VALIDATORS,
}
_UPDATE_VALIDATORS = {
    ("", "pods"): _validate_pod_update,
    ("apps", "deployments"): _validate_selector_update,
    ("apps", "replicasets"): _validate_selector_update,
    **rbac.UPDATE_VALIDATORS,
}


def validate_object(rt: Any, obj: Any, old: dict | None = None) -> list[FieldError]:
    """Everything wrong with a built-in object (and, with `old`, with the update)."""
    if not isinstance(obj, dict):
        return [_invalid("<root>", _go_type(obj), "must be an object")]
    key = (rt.group, rt.resource)
    errors = validate_metadata(rt, obj)
    from devcluster import workloads  # it builds on this module's helpers

    if old is not None and not rt.crd:
        errors += configdata.validate_update(key, obj, old)
    check = _VALIDATORS.get(key) or workloads.VALIDATORS.get(key)
    if check is not None and not rt.crd:
        errors += check(obj)
    update_check = _UPDATE_VALIDATORS.get(key) or workloads.UPDATE_VALIDATORS.get(key)
    if old is not None and update_check is not None and not rt.crd:
        errors += update_check(obj, old)
    return errors


# --------------------------------------------------------------------------- CRDs

_SCOPES = ("Cluster", "Namespaced")
_COLUMN_TYPES = ("boolean", "date", "integer", "number", "string")


def validate_crd(obj: Any) -> list[FieldError]:
    """The CRD-specific rules: name = plural.group, group, names, scope, versions, schemas.

    Generic metadata (name syntax, labels) is `validate_object`'s job; a CRD needs both.
    """
    if not isinstance(obj, dict):
        return [_invalid("<root>", _go_type(obj), "must be an object")]
    errors: list[FieldError] = []
    spec = _map(obj.get("spec"))
    group = spec.get("group")
    names = _map(spec.get("names"))
    name = _map(obj.get("metadata")).get("name")
    if group and names.get("plural") and name != f"{names['plural']}.{group}":
        errors.append(_invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    errors += _validate_crd_group(group)
    errors += _validate_crd_names(names)
    scope = spec.get("scope")
    if not scope:
        errors.append(_required("spec.scope"))
    elif scope not in _SCOPES:
        errors.append(_unsupported("spec.scope", scope, _SCOPES))
    errors += _validate_crd_versions(spec.get("versions"))
    return errors


def _validate_crd_group(group: Any) -> list[FieldError]:
    if not group:
        return [_required("spec.group")]
    if not isinstance(group, str):
        return [_invalid("spec.group", group, "must be a string")]
    errors = [_invalid("spec.group", group, m) for m in dns1123_subdomain_errors(group)]
    if "." not in group:
        errors.append(_invalid("spec.group", group, "should be a domain with at least one dot"))
    return errors


def _validate_crd_names(names: dict) -> list[FieldError]:
    errors: list[FieldError] = []
    for field, required in (("plural", True), ("singular", False)):
        value = names.get(field)
        if not value:
            if required:
                errors.append(_required(f"spec.names.{field}"))
            continue
        errs = dns1035_label_errors(str(value))
        if errs:
            errors.append(_invalid(f"spec.names.{field}", value, ",".join(errs)))
    for field, required in (("kind", True), ("listKind", False)):
        value = names.get(field)
        if not value:
            if required:
                errors.append(_required(f"spec.names.{field}"))
            continue
        errs = dns1035_label_errors(str(value).lower())
        if errs:
            errors.append(_invalid(f"spec.names.{field}", value,
                                   "may have mixed case, but should otherwise match: " + ",".join(errs)))
    return errors


def _validate_crd_versions(versions: Any) -> list[FieldError]:
    if not isinstance(versions, list) or not versions:
        return [_required("spec.versions", "must have exactly one version marked as storage version")]
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, version in enumerate(versions):
        errors += _validate_crd_version(_map(version), f"spec.versions[{i}]", seen)
    storage = sum(1 for v in versions if _map(v).get("storage") is True)
    if storage != 1:
        errors.append(FieldError("spec.versions", "Invalid value",
                                 "must have exactly one version marked as storage version"))
    return errors


def _validate_crd_version(version: dict, path: str, seen: set[str]) -> list[FieldError]:
    errors: list[FieldError] = []
    name = version.get("name")
    if not name:
        errors.append(_required(f"{path}.name"))
    elif name in seen:
        errors.append(FieldError(f"{path}.name", "Duplicate value", "", name, True))
    else:
        seen.add(name)
        errors += [_invalid(f"{path}.name", name, m) for m in dns1035_label_errors(str(name))]
    for flag in ("served", "storage"):
        if not isinstance(version.get(flag), bool):
            errors.append(_required(f"{path}.{flag}"))
    schema = _map(version.get("schema")).get("openAPIV3Schema")
    if schema is None:
        errors.append(_required(f"{path}.schema.openAPIV3Schema", "schemas are required"))
    else:
        errors += structural_field_errors(schema, f"{path}.schema.openAPIV3Schema")
    for j, column in enumerate(_list(version.get("additionalPrinterColumns"))):
        errors += _validate_printer_column(_map(column), f"{path}.additionalPrinterColumns[{j}]")
    return errors


def _validate_printer_column(column: dict, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if not column.get("name"):
        errors.append(_required(f"{path}.name"))
    kind = column.get("type")
    if not kind:
        errors.append(_required(f"{path}.type"))
    elif kind not in _COLUMN_TYPES:
        errors.append(_unsupported(f"{path}.type", kind, _COLUMN_TYPES))
    if not column.get("jsonPath"):
        errors.append(_required(f"{path}.jsonPath"))
    return errors
