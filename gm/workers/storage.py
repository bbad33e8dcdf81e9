"""Model and dataset URLs -> volumes, mounts, the storage-initializer and env (upstream §4.3).

Workers see every model or dataset through a container path put in an env var
(`MODEL_URL`, `TRAIN_DATASET_URL`, ...). Remote objects (s3/http/https) are fetched
by an init container into an emptyDir at `/downloads`; local paths are hostPath
mounts under `/home/data`. This module turns a list of `WorkerMount`s into a
`StoragePlan` once, and `apply_storage` grafts the plan onto a pod spec, so the
same inputs always yield the same objects.

Departures from upstream, on purpose: a local path directly under `/` (the FL example's
`/model`) is mounted itself, without a type check, instead of mounting the host root
at `/home/data/` (the env value is the same); `/` itself and relative paths are
refused; a Secret needed for S3 that lacks its endpoint or keys is an error, not
silently ignored.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlparse

from gm.workers.specerrors import InvalidSpec
from shared.objects import meta_str

DOWNLOAD_DIR = "/downloads"
DOWNLOAD_VOLUME = "sedna-storage-initializer"
INIT_CONTAINER_NAME = "storage-initializer"
HOST_PATH_PREFIX = "/home/data"
URL_SEPARATOR = ";"
INDIRECT_MARK = "@"
DEFAULT_VOLUME_NAME = "sedna-default-volume-name"
DOWNLOADABLE_SCHEMES = frozenset({"s3", "http", "https"})

Env = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class MountURL:
    """One URL a worker needs; `download` asks the storage initializer to fetch it."""

    url: str
    download: bool = True
    indirect: bool = False
    secret: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class WorkerMount:
    """URLs exposed to the worker through one env var (`;`-joined when several)."""

    env_name: str
    urls: tuple[MountURL, ...]


@dataclass(frozen=True, slots=True)
class StoragePlan:
    """What the mounts add to a pod: per-mount env values, worker env, volumes, init."""

    env: Env = ()
    worker_env: Env = ()
    volumes: tuple[dict[str, Any], ...] = ()
    worker_mounts: tuple[dict[str, Any], ...] = ()
    init_container: dict[str, Any] | None = None

    def value(self, env_name: str) -> str:
        """The env value computed for the mount named `env_name`."""
        for name, value in self.env:
            if name == env_name:
                return value
        raise KeyError(env_name)


@dataclass(frozen=True, slots=True)
class _Parsed:
    url: str
    container_path: str = ""
    host_path: str = ""
    mount_path: str = ""
    src: str = ""
    dst: str = ""
    indirect: bool = False
    s3_env: Env = ()
    host_type: str = "Directory"

    @property
    def downloaded(self) -> bool:
        return bool(self.src and self.dst)


@dataclass(slots=True)
class _Volumes:
    by_path: dict[str, str] = field(default_factory=dict)
    volumes: list[dict[str, Any]] = field(default_factory=list)

    def name_for(self, host_path: str, *, host_type: str = "Directory") -> str:
        if host_path not in self.by_path:
            name = k8s_valid_name(host_path)
            if name in self.by_path.values():
                digest = hashlib.sha256(host_path.encode()).hexdigest()[:8]
                name = f"{name[:54]}-{digest}"
            self.by_path[host_path] = name
            source = {"path": host_path, "type": host_type} if host_type else {"path": host_path}
            self.volumes.append({"name": name, "hostPath": source})
        return self.by_path[host_path]


def k8s_valid_name(text: str) -> str:
    """Upstream's ConvertK8SValidName: `/data/ds/` -> `data-dsz` (a DNS label)."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).lstrip("-")[:63]
    if name.endswith("-"):
        name = name[:-1] + "z"
    return name or DEFAULT_VOLUME_NAME


def s3_env_from_secret(secret: Mapping[str, Any]) -> Env:
    """S3 env built from a credential Secret: endpoint (annotations) and keys (data)."""
    name = meta_str(secret, "name") or "<unnamed>"
    annotations = secret.get("metadata", {}).get("annotations") or {}
    endpoint = annotations.get("s3-endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        raise InvalidSpec("InvalidCredential",
                          f"Secret {name} has no s3-endpoint annotation, needed for S3 access")
    scheme = "http" if annotations.get("s3-usehttps") == "0" else "https"
    return (("S3_ENDPOINT_URL", f"{scheme}://{endpoint}"),
            ("ACCESS_KEY_ID", _secret_value(secret, "ACCESS_KEY_ID", name=name)),
            ("SECRET_ACCESS_KEY", _secret_value(secret, "SECRET_ACCESS_KEY", name=name)))


def _secret_value(secret: Mapping[str, Any], key: str, *, name: str) -> str:
    string_data = secret.get("stringData") or {}
    if isinstance(string_data.get(key), str):
        return string_data[key]
    raw = (secret.get("data") or {}).get(key)
    if not isinstance(raw, str):
        raise InvalidSpec("InvalidCredential", f"Secret {name} has no data.{key}")
    try:
        return base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidSpec("InvalidCredential",
                          f"Secret {name} data.{key} is not base64 text: {exc}") from exc


