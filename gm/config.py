"""The GM's configuration file: upstream's keys plus ours, one typed loader.

Upstream semantics are kept: YAML decoded into a struct pre-filled with defaults, keys
matched case-insensitively, unknown keys ignored, a YAML null leaves the default, and
`kubeConfig`, if set, must name an existing file. Unlike upstream, a wrong type is an
error naming the key instead of a silent zero.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, get_type_hints
from urllib.parse import urlparse

import yaml

from gm.errors import ConfigError

# a Kubernetes object name (RFC 1123 subdomain), as namespaces and ServiceAccounts are named
_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")




# -- the settings that reach worker objects (env values, images) -------------------------

DEFAULT_LC_SERVER = "http://localhost:9100"
DEFAULT_KB_SERVER = "http://localhost:9020"
DEFAULT_STORAGE_INITIALIZER_IMAGE = "kubeedge/sedna-storage-initializer:v0.3.0"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Knobs of the worker builders; defaults are upstream's (`localController.server`,
    `knowledgeBaseServer.server`, the hard-coded storage-initializer image)."""

    lc_server: str = DEFAULT_LC_SERVER
    kb_server: str = DEFAULT_KB_SERVER
    storage_initializer_image: str = DEFAULT_STORAGE_INITIALIZER_IMAGE
    image_pull_policy: str = "IfNotPresent"

    def __post_init__(self) -> None:
        for key in ("lc_server", "kb_server"):
            url = urlparse(getattr(self, key))
            if url.scheme not in ("http", "https") or not url.netloc:
                raise ValueError(f"WorkerConfig.{key} must be an http(s) URL, "
                                 f"not {getattr(self, key)!r}")
        if not self.storage_initializer_image.strip():
            raise ValueError("WorkerConfig.storage_initializer_image must not be empty")
        if self.image_pull_policy not in ("Always", "IfNotPresent", "Never"):
            raise ValueError(f"WorkerConfig.image_pull_policy {self.image_pull_policy!r} is "
                             "not Always, IfNotPresent or Never")


@dataclass(frozen=True, slots=True)
class NodeTokensConfig:
    """Per-node tokens: a YAML mapping `<token>: <node>` in a file and/or a Secret."""

    file: str = ""  # path of the table (e.g. a mounted Secret's tokens.yaml)
    secret: str = ""  # "namespace/name" of a Secret whose key tokens.yaml holds the table
    refreshSeconds: float = 10.0  # how stale the Secret's table may get


@dataclass(frozen=True, slots=True)
class TokenReviewConfig:
    """The LC's projected ServiceAccount token, verified with a TokenReview."""

    enabled: bool = False
    audiences: str = ""  # comma-separated audiences the token must carry; "" = the API server's
    serviceAccounts: str = ""  # comma-separated allowed usernames (system:serviceaccount:ns:name)
    cacheSeconds: float = 10.0  # how long a positive review is reused


@dataclass(frozen=True, slots=True)
class TLSConfig:
    certFile: str = ""  # PEM certificate chain; with keyFile, the port serves TLS (wss, https)
    keyFile: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.certFile)


@dataclass(frozen=True, slots=True)
class WebsocketConfig:
    address: str = "0.0.0.0"
    port: int = 9000
    token: str = ""  # one bearer token every LC presents (proves no node); empty = none
    tokenFile: str = ""  # read the token from this file (a mounted Secret)
    nodeTokens: NodeTokensConfig = field(default_factory=NodeTokensConfig)
    tokenReview: TokenReviewConfig = field(default_factory=TokenReviewConfig)
    tls: TLSConfig = field(default_factory=TLSConfig)
    maxSessions: int = 0  # LC sessions this process holds; 0 = what its descriptor limit allows
    placementGraceSeconds: float = 10.0  # how long a report waits for its object to reach the caches


@dataclass(frozen=True, slots=True)
class ServerRef:
    server: str = ""


@dataclass(frozen=True, slots=True)
class KubeClientConfig:
    qps: float = 200.0  # reads, watches' lists, child writes, leases
    burst: int = 400
    statusQps: float = 1000.0  # CR status writes (reconcilers and edge reports)
    statusBurst: int = 2000
    eventQps: float = 50.0  # Event creates and count patches
    eventBurst: int = 100
    timeoutSeconds: float = 30.0

    def budgets(self) -> tuple[tuple[str, float, int], ...]:
        """The client's separate buckets (gm/kube/client.py)."""
        return (("status", self.statusQps, self.statusBurst), ("events", self.eventQps, self.eventBurst))


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    enabled: bool = False
    leaseName: str = "sedna-gm"
    leaseNamespace: str = "sedna"
    leaseDurationSeconds: float = 15.0
    renewDeadlineSeconds: float = 10.0
    retryPeriodSeconds: float = 2.0


