"""Where the cluster is and how to authenticate: kubeconfig, in-cluster, or a `master` URL.

What comes out is a `Connection`: the base URL, an SSL context and an async source of the
Authorization header, which `client.py` uses with its own aiohttp session so list and watch
bodies stay raw bytes parsed with orjson.

The kubeconfig fields a GM meets (a context's cluster: `server`, `certificate-authority`
or `-data`, `insecure-skip-tls-verify`; its user: `token`, `tokenFile`, `client-certificate`
and `client-key` or their `-data`, `username`/`password`) and the in-cluster service-account
mount are read here. A file path in a kubeconfig is relative to the kubeconfig's folder. A
token file (`tokenFile`, the in-cluster token) is read again when it changes, since a
projected token rotates. A user authenticated by an `exec` plugin or an `auth-provider`
is handed to kubernetes_asyncio, imported then and only then: it is a large package (about
40 MB of memory once imported), and a GM in a pod never needs it.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from gm.errors import KubeConfigError

KUBECONFIG_DEFAULT = "~/.kube/config"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

AuthSource = Callable[[], Awaitable[dict[str, str]]]


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """How the GM reaches the API: upstream's `kubeConfig` and `master`, plus client limits."""

    kubeconfig: str = ""  # path; "" = in-cluster, then ~/.kube/config
    master: str = ""  # API server URL; overrides the kubeconfig's server
    context: str | None = None
    qps: float = 200.0  # client-side request rate (reads, child writes); <= 0 disables the limiter
    burst: int = 400
    budgets: tuple[tuple[str, float, int], ...] = ()
    """Separate (name, qps, burst) buckets: a request naming one is throttled by it alone, so
    status writes, child writes and Events cannot starve each other."""
    timeout: float = 30.0  # seconds per non-watch request
    user_agent: str = "sedna-gm"


async def _no_auth() -> dict[str, str]:
    return {}


@dataclass(slots=True)
class Connection:
    """A resolved endpoint: base URL, TLS context and credentials."""

    base_url: str
    ssl_context: ssl.SSLContext | None = None
    auth: AuthSource = field(default=_no_auth, repr=False)

    async def auth_headers(self) -> dict[str, str]:
        """The Authorization header (bearer token, re-read when its file changes, or basic)."""
        return await self.auth()


class TokenFile:
    """A bearer token read from a file, read again whenever the file changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._header: dict[str, str] = {}
        self._read()  # a missing or empty file is a configuration error now, not at first use

    def _read(self) -> None:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return
            with open(self.path, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            if self._stamp is None:
                raise KubeConfigError(f"token file {self.path}: {exc.strerror}") from None
            return  # keep the last token while a rotation replaces the file
        if not token:
            if self._stamp is None:
                raise KubeConfigError(f"token file {self.path} is empty")
            return
        self._stamp, self._header = stamp, {"Authorization": f"Bearer {token}"}

    async def __call__(self) -> dict[str, str]:
        self._read()
        return self._header


def _fixed(header: dict[str, str]) -> AuthSource:
    async def auth() -> dict[str, str]:
        return header
    return auth


async def load_connection(settings: ClientSettings) -> Connection:
    """Resolve `settings` to a `Connection`; raise `KubeConfigError` if nothing is usable."""
    conn = resolve(settings)
    if isinstance(conn, _Delegated):
        conn = await _delegated(conn.path, conn.context)
    if settings.master:
        conn.base_url = settings.master
    conn.base_url = conn.base_url.rstrip("/")
    if not conn.base_url.startswith(("http://", "https://")):
        raise KubeConfigError(f"API server URL {conn.base_url!r} is not http(s)")
    if not conn.base_url.startswith("https://"):
        conn.ssl_context = None
    return conn


@dataclass(frozen=True, slots=True)
class _Delegated:
    """A kubeconfig user only kubernetes_asyncio can authenticate."""

    path: str
    context: str


def resolve(settings: ClientSettings) -> Connection | _Delegated:
    """The connection `settings` name (blocking file reads; `load_connection` is the API)."""
    if settings.kubeconfig:
        return _from_kubeconfig(_require_file(settings.kubeconfig), settings.context)
    if settings.master:
        return Connection(base_url=settings.master)
    # in-cluster first (like upstream), then the default kubeconfig for development
    if os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.isfile(os.path.join(SERVICE_ACCOUNT_DIR, "token")):
        return in_cluster()
    path = _require_file(KUBECONFIG_DEFAULT, what="no kubeConfig or master set and not running in a pod; "
                         "default kubeconfig")
    return _from_kubeconfig(path, settings.context)


def in_cluster(sa_dir: str = SERVICE_ACCOUNT_DIR) -> Connection:
    """The API server of the pod's cluster, as the pod's ServiceAccount."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeConfigError("KUBERNETES_SERVICE_HOST/PORT are not set: not running in a pod")
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    ca = os.path.join(sa_dir, "ca.crt")
    return Connection(base_url=f"https://{host}:{port}", ssl_context=_tls(cafile=_require_file(ca, what="CA")),
                      auth=TokenFile(os.path.join(sa_dir, "token")))