def parse_url(mount: MountURL) -> _Parsed:
    """Where one URL lands in the container, what to download and which S3 env it needs."""
    if not isinstance(mount.url, str) or not mount.url.strip():
        raise InvalidSpec("InvalidURL", "a model or dataset URL is empty")
    url = urlparse(mount.url)
    parsed = _Parsed(url=mount.url, indirect=mount.indirect)
    if mount.download and url.scheme in DOWNLOADABLE_SCHEMES:
        path = f"{DOWNLOAD_DIR}/{url.netloc}{url.path}"
        parsed = replace(parsed, container_path=path, mount_path=DOWNLOAD_DIR,
                          src=mount.url, dst=_dir_of(path))
    if not url.scheme:
        parsed = _parse_host_path(parsed, mount)
    if mount.secret is not None and (url.scheme == "s3" or mount.indirect):
        parsed = replace(parsed, s3_env=s3_env_from_secret(mount.secret))
    return parsed


def _parse_host_path(parsed: _Parsed, mount: MountURL) -> _Parsed:
    path = mount.url
    if not path.startswith("/"):
        raise InvalidSpec("InvalidURL", f"local path {path!r} must be absolute")
    if not path.strip("/"):
        raise InvalidSpec("InvalidURL", "local path '/' would mount the host root directory")
    host_dir = _dir_of(path)
    container_path = HOST_PATH_PREFIX + path
    if host_dir == "/":
        # Upstream mounts the parent, i.e. the host root; mount the entry itself instead.
        parsed = replace(parsed, host_path=path, container_path=container_path,
                         mount_path=container_path, host_type="")
    else:
        parsed = replace(parsed, host_path=host_dir, container_path=container_path,
                         mount_path=HOST_PATH_PREFIX + host_dir)
    if mount.indirect:
        target = DOWNLOAD_DIR + path
        parsed = replace(parsed, src=container_path, container_path=target,
                         dst=_dir_of(target))
    return parsed


def _dir_of(path: str) -> str:
    """The parent directory with a trailing slash (`/a/b/c.txt` and `/a/b/` -> `/a/b/`)."""
    parent = path if path.endswith("/") else posixpath.dirname(path)
    return parent.rstrip("/") + "/"


def plan_storage(mounts: Sequence[WorkerMount], *, image: str, pull_policy: str) -> StoragePlan:
    """Compute env, volumes, mounts and the init container for `mounts` (in order)."""
    parsed = [(m.env_name, [parse_url(u) for u in m.urls]) for m in mounts]
    flat = [p for _, urls in parsed for p in urls]
    env = tuple((name, _env_value(urls)) for name, urls in parsed)
    vols = _Volumes()
    worker_mounts: list[dict[str, Any]] = []
    init = _init_container(flat, image=image, pull_policy=pull_policy, vols=vols)
    if init is not None:
        vols.volumes.insert(0, {"name": DOWNLOAD_VOLUME, "emptyDir": {}})
        worker_mounts.append({"name": DOWNLOAD_VOLUME, "mountPath": DOWNLOAD_DIR,
                              "readOnly": True})
    host = [p for p in flat if p.host_path and not p.indirect]
    for p in host:
        _add_mount(worker_mounts, {"name": vols.name_for(p.host_path, host_type=p.host_type),
                                   "mountPath": p.mount_path})
    worker_env: Env = ((("DATA_PATH_PREFIX", HOST_PATH_PREFIX),) if host else ())
    worker_env += _merge_env(p.s3_env for p in flat if not p.downloaded)
    return StoragePlan(env=env, worker_env=worker_env, volumes=tuple(vols.volumes),
                       worker_mounts=tuple(worker_mounts), init_container=init)


def _env_value(urls: Sequence[_Parsed]) -> str:
    return URL_SEPARATOR.join(p.container_path or p.url for p in urls)


def _add_mount(mounts: list[dict[str, Any]], mount: dict[str, Any]) -> None:
    if all(m["mountPath"] != mount["mountPath"] for m in mounts):
        mounts.append(mount)


def _merge_env(groups: Iterable[Env]) -> Env:
    """Concatenate env groups; on a repeated name the first value wins (upstream rule)."""
    merged: dict[str, str] = {}
    for group in groups:
        for name, value in group:
            merged.setdefault(name, value)
    return tuple(merged.items())


def _init_container(flat: Sequence[_Parsed], *, image: str, pull_policy: str,
                    vols: _Volumes) -> dict[str, Any] | None:
    downloads = [p for p in flat if p.downloaded]
    if not downloads:
        return None
    args: list[str] = []
    for p in downloads:
        args += [p.src, (INDIRECT_MARK + p.dst) if p.indirect else p.dst]
    mounts = [{"name": DOWNLOAD_VOLUME, "mountPath": DOWNLOAD_DIR}]
    for p in downloads:
        if p.indirect and p.host_path:
            name = vols.name_for(p.host_path, host_type=p.host_type)
            _add_mount(mounts, {"name": name, "mountPath": p.mount_path})
    env = _merge_env(p.s3_env for p in downloads) + (("INDIRECT_URL_MARK", INDIRECT_MARK),)
    return {
        "name": INIT_CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": pull_policy,
        "args": args,
        "env": [{"name": k, "value": v} for k, v in env],
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": mounts,
    }


def apply_storage(spec: dict[str, Any], plan: StoragePlan) -> None:
    """Graft `plan` onto a pod spec the caller owns: volumes, init container, mounts."""
    if plan.volumes:
        spec["volumes"] = list(spec.get("volumes") or []) + [dict(v) for v in plan.volumes]
    if plan.init_container is not None:
        init = copy.deepcopy(plan.init_container)
        spec["initContainers"] = list(spec.get("initContainers") or []) + [init]
    for container in spec["containers"]:
        if plan.worker_mounts:
            container["volumeMounts"] = (list(container.get("volumeMounts") or [])
                                         + [dict(m) for m in plan.worker_mounts])
