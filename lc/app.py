"""The LocalController process: store, managers, worker API and (pluggable) GM link.

Start order: open the store, build the managers, replay stored resources (a restarted LC
resumes its monitors without the GM), start the HTTP site, then the link. Stop order is
the reverse, so nothing that can still produce a report outlives the store: stop
accepting HTTP (in-flight handlers finish their commit), stop the link, stop managers,
then flush pending commits and close the database.

Replayed objects are held, not dropped: work that opens the files an object names (dataset
counts, learning jobs) waits until the GM confirms the object (`Confirmations`: the GM sent
it, or applied a snapshot, which deletes what it left out). Without a GM link there is
nobody to ask, so everything stored is confirmed at start. Stopping managers cancels that
work at once: file reads run on daemon threads that stop after their current chunk
(lc/files.py).

The link to the GM lives in lc/link/dialer.py and is plugged in through `link_factory`: it
receives this LocalController (see `Link`/`LinkFactory`) and drives `apply_*` for
downstream objects and the store's outbox (`pending`, `ack`, `wait_outbox`) upstream.
Without a link the LC still accepts and durably stores every report.

The link task is supervised with restart-with-backoff: whatever ends it (a bug in a
session, a stray cancel), the LC would otherwise go on storing reports it never relays,
so it is started again, and its stop is bounded by `LINK_STOP_TIMEOUT`.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from aiohttp import web

from lc.api import build_app, protocol_error_response
from lc.config import LCConfig
from lc.dispatch import Dispatcher
from lc.errors import ConfigError
from lc.lane import ReportLane
from lc.managers.base import Confirmations, FileWork, Manager
from lc.managers.dataset import DatasetManager
from lc.managers.federatedlearning import FederatedLearningManager
from lc.managers.forward import ReportForwarder
from lc.managers.incrementallearning import IncrementalLearning
from lc.managers.jointinference import JointInferenceManager
from lc.managers.learning.manager import LearningManager
from lc.managers.lifelonglearning import LifelongLearning
from lc.managers.model import ModelManager
from lc.metrics import LCMetrics
from lc.store.facade import Store
from shared import apis
from shared.lanes import LaneSite
from shared.logs import event
from shared.server_limits import guarded_runner
from shared.tasks import Restart, Supervised
from shared.tls import TLSConfigError, server_context

log = logging.getLogger(__name__)

HTTP_SHUTDOWN_TIMEOUT = 10.0
LINK_STOP_TIMEOUT = 10.0  # the link closes its socket within its own close timeout (5 s)
LINK_RESTART = Restart(initial=0.5, cap=30.0, stable_after=60.0)


def forwarders(dedicated: Iterable[Manager]) -> list[ReportForwarder]:
    """A plain report relay for every Sedna kind without a manager of its own.

    The GM sends a node the objects its workers need and accepts their status only from
    that node, so the LC need not know more about a kind than that its workers report:
    the multi-edge kinds (FeatureExtractionService, ObjectSearchService,
    ObjectTrackingService, ReidJob, VideoAnalyticsJob) get their reports relayed
    unchanged, in upstream's body shape.
    Taking the list from the registry means a kind added there is relayed here too.
    """
    handled = {m.kind for m in dedicated}
    return [ReportForwarder(api.kind) for api in apis.ALL_KINDS if api.kind not in handled]


class Link(Protocol):
    """The GM connection, as the LocalController drives it."""

    @property
    def state(self) -> str:
        """A short word for /readyz: e.g. "connected", "connecting", "disconnected"."""

    async def run(self) -> None:
        """Keep the link up until cancelled (the LC owns and cancels this task)."""


LinkFactory = Callable[["LocalController"], Link]


class LocalController:
    """One LC: owns the store, managers, HTTP site and link task."""

    def __init__(self, config: LCConfig, *, link_factory: LinkFactory | None = None) -> None:
        self.config = config
        self._link_factory = link_factory
        self.link: Link | None = None
        self.store: Store | None = None
        self.dispatcher: Dispatcher | None = None
        self.metrics = LCMetrics()
        self._runner: web.AppRunner | None = None
        self._lane: ReportLane | None = None
        self.link_task: Supervised | None = None  # the link's run, restarted when it ends
        self.port: int | None = None  # the bound port once started (BIND_PORT may be 0)
        self.confirmations = Confirmations()  # which stored objects the GM vouched for

    # ---- seam for the link -----------------------------------------------------------

    async def apply_upsert(self, kind: str, namespace: str, name: str, obj: dict[str, Any]) -> None:
        """A downstream insert/update from the GM (which confirms the object exists)."""
        dispatcher = self._dispatch()
        self.confirmations.confirm(kind, namespace, name)
        await dispatcher.upsert(kind, namespace, name, obj)

    async def apply_delete(self, kind: str, namespace: str, name: str) -> None:
        """A downstream delete from the GM."""
        await self._dispatch().delete(kind, namespace, name)
        self.confirmations.forget(kind, namespace, name)

    async def apply_snapshot(self, objects: Iterable[tuple[str, str, str, dict[str, Any]]]) -> None:
        """The full set of objects this node needs, sent by the GM on (re)connect."""
        await self._dispatch().snapshot(objects)
        self.confirmations.confirm_all()

    def snapshot_applied(self) -> None:
        """The link applied a whole snapshot (objects it left out are deleted by now)."""
        self.confirmations.confirm_all()

    @property
    def app(self) -> web.Application | None:
        """The aiohttp application while serving (for introspection and tests)."""
        return None if self._runner is None else self._runner.app

    def link_state(self) -> str:
        return "none" if self.link is None else self.link.state

    # ---- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Open the store, resume managers, serve HTTP, start the link."""
        cfg = self.config
        if self._link_factory is None:
            self.confirmations.confirm_all()  # no GM to ask: what is stored is all there is
        self.store = await Store.open(cfg.db_path, synchronous=cfg.db_synchronous,
                                      observe=self.metrics.observe_batch,
                                      bounds=cfg.store_bounds)
        try:
            await self._start_managers()
            await self._start_http()
        except BaseException:
            await self.stop()
            raise
        if self._link_factory is not None:
            self.link = self._link_factory(self)
            # policy: restart with backoff (see the module docstring)
            self.link_task = Supervised(self.link.run, name="lc-link", policy=LINK_RESTART, logger=log)
            self.link_task.start()

    async def _start_managers(self) -> None:
        assert self.store is not None
        cfg, models = self.config, ModelManager()
        work = FileWork(limits=cfg.file_limits, s3=cfg.s3_settings, confirmations=self.confirmations)
        datasets = DatasetManager(self.store, rootfs=cfg.rootfs, period=cfg.dataset_period, work=work)
        self.metrics.watch_datasets(datasets)
        managers = [
            datasets, models, JointInferenceManager(), FederatedLearningManager(),
            *(LearningManager(kind, self.store, rootfs=cfg.rootfs, node=cfg.node_name, work=work)
              for kind in (IncrementalLearning(models), LifelongLearning())),
        ]
        self.dispatcher = Dispatcher(self.store, [*managers, *forwarders(managers)])
        resumed = await self.dispatcher.resume()
        for manager in managers:
            if isinstance(manager, LearningManager):
                manager.start()  # now that the Models and Datasets they read are back
        event(log, "state resumed", resources=resumed, outbox=self.store.outbox_size,
              db=self.config.db_path, confirmed=self.confirmations.everything)

    async def _start_http(self) -> None:
        assert self.store is not None and self.dispatcher is not None
        app = build_app(store=self.store, dispatcher=self.dispatcher, metrics_=self.metrics,
                        link_state=self.link_state, limits=self.config.server_limits,
                        body_budget=self.config.new_body_budget())
        self._runner = guarded_runner(app, limits=self.config.server_limits, access_log=None,
                                      error_response=protocol_error_response,
                                      shutdown_timeout=HTTP_SHUTDOWN_TIMEOUT)
        await self._runner.setup()
        # worker reports skip aiohttp on the plain path (lc/lane.py); everything else is the app's
        self._lane = ReportLane.of(app)
        site = LaneSite(self._runner, self.config.bind_address, self.config.bind_port,
                        requests=[self._lane], ssl_context=self._server_ssl())
        await site.start()
        self.port = self._runner.addresses[0][1]
        event(log, "serving", address=self.config.bind_address, port=self.port,
              node=self.config.node_name, tls=self.config.tls_cert_file is not None)

    def _server_ssl(self) -> ssl.SSLContext | None:
        """LC_TLS_CERT_FILE/LC_TLS_KEY_FILE: the worker API serves https."""
        cfg = self.config
        if not cfg.tls_cert_file or not cfg.tls_key_file:
            return None
        try:
            return server_context(cfg.tls_cert_file, cfg.tls_key_file, setting="LC_TLS_CERT_FILE")
        except TLSConfigError as exc:
            raise ConfigError(str(exc)) from exc

    async def stop(self) -> None:
        """Ordered shutdown; safe to call more than once and after a failed start."""
        if self._runner is not None:
            await self._runner.cleanup()  # stop accepting; in-flight handlers finish
            self._runner = None
        if self._lane is not None:
            await self._lane.drain(HTTP_SHUTDOWN_TIMEOUT)  # and the lane's reports in progress
            self._lane = None
        if self.link_task is not None:
            await self.link_task.stop(within=LINK_STOP_TIMEOUT)  # logged if it hangs; go on
            self.link_task = None
        if self.dispatcher is not None:
            await self.dispatcher.stop()
        if self.store is not None:
            await self.store.close()  # commits what was submitted, then closes
        event(log, "stopped")

    def _dispatch(self) -> Dispatcher:
        if self.dispatcher is None:
            raise RuntimeError("LocalController is not started")
        return self.dispatcher
