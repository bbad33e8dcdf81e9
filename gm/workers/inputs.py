"""The Models, Datasets and Secrets a CR names, checked and turned into mount URLs, and the
lists of worker objects a spec holds, checked once for every kind.

The reconciler looks these objects up in its caches and passes what it found (None
for absent); this module decides what absence or a malformed object means, so every
builder reports it the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gm.workers.specerrors import InvalidSpec, MissingDependency
from gm.workers.storage import MountURL
from shared.objects import deep_get, meta_str

Secrets = Mapping[str, Mapping[str, Any]]


def ref_name(spec: Mapping[str, Any], *path: str, where: str) -> str:
    """The `name` of a `{name: ...}` reference at `path`, required."""
    name = deep_get(spec, *path, "name")
    if not isinstance(name, str) or not name:
        raise InvalidSpec("InvalidSpec", f"{where}.name is required")
    return name


def object_list(spec: Mapping[str, Any], key: str, *, what: str) -> list[Mapping[str, Any]]:
    """`spec[key]`: a non-empty list of objects (a worker per entry, whose template the
    caller checks), named `spec.<key>` in the messages."""
    items = spec.get(key)
    if not isinstance(items, list) or not items:
        raise InvalidSpec("InvalidSpec", f"spec.{key} needs at least one {what}")
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InvalidSpec("InvalidSpec", f"spec.{key}[{i}] is not an object")
    return items


def required(obj: Mapping[str, Any] | None, *, kind: str, name: str,
             namespace: str) -> Mapping[str, Any]:
    """`obj` when present, else MissingDependency; the caller must pass the right object."""
    if obj is None:
        raise MissingDependency(kind, name, namespace=namespace)
    if meta_str(obj, "name") != name:
        raise ValueError(f"looked up {kind} {name!r} but got {meta_str(obj, 'name')!r}")
    return obj


def source_url(obj: Mapping[str, Any], *, kind: str) -> str:
    """`spec.url` of a Model or Dataset."""
    url = deep_get(obj, "spec", "url")
    if not isinstance(url, str) or not url.strip():
        raise InvalidSpec(f"Invalid{kind}", f"{kind} {meta_str(obj, 'name')} has no spec.url")
    return url


def credential(name: Any, *, secrets: Secrets | None, namespace: str) -> Mapping | None:
    """The Secret called `name` (None when no credential is named)."""
    if name in (None, ""):
        return None
    if not isinstance(name, str):
        raise InvalidSpec("InvalidSpec", f"credentialName must be a string, not {name!r}")
    secret = (secrets or {}).get(name)
    if secret is None:
        raise MissingDependency("Secret", name, namespace=namespace)
    return secret


def mount_of(obj: Mapping[str, Any], *, kind: str, secrets: Secrets | None,
             namespace: str) -> MountURL:
    """A downloaded mount of a Model's or Dataset's URL, with its credential."""
    secret = credential(deep_get(obj, "spec", "credentialName"), secrets=secrets,
                        namespace=namespace)
    return MountURL(url=source_url(obj, kind=kind), download=True, secret=secret)
