"""A user's PodTemplateSpec -> the pod template a worker runs (validated, env, storage).

The CR embeds a template per worker; the GM adds its env, mounts and pod knobs on
top of a deep copy, never on the cached CR. Injected env comes after the user's and
replaces a user entry of the same name (upstream appends, so the GM's value won
anyway; dropping the duplicate keeps the container valid and readable).

One thing a template may never ask for: to run as the GM's own ServiceAccount in the GM's
namespace (`refuse_service_account`, checked once on every kind's built children).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gm.workers.specerrors import ForbiddenSpec, InvalidSpec
from gm.workers.storage import StoragePlan, apply_storage

# Kubernetes resource.Quantity: a signed decimal with a binary-SI, decimal-SI or exponent suffix.
_QUANTITY = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?")


def env_value(name: str, value: str) -> dict[str, Any]:
    """A literal env entry."""
    return {"name": name, "value": value}


def env_field(name: str, field_path: str) -> dict[str, Any]:
    """An env entry from the Downward API (e.g. the pod's own name)."""
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                     "fieldPath": field_path}}}


def identity_env(*, namespace: str, name: str) -> list[dict[str, Any]]:
    """Who a service's worker is: its CR (`SERVICE_NAME`, and `JOB_NAME`, which the worker
    library names its reports' owner from) and its own pod name, from the Downward API so
    it is stable across reconciles and unique per replica."""
    return [env_value("NAMESPACE", namespace), env_value("SERVICE_NAME", name),
            env_value("JOB_NAME", name), env_field("WORKER_NAME", "metadata.name")]


@dataclass(frozen=True, slots=True)
class PodKnobs:
    """Pod settings the GM forces (`host_network`) or defaults when the template is silent."""

    host_network: bool = False
    restart_policy: str | None = None
    dns_policy: str | None = None
    node_name: str | None = None


def checked_template(template: Any, *, where: str) -> dict[str, Any]:
    """A deep copy of `template` after checking the parts the GM relies on."""
    if not isinstance(template, Mapping):
        raise InvalidSpec("InvalidTemplate", f"{where} is missing or not an object")
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidSpec("InvalidTemplate", f"{where}.spec is missing or not an object")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise InvalidSpec("InvalidTemplate", f"{where}.spec.containers has no container")
    for i, container in enumerate(containers):
        _check_container(container, where=f"{where}.spec.containers[{i}]")
    for key in ("initContainers", "volumes"):
        if key in spec and not isinstance(spec[key], list | None):
            raise InvalidSpec("InvalidTemplate", f"{where}.spec.{key} must be a list")
    metadata = template.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise InvalidSpec("InvalidTemplate", f"{where}.metadata must be an object")
    return copy.deepcopy(dict(template))


def _check_container(container: Any, *, where: str) -> None:
    if not isinstance(container, Mapping):
        raise InvalidSpec("InvalidTemplate", f"{where} is not an object")
    for key in ("name", "image"):
        if not isinstance(container.get(key), str) or not container[key]:
            raise InvalidSpec("InvalidTemplate", f"{where}.{key} is required")
    env = container.get("env")
    if env is not None and (not isinstance(env, list)
                            or not all(isinstance(e, Mapping) and isinstance(e.get("name"), str)
                                       for e in env)):
        raise InvalidSpec("InvalidTemplate", f"{where}.env must be a list of named entries")
    if not isinstance(container.get("volumeMounts") or [], list):
        raise InvalidSpec("InvalidTemplate", f"{where}.volumeMounts must be a list")
    _check_resources(container.get("resources"), where=f"{where}.resources")


def _check_resources(resources: Any, *, where: str) -> None:
    """Quantities the API server would refuse (`memory: lots`), caught with the field named
    instead of a pod create failing for every reconcile."""
    if resources is None:
        return
    if not isinstance(resources, Mapping):
        raise InvalidSpec("InvalidTemplate", f"{where} must be an object")
    for kind in ("limits", "requests"):
        values = resources.get(kind)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise InvalidSpec("InvalidTemplate", f"{where}.{kind} must be an object")
        for name, value in values.items():
            if not _is_quantity(value):
                raise InvalidSpec("InvalidTemplate", f"{where}.{kind}.{name}: {value!r} is not a quantity "
                                  "(e.g. 2Gi, 500m, 1.5)")


