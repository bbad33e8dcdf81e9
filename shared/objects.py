"""Helpers for Kubernetes objects held as plain dicts: ownership, labels, hashes, conditions.

Both services keep API objects as the dicts orjson parsed (DESIGN.md §3, "hot paths stay
raw"), so the small facts every controller needs about them live here once: who controls
an object, which labels select a CR's workers, which hash a child was built from, and how
a condition list keeps one entry per type. Everything here is pure and never mutates its
arguments.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

SEDNA_GROUP = "sedna.io"
SEDNA_API_VERSION = "sedna.io/v1alpha1"
SPEC_HASH_ANNOTATION = "sedna.io/spec-hash"
CONDITION_STATUSES = frozenset({"True", "False", "Unknown"})

_MISSING = object()


class ObjectError(ValueError):
    """An object lacks a field these helpers need (e.g. an owner without a uid)."""


# -- field access ---------------------------------------------------------------------


def deep_get(obj: Any, *path: str | int, default: Any = None) -> Any:
    """Follow `path` through nested mappings (str keys) and lists (int indexes).

    Returns `default` as soon as a step is absent or the value there is not a container
    of the right shape, so callers never have to guard each level.
    """
    cur = obj
    for step in path:
        if isinstance(step, int) and not isinstance(step, bool):
            if not isinstance(cur, list) or not -len(cur) <= step < len(cur):
                return default
            cur = cur[step]
        elif isinstance(cur, Mapping) and step in cur:
            cur = cur[step]
        else:
            return default
    return cur


def meta_str(obj: Mapping[str, Any], field: str) -> str:
    """`metadata.<field>` as a string, '' when absent."""
    value = deep_get(obj, "metadata", field, default="")
    return value if isinstance(value, str) else ""


def object_key(obj: Mapping[str, Any]) -> str:
    """The workqueue key `namespace/name` (just `name` for cluster-scoped objects)."""
    name = meta_str(obj, "name")
    if not name:
        raise ObjectError("object has no metadata.name")
    namespace = meta_str(obj, "namespace")
    return f"{namespace}/{name}" if namespace else name


# -- ownership ------------------------------------------------------------------------


def controller_ref(
    owner: Mapping[str, Any], *, kind: str | None = None, api_version: str | None = None
) -> dict[str, Any]:
    """The controller ownerReference a child of `owner` carries.

    Objects from list responses have no `kind`/`apiVersion`, so callers that know the
    owner's type pass them explicitly; otherwise the owner's own fields are used.
    """
    ref = {
        "apiVersion": api_version or owner.get("apiVersion") or "",
        "kind": kind or owner.get("kind") or "",
        "name": meta_str(owner, "name"),
        "uid": meta_str(owner, "uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }
    missing = [k for k in ("apiVersion", "kind", "name", "uid") if not ref[k]]
    if missing:
        raise ObjectError(f"owner lacks {', '.join(missing)} for an ownerReference")
    return ref


def controller_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ownerReference marked `controller: true`, if any (there is at most one)."""
    for ref in deep_get(obj, "metadata", "ownerReferences", default=None) or ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return dict(ref)
    return None


def is_controlled_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    """True when `obj`'s controller reference points at `owner` (matched by uid)."""
    ref = controller_of(obj)
    uid = meta_str(owner, "uid")
    return ref is not None and bool(uid) and ref.get("uid") == uid


# -- labels ---------------------------------------------------------------------------


def label_prefix(kind: str) -> str:
    """`<kind lower-cased>.sedna.io/`, the label namespace upstream uses per CR kind."""
    if not kind:
        raise ObjectError("a kind is needed to build worker labels")
    return f"{kind.lower()}.{SEDNA_GROUP}/"


def owner_labels(owner: Mapping[str, Any], *, kind: str | None = None) -> dict[str, str]:
    """Labels that select every worker of `owner`: `<prefix>name` and `<prefix>uid`."""
    prefix = label_prefix(kind or owner.get("kind") or "")
    name, uid = meta_str(owner, "name"), meta_str(owner, "uid")
    if not name or not uid:
        raise ObjectError("owner needs metadata.name and metadata.uid for its labels")
    return {f"{prefix}name": name, f"{prefix}uid": uid}


