"""Leader election on a coordination.k8s.io/v1 Lease, so only one GM replica reconciles.

The protocol is client-go's LeaseLock: the lease names a holder and when it last renewed.
A candidate takes the lease when it is free (no holder) or when the holder has not
renewed for `lease_duration` as measured on the candidate's own clock since it last saw
the lease change (so clock skew between replicas does not matter). Every write is a
create (409 if someone else created it first) or a PUT guarded by the resourceVersion
just read (409 if someone else wrote in between), so two candidates can never both win.
The leader renews every `retry_period` and steps down when it has not managed to renew
for `renew_deadline`; on shutdown it releases the lease (empty holder) so a standby
takes over at once instead of waiting out the lease.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gm.kube.client import KubeClient
from gm.kube.errors import AlreadyExists, ApiError, Conflict, NotFound
from gm.kube.metrics import KubeMetrics
from gm.kube.resources import LEASES
from shared.logs import event

log = logging.getLogger(__name__)

Callback = Callable[[], Awaitable[None] | None]


@dataclass(frozen=True, slots=True)
class LeaderSettings:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_cancel: bool = True

    def __post_init__(self) -> None:
        if not (self.namespace and self.name and self.identity):
            raise ValueError("leader election needs a lease namespace, name and identity")
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")


class LeaderElector:
    """Campaigns for the lease, holds it, and reports leadership through callbacks.

    `run()` returns when leadership is lost (the caller should stop its controllers,
    usually by exiting); cancelling it releases a held lease.
    """

    def __init__(self, client: KubeClient, settings: LeaderSettings, *,
                 on_started_leading: Callback | None = None,
                 on_stopped_leading: Callback | None = None,
                 on_new_leader: Callable[[str], None] | None = None,
                 metrics: KubeMetrics | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.client = client
        self.settings = settings
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self.metrics = metrics or client.metrics
        self.leading = asyncio.Event()  # set while this candidate holds the lease
        self.observed_holder = ""  # last holder seen on the lease
        self._clock = clock
        self._observed_spec: dict[str, Any] | None = None  # last lease spec seen
        self._observed_at = 0.0  # our clock when that spec was first seen
        self._lease: dict[str, Any] | None = None  # last lease read or written (its RV guards)

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    async def run(self) -> None:
        """Acquire, lead until renewal fails for `renew_deadline`, then return."""
        try:
            await self._acquire()
            await self._became_leader()
            await self._renew_until_lost()
        except asyncio.CancelledError:
            if self.is_leader and self.settings.release_on_cancel:
                await asyncio.shield(self._release())
            raise
        finally:
            if self.is_leader:
                await self._stopped_leader()

    async def _acquire(self) -> None:
        while True:  # polling the API is the protocol: there is nothing to wait on
            if await self._try_acquire_or_renew():
                return
            await asyncio.sleep(self.settings.retry_period)

    async def _renew_until_lost(self) -> None:
        s = self.settings
        last_renew = self._clock()
        while True:
            await asyncio.sleep(s.retry_period)
            if await self._try_acquire_or_renew():
                last_renew = self._clock()
            elif self.observed_holder != s.identity or self._clock() - last_renew >= s.renew_deadline:
                event(log, "leadership lost", level=logging.WARNING, lease=s.name,
                      identity=s.identity, holder=self.observed_holder)
                return

    async def _try_acquire_or_renew(self) -> bool:
        """One attempt: read, decide, write. False when someone else holds or wins the race."""
        s = self.settings
        try:
            lease = await self.client.get(LEASES, s.name, namespace=s.namespace)
        except NotFound:
            return await self._create()
        except ApiError as exc:
            self._log_failure("get", exc)
            return False
        self._observe(lease)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if holder and holder != s.identity and not self._expired(spec):
            return False
        return await self._update(lease, spec, holder)

    async def _create(self) -> bool:
        s = self.settings
        now = _micro_time()
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": s.name, "namespace": s.namespace},
                "spec": {"holderIdentity": s.identity, "leaseDurationSeconds": _secs(s.lease_duration),
                         "acquireTime": now, "renewTime": now, "leaseTransitions": 0}}
        try:
            self._lease = await self.client.create(LEASES, body, namespace=s.namespace)
        except (AlreadyExists, Conflict):
            return False
        except ApiError as exc:
            self._log_failure("create", exc)
            return False
        self._observe(self._lease)
        return True

    async def _update(self, lease: dict[str, Any], spec: dict[str, Any], holder: str) -> bool:
        s = self.settings
        now = _micro_time()
        new_spec = dict(spec, holderIdentity=s.identity, leaseDurationSeconds=_secs(s.lease_duration),
                        renewTime=now)
        if holder != s.identity:
            new_spec["acquireTime"] = now
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        try:
            self._lease = await self.client.replace(LEASES, s.name, dict(lease, spec=new_spec),
                                                    namespace=s.namespace)
        except Conflict:
            return False
        except ApiError as exc:
            self._log_failure("update", exc)
            return False
        self._observe(self._lease)
        return True

    async def _release(self) -> None:
        """Give the lease up (empty holder) so a standby can take it without waiting."""
        s, lease = self.settings, self._lease
        if lease is None:
            return
        spec = dict(lease.get("spec") or {}, holderIdentity="", leaseDurationSeconds=1,
                    renewTime=_micro_time())
        try:
            async with asyncio.timeout(s.retry_period * 2):
                await self.client.replace(LEASES, s.name, dict(lease, spec=spec),
                                          namespace=s.namespace)
            event(log, "lease released", lease=s.name, identity=s.identity)
        except (ApiError, TimeoutError) as exc:
            event(log, "lease release failed", level=logging.WARNING, lease=s.name,
                  error=repr(exc))

    def _observe(self, lease: dict[str, Any]) -> None:
        """Note when the lease record last changed, on our own clock."""
        spec = lease.get("spec") or {}
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_at = self._clock()
        holder = spec.get("holderIdentity") or ""
        if holder != self.observed_holder:
            self.observed_holder = holder
            if holder and self.on_new_leader is not None:
                self.on_new_leader(holder)

    def _expired(self, spec: dict[str, Any]) -> bool:
        duration = float(spec.get("leaseDurationSeconds") or self.settings.lease_duration)
        return self._clock() >= self._observed_at + duration

    async def _became_leader(self) -> None:
        self.leading.set()
        self.metrics.leader.set(1)
        event(log, "started leading", lease=self.settings.name, identity=self.settings.identity)
        await _call(self.on_started_leading)

    async def _stopped_leader(self) -> None:
        self.leading.clear()
        self.metrics.leader.set(0)
        event(log, "stopped leading", lease=self.settings.name, identity=self.settings.identity)
        await _call(self.on_stopped_leading)

    def _log_failure(self, verb: str, exc: ApiError) -> None:
        event(log, "lease request failed", level=logging.WARNING, verb=verb,
              lease=self.settings.name, code=exc.code, error=exc.message)


async def _call(fn: Callback | None) -> None:
    if fn is None:
        return
    result = fn()
    if inspect.isawaitable(result):
        await result


def _secs(value: float) -> int:
    return max(1, round(value))


def _micro_time() -> str:
    """MicroTime: RFC 3339 UTC with six fraction digits."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
