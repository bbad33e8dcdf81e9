"""Builders and lookups shared by the controller tests (store-level)."""

from __future__ import annotations

from typing import Any


def rt(store: Any, resource: str, group: str = "", version: str = "v1") -> Any:
    return store.registry.lookup(group=group, version=version, resource=resource)


def deployment(name: str, *, replicas: int = 2, image: str = "nginx:1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "c", "image": image}]}},
            **spec,
        },
    }


def pod(name: str, *, image: str = "nginx:1", labels: dict | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": image}], **spec}}


def names(items: list[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in items)


def owned_by(items: list[dict[str, Any]], owner: dict[str, Any]) -> list[dict[str, Any]]:
    uid = owner["metadata"]["uid"]
    return [o for o in items if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])]
