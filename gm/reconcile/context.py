"""What a reconcile holds and reads: the cluster handles, and the lookups in the caches.

One `Context` per GM process carries the client, the informer factory, the status writer,
the event recorder and the configs. Children are cached by one informer per child type for
every controller (`Context.children`), selected by the `MANAGED_BY` label every child the GM
builds carries and indexed by owner uid; each controller's handlers keep the children of its
own kind. Secrets come from one cache too (`Context.secrets`), kept lean by
`caches.slim_secret` (the credential index over it is credentials.py).

Keys are `namespace/name`; a handler only computes the key of the CR an event concerns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gm.config import GMConfig, WorkerConfig
from gm.kube.client import KubeClient
from gm.kube.events import EventRecorder
from gm.kube.informer import InformerFactory, SharedInformer
from gm.kube.resources import GVR, SECRETS
from gm.kube.statuswriter import StatusWriter
from gm.workers.owned import MANAGED_SELECTOR


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

    def children(self, gvr: GVR) -> SharedInformer:
        """The one informer of a child type (Pods, Deployments, ...) that every controller shares."""
        return self.informers.informer(gvr, label_selector=MANAGED_SELECTOR)

    def secrets(self) -> SharedInformer:
        """The one Secret cache, holding what the builders read (gm/reconcile/caches.py)."""
        return self.informers.informer(SECRETS)


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
