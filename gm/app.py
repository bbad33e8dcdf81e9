"""The GlobalManager process: wires the cluster client, informers, controllers and the
HTTP server on the websocket port (health, readiness, metrics, and the LC hub).

Start-up order: connect, create every informer (so each type is listed and watched
once), start them, serve /healthz at once and /readyz when the caches have synced, then
(after winning the leader lease, when enabled) run the controllers. Shutdown reverses it
within a timeout: stop the controllers (in-flight reconciles finish), flush events, stop
the informers, close the server and the client.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gm.config import GMConfig
from gm.controllers.common import Context
from gm.controllers.federatedlearning import FederatedLearningController
from gm.controllers.jointinference import JointInferenceController
from gm.controllers.runner import ControllerRunner, ReconcileMetrics
from gm.kube.client import KubeClient
from gm.kube.config import ClientSettings
from gm.kube.events import EventRecorder
from gm.kube.informer import InformerFactory
from gm.kube.leader import LeaderElector, LeaderSettings
from gm.kube.metrics import KubeMetrics
from gm.kube.status import StatusWriter
from gm.kube.workqueue import WorkQueue
from gm.workers import WorkerConfig
from shared.logs import event
from shared.metrics import CONTENT_TYPE, Registry

log = logging.getLogger("gm")

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
        self.identity = identity or f"{socket.gethostname()}_{os.getpid()}"
        self.client: KubeClient | None = None
        self.informers: InformerFactory | None = None
        self.controllers: dict[str, Any] = {}
        self.runners: dict[str, ControllerRunner] = {}
        self.recorders: list[EventRecorder] = []
        self.leader: LeaderElector | None = None
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
        for ext in self.extensions:
            ext(self)
        self.informers.start()
        for recorder in self.recorders:
            await recorder.start()
        await self._serve()
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

    async def _serve(self) -> None:
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/readyz", self._readyz)
        self.app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(self.app, handle_signals=False, access_log=None)
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
        return web.Response(body=self.registry.render().encode(), headers={"Content-Type": CONTENT_TYPE})

    # -- stop ------------------------------------------------------------------------

    async def wait(self) -> None:
        """Until the GM stops by itself (lost leadership or a failed task)."""
        await self._stopped.wait()

    async def stop(self, grace: float = 10.0) -> None:
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
