"""What the GM's informer caches keep of each object: only what the GM reads.

Every informer of one resource type is cut down by the same function (`transform_for`,
given to the InformerFactory), so a reader never gets an object cut for another and the
GM holds one lean copy of each object however many kinds read it. What goes everywhere:
`metadata.managedFields` (a server's bookkeeping, often the largest part of an object)
and the last-applied annotation (a second copy of the object as kubectl applied it).
What goes besides, by type, with who reads what is kept:

- Pods (every worker pod): `spec.nodeName` (placement, stranded pods) and the status'
  phase, reason, message, startTime and `PodScheduled` condition (worker counts, failures,
  unschedulable waits). A pod the GM replaces is rebuilt from the CR, never from the cache.
- Deployments: `spec.replicas` (kept when the CR leaves replicas to an HPA) and
  `spec.selector` (an immutable field checked before an update); the status less the
  conditions other than `Progressing` and `ReplicaFailure` (how a Deployment fails).
- Services: the fields the API server allocates (`clusterIP(s)`, `ipFamilies`,
  `ipFamilyPolicy`), carried over when a Service is updated; status whole.
- Nodes: name, labels and `status.addresses` (an aggregator on the host network); a
  node's image list and conditions are most of its size and nothing the GM reads.
- Secrets: without the data of types no credential has (`slim_secret`).
- Sedna CRs and everything else: whole, less the two copies above.

What is kept is rebuilt with its short strings interned (`shared`): the same label keys and
values, uids, names, kinds and condition words recur across every child of every CR, and a
cache holding one string object for each occurrence is several times its size in JSON.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from gm.kube.resources import DEPLOYMENTS, GVR, NODES, PODS, SECRETS, SERVICES

Obj = dict[str, Any]
Transform = Callable[[Obj], Obj]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# Secret types that never hold a storage credential, whose data can be large (a Helm release
# is up to 1 MiB): cached without their data
DATALESS_SECRET_TYPES = frozenset({"helm.sh/release.v1", "kubernetes.io/service-account-token"})

POD_STATUS = ("phase", "reason", "message", "conditions", "startTime")
POD_CONDITIONS = frozenset({"PodScheduled"})
DEPLOYMENT_CONDITIONS = frozenset({"Progressing", "ReplicaFailure"})
POD_SPEC = ("nodeName",)
DEPLOYMENT_SPEC = ("replicas", "selector")
SERVICE_SPEC = ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy")
NODE_META = ("name", "uid", "resourceVersion", "labels", "deletionTimestamp")


SHARED_MAX = 128  # strings up to this long are interned; longer ones are rarely repeated


def shared(value: Any) -> Any:
    """`value` rebuilt with every dict key and every short string interned (the strings a
    cache holds many times become one object each); other values as they are."""
    if isinstance(value, str):
        return sys.intern(value) if len(value) <= SHARED_MAX else value
    if isinstance(value, dict):
        return {sys.intern(k) if isinstance(k, str) else k: shared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shared(v) for v in value]
    return value


def slim_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata without managedFields and the last-applied annotation."""
    out = {k: v for k, v in meta.items() if k != "managedFields"}
    annotations = out.get("annotations")
    if isinstance(annotations, Mapping) and LAST_APPLIED in annotations:
        out["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    return out


def slim_object(obj: Obj) -> Obj:
    """Any object less its managedFields and last-applied copy."""
    return shared({**obj, "metadata": slim_meta(obj.get("metadata") or {})})


def _keep(part: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: part[k] for k in keys if k in part} if isinstance(part, Mapping) else {}


def _cut(obj: Obj, *, spec: tuple[str, ...] | None = None, status: tuple[str, ...] | None = None,
         meta: tuple[str, ...] | None = None) -> Obj:
    out = {**obj, "metadata": slim_meta(obj.get("metadata") or {})}
    if meta is not None:
        out["metadata"] = _keep(out["metadata"], meta)
    if spec is not None and "spec" in obj:
        out["spec"] = _keep(obj["spec"], spec)
    if status is not None and "status" in obj:
        out["status"] = _keep(obj["status"], status)
    return shared(out)


def _only_conditions(out: Obj, types: frozenset[str]) -> Obj:
    status = out.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if isinstance(conditions, list):
        out["status"] = {**status, "conditions": [c for c in conditions
                                                  if isinstance(c, Mapping) and c.get("type") in types]}
    return out


def slim_pod(pod: Obj) -> Obj:
    return _only_conditions(_cut(pod, spec=POD_SPEC, status=POD_STATUS), POD_CONDITIONS)


def slim_deployment(deployment: Obj) -> Obj:
    return _only_conditions(_cut(deployment, spec=DEPLOYMENT_SPEC), DEPLOYMENT_CONDITIONS)


def slim_service(service: Obj) -> Obj:
    return _cut(service, spec=SERVICE_SPEC)


def slim_node(node: Obj) -> Obj:
    return _cut(node, meta=NODE_META, spec=(), status=("addresses",))


def slim_secret(secret: Obj) -> Obj:
    """A Secret as cached: without managedFields and the last-applied annotation (which
    repeats the whole Secret), and without the data of types no credential has. A field
    or label selector cannot narrow the list (a credential is any Secret a user names),
    so this is what bounds the cache: one entry per Secret, about the size of its data."""
    out = slim_object(secret)
    if secret.get("type") in DATALESS_SECRET_TYPES:
        out.pop("data", None)
        out.pop("stringData", None)
    return out


_BY_TYPE: dict[GVR, Transform] = {PODS: slim_pod, DEPLOYMENTS: slim_deployment, SERVICES: slim_service,
                                  NODES: slim_node, SECRETS: slim_secret}


def transform_for(gvr: GVR) -> Transform:
    """The one transform every cache of `gvr` uses."""
    return _BY_TYPE.get(gvr, slim_object)
