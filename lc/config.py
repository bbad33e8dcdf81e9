"""LocalController configuration: one typed loader over the environment.

The LC has no config file. Upstream's variable names (`GM_ADDRESS`, `NODENAME`, `HOSTNAME`,
`BIND_PORT`, `ROOTFS_MOUNT_DIR`) keep their upstream meaning and defaults so existing
DaemonSet manifests work unchanged; the rest are ours. lc/README.md has the table.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from lc.budget import DEFAULT_BUDGET, DEFAULT_WAIT, BodyBudget
from lc.errors import ConfigError
from lc.files import DEFAULT_INDEX_BYTES, DEFAULT_INDEX_LINES, DEFAULT_MODEL_BYTES, FileLimits
from lc.s3 import DEFAULT_SETTINGS as S3_DEFAULTS
from lc.s3 import S3Settings
from lc.store.bounds import StoreBounds
from shared.server_limits import ServerLimits

DEFAULT_BIND_PORT = 9100
DEFAULT_ROOTFS = "/rootfs"
DB_RELATIVE_PATH = "var/lib/sedna/database.db"
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
SYNC_MODES = ("FULL", "NORMAL")


@dataclass(frozen=True, slots=True)
class LCConfig:
    """Everything the LC reads from its environment, validated."""

    gm_address: str | None  # "host:port" of the GM websocket, None when not configured
    gm_scheme: str  # "ws" or "wss"
    gm_token: str | None
    node_name: str
    bind_address: str
    bind_port: int
    rootfs: str  # host "/" as seen by the LC; "" means no prefix
    db_path: str
    db_synchronous: str
    dataset_period: float
    log_level: str
    log_format: str
    gm_token_file: str | None = None  # re-read at every dial: a projected token rotates
    gm_ca_file: str | None = None  # CA bundle the GM's certificate must chain to (wss only)
    tls_cert_file: str | None = None  # with tls_key_file, the worker API serves https
    tls_key_file: str | None = None
    unknown_owner_ttl: float = 600.0  # a report of an owner this node does not hold
    unknown_owner_bytes: int = 16 << 20  # all such reports together
    workers_bytes: int = 64 << 20  # every worker record together
    dead_letters_bytes: int = 16 << 20
    outbox_bytes: int = 64 << 20  # reports waiting for the GM; over it, 503
    body_budget_bytes: int = DEFAULT_BUDGET  # request bodies read and processed at once
    body_budget_wait: float = DEFAULT_WAIT  # seconds a body may wait for room in it (0: none)
    http_idle_timeout: float = 15.0  # keep-alive idle limit, also the deadline for headers
    http_body_timeout: float = 30.0
    http_max_conns_per_client: int = 512
    worker_ttl: float = 7 * 24 * 3600.0  # /sedna/workers forgets reports older than this
    index_max_bytes: int = DEFAULT_INDEX_BYTES  # a dataset index over this is refused whole
    index_max_lines: int = DEFAULT_INDEX_LINES
    model_max_bytes: int = DEFAULT_MODEL_BYTES  # a model copy over this is refused
    s3_connect_timeout: float = S3_DEFAULTS.connect_timeout
    s3_read_timeout: float = S3_DEFAULTS.read_timeout  # the most a response may stay silent
    s3_request_timeout: float = S3_DEFAULTS.request_timeout  # one request, send to last byte
    s3_attempts: int = S3_DEFAULTS.attempts  # requests per S3 call, the first included

    @property
    def server_limits(self) -> ServerLimits:
        """The worker API's read timeouts and connection cap."""
        return ServerLimits(idle_timeout=self.http_idle_timeout,
                            body_timeout=self.http_body_timeout,
                            max_connections_per_client=self.http_max_conns_per_client)

    def new_body_budget(self) -> BodyBudget:
        """A fresh budget of the bytes of request bodies the worker API holds at once."""
        return BodyBudget(self.body_budget_bytes, wait=self.body_budget_wait)

    @property
    def file_limits(self) -> FileLimits:
        """The caps on the files CRs name (lc/files.py)."""
        return FileLimits(index_bytes=self.index_max_bytes, index_lines=self.index_max_lines,
                          model_bytes=self.model_max_bytes)

    @property
    def s3_settings(self) -> S3Settings:
        """Timeouts and retries of the S3 requests the managers make (lc/s3/)."""
        return S3Settings(connect_timeout=self.s3_connect_timeout, read_timeout=self.s3_read_timeout,
                          request_timeout=self.s3_request_timeout, attempts=self.s3_attempts)

    @property
    def gm_url(self) -> str | None:
        """The websocket URL of the GM, or None when GM_ADDRESS is unset."""
        if self.gm_address is None:
            return None
        return f"{self.gm_scheme}://{self.gm_address}/"

    @property
    def store_bounds(self) -> StoreBounds:
        """How long and how much the store keeps of what workers and the GM sent."""
        return StoreBounds(worker_ttl=self.worker_ttl, unknown_owner_ttl=self.unknown_owner_ttl,
                           unknown_owner_bytes=self.unknown_owner_bytes,
                           workers_bytes=self.workers_bytes,
                           dead_letters_bytes=self.dead_letters_bytes,
                           outbox_bytes=self.outbox_bytes)


