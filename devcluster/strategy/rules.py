"""Pure rules of a write: what the server keeps, resets and recomputes (spec §4.3-§4.7, §5.8).

Functions here never mutate stored objects: they build new dicts, sharing unchanged
sub-trees with the stored version (stored objects are immutable, so sharing is safe).
"""

from __future__ import annotations

from typing import Any

from devcluster.machinery.errors import ApiError, FieldError, bad_request, conflict, invalid
from devcluster.machinery.resource import ResourceType
from devcluster.machinery.selectors import selector_to_string

# Metadata the client cannot change through an update (generation is recomputed).
PRESERVED_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                  "generation", "name", "namespace")
# Metadata a client may not set on create.
SERVER_META = ("uid", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "generation",
               "creationTimestamp")
GC_FINALIZERS = ("orphan", "foregroundDeletion")
PROPAGATIONS = ("Orphan", "Background", "Foreground")
_IGNORED_META = ("resourceVersion", "managedFields")
# Kinds whose status strategy takes metadata.annotations from the request (only spec and labels
# are reset): the Deployment controller records `deployment.kubernetes.io/revision` this way,
# so the annotation never bumps generation.
STATUS_KEEPS_ANNOTATIONS = frozenset({("apps", "deployments"), ("apps", "replicasets")})


def as_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request(f"the body of the request must be a JSON object, got {type(body).__name__}")
    return body


def own_meta(obj: dict[str, Any]) -> dict[str, Any]:
    """Give `obj` a private metadata dict (a shallow copy) and return it."""
    m = obj.get("metadata")
    m = dict(m) if isinstance(m, dict) else {}
    obj["metadata"] = m
    return m


