"""The Sedna API registry: the eleven sedna.io/v1alpha1 kinds and what is known about them.

GM and LC both need the same facts about each kind: its REST names, the lower-case name the
upstream websocket envelope uses, its condition types, which Models and Datasets it references,
and where it must go at the edge. Keeping them in one table means a controller, the hub and
the LC managers can never disagree. The CRD YAML files under charts/sedna/crds are the source
of truth for the schema; `crd_manifests()` loads them.

This is the only list of kinds in the project. proto/ (the wire codecs) sits beside shared/
and imports nothing from it, so it holds no copy: the upstream codec is handed
`canonical_kind` by the services that decode frames.

Placement ("which nodes need this object") is declared per kind as a pure function of the
object and a `PlacementView`, the read-only window on the caches the GM keeps (Datasets by
name, live worker pods, the nodes of a Model's users). The learning kinds with stages (IL, LL)
declare one rule per stage and go where any stage needs them. A name that is not a kind is an
`UnknownKind` error, never a default rule.

Field paths are tuples of keys; the element `"*"` stands for every item of a list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from shared.objects import deep_get, label_prefix, meta_str

GROUP = "sedna.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

FieldPath = tuple[str, ...]

# Where the chart keeps the CRDs, relative to the repository root (the project is installed
# in editable mode, so the module's location finds it).
CRD_DIR = Path(__file__).resolve().parents[1] / "charts" / "sedna" / "crds"

# libyaml when present: the CRD files are large enough for the pure-Python parser to show.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Obj = Mapping[str, Any]
# Pod phases after which a worker no longer pins its object to its node.
_DONE_PHASES = ("Succeeded", "Failed")


class UnknownKind(LookupError):
    """A name that is none of the eleven Sedna kinds: no rule is guessed for it (the caller
    logs it and leaves the object alone)."""

    def __init__(self, kind: str):
        super().__init__(f"{kind!r} is not a Sedna kind")
        self.kind = kind


class PlacementView(Protocol):
    """What a placement rule may read besides the object itself (the GM answers from caches)."""

    def dataset(self, namespace: str, name: str) -> Obj | None:
        """The Dataset `namespace/name`, or None when it does not exist."""

    def worker_pods(self, kind: str, uid: str, worker_type: str) -> Iterable[Obj]:
        """The pods of worker type `worker_type` that belong to the `kind` object with `uid`."""

    def user_nodes(self, kind: str, namespace: str, name: str) -> frozenset[str]:
        """The nodes of the objects that reference this one (how a Model is placed)."""


Placement = Callable[[Obj, PlacementView], frozenset[str]]


@dataclass(frozen=True, slots=True)
class Stage:
    """One stage of a learning job: its workers come from `template`, labelled `worker_type`."""

    name: str
    worker_type: str
    template: FieldPath


@dataclass(frozen=True, slots=True)
class SednaKind:
    """Static facts about one sedna.io kind."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    # Which nodes need an object of this kind (see the module docstring).
    placement: Placement
    # Spec paths whose value is a node name the object must be sent to.
    node_paths: tuple[FieldPath, ...] = ()
    # The stages of a learning job, each placed on its own (IL, LL).
    stages: tuple[Stage, ...] = ()
    model_paths: tuple[FieldPath, ...] = ()
    dataset_paths: tuple[FieldPath, ...] = ()
    condition_types: tuple[str, ...] = ()
    # Upstream's GM syncs objects of this kind to LCs over the websocket.
    synced_to_edge: bool = False
    # The worker types whose live pods the placement rule reads (a pod of another type
    # cannot move the object).
    worker_types: tuple[str, ...] = ()

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def ws_kind(self) -> str:
        """`header.resourceKind` in upstream's websocket envelope (lower-case kind)."""
        return self.kind.lower()

    @property
    def api_version(self) -> str:
        return API_VERSION

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        """REST path of the collection (all namespaces when `namespace` is None) or one object."""
        parts = [f"/apis/{GROUP}/{VERSION}"]
        if namespace is not None:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
            if subresource is not None:
                parts.append(subresource)
        return "/".join(parts)


_SERVICE_CONDITIONS = ("Pending", "Running", "Failed")
_STAGE_CONDITIONS = ("Waiting", "Ready", "Starting", "Running", "Completed", "Failed")
_TEMPLATE_NODE = ("template", "spec", "nodeName")


