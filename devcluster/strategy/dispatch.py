"""The defaulting, create-time status and validation of every built-in kind, by (group, resource).

Each kind's rules live with their idea (`defaults`, `validation`, `workloads`, `rbac`,
`configdata`); this module only assembles their tables, so none of them imports another
to register itself. The tables' keys are disjoint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from devcluster.machinery.errors import FieldError
from devcluster.machinery.fielderrors import go_type, invalid_value
from devcluster.strategy import configdata, defaults, rbac, validation, workloads

DEFAULTERS: dict[tuple[str, str], Callable[[dict[str, Any]], None]] = {
    **defaults.DEFAULTERS,
    **rbac.DEFAULTERS,
    **workloads.DEFAULTERS,
}
VALIDATORS: dict[tuple[str, str], Callable[[dict], list[FieldError]]] = {
    **validation.VALIDATORS,  # core and apps kinds, Secrets, RBAC
    **workloads.VALIDATORS,
}
UPDATE_VALIDATORS: dict[tuple[str, str], Callable[[dict, dict], list[FieldError]]] = {
    **validation.UPDATE_VALIDATORS,
    **workloads.UPDATE_VALIDATORS,
}


def apply_builtin_defaults(key: tuple[str, str], obj: dict[str, Any]) -> None:
    """The kind's defaults, then empty metadata maps and lists dropped (they are omitempty)."""
    fn = DEFAULTERS.get(key)
    if fn is not None:
        fn(obj)
    defaults.drop_empty_metadata(obj)


def initial_status(key: tuple[str, str], obj: dict[str, Any], body_status: Any) -> Any:
    """The status a built-in object starts with (spec §4.3); None means no status key."""
    workload_status = workloads.INITIAL_STATUS.get(key)
    if workload_status is not None:
        return workload_status()
    return defaults.core_initial_status(key, obj, body_status)


def validate_object(rt: Any, obj: Any, old: dict | None = None) -> list[FieldError]:
    """Everything wrong with a built-in object (and, with `old`, with the update)."""
    if not isinstance(obj, dict):
        return [invalid_value("<root>", go_type(obj), "must be an object")]
    key = (rt.group, rt.resource)
    errors = validation.validate_metadata(rt, obj)
    if old is not None and not rt.crd:
        errors += configdata.validate_update(key, obj, old)
    check = VALIDATORS.get(key)
    if check is not None and not rt.crd:
        errors += check(obj)
    update_check = UPDATE_VALIDATORS.get(key)
    if old is not None and update_check is not None and not rt.crd:
        errors += update_check(obj, old)
    return errors