def load(env: Mapping[str, str] | None = None) -> LCConfig:
    """Read and validate the LC configuration from `env` (default: os.environ)."""
    env = os.environ if env is None else env
    scheme, gm_address = _gm_address(env.get("GM_ADDRESS", ""))
    node_name = env.get("NODENAME") or env.get("HOSTNAME") or ""
    _check_node_name(node_name, needed=gm_address is not None)
    rootfs = _rootfs(env)
    tls = _tls_files(env, scheme)
    return LCConfig(
        gm_address=gm_address,
        gm_scheme=scheme,
        gm_token=env.get("GM_TOKEN") or None,
        node_name=node_name,
        bind_address=env.get("BIND_ADDRESS") or "0.0.0.0",
        bind_port=_port(env.get("BIND_PORT", "")),
        rootfs=rootfs,
        db_path=env.get("LC_DB_PATH") or os.path.join(rootfs or "/", DB_RELATIVE_PATH),
        db_synchronous=_choice(env, "LC_DB_SYNCHRONOUS", "FULL", SYNC_MODES, upper=True),
        dataset_period=_positive_float(env, "LC_DATASET_PERIOD", 60.0),
        log_level=_choice(env, "LOG_LEVEL", "info", LOG_LEVELS),
        log_format=_choice(env, "LOG_FORMAT", "text", LOG_FORMATS),
        gm_token_file=tls["GM_TOKEN_FILE"],
        gm_ca_file=tls["GM_CA_FILE"],
        tls_cert_file=tls["LC_TLS_CERT_FILE"],
        tls_key_file=tls["LC_TLS_KEY_FILE"],
        unknown_owner_ttl=_positive_float(env, "LC_UNKNOWN_OWNER_TTL", 600.0),
        unknown_owner_bytes=_byte_cap(env, "LC_UNKNOWN_OWNER_BYTES", 16 << 20),
        workers_bytes=_byte_cap(env, "LC_WORKERS_BYTES", 64 << 20),
        dead_letters_bytes=_byte_cap(env, "LC_DEAD_LETTERS_BYTES", 16 << 20),
        outbox_bytes=_byte_cap(env, "LC_OUTBOX_BYTES", 64 << 20),
        body_budget_bytes=_byte_cap(env, "LC_BODY_BUDGET_BYTES", DEFAULT_BUDGET),
        body_budget_wait=_seconds(env, "LC_BODY_BUDGET_WAIT", DEFAULT_WAIT),
        http_idle_timeout=_positive_float(env, "LC_HTTP_IDLE_TIMEOUT", 15.0),
        http_body_timeout=_positive_float(env, "LC_HTTP_BODY_TIMEOUT", 30.0),
        http_max_conns_per_client=_positive_int(env, "LC_HTTP_MAX_CONNS_PER_CLIENT", 512),
        worker_ttl=_positive_float(env, "LC_WORKER_TTL", 7 * 24 * 3600.0),
        index_max_bytes=_positive_int(env, "LC_INDEX_MAX_BYTES", DEFAULT_INDEX_BYTES),
        index_max_lines=_positive_int(env, "LC_INDEX_MAX_LINES", DEFAULT_INDEX_LINES),
        model_max_bytes=_positive_int(env, "LC_MODEL_MAX_BYTES", DEFAULT_MODEL_BYTES),
        s3_connect_timeout=_positive_float(env, "LC_S3_CONNECT_TIMEOUT", S3_DEFAULTS.connect_timeout),
        s3_read_timeout=_positive_float(env, "LC_S3_READ_TIMEOUT", S3_DEFAULTS.read_timeout),
        s3_request_timeout=_positive_float(env, "LC_S3_REQUEST_TIMEOUT", S3_DEFAULTS.request_timeout),
        s3_attempts=_positive_int(env, "LC_S3_ATTEMPTS", S3_DEFAULTS.attempts),
    )


