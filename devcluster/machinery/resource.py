"""`ResourceType`: one served resource, as the registry, the store and every pure rule name it.

A leaf: the registry builds these (built-ins, CRDs) and the per-kind rules declare theirs
(`strategy/rbac.py`), so neither has to import the other to speak of a resource.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One served resource. Frozen: a CRD update registers a new instance."""

    group: str  # "" for the core group
    version: str
    resource: str  # plural, e.g. "deployments"
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status: bool = False  # serves the /status subresource; the main endpoint ignores status
    scale: bool = False  # serves the /scale subresource (autoscaling/v1 Scale)
    generation: bool = False  # keeps metadata.generation (as the real strategies do: not Services, Namespaces)
    crd: bool = False
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    printer_columns: tuple[dict[str, Any], ...] = field(default=(), compare=False, hash=False)
    # Extra subresources with their own verbs, e.g. pods: (("binding", ("create",)), ("log", ("get",))).
    extra_subresources: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # CR scale subresource paths (JSON paths as in the CRD, e.g. ".spec.replicas").
    scale_spec_path: str = ".spec.replicas"
    scale_status_path: str = ".status.replicas"
    scale_selector_path: str = ""
    storage: bool = True  # the version whose apiVersion stored objects carry

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def gv_path(self) -> str:
        """URL prefix of the group-version: `/api/v1` or `/apis/<group>/<version>`."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def qualified(self) -> str:
        """`resource[.group]`, as error messages name it."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def key(self) -> tuple[str, str]:
        """Storage key of the resource: every served version shares one set of objects."""
        return (self.group, self.resource)
