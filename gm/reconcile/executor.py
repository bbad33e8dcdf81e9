"""The reconcile's writes to the API: a child plan carried out, the status written, a
problem reported.

Reconcilers read from the informer caches and write through `KubeClient`; the API's own
answers decide races: AlreadyExists on create means the cache is behind (the next event
reconciles again), NotFound on delete means someone else was faster. A 400/422 on a
child's create or update is the spec's fault (`ChildRejected`, reported as a condition);
anything else is a temporary error and the key is retried with backoff.

A plan is carried out in batches of `BATCH` writes. Before each write the owner is looked
up in the informer cache (free), and between batches it is read back from the API (the
cache may lag): it must still exist with the same uid and not be terminating. So a job
deleted while its thousands of pods are being created stops growing as soon as the
delete is seen, within one batch at worst, and the caller's progress callback writes
status, so a large job shows its pods
as they come instead of after the whole loop. The owner gone, at a checkpoint or at the
final status write, ends the reconcile quietly (`OwnerGone`).

A child made by a GM from before the `MANAGED_BY` label is invisible to the children's
informers (context.py): creating it again answers AlreadyExists, and the create path then
relabels the object when this owner controls it (`_adopt_unlabelled`), so it is adopted as
it is, never recreated. Its spec hash leaves the label out, so an adopted child is not
outdated either.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from typing import Any, NoReturn

from gm.errors import OwnerGone, TemporaryError
from gm.kube.apierrors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
)
from gm.kube.resources import GVR
from gm.reconcile.context import Context, own_key
from gm.reconcile.planning import ChildPlan, merge_for_update
from gm.reconcile.problems import ChildRejected, Problem, problem_of
from gm.workers.owned import MANAGED_BY, MANAGED_BY_LABEL
from shared.logs import event

log = logging.getLogger("gm.controllers")

BATCH = 50  # writes between two owner checks (and progress status writes) in one plan
REJECTED = (BadRequest, Invalid)  # server-side validation: the same body can never succeed
# the wording of an authorization denial (a GM without the permission), which no CR can fix;
# any other 403 to a write is an admission plugin refusing what the CR asked for
_RBAC_DENIAL = re.compile(r'is forbidden: User ".*" cannot ')

Progress = Callable[[], Awaitable[Any]]
WriteProblem = Callable[[Problem], Awaitable[bool]]


async def execute(ctx: Context, gvr: GVR, plan: ChildPlan, *, owner: Mapping[str, Any],
                  owner_gvr: GVR, namespace: str, progress: Progress | None = None) -> int:
    """Carry out a child plan in batches (see the module docstring); returns how many
    writes were sent. Raises `OwnerGone` as soon as the owner is seen gone, `ChildRejected`
    when the API server refuses a child."""
    ops: list[Callable[[], Awaitable[int]]] = [
        *(partial(_delete, ctx, gvr, obj, owner=owner, namespace=namespace) for obj in plan.delete),
        *(partial(_update, ctx, gvr, have, want, owner=owner, namespace=namespace)
          for have, want in plan.update),
        *(partial(_create, ctx, gvr, obj, owner=owner, namespace=namespace) for obj in plan.create),
    ]
    writes = 0
    for i, op in enumerate(ops):
        if i and i % BATCH == 0:
            await ensure_owner(ctx, owner_gvr, owner)
            if progress is not None:
                await progress()
        elif i:
            await _check_cached_owner(ctx, owner_gvr, owner)
        writes += await op()
    for name in plan.conflicts:
        ctx.events.warning(owner, "NameConflict",
                           f"{gvr.plural} {namespace}/{name} exists and is not controlled by this object")
    return writes


async def ensure_owner(ctx: Context, gvr: GVR, owner: Mapping[str, Any]) -> None:
    """Raise `OwnerGone` unless the owner still exists, with its uid, and is not being deleted.
    Read from the API, not the cache: the cache may not have seen the delete yet."""
    meta = owner.get("metadata") or {}
    try:
        live = await ctx.client.get(gvr, meta["name"], namespace=meta.get("namespace"))
    except NotFound:
        raise OwnerGone(f"{gvr.plural} {own_key(owner)} was deleted") from None
    except ApiError as exc:
        raise TemporaryError(f"re-reading {gvr.plural} {own_key(owner)}: {exc}") from exc
    live_meta = live.get("metadata") or {}
    if live_meta.get("uid") != meta.get("uid") or live_meta.get("deletionTimestamp"):
        raise OwnerGone(f"{gvr.plural} {own_key(owner)} is being deleted or was replaced")


async def _check_cached_owner(ctx: Context, gvr: GVR, owner: Mapping[str, Any]) -> None:
    """The per-write check, free while the cache holds the owner: stop as soon as the
    cache has seen the delete (or a replacement); ask the API when the cache has nothing."""
    meta = owner.get("metadata") or {}
    cached = ctx.informers.get_cached(gvr, meta.get("namespace"), meta["name"])
    if cached is None:
        await ensure_owner(ctx, gvr, owner)
        return
    cached_meta = cached.get("metadata") or {}
    if cached_meta.get("uid") != meta.get("uid") or cached_meta.get("deletionTimestamp"):
        raise OwnerGone(f"{gvr.plural} {own_key(owner)} is being deleted or was replaced")


async def write_status(ctx: Context, gvr: GVR, owner: Mapping[str, Any], mutate) -> bool:
    """Write the owner's status through the status writer; True if it changed.

    The owner gone (404, or another uid under its name) is `OwnerGone`; a conflict that
    outlasted the writer's retries or any other API failure is a `TemporaryError`."""
    meta = owner["metadata"]
    try:
        result = await ctx.status.update(gvr, meta.get("namespace"), meta["name"], mutate, uid=meta.get("uid"))
    except NotFound:
        raise OwnerGone(f"{gvr.plural} {own_key(owner)} was deleted") from None
    except Conflict as exc:
        raise TemporaryError(f"writing status of {gvr.plural} {own_key(owner)}: {exc}", delay=0.05) from exc
    except ApiError as exc:
        raise TemporaryError(f"writing status of {gvr.plural} {own_key(owner)}: {exc}") from exc
    return result.written


