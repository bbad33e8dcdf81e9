"""Leader election on a coordination.k8s.io/v1 Lease, so only one GM replica reconciles.

The protocol is client-go's LeaseLock: the lease names a holder and when it last renewed.
A candidate takes the lease when it is free (no holder) or when the holder has not
renewed for `lease_duration` as measured on the candidate's own clock since it last saw
the lease record change (so clock skew between replicas does not matter). Every write is
a create (409 if someone else created it first) or a PUT guarded by the resourceVersion
just read (409 if someone else wrote in between), so two candidates can never both win.

Two leaders at once are impossible as long as the old leader stops acting before the
lease can expire elsewhere. The leader renews every `retry_period`; every attempt is cut
off at the renew deadline, `renew_deadline` after the last attempt that succeeded was
*sent* (so the write it made is no older than that), whatever the client's own request
timeout. A standby that saw that write can take over no sooner than `lease_duration`
after it, so the leader that steps down at the deadline has `lease_duration -
renew_deadline` to stop its controllers. On shutdown the leader stops its work, then
releases the lease (empty holder) so a standby takes over at once.

A lease namespace that does not exist, or RBAC that forbids the lease, cannot fix itself
by retrying faster: it is logged once as an error, kept in `blocked` (the GM's readiness
fails with it) and retried quietly until it clears.
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

from gm.errors import GMError
from gm.kube.apierrors import AlreadyExists, ApiError, Conflict, NotFound
from gm.kube.client import KubeClient
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


class LeaseBlocked(GMError):
    """The lease cannot be read or written until an operator acts (namespace, RBAC)."""


class LeaderElector:
    """Campaigns for the lease, holds it, and reports leadership through callbacks.

    `run()` returns when leadership is lost, after `on_stopped_leading` has returned (the
    caller should then exit); cancelling it stops leading and releases a held lease.
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
        self.observed_changes = 0  # times the lease record was seen to change (renewals included)
        self.renewals = 0  # successful renewals while leading
        self.attempts = 0  # acquire or renew attempts made, whatever their outcome
        self.blocked: str | None = None  # why the lease is unusable (missing namespace, 403), if so
        self.lost_reason: str | None = None  # why leadership ended, once it did
        self._clock = clock
        self._observed_spec: dict[str, Any] | None = None  # last lease spec seen
        self._observed_at = 0.0  # our clock when that spec was first seen
        self._renewed_at = 0.0  # our clock when the last successful attempt was sent
        self._lease: dict[str, Any] | None = None  # last lease read or written (its RV guards)

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    async def run(self) -> None:
        """Acquire, lead until a renewal misses the renew deadline, stop leading, return."""
        try:
            await self._acquire()
            await self._became_leader()
            self.lost_reason = await self._renew_until_lost()
            event(log, "leadership lost", level=logging.WARNING, lease=self.settings.name,
                  identity=self.settings.identity, holder=self.observed_holder, why=self.lost_reason)
        except asyncio.CancelledError:
            if self.is_leader:
                await self._stopped_leader()  # stop working before a standby can take over
                if self.settings.release_on_cancel:
                    await self._release()
            raise
        finally:
            if self.is_leader:
                await self._stopped_leader()

    async def _acquire(self) -> None:
        while True:  # polling the API is the protocol: there is nothing to wait on
            sent = self._clock()
            if await self._bounded_attempt(self.settings.renew_deadline):
                self._renewed_at = sent
                return
            await asyncio.sleep(self.settings.retry_period)

    async def _renew_until_lost(self) -> str:
        """Renew every retry period; return why leadership ended (deadline missed, lease taken)."""
        s = self.settings
        while True:
            await asyncio.sleep(max(0.0, min(s.retry_period, self._until_deadline())))
            remaining = self._until_deadline()
            if remaining <= 0:
                return f"not renewed within the renew deadline ({s.renew_deadline:g}s)"
            sent = self._clock()
            if await self._bounded_attempt(remaining):
                self._renewed_at = sent
                self.renewals += 1
            elif self.observed_holder != s.identity:
                return f"the lease is held by {self.observed_holder or 'nobody'}"

    def _until_deadline(self) -> float:
        return self._renewed_at + self.settings.renew_deadline - self._clock()

    async def _bounded_attempt(self, within: float) -> bool:
        """One attempt cut off after `within` seconds: a hung API server must not keep us leading."""
        self.attempts += 1
        try:
            async with asyncio.timeout(within):
                return await self._try_acquire_or_renew()
        except TimeoutError:
            event(log, "lease request timed out", level=logging.WARNING, lease=self.settings.name,
                  identity=self.settings.identity, within=round(within, 3))
            return False

    async def _try_acquire_or_renew(self) -> bool:
        """One attempt: read, decide, write. False when someone else holds or wins the race."""
        try:
            won = await self._attempt()
        except LeaseBlocked as exc:
            self._block(str(exc))
            return False
        if won is not None:  # the API answered the whole attempt: nothing blocks the lease
            self._unblock()
        return bool(won)

    async def _attempt(self) -> bool | None:
        """True: we hold the lease; False: someone else does; None: a transient failure."""
        s = self.settings
        try:
            lease = await self.client.get(LEASES, s.name, namespace=s.namespace)
        except NotFound:
            return await self._create()
        except ApiError as exc:
            return self._failed("get", exc)
        self._observe(lease)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if holder and holder != s.identity and not self._expired(spec):
            return False
        return await self._update(lease, spec, holder)

    async def _create(self) -> bool | None:
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
        except NotFound as exc:  # the lease was missing, and creating it says why: no namespace
            raise LeaseBlocked(f"lease namespace {s.namespace!r} does not exist "
                               f"(create it, or set leaderElection.leaseNamespace): {exc.message}") from exc
        except ApiError as exc:
            return self._failed("create", exc)
        self._observe(self._lease)
        return True

    async def _update(self, lease: dict[str, Any], spec: dict[str, Any], holder: str) -> bool | None:
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
            return self._failed("update", exc)
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
            self.observed_changes += 1
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

    def _failed(self, verb: str, exc: ApiError) -> None:
        """A failed lease request: blocking ones (RBAC) raise, transient ones are logged."""
        s = self.settings
        if exc.code in (401, 403):
            raise LeaseBlocked(f"not allowed to {verb} lease {s.namespace}/{s.name} "
                               f"(check the GM's RBAC): {exc.code} {exc.message}") from exc
        event(log, "lease request failed", level=logging.WARNING, verb=verb, lease=s.name,
              code=exc.code, error=exc.message)
        return None

    def _block(self, reason: str) -> None:
        if reason != self.blocked:  # once per cause, not every retry period
            event(log, "leader election blocked", level=logging.ERROR, lease=self.settings.name,
                  namespace=self.settings.namespace, error=reason)
        self.blocked = reason

    def _unblock(self) -> None:
        if self.blocked is not None:
            event(log, "leader election unblocked", lease=self.settings.name,
                  namespace=self.settings.namespace)
        self.blocked = None


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
