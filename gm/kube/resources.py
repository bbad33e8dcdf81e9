"""Resource identities (group, version, plural) and the REST paths built from them.

Every API call names its target as a `GVR` plus namespace, name and subresource; this
module is the only place that turns those into URL paths, and it rejects path segments
that would escape their slot (empty names, slashes) before a request is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from shared import apis


@dataclass(frozen=True, slots=True)
class GVR:
    """A resource type: `group` ("" for core), `version`, `plural`, and whether namespaced."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """The `apiVersion` of objects of this type (`v1`, `apps/v1`, `sedna.io/v1alpha1`)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}/{self.version}" if self.group else f"{self.plural}/{self.version}"

    def path(self, *, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        """The URL path of the collection (no name) or of one object (and its subresource)."""
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [prefix]
        if namespace is not None and self.namespaced:
            parts.append(f"namespaces/{_segment(namespace, 'namespace')}")
        elif namespace is not None:
            raise ValueError(f"{self} is cluster-scoped; namespace {namespace!r} given")
        parts.append(self.plural)
        if name is not None:
            parts.append(_segment(name, "name"))
        elif subresource is not None:
            raise ValueError("a subresource needs an object name")
        if subresource is not None:
            parts.append(_segment(subresource, "subresource"))
        return "/".join(parts)


def _segment(value: str, what: str) -> str:
    if not isinstance(value, str) or not value or value in (".", "..") or "/" in value:
        raise ValueError(f"invalid {what} {value!r} for an API path")
    return quote(value, safe="")


PODS = GVR("", "v1", "pods")
SERVICES = GVR("", "v1", "services")
EVENTS = GVR("", "v1", "events")
CONFIGMAPS = GVR("", "v1", "configmaps")
SECRETS = GVR("", "v1", "secrets")
NODES = GVR("", "v1", "nodes", namespaced=False)
NAMESPACES = GVR("", "v1", "namespaces", namespaced=False)
DEPLOYMENTS = GVR("apps", "v1", "deployments")
LEASES = GVR("coordination.k8s.io", "v1", "leases")
HPAS = GVR("autoscaling", "v2", "horizontalpodautoscalers")


def sedna_gvr(kind: apis.SednaKind) -> GVR:
    """The resource of a Sedna kind (`sedna.io/v1alpha1`, its plural)."""
    return GVR(apis.GROUP, apis.VERSION, kind.plural)


JI = sedna_gvr(apis.JOINT_INFERENCE)
FL = sedna_gvr(apis.FEDERATED_LEARNING)
DATASETS = sedna_gvr(apis.DATASET)
MODELS = sedna_gvr(apis.MODEL)
