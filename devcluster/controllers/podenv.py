"""Environment of a container as the kubelet would build it (literal values and references).

`$(VAR)` expansion is not done: values are passed through as written.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

Lookup = Callable[[str, str, str], dict[str, Any] | None]  # (resource, namespace, name) -> object


class EnvError(Exception):
    """A referenced field, secret or config map key cannot be resolved (CreateContainerConfigError)."""


def _field(pod: dict[str, Any], path: str) -> str:
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
    }
    if path in simple:
        return simple[path] or ""
    for prefix, source in (("metadata.labels", meta.get("labels")), ("metadata.annotations", meta.get("annotations"))):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return (source or {}).get(path[len(prefix) + 2 : -2], "")
    raise EnvError(f"unsupported fieldRef path {path!r}")


def _key_ref(ref: dict[str, Any], resource: str, ns: str, lookup: Lookup) -> str | None:
    obj = lookup(resource, ns, ref.get("name", ""))
    key = ref.get("key", "")
    if obj is None:
        if ref.get("optional"):
            return None
        raise EnvError(f'{resource[:-1]} "{ref.get("name", "")}" not found')
    if resource == "secrets":
        if key in (obj.get("stringData") or {}):
            return obj["stringData"][key]
        raw = (obj.get("data") or {}).get(key)
        if raw is not None:
            try:
                return base64.b64decode(raw).decode("utf-8", "replace")
            except (binascii.Error, ValueError) as err:
                raise EnvError(f"secret {ref.get('name')} key {key}: bad base64") from err
    else:
        value = (obj.get("data") or {}).get(key)
        if value is not None:
            return value
    if ref.get("optional"):
        return None
    raise EnvError(f"couldn't find key {key} in {resource[:-1]} {ns}/{ref.get('name', '')}")


def container_env(pod: dict[str, Any], container: dict[str, Any], lookup: Lookup) -> dict[str, str]:
    """Name -> value for the container, plus NODE_NAME, POD_NAME and POD_NAMESPACE."""
    ns = pod["metadata"].get("namespace", "default")
    env = {
        "NODE_NAME": pod.get("spec", {}).get("nodeName") or "",
        "POD_NAME": pod["metadata"].get("name", ""),
        "POD_NAMESPACE": ns,
    }
    for item in container.get("env") or []:
        name = item.get("name")
        if not name:
            continue
        src = item.get("valueFrom")
        if src is None:
            env[name] = str(item.get("value", ""))
            continue
        if "fieldRef" in src:
            env[name] = _field(pod, (src["fieldRef"] or {}).get("fieldPath", ""))
            continue
        if "secretKeyRef" in src:
            value = _key_ref(src["secretKeyRef"] or {}, "secrets", ns, lookup)
        elif "configMapKeyRef" in src:
            value = _key_ref(src["configMapKeyRef"] or {}, "configmaps", ns, lookup)
        else:
            continue  # resourceFieldRef: nothing meaningful to give a local process
        if value is not None:
            env[name] = value
    return env
