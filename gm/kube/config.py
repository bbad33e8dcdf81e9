"""Where the cluster is and how to authenticate: kubeconfig, in-cluster, or a `master` URL.

kubernetes_asyncio is used here, and only here, to read kubeconfig files and the
service-account mount (contexts, exec plugins, inline certificates, token refresh). What
comes out is a `Connection`: the base URL, an SSL context and an async source of the
Authorization header, which `client.py` uses with its own aiohttp session so list and watch
bodies stay raw bytes parsed with orjson.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field

from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config import ConfigException, load_incluster_config, load_kube_config
from kubernetes_asyncio.config.kube_config import KUBE_CONFIG_DEFAULT_LOCATION


class ConfigError(Exception):
    """No usable cluster configuration (missing file, bad kubeconfig, not in a pod)."""


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


@dataclass(slots=True)
class Connection:
    """A resolved endpoint: base URL, TLS context and credentials."""

    base_url: str
    ssl_context: ssl.SSLContext | None = None
    configuration: Configuration | None = field(default=None, repr=False)

    async def auth_headers(self) -> dict[str, str]:
        """The Authorization header (bearer token, refreshed when it rotates, or basic)."""
        conf = self.configuration
        if conf is None:
            return {}
        if "BearerToken" in conf.api_key or conf.refresh_api_key_hook is not None:
            token = await conf.get_api_key_with_prefix("BearerToken")
            if token:
                return {"Authorization": token}
        if conf.username or conf.password:
            return {"Authorization": conf.get_basic_auth_token()}
        return {}


async def load_connection(settings: ClientSettings) -> Connection:
    """Resolve `settings` to a `Connection`; raise `ConfigError` if nothing is usable."""
    conf = Configuration()
    try:
        if settings.kubeconfig:
            _require_file(settings.kubeconfig)
            await load_kube_config(settings.kubeconfig, context=settings.context,
                                   client_configuration=conf, persist_config=False)
        elif settings.master:
            conf.host = settings.master
        else:
            await _load_default(conf, settings.context)
    except ConfigException as exc:
        raise ConfigError(f"cannot load cluster configuration: {exc}") from exc
    if settings.master:
        conf.host = settings.master
    base_url = conf.host.rstrip("/")
    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"API server URL {base_url!r} is not http(s)")
    return Connection(base_url=base_url, ssl_context=_ssl_context(conf, base_url),
                      configuration=conf)


async def _load_default(conf: Configuration, context: str | None) -> None:
    """In-cluster first (like upstream), then the default kubeconfig for development."""
    try:
        load_incluster_config(client_configuration=conf)
        return
    except ConfigException:
        pass  # not in a pod: try the user's kubeconfig next
    path = _require_file(KUBE_CONFIG_DEFAULT_LOCATION, what="no kubeConfig or master set and not running in a pod; "
                         "default kubeconfig")
    await load_kube_config(path, context=context, client_configuration=conf,
                           persist_config=False)


def _require_file(path: str, *, what: str = "kubeconfig") -> str:
    path = os.path.expanduser(path)
    if not os.path.isfile(path):
        raise ConfigError(f"{what} {path!r} does not exist")
    return path


def _ssl_context(conf: Configuration, base_url: str) -> ssl.SSLContext | None:
    if not base_url.startswith("https://"):
        return None
    ctx = ssl.create_default_context(cafile=conf.ssl_ca_cert)
    if conf.cert_file:
        ctx.load_cert_chain(conf.cert_file, keyfile=conf.key_file)
    if not conf.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx
