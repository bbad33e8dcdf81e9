"""CustomResourceDefinition semantics: the CRD's own validation, its status on registration and
the CR write pipeline.

A CRD is checked as the real server checks it (name = plural.group, names, scope, versions,
schemas); a CR body goes through defaulting, pruning and schema validation (in that order,
as on a real server) before the store writes it; a CRD gets the status a real server
publishes once its names are accepted (spec §4.9).
"""

from __future__ import annotations

from typing import Any

from devcluster.machinery.errors import FieldError
from devcluster.machinery.fielderrors import (
    as_list,
    as_map,
    go_type,
    invalid_value,
    required_value,
    unique_name,
    unsupported_value,
)
from devcluster.machinery.names import dns1035_label_errors, dns1123_subdomain_errors
from devcluster.machinery.objmeta import rfc3339
from devcluster.machinery.resource import ResourceType
from devcluster.strategy import schema
from devcluster.strategy.schema import structural_field_errors

_TOP_LEVEL = ("apiVersion", "kind", "metadata")


# --------------------------------------------------------------------------- the CRD

_SCOPES = ("Cluster", "Namespaced")
_COLUMN_TYPES = ("boolean", "date", "integer", "number", "string")


def validate_crd(obj: Any) -> list[FieldError]:
    """The CRD-specific rules: name = plural.group, group, names, scope, versions, schemas.

    Generic metadata (name syntax, labels) is `validate_object`'s job; a CRD needs both.
    """
    if not isinstance(obj, dict):
        return [invalid_value("<root>", go_type(obj), "must be an object")]
    errors: list[FieldError] = []
    spec = as_map(obj.get("spec"))
    group = spec.get("group")
    names = as_map(spec.get("names"))
    name = as_map(obj.get("metadata")).get("name")
    if group and names.get("plural") and name != f"{names['plural']}.{group}":
        errors.append(invalid_value("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    errors += _validate_crd_group(group)
    errors += _validate_crd_names(names)
    scope = spec.get("scope")
    if not scope:
        errors.append(required_value("spec.scope"))
    elif scope not in _SCOPES:
        errors.append(unsupported_value("spec.scope", scope, _SCOPES))
    errors += _validate_crd_versions(spec.get("versions"))
    return errors


def _validate_crd_group(group: Any) -> list[FieldError]:
    if not group:
        return [required_value("spec.group")]
    if not isinstance(group, str):
        return [invalid_value("spec.group", group, "must be a string")]
    errors = [invalid_value("spec.group", group, m) for m in dns1123_subdomain_errors(group)]
    if "." not in group:
        errors.append(invalid_value("spec.group", group, "should be a domain with at least one dot"))
    return errors


def _validate_crd_names(names: dict) -> list[FieldError]:
    errors: list[FieldError] = []
    # the kinds may have mixed case: their lower case is held to the same syntax
    for field, required, mixed in (("plural", True, False), ("singular", False, False),
                                   ("kind", True, True), ("listKind", False, True)):
        value = names.get(field)
        if not value:
            if required:
                errors.append(required_value(f"spec.names.{field}"))
            continue
        errs = dns1035_label_errors(str(value).lower() if mixed else str(value))
        if errs:
            prefix = "may have mixed case, but should otherwise match: " if mixed else ""
            errors.append(invalid_value(f"spec.names.{field}", value, prefix + ",".join(errs)))
    return errors


def _validate_crd_versions(versions: Any) -> list[FieldError]:
    if not isinstance(versions, list) or not versions:
        return [required_value("spec.versions", "must have exactly one version marked as storage version")]
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, version in enumerate(versions):
        errors += _validate_crd_version(as_map(version), f"spec.versions[{i}]", seen)
    storage = sum(1 for v in versions if as_map(v).get("storage") is True)
    if storage != 1:
        errors.append(FieldError("spec.versions", "Invalid value",
                                 "must have exactly one version marked as storage version"))
    return errors


def _validate_crd_version(version: dict, path: str, seen: set[str]) -> list[FieldError]:
    name = version.get("name")
    errors = unique_name(name, f"{path}.name", seen)
    if not errors:  # present and new: held to the syntax
        errors += [invalid_value(f"{path}.name", name, m) for m in dns1035_label_errors(str(name))]
    for flag in ("served", "storage"):
        if not isinstance(version.get(flag), bool):
            errors.append(required_value(f"{path}.{flag}"))
    schema = as_map(version.get("schema")).get("openAPIV3Schema")
    if schema is None:
        errors.append(required_value(f"{path}.schema.openAPIV3Schema", "schemas are required"))
    else:
        errors += structural_field_errors(schema, f"{path}.schema.openAPIV3Schema")
    for j, column in enumerate(as_list(version.get("additionalPrinterColumns"))):
        errors += _validate_printer_column(as_map(column), f"{path}.additionalPrinterColumns[{j}]")
    return errors


def _validate_printer_column(column: dict, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if not column.get("name"):
        errors.append(required_value(f"{path}.name"))
    kind = column.get("type")
    if not kind:
        errors.append(required_value(f"{path}.type"))
    elif kind not in _COLUMN_TYPES:
        errors.append(unsupported_value(f"{path}.type", kind, _COLUMN_TYPES))
    if not column.get("jsonPath"):
        errors.append(required_value(f"{path}.jsonPath"))
    return errors


# --------------------------------------------------------------------------- CRs and CRD status


def prepare_cr(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """Defaults then pruning from the version's openAPIV3Schema; metadata is never pruned."""
    if not rt.schema:
        return obj
    kept = {k: obj[k] for k in _TOP_LEVEL if k in obj}
    out = schema.apply_defaults(rt.schema, obj)
    out = schema.prune(rt.schema, out)
    out.update(kept)
    return out


def validate_cr(rt: ResourceType, obj: dict[str, Any]) -> list[FieldError]:
    if not rt.schema:
        return []
    return schema.validate(rt.schema, obj)


def default_crd(crd: dict[str, Any]) -> None:
    """Fill the CRD spec defaults a real server sets (listKind, singular, conversion)."""
    spec = crd.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    names = spec.get("names")
    if isinstance(names, dict) and isinstance(names.get("kind"), str):
        names.setdefault("listKind", names["kind"] + "List")
        names.setdefault("singular", names["kind"].lower())
    spec.setdefault("conversion", {"strategy": "None"})


def crd_status(crd: dict[str, Any], old_status: dict[str, Any] | None, now: float) -> dict[str, Any]:
    """acceptedNames, NamesAccepted/Established conditions and storedVersions."""
    spec = crd.get("spec") or {}
    names = dict(spec.get("names") or {})
    old_status = old_status or {}
    stored = list(old_status.get("storedVersions") or [])
    for ver in spec.get("versions") or []:
        if ver.get("storage") and ver.get("name") not in stored:
            stored.append(ver.get("name"))
    old_conds = {c.get("type"): c for c in old_status.get("conditions") or [] if isinstance(c, dict)}
    conds = [
        _condition(old_conds, "NamesAccepted", "NoConflicts", "no conflicts found", now),
        _condition(old_conds, "Established", "InitialNamesAccepted", "the initial names have been accepted", now),
    ]
    return {"conditions": conds, "acceptedNames": names, "storedVersions": stored}


def terminating_condition(status: dict[str, Any], now: float) -> dict[str, Any]:
    """The status of a CRD whose instances are being deleted."""
    conds = [c for c in status.get("conditions") or [] if c.get("type") != "Terminating"]
    conds.append({"type": "Terminating", "status": "True", "reason": "InstanceDeletionInProgress",
                  "message": "CustomResource deletion is in progress", "lastTransitionTime": rfc3339(now)})
    return {**status, "conditions": conds}


def _condition(old: dict[str, dict[str, Any]], type_: str, reason: str, message: str, now: float) -> dict[str, Any]:
    prev = old.get(type_)
    if prev is not None and prev.get("status") == "True":
        return prev
    return {"type": type_, "status": "True", "reason": reason, "message": message,
            "lastTransitionTime": rfc3339(now)}


def crd_name(rt: ResourceType) -> str:
    return f"{rt.resource}.{rt.group}"