def _tls_files(env: Mapping[str, str], scheme: str) -> dict[str, str | None]:
    """The credential and certificate paths, checked for consistency (and existence, except
    the token file, which the link reads at each dial)."""
    files = {key: env.get(key) or None for key in
             ("GM_TOKEN_FILE", "GM_CA_FILE", "LC_TLS_CERT_FILE", "LC_TLS_KEY_FILE")}
    if files["GM_TOKEN_FILE"] and env.get("GM_TOKEN"):
        raise ConfigError("set GM_TOKEN or GM_TOKEN_FILE, not both")
    if files["GM_CA_FILE"] and scheme != "wss":
        raise ConfigError("GM_CA_FILE is set but GM_ADDRESS is not wss://")
    if bool(files["LC_TLS_CERT_FILE"]) != bool(files["LC_TLS_KEY_FILE"]):
        raise ConfigError("LC_TLS_CERT_FILE and LC_TLS_KEY_FILE go together")
    for key in ("GM_CA_FILE", "LC_TLS_CERT_FILE", "LC_TLS_KEY_FILE"):
        path = files[key]
        if path and not os.path.isfile(path):
            raise ConfigError(f"{key}: file {path!r} does not exist")
    return files


def _gm_address(raw: str) -> tuple[str, str | None]:
    """Split GM_ADDRESS into (scheme, host:port); upstream takes bare host:port."""
    raw = raw.strip()
    if not raw:
        return "ws", None
    scheme = "ws"
    if "://" in raw:
        scheme, _, raw = raw.partition("://")
        if scheme not in ("ws", "wss"):
            raise ConfigError(f"GM_ADDRESS: scheme must be ws or wss, got {scheme!r}")
        raw = raw.rstrip("/")
    host, sep, port = raw.rpartition(":")
    if not sep or not host or host in ("[", "[]"):
        raise ConfigError(f"GM_ADDRESS must be host:port, got {raw!r}")
    _port_number("GM_ADDRESS port", port, allow_zero=False)
    return scheme, raw


def _check_node_name(name: str, *, needed: bool) -> None:
    if any(c.isspace() or ord(c) < 32 for c in name):
        raise ConfigError(f"NODENAME must not contain whitespace or control characters: {name!r}")
    if needed and not name:
        raise ConfigError("NODENAME (or HOSTNAME) must be set when GM_ADDRESS is set")


def _rootfs(env: Mapping[str, str]) -> str:
    # Upstream: "/rootfs" only when unset; an explicitly empty value means no prefix.
    rootfs = env.get("ROOTFS_MOUNT_DIR")
    if rootfs is None:
        return DEFAULT_ROOTFS
    if rootfs and not os.path.isabs(rootfs):
        raise ConfigError(f"ROOTFS_MOUNT_DIR must be an absolute path, got {rootfs!r}")
    return rootfs.rstrip("/") if rootfs not in ("", "/") else ""


def _port(raw: str) -> int:
    # Upstream: 9100 when unset or empty.
    if raw.strip() == "":
        return DEFAULT_BIND_PORT
    return _port_number("BIND_PORT", raw, allow_zero=True)


def _port_number(what: str, raw: str, *, allow_zero: bool) -> int:
    try:
        port = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{what} must be a number, got {raw!r}") from None
    low = 0 if allow_zero else 1
    if not low <= port <= 65535:
        raise ConfigError(f"{what} must be between {low} and 65535, got {port}")
    return port


def _choice(env: Mapping[str, str], key: str, default: str, allowed: tuple[str, ...],
            *, upper: bool = False) -> str:
    raw = env.get(key) or default
    value = raw.strip().upper() if upper else raw.strip().lower()
    if value not in allowed:
        raise ConfigError(f"{key} must be one of {', '.join(allowed)}, got {raw!r}")
    return value


def _positive_float(env: Mapping[str, str], key: str, default: float) -> float:
    """A finite number of seconds above 0."""
    return _seconds(env, key, default, zero=False)


def _seconds(env: Mapping[str, str], key: str, default: float, *, zero: bool = True) -> float:
    """A finite number of seconds, 0 included when `zero`."""
    raw = env.get(key, "")
    if raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{key} must be a number of seconds, got {raw!r}") from None
    if not (0 <= value if zero else 0 < value) or not value < float("inf"):
        what = "a finite number of seconds, 0 or more" if zero else "a positive finite number"
        raise ConfigError(f"{key} must be {what}, got {raw!r}")
    return value


def _positive_int(env: Mapping[str, str], key: str, default: int) -> int:
    raw = env.get(key, "")
    if raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{key} must be a whole number, got {raw!r}") from None
    if value < 1:
        raise ConfigError(f"{key} must be at least 1, got {raw!r}")
    return value


def _byte_cap(env: Mapping[str, str], key: str, default: int) -> int:
    """A byte cap: at least 1 MiB, what one report may take."""
    value = _positive_int(env, key, default)
    if value < 1 << 20:
        raise ConfigError(f"{key} must be at least 1048576 (1 MiB), got {value}")
    return value
