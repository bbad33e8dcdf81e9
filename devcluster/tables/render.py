"""`meta.k8s.io/v1` Table rendering for `kubectl get` (spec §3.6): the columns and rows of a type.

kubectl asks for `as=Table` on every get and watch and prints whatever columns the
server sends, so these printers decide what `kubectl get` shows. Like the real server,
every row carries all columns, wide ones (priority 1) included; kubectl drops those
unless `-o wide`. Printers are pure: `now` comes from the caller, so ages are testable.
"""

from __future__ import annotations

from typing import Any

from devcluster.tables.columns import RowFn, age_of, meta_of, name_of
from devcluster.tables.custom import cr_columns, cr_row_fn
from devcluster.tables.pods import pod_conditions
from devcluster.tables.printers import DEFAULT_COLUMNS, PRINTERS

__all__ = ["to_table", "column_definitions", "row_object"]

# --------------------------------------------------------------------------- the table


def _printer(rt: Any) -> tuple[list[dict], RowFn]:
    if rt.crd:
        return cr_columns(rt), cr_row_fn(rt)
    # events.k8s.io Events print with the core Event columns: both are views of one storage.
    found = PRINTERS.get((rt.group, rt.resource))
    return found or (DEFAULT_COLUMNS, lambda o, now: [name_of(o), age_of(o, now)])


def column_definitions(rt: Any) -> list[dict]:
    """The Table columns for resource type `rt`, wide ones marked with priority 1."""
    return _printer(rt)[0]


def row_object(obj: dict, include_object: str | None) -> dict | None:
    """What a row carries per `includeObject`: Metadata (default), the whole Object, or None."""
    if include_object == "None":
        return None
    if include_object == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta_of(obj)}


def to_table(rt: Any, objs: list[dict], *, resource_version: str, now: float,
             include_object: str | None = None) -> dict:
    """A `meta.k8s.io/v1` Table of `objs`, each row with all cells and, per `include_object`, the
    object's metadata (default), the whole object (`kubectl get --sort-by` needs it) or nothing."""
    columns, row_fn = _printer(rt)
    rows = []
    for obj in objs:
        row: dict[str, Any] = {"cells": row_fn(obj, now)}
        shown = row_object(obj, include_object)
        if shown is not None:
            row["object"] = shown
        if rt.group == "" and rt.resource == "pods":
            conditions = pod_conditions(obj)
            if conditions:
                row["conditions"] = conditions
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": columns, "rows": rows}