@dataclass(frozen=True, slots=True)
class LogConfig:
    level: str = "info"
    format: str = "text"  # text (key=value) or json


@dataclass(frozen=True, slots=True)
class IdentityConfig:
    """Who the GM runs as: no worker template may name this ServiceAccount in this namespace.

    The chart writes both keys; `load_config` fills an empty one from the env (POD_NAMESPACE,
    POD_SERVICE_ACCOUNT: the downward API's metadata.namespace and spec.serviceAccountName).
    Unless both are known nothing is refused."""

    namespace: str = ""
    serviceAccount: str = ""

    @property
    def known(self) -> bool:
        return bool(self.namespace and self.serviceAccount)


IDENTITY_ENV = {"namespace": "POD_NAMESPACE", "serviceAccount": "POD_SERVICE_ACCOUNT"}


@dataclass(frozen=True, slots=True)
class FederatedLearningConfig:
    specEditPolicy: str = "recreate"  # recreate | reject


@dataclass(frozen=True, slots=True)
class GMConfig:
    kubeConfig: str = ""
    master: str = ""
    namespace: str = ""
    websocket: WebsocketConfig = field(default_factory=WebsocketConfig)
    localController: ServerRef = field(default_factory=lambda: ServerRef("http://localhost:9100"))
    knowledgeBaseServer: ServerRef = field(default_factory=lambda: ServerRef("http://localhost:9020"))
    minResyncPeriodSeconds: int = 30
    kubeClient: KubeClientConfig = field(default_factory=KubeClientConfig)
    workers: int = 4  # reconcile workers per controller
    leaderElection: LeaderElectionConfig = field(default_factory=LeaderElectionConfig)
    cacheSyncTimeoutSeconds: float = 120.0  # the GM exits if its caches have not synced by then
    log: LogConfig = field(default_factory=LogConfig)
    federatedLearning: FederatedLearningConfig = field(default_factory=FederatedLearningConfig)
    identity: IdentityConfig = field(default_factory=IdentityConfig)

    def websocket_token(self) -> str:
        if self.websocket.token:
            return self.websocket.token
        if self.websocket.tokenFile:
            with open(self.websocket.tokenFile, encoding="utf-8") as f:
                return f.read().strip()
        return ""


def _coerce(path: str, hint: Any, value: Any, default: Any) -> Any:
    if is_dataclass(hint):
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {type(value).__name__}")
        return _fill(path, default, value)
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    raise ConfigError(f"{path}: expected {hint.__name__}, got {value!r}")


def _fill(prefix: str, base: Any, data: dict[str, Any]) -> Any:
    hints = get_type_hints(type(base))
    by_lower = {f.name.lower(): f.name for f in fields(base)}
    changes: dict[str, Any] = {}
    for key, value in data.items():
        name = by_lower.get(str(key).lower())
        if name is None or value is None:  # unknown keys ignored; null keeps the default
            continue
        path = f"{prefix}.{name}" if prefix else name
        changes[name] = _coerce(path, hints[name], value, getattr(base, name))
    return replace(base, **changes)


def _validate(cfg: GMConfig) -> None:
    if cfg.kubeConfig and not os.path.isfile(cfg.kubeConfig):
        raise ConfigError(f"kubeConfig: file {cfg.kubeConfig!r} does not exist")
    if not 0 <= cfg.websocket.port < 65536:  # 0 = any free port (tests, dev runs)
        raise ConfigError(f"websocket.port: {cfg.websocket.port} is not a valid port")
    if cfg.workers < 1:
        raise ConfigError("workers: must be at least 1")
    for prefix in ("", "status", "event"):
        qps = getattr(cfg.kubeClient, f"{prefix}Qps" if prefix else "qps")
        burst = getattr(cfg.kubeClient, f"{prefix}Burst" if prefix else "burst")
        if qps <= 0 or burst < 1:
            name = f"{prefix}Qps / {prefix}Burst" if prefix else "qps / burst"
            raise ConfigError(f"kubeClient: {name} must be > 0 and >= 1")
    if cfg.federatedLearning.specEditPolicy not in ("recreate", "reject"):
        raise ConfigError("federatedLearning.specEditPolicy: must be 'recreate' or 'reject'")
    if cfg.log.format not in ("text", "json"):
        raise ConfigError("log.format: must be 'text' or 'json'")
    if cfg.minResyncPeriodSeconds < 1:
        raise ConfigError("minResyncPeriodSeconds: must be at least 1")
    if cfg.cacheSyncTimeoutSeconds <= 0:
        raise ConfigError("cacheSyncTimeoutSeconds: must be > 0")
    _validate_leader(cfg.leaderElection)
    _validate_websocket(cfg.websocket)
    _validate_identity(cfg.identity)


