"""CustomResourceDefinition semantics: CRD status on registration and the CR write pipeline.

A CR body goes through defaulting, pruning and schema validation (in that order, as on a
real server) before the store writes it; a CRD gets the status a real server publishes
once its names are accepted (spec §4.9).
"""

from __future__ import annotations

from typing import Any

from devcluster import schema
from devcluster.errors import FieldError
from devcluster.objmeta import rfc3339
from devcluster.registry import ResourceType

_TOP_LEVEL = ("apiVersion", "kind", "metadata")


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
