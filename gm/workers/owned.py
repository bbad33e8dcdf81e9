"""Owned child objects (Pod, Deployment, Service, HPA) stamped with owner, labels and hash.

Every child gets a controller ownerReference (cascade delete by the garbage collector),
the `<kind>.sedna.io/{name,uid,worker-type}` labels, the common `MANAGED_BY` label (what
the GM's one shared informer per child type selects on), and `sedna.io/spec-hash`: the
hash of the child as built, without that annotation and without `MANAGED_BY`. Leaving the
marker out of the hash keeps the hashes of children built before it existed valid, so an
upgraded GM relabels those children instead of rolling or recreating them. A child
therefore changes hash exactly when something that reaches it changes (its template, a
model URL, a Secret, a config value), and two builds from the same inputs are
byte-identical. Pods made by a child Deployment do not carry the marker: the GM does not
manage them directly.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gm.workers.deployspec import InlineDeployment
from gm.workers.specerrors import InvalidSpec
from shared.objects import (
    SEDNA_API_VERSION,
    SPEC_HASH_ANNOTATION,
    controller_ref,
    owner_labels,
    spec_hash,
    worker_labels,
)

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "sedna-gm"
MANAGED_BY = {MANAGED_BY_LABEL: MANAGED_BY_VALUE}
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"  # every child the GM creates

_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


@dataclass(frozen=True, slots=True)
class Owner:
    """The CR that owns the children, checked once (list items carry no kind/apiVersion)."""

    kind: str
    name: str
    namespace: str
    uid: str
    api_version: str = SEDNA_API_VERSION

    def as_object(self) -> dict[str, Any]:
        return {"apiVersion": self.api_version, "kind": self.kind,
                "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid}}

    def ref(self) -> dict[str, Any]:
        return controller_ref(self.as_object())

    def selector(self) -> dict[str, str]:
        """Labels shared by every worker of this CR."""
        return owner_labels(self.as_object())

    def labels(self, worker_type: str) -> dict[str, str]:
        return worker_labels(self.as_object(), worker_type=worker_type)


def owner_of(cr: Any, *, kind: str) -> Owner:
    """Check the CR's identity fields and that its kind (when present) is `kind`."""
    if not isinstance(cr, Mapping) or not isinstance(cr.get("metadata"), Mapping):
        raise InvalidSpec("InvalidObject", f"{kind} must be an object with metadata")
    meta = cr["metadata"]
    missing = [f for f in ("name", "namespace", "uid") if not isinstance(meta.get(f), str)
               or not meta[f]]
    if missing:
        raise InvalidSpec("InvalidObject", f"{kind} lacks metadata.{', metadata.'.join(missing)}")
    if cr.get("kind") not in (None, "", kind):
        raise InvalidSpec("InvalidObject", f"expected a {kind}, got a {cr['kind']}")
    if not isinstance(cr.get("spec"), Mapping):
        raise InvalidSpec("InvalidSpec", f"{kind} {meta['name']} has no spec")
    owner = Owner(kind=kind, name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])
    check_label_value(owner.name, what=f"{kind} name")
    return owner


def check_label_value(value: str, *, what: str) -> None:
    """Label values are at most 63 characters; say which name is too long and by how much."""
    if len(value) > 63:
        raise InvalidSpec("NameTooLong", f"{what} {value!r} is {len(value)} characters; "
                          "it must fit in a 63-character label value")


def check_dns_label(value: str, *, what: str) -> None:
    """Service names must be RFC 1035 labels: lower-case, start with a letter, <= 63."""
    if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise InvalidSpec("InvalidName", f"{what} {value!r} is not a valid DNS label "
                          "(lower-case letters, digits and '-', starting with a letter, "
                          "at most 63 characters)")