def _from_kubeconfig(path: str, context: str | None) -> Connection | _Delegated:
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise KubeConfigError(f"kubeconfig {path}: {exc}") from None
    if not isinstance(doc, Mapping):
        raise KubeConfigError(f"kubeconfig {path} is not a mapping")
    kc = _Kubeconfig(doc, os.path.dirname(os.path.abspath(path)), path)
    ctx_name = context or doc.get("current-context")
    if not ctx_name:
        raise KubeConfigError(f"kubeconfig {path}: no context given and no current-context")
    ctx = kc.entry("contexts", "context", ctx_name)
    cluster = kc.entry("clusters", "cluster", ctx.get("cluster"))
    user = kc.entry("users", "user", ctx.get("user")) if ctx.get("user") else {}
    if user.get("exec") or user.get("auth-provider"):
        return _Delegated(path, ctx_name)
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise KubeConfigError(f"kubeconfig {path}: cluster {ctx.get('cluster')!r} has no server")
    verify = not cluster.get("insecure-skip-tls-verify")
    ctx_tls = None
    if server.startswith("https://"):
        ctx_tls = _tls(cafile=kc.path(cluster.get("certificate-authority")),
                       cadata=kc.data(cluster.get("certificate-authority-data"), "certificate-authority-data"),
                       verify=verify)
        cert = kc.pem(user, "client-certificate")
        key = kc.pem(user, "client-key")
        if cert is not None:
            _load_client_cert(ctx_tls, cert, key)
    return Connection(base_url=server, ssl_context=ctx_tls, auth=kc.auth(user))


class _Kubeconfig:
    def __init__(self, doc: Mapping[str, Any], base: str, where: str) -> None:
        self.doc, self.base, self.where = doc, base, where

    def entry(self, section: str, inner: str, name: Any) -> dict[str, Any]:
        for item in self.doc.get(section) or ():
            if isinstance(item, Mapping) and item.get("name") == name:
                value = item.get(inner)
                return dict(value) if isinstance(value, Mapping) else {}
        raise KubeConfigError(f"kubeconfig {self.where}: no {inner} named {name!r}")

    def path(self, value: Any) -> str | None:
        if not value:
            return None
        return os.path.join(self.base, os.path.expanduser(str(value)))

    def data(self, value: Any, what: str) -> bytes | None:
        if not value:
            return None
        try:
            return base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            raise KubeConfigError(f"kubeconfig {self.where}: {what} is not base64") from None

    def pem(self, user: Mapping[str, Any], field_name: str) -> bytes | None:
        inline = self.data(user.get(f"{field_name}-data"), f"{field_name}-data")
        if inline is not None:
            return inline
        path = self.path(user.get(field_name))
        if path is None:
            return None
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as exc:
            raise KubeConfigError(f"kubeconfig {self.where}: {field_name} {path}: {exc.strerror}") from None

    def auth(self, user: Mapping[str, Any]) -> AuthSource:
        if user.get("token"):
            return _fixed({"Authorization": f"Bearer {user['token']}"})
        if user.get("tokenFile"):
            return TokenFile(self.path(user["tokenFile"]) or "")
        if user.get("username") or user.get("password"):
            pair = f"{user.get('username', '')}:{user.get('password', '')}".encode()
            return _fixed({"Authorization": f"Basic {base64.b64encode(pair).decode()}"})
        return _no_auth


def _tls(*, cafile: str | None = None, cadata: bytes | None = None, verify: bool = True) -> ssl.SSLContext:
    try:
        ctx = ssl.create_default_context(cafile=cafile, cadata=cadata.decode("ascii") if cadata else None)
    except (OSError, ssl.SSLError, UnicodeDecodeError) as exc:
        raise KubeConfigError(f"cannot load the cluster's CA: {exc}") from None
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _load_client_cert(ctx: ssl.SSLContext, cert: bytes, key: bytes | None) -> None:
    """`load_cert_chain` reads files only: the PEM goes through a private temporary folder,
    removed as soon as it is loaded."""
    with tempfile.TemporaryDirectory(prefix="sedna-gm-") as tmp:
        cert_path = os.path.join(tmp, "cert.pem")
        key_path = os.path.join(tmp, "key.pem") if key is not None else None
        for p, data in ((cert_path, cert), (key_path, key)):
            if p is not None and data is not None:
                fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
        try:
            ctx.load_cert_chain(cert_path, keyfile=key_path)
        except (OSError, ssl.SSLError) as exc:
            raise KubeConfigError(f"cannot load the client certificate: {exc}") from None


async def _delegated(path: str, context: str) -> Connection:
    """A user kubernetes_asyncio authenticates (exec plugins, auth providers, with their
    refresh), imported only for such a kubeconfig."""
    from kubernetes_asyncio.client import Configuration
    from kubernetes_asyncio.config import ConfigException, load_kube_config

    conf = Configuration()
    try:
        await load_kube_config(path, context=context, client_configuration=conf, persist_config=False)
    except ConfigException as exc:
        raise KubeConfigError(f"cannot load cluster configuration: {exc}") from exc

    async def auth() -> dict[str, str]:
        if "BearerToken" in conf.api_key or conf.refresh_api_key_hook is not None:
            token = await conf.get_api_key_with_prefix("BearerToken")
            if token:
                return {"Authorization": token}
        if conf.username or conf.password:
            return {"Authorization": conf.get_basic_auth_token()}
        return {}

    base_url = conf.host
    tls = None
    if base_url.startswith("https://"):
        tls = _tls(cafile=conf.ssl_ca_cert, verify=bool(conf.verify_ssl))
        if conf.cert_file:
            tls.load_cert_chain(conf.cert_file, keyfile=conf.key_file)
    return Connection(base_url=base_url, ssl_context=tls, auth=auth)


def _require_file(path: str, *, what: str = "kubeconfig") -> str:
    path = os.path.expanduser(path)
    if not os.path.isfile(path):
        raise KubeConfigError(f"{what} {path!r} does not exist")
    return path