def worker_labels(
    owner: Mapping[str, Any], *, worker_type: str, kind: str | None = None
) -> dict[str, str]:
    """`owner_labels` plus `<prefix>worker-type` (lower-cased, as upstream writes it)."""
    labels = owner_labels(owner, kind=kind)
    if worker_type:
        labels[f"{label_prefix(kind or owner['kind'])}worker-type"] = worker_type.lower()
    return labels


def format_selector(labels: Mapping[str, str]) -> str:
    """A `labelSelector` query value (`k=v,...`, sorted so equal selectors compare equal)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def matches_labels(obj: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
    """True when every `selector` pair is among `obj`'s labels."""
    labels = deep_get(obj, "metadata", "labels", default=None) or {}
    return all(labels.get(k) == v for k, v in selector.items())


# -- hashing --------------------------------------------------------------------------


def canonical_json(value: Any) -> bytes:
    """JSON with sorted keys: equal values always give equal bytes."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def spec_hash(value: Any) -> str:
    """A short stable digest of `value`, recorded on children to detect spec edits."""
    return hashlib.sha256(canonical_json(value)).hexdigest()[:16]


def spec_hash_of(obj: Mapping[str, Any]) -> str:
    """The `sedna.io/spec-hash` annotation of `obj`, '' when absent."""
    value = deep_get(obj, "metadata", "annotations", SPEC_HASH_ANNOTATION, default="")
    return value if isinstance(value, str) else ""


# -- time and conditions --------------------------------------------------------------


def format_rfc3339(moment: datetime) -> str:
    """RFC 3339 in UTC with second precision, as `metav1.Time` serializes."""
    if moment.tzinfo is None:
        raise ObjectError("a timezone-aware datetime is needed")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_rfc3339() -> str:
    """The current time as `metav1.Time` text, e.g. `2025-03-01T10:00:00Z`."""
    return format_rfc3339(datetime.now(UTC))


def find_condition(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> dict | None:
    """The condition of `type_`, or None."""
    for cond in conditions or ():
        if cond.get("type") == type_:
            return dict(cond)
    return None


def set_condition(
    conditions: Iterable[Mapping[str, Any]] | None,
    type_: str,
    status: str,
    *,
    reason: str,
    message: str,
    now: str,
    transition_key: str | None = "lastTransitionTime",
    heartbeat_key: str | None = "lastHeartbeatTime",
    extra: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Return `conditions` with exactly one entry of `type_` carrying these values; `reason`
    (CamelCase) and `message` must not be empty (ObjectError).

    The transition time moves only when `status` changes. When nothing but the clock
    would change, the list comes back equal to the input, so a reconcile that finds the
    same state writes no status. FL conditions have no lastTransitionTime: pass
    `transition_key=None` (and e.g. `extra` for IL's `stage`/`data`).
    """
    if status not in CONDITION_STATUSES:
        raise ObjectError(f"condition status must be True, False or Unknown, not {status!r}")
    if not reason.strip() or not message.strip():
        # an operator reads `kubectl describe`: every condition says why it has its status
        raise ObjectError(f"condition {type_}={status} needs a reason and a message, "
                          f"got {reason!r} and {message!r}")
    out = [dict(c) for c in conditions or () if c.get("type") != type_]
    old = find_condition(conditions, type_)
    new = _merged_condition(type_, status, reason=reason, message=message, extra=extra)
    if old is not None and new == {k: old.get(k) for k in new}:
        new = old
    else:
        new = _stamped(new, old, now=now, transition_key=transition_key,
                       heartbeat_key=heartbeat_key)
    index = _index_of(conditions, type_)
    out.insert(index if index is not None else len(out), new)
    return out


def _merged_condition(type_, status, *, reason, message, extra) -> dict[str, Any]:
    cond: dict[str, Any] = {"type": type_, "status": status, "reason": reason,
                            "message": message}
    cond.update(extra or {})
    return cond


def _stamped(new, old, *, now, transition_key, heartbeat_key) -> dict[str, Any]:
    if heartbeat_key:
        new[heartbeat_key] = now
    if transition_key:
        same = old is not None and old.get("status") == new["status"]
        new[transition_key] = old.get(transition_key, now) if same else now
    return new


def _index_of(conditions, type_: str) -> int | None:
    for i, cond in enumerate(conditions or ()):
        if cond.get("type") == type_:
            return i
    return None
