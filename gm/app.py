"""The GlobalManager process: wires the cluster client, informers, controllers and the
HTTP server on the websocket port (health, readiness, metrics, and the LC hub).

Start-up order: connect, create every informer (so each type is listed and watched
once), start them, serve /healthz at once and /readyz when the caches have synced, then
(after winning the leader lease, when enabled) run the controllers. The hub (gm/edge/hub.py)
serves LCs on `/` of the same port: gm/edge/objects.py tells it which objects each node needs and
gm/edge/status.py applies the status they report. It runs whether or not this process leads
(status writes are resourceVersion-guarded), and it admits a connection only once the
caches have synced, so a node's first snapshot is complete rather than empty. Shutdown
reverses it within a timeout: close the LC sessions, stop the controllers (in-flight
reconciles finish), flush events, stop the informers, close the server and the client.

Supervision: every long-lived task is a `Supervised` with the fail-fast policy (the
informers, the event writers, the controllers with the leader
election that gates them). A GM missing any of them would look alive while doing part of
its job, so any of them ending unasked makes `wait()` return with `failure` set, and
`sedna-gm` exits non-zero; a restart by the kubelet is the recovery. So does a cache
that has not synced `cacheSyncTimeoutSeconds` after start (the log names the caches), and
so does lost leadership, after the controllers have stopped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import ssl
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from gm.config import GMConfig, WorkerConfig, split_list
from gm.edge.auth import (
    AuthConfigError,
    Authenticator,
    FileTable,
    NodeAuth,
    NodeTokens,
    SecretTable,
    SharedToken,
    TokenReviewAuth,
)
from gm.edge.capacity import raise_fd_limit, session_capacity
from gm.edge.hub import Hub
from gm.edge.metrics import EdgeCollector
from gm.edge.objects import EdgeObjects
from gm.edge.pipeline import StatusPipeline
from gm.edge.ports import EdgeSocket, UpgradeRequest
from gm.edge.site import serve_hub
from gm.edge.status import UpstreamStatus
from gm.errors import ConfigError, GMError
from gm.http_errors import error_response, json_errors, refusal
from gm.jobmetrics import JobCollector
from gm.kinds import DECLARATIONS
from gm.kube.client import KubeClient
from gm.kube.events import EventRecorder
from gm.kube.informer import InformerFactory, InformerFailed
from gm.kube.kubeconfig import ClientSettings
from gm.kube.leader import LeaderElector, LeaderSettings
from gm.kube.metrics import KubeMetrics
from gm.kube.resources import NODES, sedna_gvr
from gm.kube.statuswriter import StatusWriter
from gm.kube.workqueue import WorkQueue
from gm.reconcile.caches import transform_for
from gm.reconcile.context import Context
from gm.reconcile.declaration import KindDeclaration
from gm.reconcile.reconciler import KindController
from gm.reconcile.runner import ControllerRunner, ReconcileMetrics
from gm.ui import StatusPage
from shared import apis
from shared.lanes import WebSocketLane
from shared.logs import event
from shared.metrics import CONTENT_TYPE, render, service_registry
from shared.server_limits import guarded_runner
from shared.tasks import FailFast, Supervised
from shared.tls import TLSConfigError, server_context

log = logging.getLogger("gm")

HUB_SYNC_WAIT = 10.0  # how long an LC's upgrade waits for the caches before a 503
TASK_STOP_TIMEOUT = 10.0  # how long stop() waits for each supervised task


class LeadershipLost(GMError):
    """The lease was lost (not renewed in time, or taken); the controllers have stopped."""



class GlobalManager:
    """One GM process. `await gm.start()`, then `await gm.wait()`; `await gm.stop()` ends it."""

    def __init__(self, config: GMConfig, *, registry: CollectorRegistry | None = None,
                 identity: str | None = None,
                 declarations: tuple[KindDeclaration, ...] = DECLARATIONS):
        """`declarations`: the kinds to reconcile (gm/kinds); they are also the kinds whose
        objects go to the edge, with Datasets and Models, and whose reports are taken."""
        self.config = config
        self.declarations = declarations
        self.registry = registry or service_registry("gm")  # its own: several GMs share a test
        self.kube_metrics = KubeMetrics(self.registry)
        self.reconcile_metrics = ReconcileMetrics(self.registry)
        self.identity = identity or f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.client: KubeClient | None = None
        self.informers: InformerFactory | None = None
        self.controllers: dict[str, Any] = {}
        self.runners: dict[str, ControllerRunner] = {}
        self.recorders: list[EventRecorder] = []
        self.leader: LeaderElector | None = None
        self.edge: EdgeObjects | None = None
        self.hub: Hub | None = None
        self.status_writer: StatusWriter | None = None
        self.pipeline: StatusPipeline | None = None
        self.edge_metrics = EdgeCollector()
        self.registry.register(self.edge_metrics)
        self.job_metrics = JobCollector()  # the jobs' status, read from the caches at scrape time
        self.registry.register(self.job_metrics)
        self.status_page = StatusPage()  # GET /ui, beside /metrics (gm/ui)
        self.app = web.Application(middlewares=[json_errors])
        self._runner: web.AppRunner | None = None
        self._lane: WebSocketLane | None = None
        self._tasks: list[Supervised] = []  # every long-lived task, fail-fast
        self._reconcilers: Supervised | None = None  # the controllers while leading
        self._stopped = asyncio.Event()
        self.failure: str | None = None  # why the GM stopped by itself, if it did
        self.port: int | None = None
        self.extensions: list[Callable[[GlobalManager], Any]] = []

    # -- start -----------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.config
        ssl_context = self._server_ssl()  # a bad certificate fails before anything starts
        self.client = await KubeClient.connect(ClientSettings(
            kubeconfig=cfg.kubeConfig, master=cfg.master, qps=cfg.kubeClient.qps,
            burst=cfg.kubeClient.burst, budgets=cfg.kubeClient.budgets(),
            timeout=cfg.kubeClient.timeoutSeconds), metrics=self.kube_metrics)
        self.informers = InformerFactory(self.client, namespace=cfg.namespace or None,
                                         resync_period=float(cfg.minResyncPeriodSeconds),
                                         metrics=self.kube_metrics, on_fatal=self._fatal,
                                         transforms=transform_for)
        self._build_controllers()
        self._build_hub()
        self.job_metrics.watch_informers(self.informers, (d.api for d in self.declarations))
        self.status_page.watch(hub=self.hub, recorders=self.recorders, jobs={
            d.kind: self.informers.informer(sedna_gvr(d.api)) for d in self.declarations})
        assert self.status_writer is not None
        for inf in self.informers.informers():  # every kind whose status the GM writes
            if inf.gvr.group == apis.GROUP:
                self.status_writer.follow(inf)
        for ext in self.extensions:
            ext(self)
        self.informers.start()
        for recorder in self.recorders:
            await recorder.start(on_fatal=self._fatal)
        await self._serve(ssl_context)
        self._supervise(self._lead_and_run, "controllers")
        event(log, "gm started", port=self.port, namespace=cfg.namespace or "*", identity=self.identity)

    def _build_controllers(self) -> None:
        assert self.client is not None and self.informers is not None
        # One writer for the reconcilers and the edge reports: each starts from the other's last
        # write of an object instead of the lagging cache (gm/kube/statuswriter.py).
        self.status_writer = StatusWriter(self.client, cache=self.informers.get_cached)
        base = Context(client=self.client, informers=self.informers, status=self.status_writer,
                       events=None,  # type: ignore[arg-type]  # one recorder per controller below
                       config=self.config,
                       workers=WorkerConfig(lc_server=self.config.localController.server,
                                            kb_server=self.config.knowledgeBaseServer.server))
        for decl in self.declarations:
            name = decl.name
            recorder = EventRecorder(self.client, component=decl.component or f"{name}-controller",
                                     metrics=self.kube_metrics)
            self.recorders.append(recorder)
            queue = WorkQueue(name, metrics=self.kube_metrics)
            ctrl = KindController(dataclasses.replace(base, events=recorder), queue.add, decl)
            self.controllers[name] = ctrl
            self.runners[name] = ControllerRunner(name, queue, ctrl.reconcile,
                                                  workers=self.config.workers,
                                                  metrics=self.reconcile_metrics)

    def _build_hub(self) -> None:
        assert self.client is not None and self.informers is not None
        kinds = (apis.DATASET, apis.MODEL, *(d.api for d in self.declarations))
        self.edge = EdgeObjects(self.informers, kinds=kinds, annotations={
            d.kind: d.edge_annotations for d in self.declarations if d.edge_annotations is not None})
        self.pipeline = StatusPipeline(self.status_writer)
        events = EventRecorder(self.client, component="dataset-controller", metrics=self.kube_metrics)
        self.recorders.append(events)  # Warning Events about Dataset indexes the LC cannot read
        fd_limit = raise_fd_limit()
        capacity = session_capacity(fd_limit, configured=self.config.websocket.maxSessions)
        event(log, "hub session capacity", capacity=capacity, fd_limit=fd_limit)
        self.hub = Hub(self.edge, UpstreamStatus(self.pipeline, rules=[
            (d.api, d.report) for d in self.declarations if d.report is not None], events=events),
            auth=self._node_auth(), max_sessions=capacity,
            placement_grace=self.config.websocket.placementGraceSeconds)
        self.edge.bind(self.hub.notify_changed)
        # a deleted Node's LC session ends, and the hub forgets it (its per-node series too)
        self.informers.informer(NODES).add_event_handler(
            on_delete=lambda node: self.hub.forget_node(node["metadata"]["name"]) if self.hub else None)
        self.edge_metrics.watch(hub=self.hub, edge=self.edge, pipeline=self.pipeline)

    def _node_auth(self) -> NodeAuth:
        """The configured authenticators, cheapest first: token tables, shared token, TokenReview."""
        assert self.client is not None
        ws = self.config.websocket
        auths: list[Authenticator] = []
        try:
            if ws.nodeTokens.file:
                auths.append(NodeTokens(FileTable(ws.nodeTokens.file)))
        except AuthConfigError as exc:
            raise ConfigError(f"websocket.nodeTokens.file: {exc}") from exc
        if ws.nodeTokens.secret:
            namespace, name = ws.nodeTokens.secret.split("/")
            auths.append(NodeTokens(SecretTable(self.client, namespace, name,
                                                ttl=ws.nodeTokens.refreshSeconds)))
        if shared := self.config.websocket_token():
            auths.append(SharedToken(shared))
        if ws.tokenReview.enabled:
            tr = ws.tokenReview
            auths.append(TokenReviewAuth.with_client(
                self.client, audiences=split_list(tr.audiences),
                usernames=split_list(tr.serviceAccounts), cache_seconds=tr.cacheSeconds))
        event(log, "hub authentication", methods=",".join(type(a).__name__ for a in auths) or "none")
        return NodeAuth(auths)

    def _server_ssl(self) -> ssl.SSLContext | None:
        """websocket.tls: the port serves wss (and https for the probes and /metrics)."""
        tls = self.config.websocket.tls
        if not tls.enabled:
            return None
        try:
            return server_context(tls.certFile, tls.keyFile, setting="websocket.tls")
        except TLSConfigError as exc:
            raise ConfigError(str(exc)) from exc

    async def _hub_entry(self, request: UpgradeRequest) -> EdgeSocket:
        """Upstream LCs dial `/`; the upgrade waits until the node's snapshot can be complete."""
        assert self.hub is not None and self.edge is not None and self.informers is not None
        if not self.informers.has_synced():  # the wait is set up only while it can wait
            try:
                async with asyncio.timeout(HUB_SYNC_WAIT):
                    await self.informers.wait_synced()
            except (TimeoutError, InformerFailed) as exc:
                raise refusal(web.HTTPServiceUnavailable, f"GM caches not synced: {exc or 'timeout'}") from None
        return await self.hub.handle(request)

    async def _serve(self, ssl_context: ssl.SSLContext | None) -> None:
        self.app.router.add_get("/", self._hub_entry)
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/readyz", self._readyz)
        self.app.router.add_get("/metrics", self._metrics)
        self.app.router.add_get("/ui", self.status_page.handle)
        self.app.router.add_get("/sessions", self._sessions)
        self._runner = guarded_runner(self.app, handle_signals=False, access_log=None,
                                      error_response=error_response)
        await self._runner.setup()
        # LC sessions skip aiohttp, and a deep accept queue takes a fleet dialling at once after a
        # GM restart (gm/edge/site.py)
        assert self.hub is not None
        site, self._lane = await serve_hub(self._runner, self.hub, self.config.websocket.address,
                                           self.config.websocket.port, entry=self._hub_entry,
                                           ssl_context=ssl_context)
        sockets = getattr(site._server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self.config.websocket.port

    async def _lead_and_run(self) -> None:
        """Sync the caches (bounded), then run the controllers, as leader when configured."""
        assert self.informers is not None
        await self.informers.wait_synced(within=self.config.cacheSyncTimeoutSeconds)
        if self.config.leaderElection.enabled:
            await self._run_as_leader()
        else:
            await self._run_controllers()

    async def _run_as_leader(self) -> None:
        """Controllers run between the elector's start and stop callbacks; `run()` returns
        only after the stop callback has stopped them, and that is fatal to the process."""
        le = self.config.leaderElection
        assert self.client is not None
        self.leader = LeaderElector(self.client, LeaderSettings(
            namespace=le.leaseNamespace, name=le.leaseName, identity=self.identity,
            lease_duration=le.leaseDurationSeconds, renew_deadline=le.renewDeadlineSeconds,
            retry_period=le.retryPeriodSeconds), metrics=self.kube_metrics,
            on_started_leading=self._start_reconcilers, on_stopped_leading=self._stop_reconcilers)
        await self.leader.run()
        raise LeadershipLost(self.leader.lost_reason or "leadership lost")

    def _start_reconcilers(self) -> None:
        self._reconcilers = Supervised(self._run_controllers, name="reconcilers", policy=FailFast(),
                                       on_fatal=self._fatal, logger=log)
        self._reconcilers.start()

    async def _stop_reconcilers(self) -> None:
        # must finish before a standby can take over: the lease outlives the renew deadline by
        # this margin, and cancelling a reconcile also cancels its API calls
        le = self.config.leaderElection
        if self._reconcilers is not None:
            await self._reconcilers.stop(within=le.leaseDurationSeconds - le.renewDeadlineSeconds)

    async def _run_controllers(self) -> None:
        assert self.informers is not None
        async with asyncio.TaskGroup() as tg:
            for name, runner in self.runners.items():
                tg.create_task(runner.run(self.informers.wait_synced), name=f"controller {name}")

    def _supervise(self, factory: Callable[[], Any], name: str) -> None:
        # policy: fail fast (see the module docstring)
        sup = Supervised(factory, name=name, policy=FailFast(), on_fatal=self._fatal, logger=log)
        self._tasks.append(sup)
        sup.start()

    def _supervised(self) -> list[Supervised]:
        return [*self._tasks, *([self._reconcilers] if self._reconcilers is not None else [])]

    def _fatal(self, task: str, why: str) -> None:
        """A task the GM cannot work without ended: stop the process (the first cause wins)."""
        if self.failure is None:
            self.failure = f"{task} {why}"
            event(log, "gm failed", level=logging.ERROR, task=task, why=why)
        self._stopped.set()

    # -- HTTP ------------------------------------------------------------------------

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, request: web.Request) -> web.Response:
        if self.failure is not None:
            return web.Response(status=503, text=f"failed: {self.failure}")
        if self.leader is not None and self.leader.blocked is not None:
            return web.Response(status=503, text=f"leader election blocked: {self.leader.blocked}")
        if self.informers is not None and self.informers.has_synced():
            return web.Response(text="ok")
        unsynced = self.informers.unsynced() if self.informers is not None else []
        return web.Response(status=503, text=f"caches not synced: {', '.join(unsynced)}")

    async def _metrics(self, request: web.Request) -> web.Response:
        """Every metric of this GM (docs/metrics.md), the hub's read from it at scrape time."""
        return web.Response(body=render(self.registry), headers={"Content-Type": CONTENT_TYPE})

    async def _sessions(self, request: web.Request) -> web.Response:
        """The hub's LC sessions, by node: what an operator asks when a node seems gone."""
        views = self.hub.sessions() if self.hub is not None else []
        return web.json_response({"sessions": [view.as_json() for view in views]})

    # -- stop ------------------------------------------------------------------------

    async def wait(self) -> None:
        """Until the GM stops by itself (lost leadership or a failed task: see `failure`)."""
        await self._stopped.wait()

    async def stop(self, grace: float = 10.0) -> None:
        for sup in self._supervised():
            sup.expect_end()  # what stop ends (edge sync, drained controllers) is no failure
        if self.hub is not None:
            await self.hub.close()
        if self._lane is not None:
            await self._lane.close()  # upgrades still being decided (their sessions ended above)
        if self.pipeline is not None:
            await self.pipeline.close()
        for runner in self.runners.values():
            await runner.queue.shut_down_with_drain(grace)
        # the controllers task first: the elector stops the reconcilers, then releases the lease
        for sup in reversed(self._tasks):
            await sup.stop(within=TASK_STOP_TIMEOUT)
        for recorder in self.recorders:
            await recorder.stop(grace=min(grace, 5.0))
        if self.informers is not None:
            await self.informers.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self.client is not None:
            await self.client.close()
        self._stopped.set()
        event(log, "gm stopped")
