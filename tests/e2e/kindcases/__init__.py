"""One case per reconciled kind for the shared end-to-end test body (tests/e2e/test_kinds.py).

A case is data: the manifests to apply, the children the GM must make, which worker to
delete by hand, an edit and how to see it reach the workers, a bad spec and the reason
its condition must carry. Every kind runs the same test body over its case, so the kinds
cannot drift apart in what they guarantee (cascade delete, edits that reach the workers,
self-heal, status with observedGeneration, printer columns, bad specs as conditions).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class KindCase:
    kind: str  # CamelCase, e.g. "FeatureExtractionService"
    manifest: dict[str, Any]  # the CR, in namespace "default"
    # children the GM must create: resource plural ("deployments", "pods", "services") -> names
    children: Mapping[str, tuple[str, ...]]
    # one worker child to delete by hand: (plural, name); it must come back, with a new uid
    worker: tuple[str, str]
    # mutates a copy of the CR's spec; afterwards `edited(child)` must hold for `edited_child`
    edit: Callable[[dict[str, Any]], None]
    edited_child: tuple[str, str]
    edited: Callable[[dict[str, Any]], bool]
    # mutates a copy of the CR's spec into a bad one; a True condition must carry `bad_reason`
    bad_spec: Callable[[dict[str, Any]], None]
    bad_reason: str
    # objects applied before the CR (Models, ...)
    prerequisites: tuple[dict[str, Any], ...] = ()
    # status once the children exist: a predicate on status (e.g. a Running condition)
    healthy: Callable[[dict[str, Any]], bool] = lambda status: True
    # printer column headers `kubectl get <plural>` must show
    columns: tuple[str, ...] = ("NAME", "AGE")
    # the condition type a bad spec sets True (a missing Model or Dataset is a wait:
    # `Pending` or `Waiting`, not `Failed`)
    failed_type: str = "Failed"
    # what the edge does once the CR exists, for a kind whose children wait on it (a learning
    # job's stage report): called with the API client and the created CR
    started: Callable[[Any, dict[str, Any]], Awaitable[None]] | None = None
    notes: tuple[str, ...] = field(default=())


def env_of(obj: Mapping[str, Any], name: str) -> str | None:
    """The value of env var `name` in the first container of a Pod or a Deployment's template."""
    spec = obj.get("spec") or {}
    pod_spec = (spec.get("template") or {}).get("spec") or spec
    for container in pod_spec.get("containers") or ():
        for entry in container.get("env") or ():
            if entry.get("name") == name:
                return entry.get("value")
    return None


def image_of(obj: Mapping[str, Any]) -> str | None:
    """The image of the first container of a Pod or a Deployment's template."""
    spec = obj.get("spec") or {}
    pod_spec = (spec.get("template") or {}).get("spec") or spec
    containers = pod_spec.get("containers") or ()
    return containers[0].get("image") if containers else None
