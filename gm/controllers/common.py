"""What every GM reconciler shares: the cluster handles, the resource identities (the
Sedna kinds, HPAs, and the core ones re-exported), and the thin layer that executes a
child plan against the API.

Reconcilers read from the informer caches and write through `KubeClient`; the API's own
answers decide races: AlreadyExists on create means the cache is behind (the next event
reconciles again), NotFound on delete means someone else was faster. Anything else is a
temporary error and the key is retried with backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gm.config import GMConfig
from gm.controllers.children import ChildPlan, merge_for_update
from gm.controllers.runner import TemporaryError
from gm.kube.client import KubeClient
from gm.kube.errors import AlreadyExists, ApiError, Conflict, NotFound
from gm.kube.events import EventRecorder
from gm.kube.informer import InformerFactory, SharedInformer
from gm.kube.resources import DEPLOYMENTS, GVR, NODES, PODS, SECRETS, SERVICES  # noqa: F401 - re-exported
from gm.kube.status import StatusWriter
from gm.workers import WorkerConfig
from shared import apis
from shared.logs import event

log = logging.getLogger("gm.controllers")

HPAS = GVR("autoscaling", "v2", "horizontalpodautoscalers")


def sedna_gvr(kind: apis.SednaKind) -> GVR:
    return GVR(apis.GROUP, apis.VERSION, kind.plural)


JI = sedna_gvr(apis.JOINT_INFERENCE)
FL = sedna_gvr(apis.FEDERATED_LEARNING)
DATASETS = sedna_gvr(apis.DATASET)
MODELS = sedna_gvr(apis.MODEL)


@dataclass(frozen=True, slots=True)
class Context:
    """The handles a reconciler needs; one per GM process."""

    client: KubeClient
    informers: InformerFactory
    status: StatusWriter
    events: EventRecorder
    config: GMConfig
    workers: WorkerConfig

    def informer(self, gvr: GVR, *, label_selector: str | None = None) -> SharedInformer:
        return self.informers.informer(gvr, label_selector=label_selector)


def on_any_change(informer: SharedInformer, fn: Callable[[dict], None]) -> None:
    """Call `fn(obj)` on add, update (with the new state) and delete: a level-triggered
    handler only needs to know which object changed, never how."""
    informer.add_event_handler(on_add=fn, on_update=lambda _old, new: fn(new), on_delete=fn)


def own_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def owner_key(obj: Mapping[str, Any], kind: str) -> str | None:
    """`namespace/name` of the object's controller when it is a `kind`, else None."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") == kind and ref.get("name"):
            return f"{meta.get('namespace')}/{ref['name']}"
    return None


def split(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


def children_by_name(informer: SharedInformer, owner_uid: str,
                     names: Iterable[str], namespace: str) -> dict[str, dict]:
    """Observed children: those controlled by the owner, plus any object holding a desired name."""
    found = {o["metadata"]["name"]: o for o in informer.store.by_index("owner-uid", owner_uid)}
    for name in names:
        if name not in found:
            obj = informer.store.get_by_name(namespace, name)
            if obj is not None:
                found[name] = obj
    return found


def credential_names(*objs: Mapping[str, Any] | None) -> set[str]:
    """Every `credentialName` found anywhere in the given objects' specs."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                if k == "credentialName" and isinstance(v, str) and v:
                    names.add(v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for obj in objs:
        if obj is not None:
            walk(obj.get("spec"))
    return names


async def fetch_secrets(ctx: Context, namespace: str, names: Iterable[str]) -> dict[str, dict]:
    """The named Secrets that exist (absent ones are left out: the builders report them)."""
    found: dict[str, dict] = {}
    for name in sorted(set(names)):
        try:
            found[name] = await ctx.client.get(SECRETS, name, namespace=namespace)
        except NotFound:
            continue
        except ApiError as exc:
            raise TemporaryError(f"reading secret {namespace}/{name}: {exc}") from exc
    return found


async def execute(ctx: Context, gvr: GVR, plan: ChildPlan, *, owner: Mapping[str, Any],
                  namespace: str) -> int:
    """Carry out a child plan; returns how many writes were sent."""
    writes = 0
    for obj in plan.delete:
        writes += await _delete(ctx, gvr, obj, namespace=namespace)
    for observed, desired in plan.update:
        writes += await _update(ctx, gvr, observed, desired, namespace=namespace)
    for obj in plan.create:
        writes += await _create(ctx, gvr, obj, owner=owner, namespace=namespace)
    for name in plan.conflicts:
        ctx.events.warning(owner, "NameConflict",
                           f"{gvr.plural} {namespace}/{name} exists and is not controlled by this object")
    return writes


async def _create(ctx: Context, gvr: GVR, obj: dict, *, owner: Mapping[str, Any], namespace: str) -> int:
    name = obj["metadata"]["name"]
    try:
        await ctx.client.create(gvr, obj, namespace=namespace)
    except AlreadyExists:
        return 0  # the cache is behind; the add event brings the next reconcile
    except ApiError as exc:
        raise TemporaryError(f"creating {gvr.plural} {namespace}/{name}: {exc}") from exc
    event(log, "created", key=f"{namespace}/{name}", resource=gvr.plural)
    ctx.events.normal(owner, "SuccessfulCreate", f"Created {_singular(gvr)} {name}")
    return 1


async def _update(ctx: Context, gvr: GVR, observed: dict, desired: dict, *, namespace: str) -> int:
    name = observed["metadata"]["name"]
    try:
        await ctx.client.replace(gvr, name, merge_for_update(observed, desired), namespace=namespace)
    except (Conflict, NotFound) as exc:
        raise TemporaryError(f"updating {gvr.plural} {namespace}/{name}: {exc.reason}", delay=0.05) from exc
    except ApiError as exc:
        raise TemporaryError(f"updating {gvr.plural} {namespace}/{name}: {exc}") from exc
    event(log, "updated", key=f"{namespace}/{name}", resource=gvr.plural)
    return 1


async def _delete(ctx: Context, gvr: GVR, obj: dict, *, namespace: str) -> int:
    meta = obj["metadata"]
    try:
        await ctx.client.delete(gvr, meta["name"], namespace=namespace,
                                propagation_policy="Background",
                                preconditions={"uid": meta["uid"]} if meta.get("uid") else None)
    except (NotFound, Conflict):
        return 0  # already gone, or replaced by a newer object of that name
    except ApiError as exc:
        raise TemporaryError(f"deleting {gvr.plural} {namespace}/{meta['name']}: {exc}") from exc
    event(log, "deleted", key=f"{namespace}/{meta['name']}", resource=gvr.plural)
    return 1


def _singular(gvr: GVR) -> str:
    return {"pods": "pod", "services": "service", "deployments": "deployment",
            "horizontalpodautoscalers": "horizontalpodautoscaler"}.get(gvr.plural, gvr.plural)