# -- placement rules (pure) -------------------------------------------------------------


def _node(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _pod_nodes(kind: str, obj: Obj, view: PlacementView, worker_types: tuple[str, ...]) -> set[str]:
    """Nodes the object's live workers of these types run on (a worker placed by a selector
    or affinity is found; during a move the old node keeps the object until its pods end)."""
    uid = meta_str(obj, "uid")
    uid_label = f"{label_prefix(kind)}uid"
    nodes: set[str] = set()
    for worker_type in worker_types if uid else ():
        for pod in view.worker_pods(kind, uid, worker_type):
            if deep_get(pod, "metadata", "labels", uid_label) != uid:
                continue
            if deep_get(pod, "status", "phase") in _DONE_PHASES:
                continue
            if node := _node(deep_get(pod, "spec", "nodeName")):
                nodes.add(node)
    return nodes


def _dataset_node(obj: Obj, name: Any, view: PlacementView) -> str | None:
    dataset = view.dataset(meta_str(obj, "namespace"), name) if _node(name) else None
    return _node(deep_get(dataset, "spec", "nodeName")) if dataset is not None else None


def pinned_and_worker_nodes(kind: str, node_paths: tuple[FieldPath, ...],
                            worker_types: tuple[str, ...]) -> Placement:
    """Placement by the templates' `nodeName`s plus the nodes of the object's live workers."""
    def place(obj: Obj, view: PlacementView) -> frozenset[str]:
        return frozenset(_names(obj, node_paths)) | _pod_nodes(kind, obj, view, worker_types)
    return place


def place_dataset(obj: Obj, view: PlacementView) -> frozenset[str]:
    """A Dataset goes to its `spec.nodeName` (the LC there watches it)."""
    node = _node(deep_get(obj, "spec", "nodeName"))
    return frozenset({node} if node else ())


def place_model(obj: Obj, view: PlacementView) -> frozenset[str]:
    """A Model goes wherever an object that references it goes."""
    return view.user_nodes("Model", meta_str(obj, "namespace"), meta_str(obj, "name"))


def place_federated_learning(obj: Obj, view: PlacementView) -> frozenset[str]:
    """Every trainer's node: its template's nodeName, else its Dataset's nodeName (the rule
    the trainers are placed by); the aggregation worker's node is not an edge target."""
    nodes: set[str] = set()
    workers = deep_get(obj, "spec", "trainingWorkers")
    for worker in workers if isinstance(workers, list) else ():
        node = _node(deep_get(worker, *_TEMPLATE_NODE)) or _dataset_node(
            obj, deep_get(worker, "dataset", "name"), view)
        if node:
            nodes.add(node)
    return frozenset(nodes)


def place_stage(kind: str, stage: Stage, obj: Obj, view: PlacementView) -> frozenset[str]:
    """A stage's node: its template's nodeName, else the job's Dataset's node; plus the
    nodes its live workers run on."""
    node = _node(deep_get(obj, *stage.template, "spec", "nodeName")) or _dataset_node(
        obj, deep_get(obj, "spec", "dataset", "name"), view)
    return frozenset({node} if node else ()) | _pod_nodes(kind, obj, view, (stage.worker_type,))


def by_stages(kind: str, stages: tuple[Stage, ...]) -> Placement:
    """A learning job goes to its Dataset's node (where its triggers are evaluated) and to
    every node one of its stages needs."""
    def place(obj: Obj, view: PlacementView) -> frozenset[str]:
        home = _dataset_node(obj, deep_get(obj, "spec", "dataset", "name"), view)
        nodes = frozenset({home} if home else ())
        return nodes.union(*(place_stage(kind, s, obj, view) for s in stages))
    return place


def _declare(kind: str, plural: str, short_names: tuple[str, ...], *,
             workers: tuple[tuple[FieldPath, str], ...] = (), stages: tuple[Stage, ...] = (),
             placement: Placement | None = None, **facts: Any) -> SednaKind:
    """A kind whose placement is the given rule, its stages' rules, or its workers' templates
    (`(template path, worker type)` pairs) and live pods."""
    node_paths = facts.pop("node_paths", tuple((*path, "spec", "nodeName") for path, _ in workers))
    if placement is None:
        placement = (by_stages(kind, stages) if stages else
                     pinned_and_worker_nodes(kind, node_paths, tuple(t for _, t in workers)))
    worker_types = tuple(t for _, t in workers) + tuple(s.worker_type for s in stages)
    return SednaKind(kind=kind, plural=plural, short_names=short_names, placement=placement,
                     node_paths=node_paths, stages=stages, worker_types=worker_types, **facts)


_LEARNING_STAGES = (
    Stage("Train", "train", ("spec", "trainSpec", "template")),
    Stage("Eval", "eval", ("spec", "evalSpec", "template")),
    Stage("Deploy", "inference", ("spec", "deploySpec", "template")),
)

DATASET = _declare(
    "Dataset", "datasets", (), placement=place_dataset,
    node_paths=(("spec", "nodeName"),), condition_types=("IndexReadable",), synced_to_edge=True,
)
MODEL = _declare("Model", "models", (), placement=place_model, synced_to_edge=True)
JOINT_INFERENCE = _declare(
    "JointInferenceService", "jointinferenceservices", ("ji",),
    workers=((("spec", "edgeWorker", "template"), "edge"),),
    model_paths=(("spec", "edgeWorker", "model", "name"), ("spec", "cloudWorker", "model", "name")),
    condition_types=_SERVICE_CONDITIONS, synced_to_edge=True,
)
FEDERATED_LEARNING = _declare(
    "FederatedLearningJob", "federatedlearningjobs", ("fl",), placement=place_federated_learning,
    node_paths=(("spec", "trainingWorkers", "*", *_TEMPLATE_NODE),),
    model_paths=(("spec", "aggregationWorker", "model", "name"), ("spec", "pretrainedModel", "name")),
    dataset_paths=(("spec", "trainingWorkers", "*", "dataset", "name"),),
    condition_types=("Complete", "Failed", "Training", "Waiting"), synced_to_edge=True,
)
INCREMENTAL_LEARNING = _declare(
    "IncrementalLearningJob", "incrementallearningjobs", ("il",), stages=_LEARNING_STAGES,
    node_paths=tuple((*s.template, "spec", "nodeName") for s in _LEARNING_STAGES),
    model_paths=(("spec", "initialModel", "name"), ("spec", "evalSpec", "initialEvalModel", "name"),
                 ("spec", "deploySpec", "model", "name")),
    dataset_paths=(("spec", "dataset", "name"),),
    condition_types=_STAGE_CONDITIONS, synced_to_edge=True,
)
LIFELONG_LEARNING = _declare(
    "LifelongLearningJob", "lifelonglearningjobs", ("ll",), stages=_LEARNING_STAGES,
    node_paths=tuple((*s.template, "spec", "nodeName") for s in _LEARNING_STAGES),
    dataset_paths=(("spec", "dataset", "name"),),
    condition_types=_STAGE_CONDITIONS, synced_to_edge=True,
)
OBJECT_SEARCH = _declare(
    "ObjectSearchService", "objectsearchservices", ("objs",),
    workers=((("spec", "userWorker", "template"), "userworker"),
             (("spec", "trackingWorkers", "*", "template"), "trackingworker"),
             (("spec", "reidWorkers", "template"), "reidworker")),
    condition_types=_SERVICE_CONDITIONS,
)
OBJECT_TRACKING = _declare(
    "ObjectTrackingService", "objecttrackingservices", ("objt",),
    workers=((("spec", "trackingWorkers", "*", "template"), "trackingworker"),
             (("spec", "reidWorkers", "template"), "reidworker")),
    condition_types=_SERVICE_CONDITIONS,
)
FEATURE_EXTRACTION = _declare(
    "FeatureExtractionService", "featureextractionservices", ("fe",),
    workers=((("spec", "template"), "fe"),),
    model_paths=(("spec", "model", "name"),), condition_types=_SERVICE_CONDITIONS,
)
REID = _declare(
    "ReidJob", "reidjobs", ("reid",), workers=((("spec", "template"), "reid"),),
    condition_types=_STAGE_CONDITIONS,
)
VIDEO_ANALYTICS = _declare(
    "VideoAnalyticsJob", "videoanalyticsjobs", ("va",), workers=((("spec", "template"), "videoanalytics"),),
    model_paths=(("spec", "model", "name"),), condition_types=_STAGE_CONDITIONS,
)

ALL_KINDS: tuple[SednaKind, ...] = (
    DATASET, MODEL, JOINT_INFERENCE, FEDERATED_LEARNING, INCREMENTAL_LEARNING, LIFELONG_LEARNING,
    OBJECT_SEARCH, OBJECT_TRACKING, FEATURE_EXTRACTION, REID, VIDEO_ANALYTICS,
)

_BY_KIND = {k.kind: k for k in ALL_KINDS}
_BY_PLURAL = {k.plural: k for k in ALL_KINDS}
_BY_WS_KIND = {k.ws_kind: k for k in ALL_KINDS}
# Every name kubectl accepts for a kind, lower-cased: kind, plural, singular, short names.
_BY_ANY_NAME = {
    name: k
    for k in ALL_KINDS
    for name in (k.kind.lower(), k.plural, k.singular, *k.short_names)
}


def by_kind(kind: str) -> SednaKind | None:
    """The kind with this exact CamelCase name (`JointInferenceService`)."""
    return _BY_KIND.get(kind)


def by_plural(plural: str) -> SednaKind | None:
    """The kind with this resource name (`jointinferenceservices`)."""
    return _BY_PLURAL.get(plural)


def by_ws_kind(resource_kind: str) -> SednaKind | None:
    """The kind named by a websocket `header.resourceKind`, in any case (the LC sends CamelCase)."""
    return _BY_WS_KIND.get(resource_kind.lower())


def require(kind: str) -> SednaKind:
    """The kind with this exact CamelCase name; `UnknownKind` for any other name."""
    api = _BY_KIND.get(kind)
    if api is None:
        raise UnknownKind(kind)
    return api


def canonical_kind(name: str) -> str:
    """The CamelCase kind for a wire spelling in any case; other names unchanged (refusing
    them is the receiver's decision). The services hand this to proto's upstream codec."""
    api = by_ws_kind(name)
    return api.kind if api is not None else name


def lookup(name: str) -> SednaKind | None:
    """Resolve any name kubectl accepts (kind, plural, singular, short name), case-insensitively."""
    return _BY_ANY_NAME.get(name.lower())


def _walk(node: Any, path: FieldPath) -> Iterator[Any]:
    if not path:
        yield node
        return
    head, rest = path[0], path[1:]
    if head == "*":
        if isinstance(node, list):
            for item in node:
                yield from _walk(item, rest)
    elif isinstance(node, dict) and head in node:
        yield from _walk(node[head], rest)


def field_values(obj: dict, path: FieldPath) -> list[Any]:
    """Values found at `path` in `obj`; missing branches are skipped."""
    return list(_walk(obj, path))


def _names(obj: dict, paths: tuple[FieldPath, ...]) -> list[str]:
    seen: dict[str, None] = {}
    for path in paths:
        for value in _walk(obj, path):
            if isinstance(value, str) and value:
                seen.setdefault(value, None)
    return list(seen)


def spec_node_names(api: SednaKind, obj: dict) -> list[str]:
    """Distinct non-empty node names the spec of `obj` pins it to, in spec order."""
    return _names(obj, api.node_paths)


def model_names(api: SednaKind, obj: dict) -> list[str]:
    """Distinct Models `obj` references, in spec order."""
    return _names(obj, api.model_paths)


def dataset_names(api: SednaKind, obj: dict) -> list[str]:
    """Distinct Datasets `obj` references, in spec order."""
    return _names(obj, api.dataset_paths)


def crd_files() -> list[Path]:
    """The chart's CRD files, sorted by name."""
    return sorted(CRD_DIR.glob("*.yaml"))


def crd_manifests() -> list[dict]:
    """The CustomResourceDefinitions of all kinds, freshly parsed (callers may mutate them)."""
    manifests = []
    for path in crd_files():
        manifests.extend(doc for doc in yaml.load_all(path.read_text(), Loader=_Loader) if doc)
    return manifests


def crd_manifest(api: SednaKind) -> dict:
    """The CustomResourceDefinition of one kind."""
    for manifest in crd_manifests():
        if manifest["metadata"]["name"] == api.crd_name:
            return manifest
    raise LookupError(f"no CRD for {api.crd_name} in {CRD_DIR}")
