"""`DevCluster`: one store, the HTTP server and the controllers, started and stopped in order.

Start: load the state file (if any), start the controllers (nodes first, so pods find
them), then serve. Stop: stop the controllers, kill local processes, close the server,
save the state. Everything else (CLI, `make run`, test fixtures) builds on this class.

Every background task (the controllers, the process runtime's pod loops) runs under the
cluster's one `Supervisor`: a crash is logged and restarted, repeated crashes fail
`/healthz` and `/readyz`, and `crashes` is the record tests check at teardown.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from devcluster import servingcert
from devcluster.auth import bootstrap_policy
from devcluster.auth.admission import Admission
from devcluster.auth.tokenreview import TokenAuthority
from devcluster.controllers.base import Controller
from devcluster.controllers.daemonset import DaemonSetController
from devcluster.controllers.deployment import DeploymentController
from devcluster.controllers.gc import GarbageCollector
from devcluster.controllers.job import JobController
from devcluster.controllers.kubelet import Kubelet
from devcluster.controllers.namespace import NamespaceDefaults
from devcluster.controllers.nodes import DEFAULT_NODES, NodeController
from devcluster.controllers.replicaset import ReplicaSetController
from devcluster.controllers.scheduler import Scheduler
from devcluster.controllers.tokens import TokenController
from devcluster.runtime.process import ImageEntry, ProcessRuntime, load_image_map, parse_image_map
from devcluster.runtime.projection import ApiEndpoint, Projector, StoreSources
from devcluster.server.faults import Faults
from devcluster.storage import views
from devcluster.storage.store import Store
from devcluster.supervisor import Crash, Supervisor

log = logging.getLogger("devcluster")


class DevCluster:
    """An in-process Kubernetes API emulator with its controllers."""

    def __init__(
        self, *, nodes: Iterable[str] = DEFAULT_NODES, process_runtime: bool = False,
        image_map: str | os.PathLike[str] | dict[str, Any] | None = None,
        state_file: str | os.PathLike[str] | None = None, faults: Any = None,
        start_delay: float = 0.2, termination_delay: float = 0.1, resync: float = 5.0,
        lease_interval: float = 10.0, restart_backoff: float = 0.5, store: Store | None = None,
        supervisor: Supervisor | None = None, pod_root: str | os.PathLike[str] | None = None,
        secure: bool | None = None, pki_dir: str | os.PathLike[str] | None = None,
    ):
        """`pki_dir`: serve HTTPS (as a real API server does), with a CA and a serving certificate
        kept in this directory (made at start when missing, reused across restarts); without it
        the API is plain HTTP unless `start(tls=...)` is given a certificate."""
        self.store = store or Store()
        self.supervisor = supervisor or Supervisor()
        self.tokens = TokenAuthority(self.store)  # every ServiceAccount token: issued, reviewed, authenticated
        self.faults = faults if faults is not None else Faults()  # tests switch faults on at run time
        self.state_file = Path(state_file) if state_file else None
        if self.state_file is not None and self.state_file.exists():
            self.store.load(self.state_file.read_bytes())
        bootstrap_policy.ensure(self.store)  # the default RBAC a real cluster starts with
        self.runtime: ProcessRuntime | None = None
        # pods' volumes, nodes' root filesystems and the serving certificate (process runtime)
        self._own_root = process_runtime and pod_root is None
        self.pod_root = Path(pod_root) if pod_root else (
            Path(tempfile.mkdtemp(prefix="devcluster-")) if process_runtime else None)
        # HTTPS port for in-cluster clients: on by default with the process runtime
        self.secure = (process_runtime and servingcert.available()) if secure is None else secure
        self.serving_cert: servingcert.ServingCert | None = None
        self.secure_port = 0
        if process_runtime:
            assert self.pod_root is not None
            projector = Projector(self.pod_root, StoreSources(self.store, self.tokens, lambda: self.api_endpoint))
            self.runtime = ProcessRuntime(_image_map(image_map), supervisor=self.supervisor,
                                          backoff_base=restart_backoff, projector=projector)
        self.controllers: dict[str, Controller] = {}
        namespace_defaults = NamespaceDefaults(self.store, resync=resync, ca=self._ca_pem)
        # ServiceAccount and PodSecurity admission on every write, the controllers' own included
        self.store.admission = Admission(self.store, default_service_account=namespace_defaults.ensure_service_account)
        for ctl in (
            NodeController(self.store, nodes=nodes, lease_interval=lease_interval),
            namespace_defaults,
            GarbageCollector(self.store, resync=resync),
            ReplicaSetController(self.store, resync=resync),
            DeploymentController(self.store, resync=resync),
            DaemonSetController(self.store, resync=resync),
            JobController(self.store, resync=resync),
            Scheduler(self.store, resync=resync),
            Kubelet(self.store, start_delay=start_delay, termination_delay=termination_delay,
                    runtime=self.runtime, resync=resync),
            TokenController(self.store, self.tokens, resync=resync, ca=self._ca_pem),
        ):
            self.controllers[ctl.name] = ctl
        self._runner: web.AppRunner | None = None
        self.host = ""
        self.port = 0
        self._tls: servingcert.ServingCert | None = None
        self._ca_text: str | None = None  # the PEM of _tls.ca, read once at start
        self.pki_dir = Path(pki_dir) if pki_dir else None

    @property
    def client_host(self) -> str:
        """The host clients connect to: the bind address, loopback for a wildcard one."""
        return {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(self.host, self.host)

    @property
    def url(self) -> str:
        host = f"[{self.client_host}]" if ":" in self.client_host else self.client_host
        return f"{'https' if self._tls else 'http'}://{host}:{self.port}"

    @property
    def ca(self) -> Path | None:
        """The CA file clients verify the API server with, when serving HTTPS."""
        return self._tls.ca if self._tls else None

    @property
    def secure_url(self) -> str | None:
        return f"https://{self.client_host}:{self.secure_port}" if self.secure_port else None

    @property
    def api_endpoint(self) -> ApiEndpoint | None:
        """Where pods reach the API server (the HTTPS port), once serving."""
        if not self.secure_port or self.serving_cert is None:
            return None
        return ApiEndpoint(host=self.client_host, port=self.secure_port, ca=self.serving_cert.ca)

    def _ca_pem(self) -> str | None:
        """What `kube-root-ca.crt` and token Secrets carry as `ca.crt`: the CA of the HTTPS API."""
        return self._ca_text

    @property
    def crashes(self) -> list[Crash]:
        """Every unexpected end of a background task since the cluster was built."""
        return self.supervisor.crashes

    def controller(self, name: str) -> Controller:
        """A controller by name: node-lifecycle, namespace-defaults, garbage-collector,
        replicaset-controller, deployment-controller, daemonset-controller, job-controller,
        default-scheduler, kubelet."""
        return self.controllers[name]

    async def start(self, host: str = "127.0.0.1", port: int = 0, *,
                    tls: servingcert.ServingCert | None = None) -> DevCluster:
        """Start the controllers, then serve on host:port (0 picks a free port); HTTPS with `tls`,
        or with the certificate of `pki_dir` (made for `host`). kubectl, Helm and client-go send a
        kubeconfig's token or client certificate only over HTTPS, so a ServiceAccount-token
        kubeconfig needs HTTPS."""
        if tls is None and self.pki_dir is not None:
            tls = await asyncio.to_thread(servingcert.make, self.pki_dir, hosts=[host])
        self._tls = tls
        self._ca_text = tls.ca.read_text() if tls else None
        from devcluster.server.app import make_app  # the HTTP layer is only needed once serving

        self.start_controllers()
        app = make_app(self.store, faults=self.faults, log_source=self.pod_logs,
                       health=self.supervisor.health, tokens=self.tokens)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=tls.ssl_context() if tls else None)
        await site.start()
        self.host, self.port = self._runner.addresses[0][:2]
        if tls is not None:  # pods use the HTTPS API port itself
            self.serving_cert, self.secure_port = tls, self.port
        elif self.secure:
            await self._serve_tls(host)
        log.info("devcluster serving url=%s nodes=%s", self.url, ",".join(self._node_names()))
        return self

    async def _serve_tls(self, host: str) -> None:
        """A second, HTTPS site on a free port, signed by the dev cluster CA of this process."""
        assert self._runner is not None
        self.serving_cert = await asyncio.to_thread(servingcert.shared)
        site = web.TCPSite(self._runner, host, 0, ssl_context=self.serving_cert.ssl_context())
        await site.start()
        self.secure_port = self._runner.addresses[-1][1]  # the site just added is the last

    def pod_logs(self, namespace: str, name: str, container: str | None, tail: int | None) -> str | None:
        """Log text of a pod for `kubectl logs`: process output, or empty for simulated pods."""
        pod = self.store.get(self.store.registry.lookup(group="", version="v1", resource="pods"), namespace, name)
        containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        if container and container not in containers:
            return None
        raw = self.runtime.logs(namespace, name) if self.runtime is not None else None
        text = raw.decode("utf-8", "replace") if raw else ""
        if tail is not None:
            text = "".join(text.splitlines(keepends=True)[-tail:]) if tail > 0 else ""
        return text

    def start_controllers(self) -> None:
        """Start the controllers only (tests that drive the store directly use this)."""
        for ctl in self.controllers.values():
            if not ctl.started:
                ctl.start(self.supervisor)

    def _node_names(self) -> list[str]:
        ctl = self.controllers["node-lifecycle"]
        assert isinstance(ctl, NodeController)
        return ctl.nodes

    async def stop(self) -> None:
        """Ordered shutdown: controllers, processes, server, state file."""
        for ctl in reversed(list(self.controllers.values())):
            await ctl.stop()
        if self.runtime is not None:
            await self.runtime.close()
        await self.supervisor.stop()
        if self._runner is not None:
            await asyncio.wait_for(self._runner.cleanup(), 10)
            self._runner = None
        self.save_state()
        if self._own_root and self.pod_root is not None:
            shutil.rmtree(self.pod_root, ignore_errors=True)

    def save_state(self) -> None:
        """Write the store to the state file atomically (no-op without one)."""
        if self.state_file is None:
            return
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(self.state_file.suffix + ".tmp")
        tmp.write_bytes(self.store.dump())
        tmp.replace(self.state_file)

    def apply_manifests(self, *paths: str | os.PathLike[str]) -> list[str]:
        """Create the objects of YAML files, or of every *.yaml/*.yml in directories, in file
        order (like `kubectl create -f`); returns `kind/name` for each. A CRD is served as
        soon as it is created, so a later document of the same run may use its kind."""
        created = []
        for path in paths:
            for doc in _manifests(Path(path)):
                rt = self.store.registry.for_kind(doc.get("apiVersion", ""), doc.get("kind", ""))
                if rt is None:
                    raise ValueError(f"{path}: no resource serves {doc.get('apiVersion')} {doc.get('kind')}")
                namespace = (doc.get("metadata") or {}).get("namespace") or "default"
                target = views.ViewStore(self.store, rt) if views.is_view(rt) else self.store
                obj = target.create(rt, namespace if rt.namespaced else None, doc)
                created.append(f"{rt.kind}/{obj['metadata']['name']}")
        return created

    def kubeconfig(self, *, token: str | None = None) -> dict[str, Any]:
        """A kubeconfig for this cluster, context `devcluster`: the admin (an empty user over
        HTTP, the admin token over HTTPS), or the holder of a ServiceAccount `token` (which Go
        clients send only when serving HTTPS)."""
        cluster: dict[str, Any] = {"server": self.url}
        if self._tls is not None:
            cluster["certificate-authority-data"] = self._tls.ca_data
            token = token or self.tokens.admin_token
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "devcluster", "cluster": cluster}],
            "users": [{"name": "devcluster", "user": {"token": token} if token else {}}],
            "contexts": [{"name": "devcluster",
                          "context": {"cluster": "devcluster", "user": "devcluster", "namespace": "default"}}],
            "current-context": "devcluster",
            "preferences": {},
        }

    def write_kubeconfig(self, path: str | os.PathLike[str], *, token: str | None = None) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.touch(mode=0o600)  # it may hold a token
        p.write_text(yaml.safe_dump(self.kubeconfig(token=token), sort_keys=False))
        return p

    async def __aenter__(self) -> DevCluster:
        if self._runner is None:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class KubeYamlLoader(yaml.SafeLoader):
    """SafeLoader without YAML 1.1's base-60 numbers, as kubectl reads a manifest: an
    unquoted `end: 20:00` (upstream's learning examples) stays the string "20:00", where
    PyYAML's default resolver makes it the integer 1200 and the CRD schema refuses it."""


KubeYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
KubeYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"))
KubeYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?"
               r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def _manifests(path: Path) -> list[dict[str, Any]]:
    files = sorted([*path.glob("*.yaml"), *path.glob("*.yml")]) if path.is_dir() else [path]
    docs: list[dict[str, Any]] = []
    for file in files:
        with file.open(encoding="utf-8") as f:
            docs.extend(d for d in yaml.load_all(f, Loader=KubeYamlLoader) if d)
    return docs


def _image_map(value: str | os.PathLike[str] | dict[str, Any] | None) -> dict[str, ImageEntry]:
    if value is None:
        return {}
    if isinstance(value, dict):
        if all(isinstance(v, ImageEntry) for v in value.values()):
            return dict(value)
        return parse_image_map(value)
    return load_image_map(value)
