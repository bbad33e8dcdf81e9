"""Which objects each edge node needs, kept current from the informer caches for the hub.

Node assignment is a function of the caches, recomputed for an object whenever an event
touches it or something it depends on (level-triggered: the event says *which* object to
look at, never what changed). The rule for each kind is the placement declared with it in
shared/apis.py, read through `_CacheView`:

- a Dataset goes to its `spec.nodeName`;
- a JointInferenceService goes to its edge worker's node: the template's `nodeName`, plus
  every node its live edge pods run on (so a worker placed by a selector or affinity is
  found, and during a move the old node keeps the service until its pods are gone);
- a FederatedLearningJob goes to every trainer's node: the template's `nodeName`, else the
  trainer Dataset's `nodeName` (the rule gm/workers places trainers by);
- a Model goes to the nodes of the objects that reference it.

Only the kinds in `EDGE_KINDS` are watched here: Datasets, Models and the kinds the GM
reconciles (gm/kinds), whose workers' reports the hub authorizes by this assignment. The
registry declares placement for the other kinds too, but no informer follows them, so none
of their objects is ever sent. A kind outside the registry is an `UnknownKind`, logged once
per kind and never placed by some other kind's rule. Worker pods are followed through two
caches: the pods the GM creates (the controllers' shared informer, `MANAGED_SELECTOR`) and
the pods of the Deployments it creates (every such template carries `app.sedna.io`).

What goes down is a copy of the cached object with `kind`/`apiVersion` set (the cache is
never touched, upstream bug §6.1) and, for a Dataset, Model, IL or LL job with `credentialName`, the
`sedna.io/credential` annotation built from the Secret as upstream does (§4.6; IL/LL jobs
too, for their outputDir), plus what the kind declares for the edge. The Secret
comes from the GM's one Secret cache (the controllers' too), so the handlers stay I/O-free:
a Secret's change re-publishes the Datasets and Models naming it (the `credential` index),
so a rotated credential reaches the nodes at once, and a missing or unreadable Secret sends
the object without the annotation (one warning) until the Secret appears. A version is
pushed to the nodes that do not hold it yet, a node that lost an object is told to delete
it (deletes included), and an informer resync that changes nothing sends nothing.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gm.kinds import reconciled_kinds
from gm.kube.informer import InformerFactory, SharedInformer
from gm.kube.resources import PODS, SECRETS, sedna_gvr
from gm.kube.store import index_reads
from gm.reconcile.credentials import index_credentials, using_secret
from gm.reports import edge_view
from gm.workers.gojson import go_json
from gm.workers.owned import MANAGED_SELECTOR
from proto import ObjKey
from shared import apis
from shared.logs import event
from shared.objects import SEDNA_GROUP, deep_get, label_prefix, meta_str

log = logging.getLogger("sedna.gm.edge")

CREDENTIAL_ANNOTATION = "sedna.io/credential"
DEPLOYED_POD_SELECTOR = "app.sedna.io"  # the pods of every worker Deployment the GM builds

DATASET, MODEL = apis.DATASET.kind, apis.MODEL.kind
# Datasets, Models and the kinds the GM reconciles, hence sends.
EDGE_KINDS: tuple[apis.SednaKind, ...] = (apis.DATASET, apis.MODEL, *reconciled_kinds())

Obj = Mapping[str, Any]
Notify = Callable[[str, str, str, Mapping[str, Any] | None, Iterable[str]], None]


# -- pure rules -------------------------------------------------------------------------


def _name(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# The kinds whose `spec.credentialName` goes down as the credential annotation (upstream's:
# a Dataset's or Model's storage, an IL/LL job's outputDir and intermediate artifacts).
CREDENTIALED_KINDS = (DATASET, MODEL, apis.INCREMENTAL_LEARNING.kind, apis.LIFELONG_LEARNING.kind)


def credential_name(kind: str, obj: Obj) -> str | None:
    """The Secret an object of a `CREDENTIALED_KINDS` kind names (other kinds carry none down)."""
    if kind not in CREDENTIALED_KINDS:
        return None
    return _name(deep_get(obj, "spec", "credentialName"))


def credential_annotation(secret: Obj) -> str:
    """Upstream's annotation value: the Secret's annotations overlaid with its decoded data,
    as Go's JSON (sorted keys). ValueError if a data value is not base64 of UTF-8."""
    values: dict[str, str] = {}
    annotations = deep_get(secret, "metadata", "annotations")
    if isinstance(annotations, Mapping):
        values.update({str(k): str(v) for k, v in annotations.items()})
    data = secret.get("data")
    for key, encoded in (data.items() if isinstance(data, Mapping) else ()):
        try:
            values[str(key)] = base64.b64decode(str(encoded), validate=True).decode("utf-8")
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"data key {key!r} is not base64 of UTF-8 text: {exc}") from None
    return go_json(dict(sorted(values.items())))


