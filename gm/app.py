"""The GlobalManager process: wires the cluster client, informers, controllers and the
HTTP server on the websocket port (health, readiness, metrics, and the LC hub).

Start-up order: connect, create every informer (so each type is listed and watched
once), start them, serve /healthz at once and /readyz when the caches have synced, then
(after winning the leader lease, when enabled) run the controllers. The hub (gm/hub.py)
serves LCs on `/` of the same port: gm/edge.py tells it which objects each node needs and
gm/upstream.py applies the status they report. It runs whether or not this process leads
(status writes are resourceVersion-guarded), and it admits a connection only once the
caches have synced, so a node's first snapshot is complete rather than empty. Shutdown
reverses it within a timeout: close the LC sessions, stop the controllers (in-flight
reconciles finish), flush events, stop the informers, close the server and the client.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gm.config import GMConfig
from gm.controllers.common import Context
from gm.controllers.federatedlearning import FederatedLearningController
from gm.controllers.jointinference import JointInferenceController
from gm.controllers.runner import ControllerRunner, ReconcileMetrics
from gm.edge import EdgeObjects
from gm.hub import Hub
from gm.kube.client import KubeClient
from gm.kube.config import ClientSettings
from gm.kube.events import EventRecorder
from gm.kube.informer import InformerFactory, InformerFailed
from gm.kube.leader import LeaderElector, LeaderSettings
from gm.kube.metrics import KubeMetrics
from gm.kube.status import StatusWriter
from gm.kube.workqueue import WorkQueue
from gm.upstream import UpstreamStatus
from gm.workers import WorkerConfig
from shared.logs import event
from shared.metrics import CONTENT_TYPE, Counter, Registry
from shared.server_limits import guarded_runner

log = logging.getLogger("gm")

HUB_SYNC_WAIT = 10.0  # how long an LC's upgrade waits for the caches before a 503
HUB_SETTLE_WAIT = 2.0  # then how long it waits for pending Secret reads (the snapshot needs them)

CONTROLLERS: dict[str, tuple[type, str]] = {
    # name -> (class, event component as upstream names it)
    "jointinferenceservice": (JointInferenceController, "jointinferenceservice-controller"),
    "federatedlearningjob": (FederatedLearningController, "FederatedLearning-controller"),
}


class GlobalManager:
    """One GM process. `await gm.start()`, then `await gm.wait()`; `await gm.stop()` ends it."""

    def __init__(self, config: GMConfig, *, registry: Registry | None = None,
                 identity: str | None = None):
        self.config = config
        self.registry = registry or Registry()
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
        self.hub_metrics = HubMetrics(self.registry)
        self.app = web.Application()
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopped = asyncio.Event()
        self.port: int | None = None
        self.extensions: list[Callable[[GlobalManager], Any]] = []

    # -- start -----------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.config
        self.client = await KubeClient.connect(ClientSettings(
            kubeconfig=cfg.kubeConfig, master=cfg.master, qps=cfg.kubeClient.qps,
            burst=cfg.kubeClient.burst, timeout=cfg.kubeClient.timeoutSeconds), metrics=self.kube_metrics)
        self.informers = InformerFactory(self.client, namespace=cfg.namespace or None,
                                         resync_period=float(cfg.minResyncPeriodSeconds),
                                         metrics=self.kube_metrics)
        self._build_controllers()
        self._build_hub()
        for ext in self.extensions:
            ext(self)
        self.informers.start()
        for recorder in self.recorders:
            await recorder.start()
        await self._serve()
        assert self.edge is not None
        self._spawn(self.edge.run(), "edge-credentials")
        self._spawn(self._lead_and_run(), "controllers")
        event(log, "gm started", port=self.port, namespace=cfg.namespace or "*", identity=self.identity)

    def _build_controllers(self) -> None:
        assert self.client is not None and self.informers is not None
        base = Context(client=self.client, informers=self.informers,
                       status=StatusWriter(self.client, cache=self.informers.get_cached),
                       events=None,  # type: ignore[arg-type]  # one recorder per controller below
                       config=self.config,
                       workers=WorkerConfig(lc_server=self.config.localController.server,
                                            kb_server=self.config.knowledgeBaseServer.server))
        for name, (cls, component) in CONTROLLERS.items():
            recorder = EventRecorder(self.client, component=component, metrics=self.kube_metrics)
            self.recorders.append(recorder)
            queue = WorkQueue(name, metrics=self.kube_metrics)
            ctrl = cls(dataclasses.replace(base, events=recorder), queue.add)
            self.controllers[name] = ctrl
            self.runners[name] = ControllerRunner(name, queue, ctrl.reconcile,
                                                  workers=self.config.workers,
                                                  metrics=self.reconcile_metrics)

    def _build_hub(self) -> None:
        assert self.client is not None and self.informers is not None
        self.edge = EdgeObjects(self.informers, self.client)
        status = StatusWriter(self.client, cache=self.informers.get_cached)
        self.hub = Hub(self.edge, UpstreamStatus(status), token=self.config.websocket_token() or None)
        self.edge.bind(self.hub.notify_changed)

    async def _hub_entry(self, request: web.Request) -> web.StreamResponse:
        """Upstream LCs dial `/`; the upgrade waits until the node's snapshot can be complete."""
        assert self.hub is not None and self.edge is not None and self.informers is not None
        try:
            async with asyncio.timeout(HUB_SYNC_WAIT):
                await self.informers.wait_synced()
        except (TimeoutError, InformerFailed) as exc:
            raise web.HTTPServiceUnavailable(text=f"GM caches not synced: {exc or 'timeout'}\n") from None
        try:
            async with asyncio.timeout(HUB_SETTLE_WAIT):
                await self.edge.wait_settled()
        except TimeoutError:
            event(log, "hub admits a node while secrets are still being read", level=logging.WARNING,
                  pending=self.edge.awaiting_credentials)
        return await self.hub.handle(request)

    async def _serve(self) -> None:
        self.app.router.add_get("/", self._hub_entry)
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/readyz", self._readyz)
        self.app.router.add_get("/metrics", self._metrics)
        self._runner = guarded_runner(self.app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.websocket.address, self.config.websocket.port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self.config.websocket.port

    async def _lead_and_run(self) -> None:
        if self.config.leaderElection.enabled:
            await self._run_as_leader()
        else:
            await self._run_controllers()

    async def _run_as_leader(self) -> None:
        le = self.config.leaderElection
        assert self.client is not None
        self.leader = LeaderElector(self.client, LeaderSettings(
            namespace=le.leaseNamespace, name=le.leaseName, identity=self.identity,
            lease_duration=le.leaseDurationSeconds, renew_deadline=le.renewDeadlineSeconds,
            retry_period=le.retryPeriodSeconds), metrics=self.kube_metrics)
        async with asyncio.TaskGroup() as tg:
            lead = tg.create_task(self.leader.run(), name="leader-election")
            await self.leader.leading.wait()
            work = tg.create_task(self._run_controllers(), name="controllers")
            await lead  # returns when leadership is lost: stop working and exit
            event(log, "lost leadership, stopping", level=logging.ERROR)
            work.cancel()
        self._stopped.set()

    async def _run_controllers(self) -> None:
        assert self.informers is not None
        async with asyncio.TaskGroup() as tg:
            for name, runner in self.runners.items():
                tg.create_task(runner.run(self.informers.wait_synced), name=f"controller {name}")

    def _spawn(self, coro, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        task.add_done_callback(self._task_done)
        self._tasks.append(task)

    def _task_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            event(log, "task failed", level=logging.ERROR, task=task.get_name(), error=repr(task.exception()))
            self._stopped.set()  # a dead controller must not leave a half-working GM running

    # -- HTTP ------------------------------------------------------------------------

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, request: web.Request) -> web.Response:
        if self.informers is not None and self.informers.has_synced():
            return web.Response(text="ok")
        return web.Response(status=503, text="caches not synced")

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.hub is not None and self.edge is not None:
            self.hub_metrics.collect(self.hub, self.edge)
        return web.Response(body=self.registry.render().encode(), headers={"Content-Type": CONTENT_TYPE})

    # -- stop ------------------------------------------------------------------------

    async def wait(self) -> None:
        """Until the GM stops by itself (lost leadership or a failed task)."""
        await self._stopped.wait()

    async def stop(self, grace: float = 10.0) -> None:
        if self.hub is not None:
            await self.hub.close()
        if self.edge is not None:
            self.edge.stop()
        for runner in self.runners.values():
            await runner.queue.shut_down_with_drain(grace)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
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


class HubMetrics:
    """The hub's and edge sync's counters on /metrics, copied from their stats at scrape time."""

    _SESSIONS = {"opened": "sessions_opened", "replaced": "sessions_replaced", "dead": "sessions_dead",
                 "broken": "sessions_broken", "rejected": "handshakes_rejected"}
    _REPORTS = {"applied": "status_applied", "refused": "refused", "deferred": "deferred",
                "error": "handler_errors"}
    _FRAMES = {"in": "frames_in", "out": "frames_out", "ping": "pings_out", "ack": "acks_out",
               "skipped": "skipped_out"}

    def __init__(self, registry: Registry):
        self.sessions = registry.counter("gm_hub_sessions_total", "LC sessions by how they began or ended",
                                         ("event",))
        self.reports = registry.counter("gm_hub_status_reports_total", "LC status reports by outcome",
                                        ("result",))
        self.frames = registry.counter("gm_hub_frames_total", "websocket frames by kind", ("kind",))
        self.active = registry.gauge("gm_hub_sessions_active", "LC sessions open now")
        self.edge_objects = registry.gauge("gm_edge_objects", "objects some edge node needs")
        self.edge_sends = registry.counter("gm_edge_changes_total", "changes handed to the hub",
                                           ("op",))
        self.credentials = registry.counter("gm_edge_credential_reads_total",
                                            "Secret reads for downstream objects by outcome", ("result",))
        for counter, labels in ((self.sessions, self._SESSIONS), (self.reports, self._REPORTS),
                                (self.frames, self._FRAMES), (self.edge_sends, ("upsert", "delete")),
                                (self.credentials, ("ok", "unreadable", "retry"))):
            for label in labels:
                counter.inc(label, amount=0)

    def collect(self, hub: Hub, edge: EdgeObjects) -> None:
        for counter, names, stats in ((self.sessions, self._SESSIONS, hub.stats),
                                      (self.reports, self._REPORTS, hub.stats),
                                      (self.frames, self._FRAMES, hub.stats)):
            for label, attr in names.items():
                _mirror(counter, label, getattr(stats, attr))
        self.active.set(hub.sessions_active)
        self.edge_objects.set(len(edge))
        _mirror(self.edge_sends, "upsert", edge.stats.published)
        _mirror(self.edge_sends, "delete", edge.stats.deletes)
        _mirror(self.credentials, "ok", edge.stats.credential_reads)
        _mirror(self.credentials, "unreadable", edge.stats.credential_failures)
        _mirror(self.credentials, "retry", edge.stats.credential_retries)


def _mirror(counter: Counter, label: str, total: float) -> None:
    """Raise a counter to a monotonic total kept elsewhere."""
    delta = total - counter.value(label)
    if delta > 0:
        counter.inc(label, amount=delta)