def stamped(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with its spec-hash annotation set from its own content (less `MANAGED_BY`)."""
    meta = obj["metadata"]
    meta.setdefault("annotations", {}).pop(SPEC_HASH_ANNOTATION, None)
    if not meta["annotations"]:
        del meta["annotations"]
    labels = meta.get("labels") or {}
    marker = labels.pop(MANAGED_BY_LABEL, None)
    digest = spec_hash(obj)
    if marker is not None:
        labels[MANAGED_BY_LABEL] = marker
    meta.setdefault("annotations", {})[SPEC_HASH_ANNOTATION] = digest
    return obj


def _metadata(owner: Owner, *, name: str, labels: Mapping[str, str],
              annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": owner.namespace,
                            "labels": {**labels, **MANAGED_BY}, "ownerReferences": [owner.ref()]}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def build_pod(owner: Owner, *, name: str, worker_type: str,
              rendered: Mapping[str, Any]) -> dict[str, Any]:
    """A worker Pod named `name` from a rendered template (see `render_template`)."""
    tmeta = rendered["metadata"]
    meta = _metadata(owner, name=name,
                     labels={**tmeta.get("labels", {}), **owner.labels(worker_type)},
                     annotations=tmeta.get("annotations"))
    if tmeta.get("finalizers"):
        meta["finalizers"] = list(tmeta["finalizers"])
    return stamped({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                    "spec": copy.deepcopy(rendered["spec"])})


def build_deployment(owner: Owner, *, name: str, worker_type: str, app_label: str,
                     rendered: Mapping[str, Any],
                     inline: InlineDeployment | None = None) -> dict[str, Any]:
    """A worker Deployment selecting its pods by the worker labels. Without `inline`,
    replicas is left unset (1 by default, or the HPA's to manage); with it (a DeploymentSpec
    the CR embeds, checked by gm/workers/deployspec.py) its replicas, selector (plus the
    worker labels) and rollout knobs are honoured."""
    labels = {**owner.labels(worker_type), "app.sedna.io": app_label}
    tmeta = rendered["metadata"]
    template_meta: dict[str, Any] = {"labels": {**tmeta.get("labels", {}), **labels}}
    if tmeta.get("annotations"):
        template_meta["annotations"] = dict(tmeta["annotations"])
    spec = {"selector": {"matchLabels": labels},
            "template": {"metadata": template_meta, "spec": copy.deepcopy(rendered["spec"])}}
    if inline is not None:
        spec = inline.applied(spec)
    return stamped({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": _metadata(owner, name=name, labels=labels), "spec": spec})


def build_service(owner: Owner, *, name: str, worker_type: str, port: int) -> dict[str, Any]:
    """A ClusterIP Service in front of one worker type (port name `tcp-0`, for EdgeMesh)."""
    check_dns_label(name, what="Service name")
    labels = owner.labels(worker_type)
    spec = {"type": "ClusterIP", "selector": dict(labels),
            "ports": [{"name": "tcp-0", "protocol": "TCP", "port": port, "targetPort": port}]}
    return stamped({"apiVersion": "v1", "kind": "Service",
                    "metadata": _metadata(owner, name=name, labels=labels), "spec": spec})


def hpa_name(deployment_name: str) -> str:
    """Upstream's HPA name for a worker Deployment."""
    return f"hpa-{deployment_name}"


def build_hpa(owner: Owner, *, worker_type: str, deployment_name: str, hpa: Any,
              where: str) -> dict[str, Any]:
    """An autoscaling/v2 HPA scaling `deployment_name` per the CR's `hpa` block."""
    spec: dict[str, Any] = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                               "name": deployment_name}}
    spec.update(_checked_hpa(hpa, where=where))
    return stamped({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                    "metadata": _metadata(owner, name=hpa_name(deployment_name),
                                          labels=owner.labels(worker_type)),
                    "spec": spec})


def _checked_hpa(hpa: Any, *, where: str) -> dict[str, Any]:
    if not isinstance(hpa, Mapping):
        raise InvalidSpec("InvalidHPA", f"{where} must be an object")
    high = hpa.get("maxReplicas")
    if not _is_int(high) or high < 1:
        raise InvalidSpec("InvalidHPA", f"{where}.maxReplicas must be an integer >= 1")
    out: dict[str, Any] = {}
    low = hpa.get("minReplicas")
    if low is not None:
        if not _is_int(low) or not 1 <= low <= high:
            raise InvalidSpec("InvalidHPA",
                              f"{where}.minReplicas must be an integer in 1..maxReplicas")
        out["minReplicas"] = low
    out["maxReplicas"] = high
    for key, kind in (("metrics", list), ("behavior", Mapping)):
        if hpa.get(key) is not None:
            if not isinstance(hpa[key], kind):
                raise InvalidSpec("InvalidHPA", f"{where}.{key} has the wrong type")
            out[key] = copy.deepcopy(hpa[key])
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
