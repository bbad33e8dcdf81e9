"""Served versions that are views of another resource's storage: one object, two shapes.

A real API server keeps one copy of an object and converts it to whatever version a
client asks for. Two such pairs matter to kubectl and client-go here:

- `autoscaling/v1` HorizontalPodAutoscaler over the `autoscaling/v2` objects
  (`targetCPUUtilizationPercentage` <-> a `Resource` cpu `Utilization` metric);
- `events.k8s.io/v1` Event over the core `v1` Events (note <-> message, regarding <->
  involvedObject, reportingController <-> reportingComponent, deprecated* <-> the core
  source, timestamps and count).

`ViewStore` wraps the store for a request addressed to a view: bodies are converted to
the storage shape before any store verb runs (so defaulting, validation, generation and
watch fan-out are the storage resource's), and answers and watch events are converted
back. The store itself never sees a view type.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson

from devcluster.machinery.errors import ApiError, not_found
from devcluster.machinery.resource import ResourceType
from devcluster.storage.watch import WatchEvent

Convert = Callable[[dict[str, Any]], dict[str, Any]]

_CPU_ANNOTATIONS = ("autoscaling.alpha.kubernetes.io/metrics", "autoscaling.alpha.kubernetes.io/behavior",
                    "autoscaling.alpha.kubernetes.io/conditions", "autoscaling.alpha.kubernetes.io/current-metrics")


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _cpu_target(metrics: Any) -> int | None:
    for m in metrics if isinstance(metrics, list) else []:
        res = _d(_d(m).get("resource"))
        target = _d(res.get("target"))
        if _d(m).get("type") == "Resource" and res.get("name") == "cpu" and target.get("type") == "Utilization":
            return target.get("averageUtilization")
    return None


def _hpa_shell(obj: dict[str, Any], api_version: str) -> dict[str, Any]:
    """`obj` as `api_version`, without its status and with only the spec fields both versions share."""
    out = {k: copy.deepcopy(v) for k, v in obj.items() if k not in ("spec", "status")}
    out["apiVersion"] = api_version
    spec = _d(obj.get("spec"))
    out["spec"] = {k: copy.deepcopy(spec[k]) for k in ("scaleTargetRef", "minReplicas", "maxReplicas") if k in spec}
    return out


def hpa_v2_to_v1(obj: dict[str, Any]) -> dict[str, Any]:
    """The autoscaling/v1 shape of a stored autoscaling/v2 HPA."""
    out = _hpa_shell(obj, "autoscaling/v1")
    spec = _d(obj.get("spec"))
    cpu = _cpu_target(spec.get("metrics"))
    if cpu is not None:
        out["spec"]["targetCPUUtilizationPercentage"] = cpu
    if "status" in obj:
        status = _d(obj.get("status"))
        out["status"] = {k: copy.deepcopy(status[k]) for k in
                         ("observedGeneration", "lastScaleTime", "currentReplicas", "desiredReplicas")
                         if k in status}
        out["status"].setdefault("currentReplicas", 0)
        out["status"].setdefault("desiredReplicas", 0)
        for cur in status.get("currentMetrics") or []:
            res = _d(_d(cur).get("resource"))
            if res.get("name") == "cpu" and "averageUtilization" in _d(res.get("current")):
                out["status"]["currentCPUUtilizationPercentage"] = res["current"]["averageUtilization"]
    return out


def hpa_v1_to_v2(obj: dict[str, Any]) -> dict[str, Any]:
    """The autoscaling/v2 shape of an autoscaling/v1 HPA body."""
    out = _hpa_shell(obj, "autoscaling/v2")
    spec = _d(obj.get("spec"))
    cpu = spec.get("targetCPUUtilizationPercentage")
    if cpu is not None:
        out["spec"]["metrics"] = [{"type": "Resource", "resource": {
            "name": "cpu", "target": {"type": "Utilization", "averageUtilization": cpu}}}]
    if isinstance(obj.get("status"), dict):
        status = obj["status"]
        out["status"] = {k: copy.deepcopy(status[k]) for k in
                         ("observedGeneration", "lastScaleTime", "currentReplicas", "desiredReplicas")
                         if k in status}
        if status.get("currentCPUUtilizationPercentage") is not None:
            out["status"]["currentMetrics"] = [{"type": "Resource", "resource": {
                "name": "cpu", "current": {"averageUtilization": status["currentCPUUtilizationPercentage"]}}}]
    return out


# core field -> events.k8s.io field (values copied as they are)
_EVENT_FIELDS = (
    ("message", "note"), ("involvedObject", "regarding"), ("related", "related"), ("reason", "reason"),
    ("type", "type"), ("action", "action"), ("eventTime", "eventTime"), ("series", "series"),
    ("reportingInstance", "reportingInstance"), ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"), ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
)


def event_core_to_v1(obj: dict[str, Any]) -> dict[str, Any]:
    """The events.k8s.io/v1 shape of a stored core Event."""
    out: dict[str, Any] = {"kind": "Event", "apiVersion": "events.k8s.io/v1",
                           "metadata": copy.deepcopy(obj.get("metadata") or {})}
    for core, new in _EVENT_FIELDS:
        if obj.get(core) not in (None, "", {}):
            out[new] = copy.deepcopy(obj[core])
    # kube-apiserver copies reportingComponent only; an event that names its component just in
    # `source` (the old recorder's) has no reportingController in this view
    if obj.get("reportingComponent"):
        out["reportingController"] = obj["reportingComponent"]
    return out


def event_v1_to_core(obj: dict[str, Any]) -> dict[str, Any]:
    """The core shape of an events.k8s.io/v1 Event body."""
    out: dict[str, Any] = {"kind": "Event", "apiVersion": "v1",
                           "metadata": copy.deepcopy(obj.get("metadata") or {})}
    for core, new in _EVENT_FIELDS:
        if obj.get(new) is not None:
            out[core] = copy.deepcopy(obj[new])
    if obj.get("reportingController") is not None:
        out["reportingComponent"] = obj["reportingController"]
    return out


# view (group, version, resource) -> (storage (group, version, resource), to storage, to view)
VIEWS: dict[tuple[str, str, str], tuple[tuple[str, str, str], Convert, Convert]] = {
    ("autoscaling", "v1", "horizontalpodautoscalers"): (
        ("autoscaling", "v2", "horizontalpodautoscalers"), hpa_v1_to_v2, hpa_v2_to_v1),
    ("events.k8s.io", "v1", "events"): (("", "v1", "events"), event_v1_to_core, event_core_to_v1),
}


def is_view(rt: ResourceType) -> bool:
    return (rt.group, rt.version, rt.resource) in VIEWS


class ViewStore:
    """The store as seen through one view type: same verbs, bodies and answers converted."""

    def __init__(self, store: Any, view: ResourceType) -> None:
        storage, self._to_storage, self._to_view = VIEWS[(view.group, view.version, view.resource)]
        self._store = store
        self.view = view
        self.rt = store.registry.lookup(group=storage[0], version=storage[1], resource=storage[2])

    def __getattr__(self, name: str) -> Any:  # rv, compacted, watch_timeout, registry, ...
        return getattr(self._store, name)

    def _out(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._to_view(obj) if obj.get("kind") == self.rt.kind else obj

    def encode(self, obj: dict[str, Any], rt: Any = None) -> bytes:
        return orjson.dumps(obj)  # view objects are built per request: nothing to cache

    def get(self, rt: Any, namespace: str | None, name: str) -> dict[str, Any]:
        return self._out(self._store.get(self.rt, namespace, name))

    def create(self, rt: Any, namespace: str | None, body: Any, **kw: Any) -> dict[str, Any]:
        return self._out(self._store.create(self.rt, namespace, self._in(body), **kw))

    def update(self, rt: Any, namespace: str | None, name: str, body: Any, subresource: str | None = None,
               **kw: Any) -> dict[str, Any]:
        return self._out(self._store.update(self.rt, namespace, name, self._in(body), subresource, **kw))

    def _in(self, body: Any) -> Any:
        return self._to_storage(body) if isinstance(body, dict) else body

    def patch(self, rt: Any, namespace: str | None, name: str, patch_type: str, patch_body: Any,
              subresource: str | None = None, field_manager: str | None = None, force: bool = False,
              **kw: Any) -> tuple[dict[str, Any], bool]:
        """Patch the view of the object, then write its storage shape (guarded by its RV)."""
        fn = self._store._patch_fn(self.view, patch_type, patch_body, field_manager)
        try:
            current = self.get(rt, namespace, name)
        except ApiError as err:
            if patch_type == "apply" and subresource is None and err.code == 404:
                body = {**patch_body, "metadata": {**_d(patch_body.get("metadata")), "name": name}}
                return self.create(rt, namespace, body, **kw), True
            raise
        patched = fn(copy.deepcopy(current), patch_body)
        if not isinstance(patched, dict):
            raise not_found(self.view.resource, self.view.group, name)
        patched.setdefault("metadata", {})["resourceVersion"] = current["metadata"]["resourceVersion"]
        return self.update(rt, namespace, name, patched, subresource, **kw), False

    def delete(self, rt: Any, namespace: str | None, name: str, *args: Any, **kw: Any) -> dict[str, Any]:
        return self._out(self._store.delete(self.rt, namespace, name, *args, **kw))

    def delete_collection(self, rt: Any, namespace: str | None, **kw: Any) -> list[dict[str, Any]]:
        return [self._out(o) for o in self._store.delete_collection(self.rt, namespace, **kw)]

    def list_page(self, rt: Any, namespace: str | None, **kw: Any) -> Any:
        page = self._store.list_page(self.rt, namespace, **kw)
        page.items = [self._out(o) for o in page.items]
        return page

    def watch(self, rt: Any, namespace: str | None, **kw: Any) -> _ViewWatch:
        return _ViewWatch(self._store.watch(self.rt, namespace, **kw), self)


class _ViewWatch:
    """A storage watch whose events carry the view's shape."""

    def __init__(self, inner: Any, view: ViewStore) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_view", view)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)  # `alive`, set by the HTTP layer

    def __aiter__(self) -> _ViewWatch:
        return self

    async def __anext__(self) -> WatchEvent:
        ev = await self._inner.__anext__()
        if ev.type == "BOOKMARK":
            obj = {**ev.obj, "kind": self._view.view.kind, "apiVersion": self._view.view.api_version}
        else:
            obj = self._view._out(ev.obj)
        return WatchEvent(ev.type, self._view.view, obj, None, ev.rv, ev.time)
