"""Diff a CR's desired children against the observed ones: the heart of every reconcile.

Pure: no I/O. A reconcile builds the desired children from the spec (the kinds' builders), reads
the observed ones from the informer caches, and executes the plan this module returns.

Two kinds of children:
- mutable (Deployments, Services, HPAs): an outdated child is updated in place, so
  Kubernetes rolls the Deployment;
- immutable (training Pods): an outdated pod is deleted, and recreated from the new spec
  only once the old one is gone (same name, so the two never run side by side).

A child is outdated when the spec-hash annotation it was built with differs from the
desired one. A child that is terminating is waited for, never touched. Observed children
that the spec no longer asks for are deleted. An object with a desired child's name that
this CR does not control is never touched: the plan reports it as a conflict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ChildPlan:
    create: list[dict] = field(default_factory=list)
    update: list[tuple[dict, dict]] = field(default_factory=list)  # (observed, desired)
    delete: list[dict] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # names of terminating children
    conflicts: list[str] = field(default_factory=list)  # names taken by objects we do not own

    @property
    def converged(self) -> bool:
        """True when the observed children are exactly the desired ones."""
        return not (self.create or self.update or self.delete or self.waiting or self.conflicts)


def _hash(obj: Mapping, hash_key: str) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(hash_key)


def _terminating(obj: Mapping) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _controlled_by(obj: Mapping, owner_uid: str) -> bool:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller") and ref.get("uid") == owner_uid:
            return True
    return False


def plan_children(
    desired: Mapping[str, dict],
    observed: Mapping[str, dict],
    *,
    owner_uid: str,
    hash_key: str,
    mutable: bool,
    create_missing: bool = True,
) -> ChildPlan:
    """Compare children by name. `observed` holds every object of the kind with a desired
    name or controlled by the owner; `create_missing=False` freezes creation (a finished job)."""
    plan = ChildPlan()
    for name, want in desired.items():
        have = observed.get(name)
        if have is None:
            if create_missing:
                plan.create.append(want)
        elif not _controlled_by(have, owner_uid):
            plan.conflicts.append(name)
        elif _terminating(have):
            plan.waiting.append(name)
        elif _hash(have, hash_key) != _hash(want, hash_key):
            if mutable:
                plan.update.append((have, want))
            else:
                plan.delete.append(have)
                plan.waiting.append(name)
    for name, have in observed.items():
        if name in desired or not _controlled_by(have, owner_uid):
            continue
        if _terminating(have):
            plan.waiting.append(name)
        else:
            plan.delete.append(have)
    return plan


def outdated(desired: Mapping[str, dict], observed: Mapping[str, dict], *, hash_key: str) -> list[str]:
    """Names of observed children built from a spec other than the desired one."""
    return [
        name for name, want in desired.items()
        if name in observed and _hash(observed[name], hash_key) != _hash(want, hash_key)
    ]


def merge_for_update(observed: dict, desired: dict) -> dict:
    """The object to PUT when updating a mutable child: the desired spec, labels and
    annotations over the observed object's identity and server-owned fields."""
    meta = dict(observed.get("metadata") or {})
    want_meta = desired.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    labels.update(want_meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    annotations.update(want_meta.get("annotations") or {})
    meta["labels"] = labels
    meta["annotations"] = annotations
    if want_meta.get("ownerReferences"):
        meta["ownerReferences"] = want_meta["ownerReferences"]
    merged = {k: v for k, v in observed.items() if k not in ("spec", "metadata")}
    merged["metadata"] = meta
    spec = dict(desired.get("spec") or {})
    have_spec = observed.get("spec") or {}
    for server_owned in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
        if server_owned in have_spec and server_owned not in spec:
            spec[server_owned] = have_spec[server_owned]  # Service fields the API server allocated
    if "replicas" not in spec and "replicas" in have_spec:
        spec["replicas"] = have_spec["replicas"]  # unset in the CR: an HPA or a user owns it
    merged["spec"] = spec
    return merged
