"""The one CR controller: every kind's reconcile, driven by its `KindDeclaration`.

Level-triggered: every event only enqueues the key of the CR it concerns (the CR itself;
the controller of a changed child; the users of a changed Model, Dataset or Secret, found
through indexes; every CR for a Node change that matters), and a reconcile recomputes
everything from the caches:

1. the CR gone or terminating: nothing (the garbage collector removes the children, and
   nothing is ever created for a deleted CR); the CR `expired` (ttlSecondsAfterFinished):
   delete it;
2. `build(cr, deps)`: the desired children per owned type, none of which may run as the
   GM's own ServiceAccount (gm/workers/template.py);
3. per owned type, in declaration order: diff against the children the CR controls
   (planning.plan_children) and execute the plan in batches with owner re-checks
   (executor.execute), writing progress status between batches;
4. `status(cr, observed)`, written as a mutation of the latest status (`observedGeneration`
   set when every child matches the current spec and exists);
5. not converged: look again after `requeue_after`; a `wake` deadline: look again then.

A bad spec (`SpecError` from build) or a child the API server refuses becomes the kind's
Failed condition and a Warning event (executor.report_problem); one the GM retries (a Model
that does not exist yet) becomes its waiting state instead (`Observed.retrying`). The kind module holds no
controller code: its declaration, its build and its status are all there is to a kind.

Informers are shared: one per child type for every kind (`Context.children`, selected by
the managed-by label and indexed by owner uid), one per watched type, one Secret cache.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from gm.config import GMConfig, split_list
from gm.errors import TemporaryError
from gm.kube.apierrors import ApiError, Conflict, NotFound
from gm.kube.informer import SharedInformer
from gm.kube.resources import GVR, NODES, sedna_gvr
from gm.kube.store import index_reads
from gm.reconcile.context import Context, children_by_name, on_any_change, own_key, owner_key, split
from gm.reconcile.credentials import (
    cached_secrets,
    credential_names,
    index_credentials,
    using_secret,
)
from gm.reconcile.declaration import Dependencies, KindDeclaration, Observed, Owns, Watches
from gm.reconcile.executor import execute, report_problem, write_status
from gm.reconcile.planning import outdated, plan_children
from gm.reconcile.problems import PROBLEMS, Problem
from gm.reconcile.runner import Requeue
from gm.reports import edge_view
from gm.workers.template import ServiceAccountRef, refuse_service_account
from shared import apis
from shared.logs import event
from shared.objects import SPEC_HASH_ANNOTATION, deep_get, now_rfc3339

log = logging.getLogger("gm.controllers")

Desired = dict[str, dict[str, dict]]  # owned plural -> child name -> desired object


class KindController:
    """Reconciles one kind as its declaration says."""

    def __init__(self, ctx: Context, enqueue: Callable[[str], None], decl: KindDeclaration):
        self.ctx = ctx
        self.enqueue = enqueue
        self.decl = decl
        self.kind = decl.kind
        self.gvr = sedna_gvr(decl.api)
        self.name = decl.name
        self.crs = ctx.informer(self.gvr)
        self.owned: dict[GVR, SharedInformer] = {o.gvr: ctx.children(o.gvr) for o in decl.owns}
        self.watched: dict[GVR, SharedInformer] = {w.gvr: ctx.informer(w.gvr) for w in decl.watches}
        self.secrets = ctx.secrets()
        identity = ctx.config.identity
        # no worker of any kind runs as the GM's own ServiceAccount (template.py says why)
        self.gm_account = ServiceAccountRef(identity.namespace, identity.serviceAccount) if identity.known else None
        self.edge_accounts = _edge_identity_accounts(ctx.config)
        for watch in decl.watches:
            if watch.refs is not None:
                self.crs.add_indexer(_ref_index(watch.gvr), _refs_of(watch))
        index_credentials(self.crs, *(self.watched[w.gvr] for w in decl.watches if w.credentials))
        self._wire()

    # -- events: each one only says which CR to look at ------------------------------

    def _wire(self) -> None:
        self.crs.add_event_handler(on_add=self._on_cr, on_update=self._on_cr_update, on_delete=self._on_cr)
        for inf in self.owned.values():
            on_any_change(inf, self._on_child)
        for watch in self.decl.watches:
            inf = self.watched[watch.gvr]
            if watch.refs is None:
                inf.add_event_handler(on_add=self._on_every, on_delete=self._on_every,
                                      on_update=_if_matters(watch, self._on_every))
            else:
                on_any_change(inf, self._users_of(watch.gvr))
        on_any_change(self.secrets, self._on_secret)

    def _on_cr(self, obj: Mapping[str, Any]) -> None:
        self.enqueue(own_key(obj))

    def _on_cr_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """Every change but a report's: an edge report's status write changes nothing the
        reconcile computes from (a resync, old is new, always enqueues)."""
        if old is new or edge_view(old) != edge_view(new):
            self._on_cr(new)

    def _on_child(self, obj: Mapping[str, Any]) -> None:
        key = owner_key(obj, self.kind)
        if key is not None:
            self.enqueue(key)

    def _on_every(self, _obj: Mapping[str, Any]) -> None:
        for cr in self.crs.store.list():
            self._on_cr(cr)

    def _users_of(self, gvr: GVR) -> Callable[[Mapping[str, Any]], None]:
        index = _ref_index(gvr)

        def handler(obj: Mapping[str, Any]) -> None:
            for cr in self.crs.store.by_index(index, own_key(obj)):
                self._on_cr(cr)
        return handler

    def _on_secret(self, secret: Mapping[str, Any]) -> None:
        """The CRs naming the Secret, directly or through an object they watch."""
        for cr in using_secret(self.crs, secret):
            self._on_cr(cr)
        for watch in self.decl.watches:
            if watch.credentials and watch.refs is not None:
                users = self._users_of(watch.gvr)
                for obj in using_secret(self.watched[watch.gvr], secret):
                    users(obj)

    # -- reconcile ------------------------------------------------------------------

    async def reconcile(self, key: str) -> Requeue | None:
        namespace, name = split(key)
        cached = self.crs.store.get_by_name(namespace, name)
        if cached is None or deep_get(cached, "metadata", "deletionTimestamp"):
            return None  # deleted: the garbage collector removes the children
        cr = {**cached, "kind": self.kind, "apiVersion": apis.API_VERSION}
        now = now_rfc3339()
        if self.decl.expired(cr, now):
            await self._delete_expired(cr)
            return None
        try:
            desired = self._desired(cr, namespace, now)
            converged, rejected = await self._converge(cr, desired, namespace)
        except PROBLEMS as exc:
            await report_problem(self.ctx, cr, exc, key=key, write=lambda p: self._write_problem(cr, p))
        status = await self._write_status(cr, desired=desired, converged=converged, rejected=rejected)
        return self._next_look(cr, status, converged=converged, rejected=rejected, now=now)

    def _desired(self, cr: dict, namespace: str, now: str) -> Desired:
        deps = self._dependencies(cr, namespace, now)
        built = self.decl.build(cr, deps)
        desired: Desired = {o.gvr.plural: {} for o in self.decl.owns}
        for gvr, objs in built.items():
            if self.decl.owned(gvr) is None:
                raise TypeError(f"{self.kind} build returned {gvr.plural}, which it does not own")
            for obj in objs:
                child = obj["metadata"]["name"]
                if child in desired[gvr.plural]:
                    raise TypeError(f"{self.kind} build returned two {gvr.plural} named {child}")
                desired[gvr.plural][child] = obj
        refuse_service_account((c for objs in desired.values() for c in objs.values()),
                               namespace=namespace, forbidden=self.gm_account, edge_accounts=self.edge_accounts)
        return desired

    def _dependencies(self, cr: dict, namespace: str, now: str) -> Dependencies:
        objects: dict[str, dict[str, dict]] = {}
        for watch in self.decl.watches:
            store = self.watched[watch.gvr].store
            if watch.refs is None:
                objects[watch.gvr.plural] = {o["metadata"]["name"]: o for o in store.list()}
            else:
                found = {n: store.get_by_name(namespace, n) for n in watch.refs(cr)}
                objects[watch.gvr.plural] = {n: o for n, o in found.items() if o is not None}
        named = [o for w in self.decl.watches if w.credentials
                 for o in objects[w.gvr.plural].values()]
        secrets = cached_secrets(self.ctx, namespace, credential_names(cr, *named))
        return Dependencies(objects=objects, secrets=secrets, children=self._children(cr),
                            config=self.ctx.workers, gm=self.ctx.config, now=now)

    def _children(self, cr: Mapping[str, Any]) -> dict[str, list[dict]]:
        uid = cr["metadata"]["uid"]
        return {gvr.plural: inf.store.by_index("owner-uid", uid) for gvr, inf in self.owned.items()}

    async def _converge(self, cr: dict, desired: Desired, namespace: str) -> tuple[bool, str | None]:
        """Carry out every owned type's plan; returns (converged, why an edit was rejected).
        Converged: the children are the current generation's, i.e. nothing had to be
        updated, deleted or waited for, and whatever was missing has just been created."""
        uid = cr["metadata"]["uid"]
        finished = self.decl.finished(cr)
        converged, rejected = True, None
        for owns in self.decl.owns:
            want = desired[owns.gvr.plural]
            observed = children_by_name(self.owned[owns.gvr], uid, want, namespace)
            held = self._held_edit(cr, owns, want, observed)
            if held is not None:
                rejected, converged = held, False
                continue
            frozen = finished and owns.frozen_when_finished
            plan = plan_children(want, observed, owner_uid=uid, hash_key=SPEC_HASH_ANNOTATION,
                                 mutable=owns.on_edit == "update", create_missing=not frozen)
            await execute(self.ctx, owns.gvr, plan, owner=cr, owner_gvr=self.gvr, namespace=namespace,
                          progress=lambda: self._write_status(cr, desired=desired, converged=False,
                                                              in_progress=True))
            missing = frozen and not set(want) <= set(observed)
            converged = converged and not (plan.update or plan.delete or plan.waiting
                                           or plan.conflicts or missing)
        return converged, rejected

    def _held_edit(self, cr: dict, owns: Owns, want: Mapping[str, dict],
                   observed: Mapping[str, dict]) -> str | None:
        """Why an edit is not applied to `recreate` children under the kind's edit policy."""
        policy = self.decl.reject_edits(self.ctx.config) if owns.on_edit == "recreate" else None
        if policy is None:
            return None
        stale = [n for n in outdated(want, observed, hash_key=SPEC_HASH_ANNOTATION)
                 if not deep_get(observed[n], "metadata", "deletionTimestamp")]
        if not stale:
            return None
        message = (f"spec edit not applied to running workers {', '.join(sorted(stale))} "
                   f"({policy}); delete and recreate the {self.kind} to apply it")
        self.ctx.events.warning(cr, "SpecEditRejected", message)
        return message

    async def _write_status(self, cr: dict, *, desired: Desired | None, converged: bool,
                            problem: Problem | None = None, rejected: str | None = None,
                            in_progress: bool = False) -> dict | None:
        """Write the status computed from the cache now; returns it (None if the write
        changed nothing)."""
        generation = cr["metadata"].get("generation")
        observed = Observed(
            children=self._children(cr), desired=desired, converged=converged, now=now_rfc3339(),
            problem=(problem.reason, problem.message) if problem is not None else None,
            retrying=problem is not None and problem.retryable, in_progress=in_progress,
            rejected=rejected, nodes=self._nodes())
        last: dict[str, Any] = {}

        def mutate(status: dict) -> dict:
            new = self.decl.status({**cr, "status": status}, observed)
            if converged:
                new["observedGeneration"] = generation
            last["status"] = new
            return new

        written = await write_status(self.ctx, self.gvr, cr, mutate)
        return last.get("status") if written else None

    async def _write_problem(self, cr: dict, problem: Problem) -> bool:
        """The status with the problem as its condition; True when that changed it."""
        return await self._write_status(cr, desired=None, converged=False, problem=problem) is not None

    def _nodes(self) -> frozenset[str] | None:
        inf = self.watched.get(NODES)
        return frozenset(n["metadata"]["name"] for n in inf.store.list()) if inf is not None else None

    def _next_look(self, cr: dict, status: dict | None, *, converged: bool, rejected: str | None,
                   now: str) -> Requeue | None:
        after: list[float] = []
        if self.decl.wake is not None:
            current = {**cr, "status": status if status is not None else cr.get("status") or {}}
            wake = self.decl.wake(current, now)
            if wake is not None:
                after.append(max(wake, 0.05))
        if not converged and rejected is None and not self.decl.finished(cr):
            after.append(self.decl.requeue_after)
        return Requeue(min(after)) if after else None

    async def _delete_expired(self, cr: dict) -> None:
        meta = cr["metadata"]
        try:
            await self.ctx.client.delete(self.gvr, meta["name"], namespace=meta.get("namespace"),
                                         propagation_policy="Background",
                                         preconditions={"uid": meta["uid"]})
        except (NotFound, Conflict):
            return  # already gone, or replaced by a new object of that name
        except ApiError as exc:
            raise TemporaryError(f"deleting expired {self.gvr.plural} {own_key(cr)}: {exc}") from exc
        event(log, "deleted after ttlSecondsAfterFinished", key=own_key(cr), kind=self.kind)
        self.ctx.events.normal(cr, "Expired", f"Deleted {self.kind} {meta['name']}: its time to live after finishing passed")


def _ref_index(gvr: GVR) -> str:
    return f"uses-{gvr.plural}"


def _refs_of(watch: Watches) -> Callable[[Mapping[str, Any]], list[str]]:
    assert watch.refs is not None
    refs = watch.refs

    def index(obj: Mapping[str, Any]) -> list[str]:
        ns = (obj.get("metadata") or {}).get("namespace")
        return [f"{ns}/{name}" for name in refs(obj)]
    return index if watch.refs_read is None else index_reads(*watch.refs_read)(index)


def _if_matters(watch: Watches, fn: Callable[[Mapping[str, Any]], None]):
    def on_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        if watch.matters(old, new):
            fn(new)
    return on_update


def _edge_identity_accounts(config: GMConfig) -> tuple[ServiceAccountRef, ...]:
    """The ServiceAccounts whose tokens the hub admits as an LC (TokenReview mode)."""
    review = config.websocket.tokenReview
    if not review.enabled:
        return ()
    out = []
    for user in split_list(review.serviceAccounts):
        parts = user.split(":")
        if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
            out.append(ServiceAccountRef(parts[2], parts[3]))
    return tuple(out)