def downstream_copy(kind: str, obj: Obj, *, credential: str | None = None,
                    annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The object to send: kind/apiVersion set, the kind's edge `annotations` and the
    credential annotation when given. Only the top level and the metadata are new dicts;
    spec and status are the cached object's own, shared, never changed (cached objects are
    read-only, and a payload is only ever encoded), so a placed object costs no second copy."""
    out = {**obj, "kind": kind, "apiVersion": apis.API_VERSION}
    extra = {**(annotations or {}), **({CREDENTIAL_ANNOTATION: credential} if credential is not None else {})}
    if extra:
        meta = dict(out.get("metadata") or {})
        meta["annotations"] = {**(meta.get("annotations") or {}), **extra}
        out["metadata"] = meta
    return out


def _model_keys(api: apis.SednaKind, obj: Obj | None) -> frozenset[ObjKey]:
    if obj is None:
        return frozenset()
    ns = meta_str(obj, "namespace")
    return frozenset((MODEL, ns, m) for m in apis.model_names(api, obj))


def _dataset_keys(api: apis.SednaKind, obj: Obj | None) -> frozenset[ObjKey]:
    if obj is None:
        return frozenset()
    ns = meta_str(obj, "namespace")
    return frozenset((DATASET, ns, d) for d in apis.dataset_names(api, obj))


# -- the object source ------------------------------------------------------------------


@dataclass(slots=True)
class _Entry:
    """One object that some node needs.

    Invariant: `sent_to` <= `nodes`; every node in `sent_to` has been given `payload`
    (queued to its session, or it gets it in its next snapshot)."""

    nodes: frozenset[str]  # where the object belongs now (what is_assigned answers)
    payload: dict[str, Any] | None = None  # None until the first version is ready
    source_rv: str | None = None  # resourceVersion `payload` was built from
    credential: str | None = None  # the credential annotation `payload` carries
    view: dict[str, Any] | None = None  # edge_view of the object `payload` was built from
    sent_to: frozenset[str] = frozenset()


@dataclass(slots=True)
class _Refs:
    """What an object references, as last computed (to know whom to recompute)."""

    models: frozenset[ObjKey] = frozenset()
    datasets: frozenset[ObjKey] = frozenset()


@dataclass(slots=True)
class EdgeStats:
    published: int = 0  # versions handed to the hub (one per object, not per node)
    deletes: int = 0  # (object, node) pairs withdrawn
    credential_reads: int = 0  # annotations built from a cached Secret
    credential_failures: int = 0  # Secret absent or unreadable: sent without the annotation


@dataclass(slots=True)
class _Deps:
    model_users: dict[ObjKey, set[ObjKey]] = field(default_factory=dict)
    dataset_users: dict[ObjKey, set[ObjKey]] = field(default_factory=dict)


class EdgeObjects:
    """The hub's `ObjectSource`, fed by informer events; `bind(hub.notify_changed)` before start."""

    def __init__(self, informers: InformerFactory, *, kinds: tuple[apis.SednaKind, ...] = EDGE_KINDS,
                 annotations: Mapping[str, Callable[[Obj], Mapping[str, str]]] | None = None):
        """`annotations`: per kind, what the copy sent down carries besides the object
        (`KindDeclaration.edge_annotations`)."""
        self._annotations = dict(annotations or {})
        self._apis = {api.kind: api for api in kinds}
        self._informers: dict[str, SharedInformer] = {
            api.kind: informers.informer(sedna_gvr(api)) for api in kinds}
        self._pods = (informers.informer(PODS, label_selector=MANAGED_SELECTOR),
                      informers.informer(PODS, label_selector=DEPLOYED_POD_SELECTOR))
        for pods in self._pods:
            pods.ensure_indexer(INDEX_WORKER_OWNER, worker_owner_uid)
        # the label naming a pod's owner, for each followed kind whose placement reads pods
        self._owner_labels = {f"{label_prefix(api.kind)}name": api for api in kinds if api.worker_types}
        self._view = _CacheView(self)
        self._unknown: set[str] = set()  # kinds already logged as not placeable
        self._notify: Notify | None = None
        self._entries: dict[ObjKey, _Entry] = {}
        self._by_node: dict[str, set[ObjKey]] = {}  # node -> keys whose sent_to holds it
        self._refs: dict[ObjKey, _Refs] = {}
        self._deps = _Deps()
        self._secrets = informers.informer(SECRETS)
        # the kinds that name a Secret whose value goes down with them
        self._credentialed = {k: self._informers[k] for k in CREDENTIALED_KINDS if k in self._informers}
        index_credentials(*self._credentialed.values())
        self._without_credential: dict[ObjKey, str] = {}  # key -> why it went without, logged once
        self.stats = EdgeStats()

    def bind(self, notify: Notify) -> None:
        """Connect to the hub and start following the informers."""
        self._notify = notify
        for kind, inf in self._informers.items():
            handler = self._handler(kind)
            inf.add_event_handler(on_add=handler, on_update=lambda _o, n, h=handler: h(n), on_delete=handler)
        self._secrets.add_event_handler(on_add=self._on_secret, on_update=lambda _o, n: self._on_secret(n),
                                        on_delete=self._on_secret)
        for pods in self._pods:
            pods.add_event_handler(on_add=self._on_pod, on_update=lambda _o, n: self._on_pod(n),
                                   on_delete=self._on_pod)

    # -- ObjectSource ---------------------------------------------------------------------

    def objects_for_node(self, node: str) -> list[tuple[str, str, str, Mapping[str, Any]]]:
        out = []
        for key in sorted(self._by_node.get(node, ())):
            payload = self._entries[key].payload
            if payload is not None:
                out.append((*key, payload))
        return out

    def is_assigned(self, node: str, kind: str, namespace: str, name: str) -> bool:
        entry = self._entries.get((kind, namespace, name))
        return entry is not None and node in entry.nodes

    def lacks(self, kind: str, namespace: str, name: str) -> bool:
        """Whether the object is of a kind this GM places and is not in its caches (yet)."""
        informer = self._informers.get(kind)
        return informer is not None and informer.store.get_by_name(namespace or None, name) is None

    def nodes_of(self, kind: str, namespace: str, name: str) -> frozenset[str]:
        """Where the object belongs right now (empty when no node needs it)."""
        entry = self._entries.get((kind, namespace, name))
        return entry.nodes if entry is not None else frozenset()

    def __len__(self) -> int:
        return len(self._entries)

    # -- event handlers (cache reads only) ------------------------------------------------

    def _handler(self, kind: str) -> Callable[[Obj], None]:
        def on_event(obj: Obj) -> None:
            self.refresh((kind, meta_str(obj, "namespace"), meta_str(obj, "name")))
        return on_event

    def _on_secret(self, secret: Obj) -> None:
        """The Datasets and Models naming the Secret are sent again with its new value."""
        for kind, informer in self._credentialed.items():
            for obj in using_secret(informer, secret):
                self.refresh((kind, meta_str(obj, "namespace"), meta_str(obj, "name")))

    def _on_pod(self, pod: Obj) -> None:
        """A worker came, went or moved: its owner's nodes may change."""
        labels = deep_get(pod, "metadata", "labels")
        for label, name in (labels.items() if isinstance(labels, Mapping) else ()):
            api = self._owner_labels.get(label)
            if api is None or not isinstance(name, str) or not name:
                continue
            if labels.get(f"{label_prefix(api.kind)}worker-type") in api.worker_types:
                self.refresh((api.kind, meta_str(pod, "namespace"), name))

    def refresh(self, key: ObjKey) -> None:
        """Recompute one object's nodes from the caches and push what changed."""
        kind, namespace, name = key
        api, informer = self._followed(kind)
        if api is None or informer is None:
            return
        obj = informer.store.get_by_name(namespace or None, name)
        nodes = api.placement(obj, self._view) if obj is not None else frozenset()
        before = self.nodes_of(*key)
        self._assign(key, obj, nodes)
        if api.model_paths or api.dataset_paths:
            # Models follow their users: recompute those whose users or users' nodes changed
            models = self._track_refs(api, key, obj)
            if before != nodes:
                models |= self._refs.get(key, _Refs()).models
            for model in sorted(models):
                self.refresh(model)
        if kind == DATASET:
            for job in sorted(self._deps.dataset_users.get(key, ())):
                self.refresh(job)

    def _followed(self, kind: str) -> tuple[apis.SednaKind | None, SharedInformer | None]:
        """The kind and its informer; (None, None), logged once per kind, for a name that is
        not a Sedna kind or a kind this GM does not send."""
        api = self._apis.get(kind)
        if api is None:
            registered = apis.by_kind(kind)
            self._log_unplaceable(kind, str(apis.UnknownKind(kind)) if registered is None
                                  else f"{kind} is not sent to the edge by this GM")
            return registered, None
        return api, self._informers[kind]

    def _log_unplaceable(self, kind: str, reason: str) -> None:
        if kind not in self._unknown:
            self._unknown.add(kind)
            event(log, "edge cannot place kind", level=logging.WARNING, kind=kind, reason=reason)

    def _track_refs(self, api: apis.SednaKind, key: ObjKey, obj: Obj | None) -> set[ObjKey]:
        """Record the Models/Datasets an object references; returns the Models whose users changed."""
        old = self._refs.pop(key, _Refs())
        new = _Refs(_model_keys(api, obj), _dataset_keys(api, obj))
        if new.models or new.datasets:
            self._refs[key] = new
        _relink(self._deps.model_users, key, old.models, new.models)
        _relink(self._deps.dataset_users, key, old.datasets, new.datasets)
        return set(old.models ^ new.models)

    # -- assignment and publishing --------------------------------------------------------

    def _assign(self, key: ObjKey, obj: Obj | None, nodes: frozenset[str]) -> None:
        entry = self._entries.get(key)
        if entry is not None:
            self._withdraw(key, entry, entry.sent_to - nodes)
        if obj is None or not nodes:
            if entry is not None:
                del self._entries[key]
            self._without_credential.pop(key, None)
            return
        if entry is None:
            entry = self._entries[key] = _Entry(nodes)
        entry.nodes = nodes
        credential, rv = self._credential(key, obj), meta_str(obj, "resourceVersion")
        view = edge_view(obj)
        if entry.payload is not None and entry.credential == credential and (
                (rv and entry.source_rv == rv) or entry.view == view):
            # same version, or one that differs only in what reports write: no new copy, and
            # only nodes that lack it are sent the one they would have had; the view moves on
            # to the new version (equal), so the old one's parts are not kept alive by it
            entry.view = view
            self._publish(key, entry.payload, rv)
            return
        entry.credential, entry.view = credential, view
        annotate = self._annotations.get(key[0])
        self._publish(key, downstream_copy(key[0], obj, credential=credential,
                                           annotations=annotate(obj) if annotate is not None else None), rv)

    def _credential(self, key: ObjKey, obj: Obj) -> str | None:
        """The credential annotation for the object's Secret (from the cache), or None: no
        Secret named, or it is missing or unreadable (logged once until that changes)."""
        secret_name = credential_name(key[0], obj)
        if secret_name is None:
            self._without_credential.pop(key, None)
            return None
        secret = self._secrets.store.get_by_name(key[1] or None, secret_name)
        try:
            if secret is None:
                raise LookupError(f"secret {secret_name} not found")
            value = credential_annotation(secret)
        except (LookupError, ValueError) as exc:
            self._send_without(key, secret_name, str(exc))
            return None
        if self._without_credential.pop(key, None) is not None:
            event(log, "credential found, sending with it", key=f"{key[1]}/{key[2]}", kind=key[0],
                  secret=secret_name)
        self.stats.credential_reads += 1
        return value

    def _send_without(self, key: ObjKey, secret_name: str, reason: str) -> None:
        if self._without_credential.get(key) == reason:
            return
        self._without_credential[key] = reason
        self.stats.credential_failures += 1
        event(log, "sending without credential", level=logging.WARNING, key=f"{key[1]}/{key[2]}",
              kind=key[0], secret=secret_name, error=reason)

    def _withdraw(self, key: ObjKey, entry: _Entry, lost: frozenset[str]) -> None:
        if not lost:
            return
        self._set_sent(key, entry, entry.sent_to - lost)
        self.stats.deletes += len(lost)
        self._emit(key, None, lost)

    def _publish(self, key: ObjKey, payload: dict[str, Any], rv: str) -> None:
        """Make `payload` the object's version and hand it to every node that lacks it."""
        entry = self._entries.get(key)
        if entry is None:
            return
        targets = entry.nodes if payload != entry.payload else entry.nodes - entry.sent_to
        entry.payload, entry.source_rv = payload, rv
        self._set_sent(key, entry, entry.nodes)
        if targets:
            self.stats.published += 1
            self._emit(key, payload, targets)

    def _set_sent(self, key: ObjKey, entry: _Entry, sent: frozenset[str]) -> None:
        for node in entry.sent_to - sent:
            keys = self._by_node.get(node)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_node[node]
        for node in sent - entry.sent_to:
            self._by_node.setdefault(node, set()).add(key)
        entry.sent_to = sent

    def _emit(self, key: ObjKey, payload: Mapping[str, Any] | None, nodes: frozenset[str]) -> None:
        if self._notify is not None:
            self._notify(*key, payload, sorted(nodes))