async def report_problem(ctx: Context, owner: Mapping[str, Any], exc: Exception, *, key: str,
                         write: WriteProblem) -> NoReturn:
    """The one place a reconcile problem (see problems.py) is mapped: `write` puts it in a
    condition, a Warning event goes out when that changed the status (not on every retry),
    and the reconcile ends with the problem's outcome."""
    problem = problem_of(exc)
    if await write(problem):
        ctx.events.warning(dict(owner), problem.reason, problem.message)
        event(log, "reconcile problem", level=logging.WARNING, key=key, reason=problem.reason,
              detail=problem.message, retryable=problem.retryable)
    raise problem.outcome() from None


async def _create(ctx: Context, gvr: GVR, obj: dict, *, owner: Mapping[str, Any], namespace: str) -> int:
    name = obj["metadata"]["name"]
    with _writing(gvr, namespace, name, "create"):
        try:
            await ctx.client.create(gvr, obj, namespace=namespace)
        except AlreadyExists:
            return await _adopt_unlabelled(ctx, gvr, name, owner=owner, namespace=namespace)
    event(log, "created", key=own_key(owner), child=f"{namespace}/{name}", resource=gvr.plural,
          **_node_field(obj))
    ctx.events.normal(dict(owner), "SuccessfulCreate", f"Created {_singular(gvr)} {name}")
    return 1


