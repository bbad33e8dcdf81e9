"""What the kubelet gives a pod besides its command line: volumes, the service-account mount,
the API server's address and cluster DNS, projected for a local process.

A process cannot mount anything, so every volume of a pod becomes a directory on the host
(`<root>/pods/<uid>/volumes/<name>`, or `<root>/nodes/<node>/<path>` for a hostPath, each
node having its own root filesystem), and the runtime rewrites the paths a process is given:

- env values and arguments that name a path under a `mountPath` (`/config/sedna-gm.yaml`,
  `ROOTFS_MOUNT_DIR=/rootfs`) are rewritten to the host directory before the process starts;
- paths compiled into programs (the in-cluster service-account mount
  `/var/run/secrets/kubernetes.io/serviceaccount` that client libraries read) are rewritten
  at run time inside Python processes by `devcluster/runtime/podshim/sitecustomize.py`, which the
  runtime puts on PYTHONPATH together with the mount table in `DEVCLUSTER_MOUNTS` (JSON).

The API server is the dev cluster's HTTPS port (`KUBERNETES_SERVICE_HOST=127.0.0.1`); its CA
is the `ca.crt` of the service-account mount, and the token beside it is issued by the
cluster's token authority for the pod's ServiceAccount, as the kubelet's TokenRequest would.
Every pod shares the host's network, so a Service name in an env value or argument
(`gm.sedna:9000`, `http://kb.sedna.svc.cluster.local:9020`) resolves to 127.0.0.1 and the
Service's numeric targetPort, which is what cluster DNS plus kube-proxy give a real pod.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from devcluster.controllers.podenv import EnvError
from devcluster.storage.objects import get_or_none

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
SA_TOKEN_SECONDS = 3607  # what the kubelet asks for a kube-api-access volume
SHIM_DIR = Path(__file__).resolve().parent / "podshim"
MOUNTS_ENV = "DEVCLUSTER_MOUNTS"
_SERVICE_HOST = re.compile(
    r"(?P<pre>^|[/@=,\s])(?P<svc>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.(?P<ns>[a-z0-9]([-a-z0-9]*[a-z0-9])?)"
    r"(?:\.svc(?:\.cluster\.local)?)?(?::(?P<port>\d+))?(?=$|[/\s,?])")


class ProjectionError(EnvError):
    """A volume cannot be projected (missing ConfigMap/Secret/key): CreateContainerConfigError."""


@dataclass(frozen=True, slots=True)
class ApiEndpoint:
    """Where pods reach the API server: HTTPS host and port, and the CA that signed it."""

    host: str
    port: int
    ca: Path


class ClusterSources(Protocol):
    """What the projector reads from the cluster (the kubelet's view of the API)."""

    def lookup(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    def token(self, namespace: str, pod: str, *, audiences: list[str], expiration_seconds: int) -> str: ...

    def api(self) -> ApiEndpoint | None: ...


@dataclass(frozen=True, slots=True)
class Projection:
    """Env to add and the mount table (container path -> host path) for one container."""

    env: dict[str, str]
    mounts: dict[str, str]

    def rewrite(self, value: str) -> str:
        return rewrite_path(value, self.mounts)

    def process_env(self) -> dict[str, str]:
        """Env that makes the run-time rewrite work in Python processes (empty without mounts)."""
        if not self.mounts:
            return {}
        path = os.pathsep.join(p for p in (str(SHIM_DIR), os.environ.get("PYTHONPATH", "")) if p)
        return {MOUNTS_ENV: json.dumps(self.mounts, sort_keys=True), "PYTHONPATH": path}


def rewrite_path(value: str, mounts: dict[str, str]) -> str:
    """`value` with its leading mount path (longest match) replaced by the host directory;
    `--flag=/path` keeps its flag."""
    if "=" in value and value.startswith("-"):
        flag, _, rest = value.partition("=")
        return f"{flag}={rewrite_path(rest, mounts)}"
    if not value.startswith("/"):
        return value
    for target in sorted(mounts, key=len, reverse=True):
        prefix = target.rstrip("/")
        if value == prefix or value.startswith(prefix + "/"):
            return mounts[target].rstrip("/") + value[len(prefix):]
    return value


class Projector:
    """Builds and removes the per-pod directories and env of the process runtime."""

    def __init__(self, root: Path, sources: ClusterSources):
        self.root = Path(root)
        self.sources = sources

    def node_root(self, node: str) -> Path:
        """The root filesystem of `node` (where its hostPath volumes live)."""
        path = self.root / "nodes" / node
        path.mkdir(parents=True, exist_ok=True)
        return path

    def pod_dir(self, uid: str) -> Path:
        return self.root / "pods" / uid

    def release(self, uid: str) -> None:
        """Remove a gone pod's volumes (a hostPath stays: it belongs to the node)."""
        shutil.rmtree(self.pod_dir(uid), ignore_errors=True)

    def prepare(self, pod: dict[str, Any], container: dict[str, Any]) -> Projection:
        """Write the pod's volumes and return the container's mounts and extra env."""
        volumes = {v.get("name", ""): v for v in pod["spec"].get("volumes") or []}
        mounts: dict[str, str] = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount.get("name", ""))
            if volume is None:
                raise ProjectionError(f'volume "{mount.get("name")}" of mountPath {mount.get("mountPath")} not found')
            host = self._api_access(pod) if _is_api_access(volume) else self._volume(pod, volume)
            mounts[mount["mountPath"]] = str(host / mount["subPath"]) if mount.get("subPath") else str(host)
        if SA_DIR not in mounts and self._automount(pod):
            mounts[SA_DIR] = str(self._api_access(pod))
        return Projection(env=self._api_env(), mounts=mounts)

    def resolve(self, namespace: str, value: str) -> str:
        """Service names in `value` replaced by 127.0.0.1 and the Service's targetPort."""
        def sub(m: re.Match[str]) -> str:
            service = self.sources.lookup("services", m["ns"], m["svc"])
            if service is None:
                return m[0]
            port = _target_port(service, m["port"])
            return f"{m['pre']}127.0.0.1" + (f":{port}" if port else "")

        return _SERVICE_HOST.sub(sub, value)

    # -- volumes ---------------------------------------------------------------------

    def _volume(self, pod: dict[str, Any], volume: dict[str, Any]) -> Path:
        name = volume.get("name", "")
        if "hostPath" in volume:
            host = self.node_root(pod["spec"].get("nodeName") or "") / volume["hostPath"].get("path", "/").lstrip("/")
            host.mkdir(parents=True, exist_ok=True)
            return host
        target = self.pod_dir(pod["metadata"]["uid"]) / "volumes" / name
        target.mkdir(parents=True, exist_ok=True)
        ns = pod["metadata"]["namespace"]
        if "configMap" in volume:
            _write_files(target, self._config_map(ns, volume["configMap"]))
        elif "secret" in volume:
            src = volume["secret"]
            _write_files(target, self._secret(ns, {**src, "name": src.get("secretName", "")}))
        elif "projected" in volume:
            _write_files(target, self._projected(pod, volume["projected"]))
        elif "downwardAPI" in volume:
            _write_files(target, _downward(pod, volume["downwardAPI"]))
        return target  # emptyDir, and every other kind, is an empty directory of the pod

    def _config_map(self, ns: str, src: dict[str, Any]) -> dict[str, bytes]:
        obj = self.sources.lookup("configmaps", ns, src.get("name", ""))
        if obj is None:
            return _missing(src, f'configmap "{src.get("name", "")}" not found')
        data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
        for key, raw in (obj.get("binaryData") or {}).items():
            data[key] = _b64(raw, f"configmap {src.get('name')} key {key}")
        return _select(data, src, f"configmap {ns}/{src.get('name', '')}")

    def _secret(self, ns: str, src: dict[str, Any]) -> dict[str, bytes]:
        obj = self.sources.lookup("secrets", ns, src.get("name", ""))
        if obj is None:
            return _missing(src, f'secret "{src.get("name", "")}" not found')
        data = {k: _b64(v, f"secret {src.get('name')} key {k}") for k, v in (obj.get("data") or {}).items()}
        data.update({k: v.encode() for k, v in (obj.get("stringData") or {}).items()})
        return _select(data, src, f"secret {ns}/{src.get('name', '')}")

    def _projected(self, pod: dict[str, Any], src: dict[str, Any]) -> dict[str, bytes]:
        ns = pod["metadata"]["namespace"]
        files: dict[str, bytes] = {}
        for source in src.get("sources") or []:
            if "serviceAccountToken" in source:
                files.update(self._token_file(pod, source["serviceAccountToken"]))
            elif "configMap" in source:
                files.update(self._config_map(ns, source["configMap"]))
            elif "secret" in source:
                files.update(self._secret(ns, source["secret"]))
            elif "downwardAPI" in source:
                files.update(_downward(pod, source["downwardAPI"]))
        return files

    def _token_file(self, pod: dict[str, Any], src: dict[str, Any]) -> dict[str, bytes]:
        audience = src.get("audience") or API_AUDIENCE
        token = self.sources.token(pod["metadata"]["namespace"], pod["metadata"]["name"], audiences=[audience],
                                   expiration_seconds=int(src.get("expirationSeconds") or 3600))
        return {src.get("path") or "token": token.encode()}

    # -- the service-account mount and the API server's address ----------------------

    def _automount(self, pod: dict[str, Any]) -> bool:
        spec = pod["spec"]
        if spec.get("automountServiceAccountToken") is not None:
            return bool(spec["automountServiceAccountToken"])
        sa = self.sources.lookup("serviceaccounts", pod["metadata"]["namespace"],
                                 spec.get("serviceAccountName") or "default")
        return (sa or {}).get("automountServiceAccountToken") is not False and self.sources.api() is not None

    def _api_access(self, pod: dict[str, Any]) -> Path:
        """The kube-api-access volume: token (API audience), ca.crt, namespace."""
        target = self.pod_dir(pod["metadata"]["uid"]) / "volumes" / "kube-api-access"
        target.mkdir(parents=True, exist_ok=True)
        api = self.sources.api()
        files = self._token_file(pod, {"audience": API_AUDIENCE, "expirationSeconds": SA_TOKEN_SECONDS})
        files["namespace"] = pod["metadata"]["namespace"].encode()
        if api is not None:
            files["ca.crt"] = api.ca.read_bytes()
        _write_files(target, files)
        return target

    def _api_env(self) -> dict[str, str]:
        api = self.sources.api()
        if api is None:
            return {}
        addr = f"tcp://{api.host}:{api.port}"
        return {"KUBERNETES_SERVICE_HOST": api.host, "KUBERNETES_SERVICE_PORT": str(api.port),
                "KUBERNETES_SERVICE_PORT_HTTPS": str(api.port), "KUBERNETES_PORT": addr,
                f"KUBERNETES_PORT_{api.port}_TCP": addr}


def _is_api_access(volume: dict[str, Any]) -> bool:
    """The ServiceAccount admission's `kube-api-access-<suffix>` volume: projected as the kubelet does
    (its `ca.crt` is the CA of the port pods use, which over plain HTTP is not kube-root-ca.crt's)."""
    return str(volume.get("name", "")).startswith("kube-api-access-") and "projected" in volume


def _target_port(service: dict[str, Any], port: str | None) -> str | None:
    """The numeric targetPort behind `port` (named target ports keep the Service port)."""
    if port is None:
        return None
    for p in (service.get("spec") or {}).get("ports") or []:
        if str(p.get("port")) == port:
            target = p.get("targetPort", p.get("port"))
            return str(target) if isinstance(target, int) else port
    return port


def _missing(src: dict[str, Any], message: str) -> dict[str, bytes]:
    if src.get("optional"):
        return {}
    raise ProjectionError(message)


def _b64(raw: str, what: str) -> bytes:
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as err:
        raise ProjectionError(f"{what}: bad base64") from err


def _select(data: dict[str, bytes], src: dict[str, Any], what: str) -> dict[str, bytes]:
    items = src.get("items")
    if not items:
        return data
    out = {}
    for item in items:
        key = item.get("key", "")
        if key not in data:
            if src.get("optional"):
                continue
            raise ProjectionError(f"couldn't find key {key} in {what}")
        out[item.get("path") or key] = data[key]
    return out


def _downward(pod: dict[str, Any], src: dict[str, Any]) -> dict[str, bytes]:
    meta = pod["metadata"]
    fields: dict[str, Callable[[], str]] = {
        "metadata.name": lambda: meta.get("name", ""), "metadata.namespace": lambda: meta.get("namespace", ""),
        "metadata.uid": lambda: meta.get("uid", ""),
        "metadata.labels": lambda: _pairs(meta.get("labels") or {}),
        "metadata.annotations": lambda: _pairs(meta.get("annotations") or {}),
    }
    out = {}
    for item in src.get("items") or []:
        path = (item.get("fieldRef") or {}).get("fieldPath", "")
        if path in fields:
            out[item.get("path", path)] = fields[path]().encode()
    return out


def _pairs(values: dict[str, str]) -> str:
    return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))


def _write_files(target: Path, files: dict[str, bytes]) -> None:
    """Write each file under `target`; a path that leaves the volume is refused."""
    base = target.resolve()
    for rel, data in files.items():
        path = (target / rel).resolve()
        if base not in path.parents:
            raise ProjectionError(f"volume file path {rel!r} leaves the volume")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


class StoreSources:
    """`ClusterSources` over the dev cluster's store and token authority."""

    def __init__(self, store: Any, tokens: Any, api: Callable[[], ApiEndpoint | None]):
        self._store = store
        self._tokens = tokens
        self._api = api

    def lookup(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        rt = self._store.registry.lookup(group="", version="v1", resource=resource)
        return get_or_none(self._store, rt, namespace, name)

    def token(self, namespace: str, pod: str, *, audiences: list[str], expiration_seconds: int) -> str:
        return self._tokens.issue(namespace, pod, audiences=audiences, expiration_seconds=expiration_seconds)

    def api(self) -> ApiEndpoint | None:
        return self._api()