INDEX_WORKER_OWNER = "worker-owner-uid"


@index_reads("metadata.labels")
def worker_owner_uid(pod: Obj) -> list[str]:
    """`<kind>.sedna.io/uid=<uid>`: the label naming the CR a worker pod belongs to (the only
    label the placement rules look pods up by, so the only one indexed)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    suffix = f".{SEDNA_GROUP}/uid"
    return [f"{k}={v}" for k, v in labels.items() if k.endswith(suffix)] if isinstance(labels, dict) else []


class _CacheView:
    """The placement rules' window on the caches (reads only, so handlers stay I/O-free)."""

    __slots__ = ("_edge",)

    def __init__(self, edge: EdgeObjects):
        self._edge = edge

    def dataset(self, namespace: str, name: str) -> Obj | None:
        return self._edge._informers[DATASET].store.get_by_name(namespace or None, name)

    def worker_pods(self, kind: str, uid: str, worker_type: str) -> list[Obj]:
        prefix = label_prefix(kind)
        return [pod for pods in self._edge._pods
                for pod in pods.store.by_index(INDEX_WORKER_OWNER, f"{prefix}uid={uid}")
                if deep_get(pod, "metadata", "labels", f"{prefix}worker-type") == worker_type]

    def user_nodes(self, kind: str, namespace: str, name: str) -> frozenset[str]:
        users = self._edge._deps.model_users.get((kind, namespace, name), ())
        return frozenset().union(*(self._edge.nodes_of(*u) for u in users))


def _relink(index: dict[ObjKey, set[ObjKey]], user: ObjKey, old: frozenset[ObjKey],
            new: frozenset[ObjKey]) -> None:
    for dep in old - new:
        users = index.get(dep)
        if users is not None:
            users.discard(user)
            if not users:
                del index[dep]
    for dep in new - old:
        index.setdefault(dep, set()).add(user)