async def _adopt_unlabelled(ctx: Context, gvr: GVR, name: str, *, owner: Mapping[str, Any],
                            namespace: str) -> int:
    """A create met an existing object: when it is a child of this owner without the
    `MANAGED_BY` label (made by an older GM), label it so the shared informer sees it; its
    add event brings the next reconcile. Otherwise the cache is just behind (0 writes), or
    the name belongs to an object this owner does not control (a NameConflict event)."""
    try:
        live = await ctx.client.get(gvr, name, namespace=namespace)
    except NotFound:
        return 0  # deleted since: its delete event brings the next reconcile
    except ApiError as exc:
        raise TemporaryError(f"reading {gvr.plural} {namespace}/{name}: {exc}") from exc
    meta = live.get("metadata") or {}
    if (meta.get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY[MANAGED_BY_LABEL]:
        return 0
    owner_uid = (owner.get("metadata") or {}).get("uid")
    if not any(ref.get("controller") and ref.get("uid") == owner_uid for ref in meta.get("ownerReferences") or ()):
        ctx.events.warning(owner, "NameConflict",
                           f"{gvr.plural} {namespace}/{name} exists and is not controlled by this object")
        return 0
    try:
        await ctx.client.patch(gvr, name, {"metadata": {"labels": MANAGED_BY}}, namespace=namespace)
    except NotFound:
        return 0
    except ApiError as exc:
        raise TemporaryError(f"labelling {gvr.plural} {namespace}/{name}: {exc}") from exc
    event(log, "adopted unlabelled child", key=own_key(owner), child=f"{namespace}/{name}", resource=gvr.plural)
    return 1


async def _update(ctx: Context, gvr: GVR, observed: dict, desired: dict, *, owner: Mapping[str, Any],
                  namespace: str) -> int:
    name = observed["metadata"]["name"]
    with _writing(gvr, namespace, name, "update"):
        try:
            await ctx.client.replace(gvr, name, merge_for_update(observed, desired), namespace=namespace)
        except (Conflict, NotFound) as exc:
            raise TemporaryError(f"updating {gvr.plural} {namespace}/{name}: {exc.reason}", delay=0.05) from exc
    event(log, "updated", key=own_key(owner), child=f"{namespace}/{name}", resource=gvr.plural)
    return 1


_DOING = {"create": "creating", "update": "updating"}


@contextmanager
def _writing(gvr: GVR, namespace: str, name: str, verb: str) -> Iterator[None]:
    """A write of a child that the API server refuses for its content (validation, or an
    admission plugin's 403) raises `ChildRejected`, never retried; any other API error a retry."""
    try:
        yield
    except REJECTED as exc:
        raise ChildRejected(kind=_singular(gvr), namespace=namespace, name=name, verb=verb, error=exc) from None
    except Forbidden as exc:
        _refused_by_admission(exc, gvr, namespace, name, verb)
        raise TemporaryError(f"{_DOING[verb]} {gvr.plural} {namespace}/{name}: {exc}") from exc
    except ApiError as exc:
        raise TemporaryError(f"{_DOING[verb]} {gvr.plural} {namespace}/{name}: {exc}") from exc


def _refused_by_admission(exc: Forbidden, gvr: GVR, namespace: str, name: str, verb: str) -> None:
    """Raise `ChildRejected` (admission) for a 403 that is not an authorization denial."""
    if not _RBAC_DENIAL.search(exc.message):
        raise ChildRejected(kind=_singular(gvr), namespace=namespace, name=name, verb=verb, error=exc,
                            admission=True) from None


async def _delete(ctx: Context, gvr: GVR, obj: dict, *, owner: Mapping[str, Any], namespace: str) -> int:
    meta = obj["metadata"]
    try:
        await ctx.client.delete(gvr, meta["name"], namespace=namespace,
                                propagation_policy="Background",
                                preconditions={"uid": meta["uid"]} if meta.get("uid") else None)
    except (NotFound, Conflict):
        return 0  # already gone, or replaced by a newer object of that name
    except ApiError as exc:
        raise TemporaryError(f"deleting {gvr.plural} {namespace}/{meta['name']}: {exc}") from exc
    event(log, "deleted", key=own_key(owner), child=f"{namespace}/{meta['name']}", resource=gvr.plural)
    return 1


def _node_field(obj: Mapping[str, Any]) -> dict[str, str]:
    """`node=` for a log line about a child bound to a node (a pod, or a template's pods)."""
    spec = obj.get("spec") or {}
    node = spec.get("nodeName") or ((spec.get("template") or {}).get("spec") or {}).get("nodeName")
    return {"node": node} if isinstance(node, str) and node else {}


def _singular(gvr: GVR) -> str:
    return {"pods": "pod", "services": "service", "deployments": "deployment",
            "horizontalpodautoscalers": "horizontalpodautoscaler"}.get(gvr.plural, gvr.plural)