def _validate_leader(le: LeaderElectionConfig) -> None:
    # A leader must give up before its lease can expire elsewhere: renew deadline < lease.
    if not le.leaseDurationSeconds > le.renewDeadlineSeconds > le.retryPeriodSeconds > 0:
        raise ConfigError("leaderElection: need leaseDurationSeconds > renewDeadlineSeconds > "
                          f"retryPeriodSeconds > 0, got {le.leaseDurationSeconds:g} / "
                          f"{le.renewDeadlineSeconds:g} / {le.retryPeriodSeconds:g}")
    if le.enabled and not (le.leaseName and le.leaseNamespace):
        raise ConfigError("leaderElection: leaseName and leaseNamespace must be set")


def _validate_websocket(ws: WebsocketConfig) -> None:
    secret = ws.nodeTokens.secret
    if secret and (secret.count("/") != 1 or not all(secret.split("/"))):
        raise ConfigError(f"websocket.nodeTokens.secret: must be namespace/name, got {secret!r}")
    if ws.nodeTokens.refreshSeconds <= 0:
        raise ConfigError("websocket.nodeTokens.refreshSeconds: must be > 0")
    if ws.tokenReview.cacheSeconds < 0:
        raise ConfigError("websocket.tokenReview.cacheSeconds: must be >= 0")
    if ws.maxSessions < 0:
        raise ConfigError("websocket.maxSessions: must be >= 0 (0: what the descriptor limit allows)")
    if not 0 <= ws.placementGraceSeconds <= 300:
        raise ConfigError("websocket.placementGraceSeconds: must be within 0..300 (0: refuse at once)")
    tls = ws.tls
    if bool(tls.certFile) != bool(tls.keyFile):
        raise ConfigError("websocket.tls: certFile and keyFile go together")
    for key, path in (("tls.certFile", tls.certFile), ("tls.keyFile", tls.keyFile),
                      ("nodeTokens.file", ws.nodeTokens.file), ("tokenFile", ws.tokenFile)):
        if path and not os.path.isfile(path):
            raise ConfigError(f"websocket.{key}: file {path!r} does not exist")


def _validate_identity(identity: IdentityConfig) -> None:
    for key in IDENTITY_ENV:
        value = getattr(identity, key)
        if value and (len(value) > 253 or not _DNS_NAME.fullmatch(value)):
            raise ConfigError(f"identity.{key}: {value[:64]!r} is not a valid name")


def split_list(value: str) -> tuple[str, ...]:
    """A comma-separated config value as a tuple, blanks dropped."""
    return tuple(item.strip() for item in value.split(",") if item.strip())


def yaml_mapping(text: str, *, fail: Callable[[str], Exception], not_mapping: str) -> dict:
    """The YAML mapping `text` holds (empty text: {}); `fail(message)` is raised when it is
    not YAML, or (with `not_mapping`) not a mapping."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise fail(f"not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise fail(not_mapping)
    return data


def parse_config(text: str, *, env: Mapping[str, str] | None = None) -> GMConfig:
    """Parse the YAML text of a config file over the defaults; `env` fills what the file
    leaves empty of `identity` (see IdentityConfig)."""
    data = yaml_mapping(text, fail=ConfigError, not_mapping="the configuration must be a mapping")
    cfg = _fill("", GMConfig(), data)
    if env is not None:
        cfg = replace(cfg, identity=_identity_from_env(cfg.identity, env))
    _validate(cfg)
    return cfg


def _identity_from_env(identity: IdentityConfig, env: Mapping[str, str]) -> IdentityConfig:
    return replace(identity, **{key: env.get(var, "").strip() for key, var in IDENTITY_ENV.items()
                                if not getattr(identity, key)})


def load_config(path: str, *, env: Mapping[str, str] | None = None) -> GMConfig:
    """Read and parse the config file at `path` (it must exist, as upstream requires); the
    process environment (or `env`) completes `identity`."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path!r}: {exc.strerror}") from exc
    return parse_config(text, env=os.environ if env is None else env)