def _is_quantity(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return value == value  # not NaN
    return isinstance(value, str) and _QUANTITY.fullmatch(value) is not None


def inject_env(container: dict[str, Any], entries: Sequence[Mapping[str, Any]]) -> None:
    """Append `entries` to the container's env, dropping earlier entries of those names."""
    names = {e["name"] for e in entries}
    kept = [e for e in container.get("env") or [] if e.get("name") not in names]
    container["env"] = kept + [dict(e) for e in entries]


def render_template(
    template: Any,
    *,
    where: str,
    env: Sequence[Mapping[str, Any]],
    storage: StoragePlan,
    knobs: PodKnobs = PodKnobs(),
) -> dict[str, Any]:
    """The worker's pod template: user template + storage + storage env + `env` + knobs.

    Returns `{"metadata": {labels?, annotations?, finalizers?}, "spec": ...}`; only those
    metadata fields carry over, as upstream copies them (names are the caller's).
    """
    source = checked_template(template, where=where)
    spec = source["spec"]
    apply_storage(spec, storage)
    storage_env = [env_value(k, v) for k, v in storage.worker_env]
    for container in spec["containers"]:
        inject_env(container, storage_env)
        inject_env(container, env)
    _apply_knobs(spec, knobs)
    meta = source.get("metadata") or {}
    kept = {k: copy.deepcopy(meta[k]) for k in ("labels", "annotations", "finalizers")
            if meta.get(k)}
    return {"metadata": kept, "spec": spec}


def _apply_knobs(spec: dict[str, Any], knobs: PodKnobs) -> None:
    if knobs.host_network:
        spec["hostNetwork"] = True
    defaults = {"restartPolicy": knobs.restart_policy, "dnsPolicy": knobs.dns_policy,
                "nodeName": knobs.node_name}
    for key, value in defaults.items():
        if value and not spec.get(key):
            spec[key] = value


# ---- the GM's own ServiceAccount ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServiceAccountRef:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


# where a pod spec names its ServiceAccount; the API server reads the deprecated alias when
# the first is empty, so both count
ACCOUNT_FIELDS = ("serviceAccountName", "serviceAccount")
_GM_OWN = ("the GlobalManager's own", "a worker may not get the GM's cluster-wide rights")
_EDGE_IDENTITY = ("one whose token the GM accepts as a LocalController's node identity",
                  "a worker may not speak for its node")


def pod_spec_of(child: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod spec a child runs: a Pod's own, a workload's (Deployment) template's, else None."""
    spec = child.get("spec")
    if not isinstance(spec, Mapping):
        return None
    if child.get("kind") == "Pod":
        return spec
    template = spec.get("template")
    inner = template.get("spec") if isinstance(template, Mapping) else None
    return inner if isinstance(inner, Mapping) else None


def refuse_service_account(children: Iterable[Mapping[str, Any]], *, namespace: str,
                           forbidden: ServiceAccountRef | None,
                           edge_accounts: Iterable[ServiceAccountRef] = ()) -> None:
    """Raise `ForbiddenSpec` when a child of a CR in `namespace` would run as `forbidden` or
    as one of `edge_accounts`.

    `forbidden` is the GM's own ServiceAccount: its token holds the GM's cluster-wide rights
    (every namespace's Pods and Secrets), and a worker running as it would hand them to
    anyone allowed to create a CR in the GM's namespace. `edge_accounts` are the accounts
    whose tokens the GM accepts as an LC's node identity (TokenReview): a worker running as
    one could project such a token and speak for its node. A ServiceAccount is namespaced, so
    the same name elsewhere is someone else's and passes. None / empty: nothing is refused."""
    refused = [(ref, why) for ref, why in ((forbidden, _GM_OWN),
                                           *((r, _EDGE_IDENTITY) for r in edge_accounts))
               if ref is not None and ref.namespace == namespace]
    if not refused:
        return
    for child in children:
        spec = pod_spec_of(child)
        if spec is None:
            continue
        for key in ACCOUNT_FIELDS:
            for ref, (role, why) in refused:
                if spec.get(key) == ref.name:
                    meta = child.get("metadata") or {}
                    raise ForbiddenSpec(
                        "ServiceAccountForbidden",
                        f"worker {str(child.get('kind', '')).lower()} {meta.get('name')} would run as "
                        f"ServiceAccount {ref}, {role} ({key} in its template): {why}; name a "
                        "ServiceAccount of the workers' own")