def carry_update_fields(rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Copy what an update may not change from the stored object into `new` (spec §4.4)."""
    new["kind"] = rt.kind
    new["apiVersion"] = rt.api_version
    m = own_meta(new)
    om = old["metadata"]
    for k in PRESERVED_META:
        if k in om:
            m[k] = om[k]
        else:
            m.pop(k, None)
    if rt.status:
        if "status" in old:
            new["status"] = old["status"]
        else:
            new.pop("status", None)


def status_only(rt: ResourceType, old: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """The stored object with only `status` taken from the request (spec §4.6)."""
    new = dict(old)
    new["metadata"] = dict(old["metadata"])
    if rt.key in STATUS_KEEPS_ANNOTATIONS:
        annotations = (body.get("metadata") or {}).get("annotations")
        if annotations:
            new["metadata"]["annotations"] = annotations
        else:
            new["metadata"].pop("annotations", None)
    if "status" in body:
        new["status"] = omit_zero_counters(rt, body["status"])
    else:
        new.pop("status", None)
    return new


# status counters the real types write only when not zero (`omitempty` integers), per kind
_ZERO_OMITTED = {
    ("apps", "deployments"): ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas",
                              "unavailableReplicas", "terminatingReplicas"),
    ("apps", "replicasets"): ("fullyLabeledReplicas", "readyReplicas", "availableReplicas", "terminatingReplicas",
                              "observedGeneration"),
    ("apps", "daemonsets"): ("updatedNumberScheduled", "numberAvailable", "numberUnavailable", "observedGeneration"),
    ("batch", "jobs"): ("active", "succeeded", "failed"),
}


def omit_zero_counters(rt: ResourceType, status: Any) -> Any:
    """`status` without the zero counters its kind never writes."""
    keys = _ZERO_OMITTED.get(rt.key)
    if not keys or not isinstance(status, dict) or not any(status.get(k) == 0 for k in keys):
        return status
    return {k: v for k, v in status.items() if not (k in keys and v == 0 and not isinstance(v, bool))}


def check_new_finalizers(rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> None:
    """No finalizer may be added once deletion started (spec §4.4)."""
    om = old["metadata"]
    if not om.get("deletionTimestamp"):
        return
    before = set(om.get("finalizers") or [])
    if any(f not in before for f in new["metadata"].get("finalizers") or []):
        raise invalid(rt.kind, rt.group, om.get("name", ""), [FieldError(
            "metadata.finalizers", "Forbidden", "no new finalizers can be added if the object is being deleted")])


def spec_changed(rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether the change counts for metadata.generation (spec §4.5)."""
    if rt.crd:
        skip = {"metadata", "status", "apiVersion", "kind"} if rt.status else {"metadata", "apiVersion", "kind"}
        keys = (old.keys() | new.keys()) - skip
        return any(old.get(k) != new.get(k) for k in keys)
    if old.get("spec") != new.get("spec"):
        return True
    if rt.key == ("apps", "deployments"):
        return old["metadata"].get("annotations") != new["metadata"].get("annotations")
    return False


def set_generation(rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> None:
    if not rt.generation:
        return
    gen = old["metadata"].get("generation") or 1
    new["metadata"]["generation"] = gen + 1 if spec_changed(rt, old, new) else gen
    if rt.key == ("apps", "daemonsets"):
        _keep_template_generation(old, new)


DS_TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"


def _keep_template_generation(old: dict[str, Any], new: dict[str, Any]) -> None:
    """A DaemonSet's template generation is the server's: the stored one, plus one when the
    template changed, whatever the request's annotation says."""
    try:
        current = int(((old["metadata"].get("annotations") or {}).get(DS_TEMPLATE_GENERATION)) or 1)
    except ValueError:
        current = 1
    if (old.get("spec") or {}).get("template") != (new.get("spec") or {}).get("template"):
        current += 1
    new["metadata"].setdefault("annotations", {})[DS_TEMPLATE_GENERATION] = str(current)


def same_content(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """True when nothing but resourceVersion/managedFields differs: a no-op write (spec §4.2)."""
    if old.keys() != new.keys():
        return False
    for k, v in new.items():
        if k == "metadata":
            om, nm = old[k], v
            if {a: b for a, b in om.items() if a not in _IGNORED_META} != \
                    {a: b for a, b in nm.items() if a not in _IGNORED_META}:
                return False
        elif old[k] != v:
            return False
    return True


def check_rv_precondition(rt: ResourceType, old: dict[str, Any], rv: Any) -> None:
    """409 when a client-supplied resourceVersion is not the stored one."""
    if rv in (None, ""):
        return
    if str(rv) != old["metadata"]["resourceVersion"]:
        raise conflict(rt.resource, rt.group, old["metadata"]["name"])


def check_coordinates(rt: ResourceType, namespace: str, name: str, body: dict[str, Any]) -> None:
    """The body may not name another object than the URL does."""
    m = body.get("metadata") or {}
    if m.get("name") not in (None, "", name):
        raise bad_request(f"the name of the object ({m.get('name')}) does not match the name on the URL ({name})")
    if rt.namespaced and m.get("namespace") not in (None, "", namespace):
        raise bad_request("the namespace of the provided object does not match the namespace sent on the request")


def gc_finalizers(existing: list[str], propagation: str | None) -> list[str]:
    """The finalizers after a delete with this propagation policy (spec §5.6 step 3)."""
    if propagation is None:
        return list(existing)
    out = [f for f in existing if f not in GC_FINALIZERS]
    if propagation == "Orphan":
        out.append("orphan")
    elif propagation == "Foreground":
        out.append("foregroundDeletion")
    return out


def propagation_of(propagation: str | None, orphan_dependents: bool | None) -> str | None:
    if propagation is not None and propagation not in PROPAGATIONS:
        raise ApiError(400, "BadRequest",
                       f'propagationPolicy: Unsupported value: "{propagation}": supported values: '
                       '"Background", "Foreground", "Orphan"')
    if propagation is None and orphan_dependents is not None:
        return "Orphan" if orphan_dependents else "Background"
    return propagation


# -- scale subresource ----------------------------------------------------------------------------

def _path(path: str) -> list[str]:
    return [p for p in path.split(".") if p]


def get_path(obj: Any, path: str) -> Any:
    for part in _path(path):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def set_path(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `obj` with `value` at `path`, copying only the dicts along the path."""
    parts = _path(path)
    out = dict(obj)
    cur = out
    for part in parts[:-1]:
        child = cur.get(part)
        child = dict(child) if isinstance(child, dict) else {}
        cur[part] = child
        cur = child
    cur[parts[-1]] = value
    return out


def to_scale(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """The autoscaling/v1 Scale view of a Deployment, ReplicaSet or scalable CR (spec §5.8)."""
    m = obj["metadata"]
    if rt.crd:
        replicas = get_path(obj, rt.scale_spec_path) or 0
        status_replicas = get_path(obj, rt.scale_status_path) or 0
        selector = get_path(obj, rt.scale_selector_path) if rt.scale_selector_path else ""
    else:
        replicas = (obj.get("spec") or {}).get("replicas", 0)
        status_replicas = (obj.get("status") or {}).get("replicas", 0)
        selector = selector_to_string((obj.get("spec") or {}).get("selector"))
    status: dict[str, Any] = {"replicas": status_replicas}
    if selector:
        status["selector"] = selector
    return {
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {k: m[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in m},
        "spec": {"replicas": replicas},
        "status": status,
    }


def scale_replicas(rt: ResourceType, name: str, scale: Any) -> int:
    """`spec.replicas` of a Scale body; 422 when absent or negative."""
    spec = scale.get("spec") if isinstance(scale, dict) else None
    value = spec.get("replicas", 0) if isinstance(spec, dict) else 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise invalid("Scale", "autoscaling", name, [FieldError(
            "spec.replicas", "Invalid value", "must be greater than or equal to 0", value, True)])
    return value


def with_replicas(rt: ResourceType, obj: dict[str, Any], replicas: int) -> dict[str, Any]:
    path = rt.scale_spec_path if rt.crd else ".spec.replicas"
    out = set_path(obj, path, replicas)
    out["metadata"] = dict(obj["metadata"])
    return out
