"""The Sedna API registry: the eleven sedna.io/v1alpha1 kinds and what is known about them.

GM and LC both need the same facts about each kind: its REST names, the lower-case name the
upstream websocket envelope uses, which spec fields name nodes (so the GM knows where to send
an object), and which Models and Datasets it references. Keeping them in one table means a
controller, the hub and the LC managers can never disagree. The CRD YAML files under
charts/sedna/crds are the source of truth for the schema; `crd_manifests()` loads them.

Field paths are tuples of keys; the element `"*"` stands for every item of a list.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

GROUP = "sedna.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

FieldPath = tuple[str, ...]

# Where the chart keeps the CRDs, relative to the repository root (the project is installed
# in editable mode, so the module's location finds it).
CRD_DIR = Path(__file__).resolve().parents[1] / "charts" / "sedna" / "crds"

# libyaml when present: the CRD files are large enough for the pure-Python parser to show.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Annotations the GM writes on IL/LL jobs with the node that ran each stage (capitalised
# stage names, as upstream).
STAGE_NODE_ANNOTATIONS: tuple[str, ...] = ("sedna.io/Train", "sedna.io/Eval", "sedna.io/Deploy")


@dataclass(frozen=True, slots=True)
class SednaKind:
    """Static facts about one sedna.io kind."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    # Spec paths whose value is a node name the object must be sent to.
    node_paths: tuple[FieldPath, ...] = ()
    # The object also goes to the node of the Dataset named at this path (IL/LL), and to the
    # nodes recorded in STAGE_NODE_ANNOTATIONS.
    dataset_node_path: FieldPath | None = None
    model_paths: tuple[FieldPath, ...] = ()
    dataset_paths: tuple[FieldPath, ...] = ()
    condition_types: tuple[str, ...] = ()
    # Upstream's GM syncs objects of this kind to LCs over the websocket.
    synced_to_edge: bool = False

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

    @property
    def uses_stage_nodes(self) -> bool:
        return self.dataset_node_path is not None

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

DATASET = SednaKind(
    kind="Dataset", plural="datasets", short_names=(),
    node_paths=(("spec", "nodeName"),), synced_to_edge=True,
)
MODEL = SednaKind(kind="Model", plural="models", short_names=(), synced_to_edge=True)
JOINT_INFERENCE = SednaKind(
    kind="JointInferenceService", plural="jointinferenceservices", short_names=("ji",),
    node_paths=(("spec", "edgeWorker", *_TEMPLATE_NODE),),
    model_paths=(("spec", "edgeWorker", "model", "name"), ("spec", "cloudWorker", "model", "name")),
    condition_types=_SERVICE_CONDITIONS, synced_to_edge=True,
)
FEDERATED_LEARNING = SednaKind(
    kind="FederatedLearningJob", plural="federatedlearningjobs", short_names=("fl",),
    node_paths=(("spec", "trainingWorkers", "*", *_TEMPLATE_NODE),),
    model_paths=(("spec", "aggregationWorker", "model", "name"), ("spec", "pretrainedModel", "name")),
    dataset_paths=(("spec", "trainingWorkers", "*", "dataset", "name"),),
    condition_types=("Complete", "Failed", "Training", "Waiting"), synced_to_edge=True,
)
INCREMENTAL_LEARNING = SednaKind(
    kind="IncrementalLearningJob", plural="incrementallearningjobs", short_names=("il",),
    dataset_node_path=("spec", "dataset", "name"),
    model_paths=(("spec", "initialModel", "name"), ("spec", "evalSpec", "initialEvalModel", "name"),
                 ("spec", "deploySpec", "model", "name")),
    dataset_paths=(("spec", "dataset", "name"),),
    condition_types=_STAGE_CONDITIONS, synced_to_edge=True,
)
LIFELONG_LEARNING = SednaKind(
    kind="LifelongLearningJob", plural="lifelonglearningjobs", short_names=("ll",),
    dataset_node_path=("spec", "dataset", "name"),
    dataset_paths=(("spec", "dataset", "name"),),
    condition_types=_STAGE_CONDITIONS, synced_to_edge=True,
)
OBJECT_SEARCH = SednaKind(
    kind="ObjectSearchService", plural="objectsearchservices", short_names=("objs",),
    condition_types=_SERVICE_CONDITIONS,
)
OBJECT_TRACKING = SednaKind(
    kind="ObjectTrackingService", plural="objecttrackingservices", short_names=("objt",),
    condition_types=_SERVICE_CONDITIONS,
)
FEATURE_EXTRACTION = SednaKind(
    kind="FeatureExtractionService", plural="featureextractionservices", short_names=("fe",),
    model_paths=(("spec", "model", "name"),), condition_types=_SERVICE_CONDITIONS,
)
REID = SednaKind(
    kind="ReidJob", plural="reidjobs", short_names=("reid",), condition_types=_STAGE_CONDITIONS,
)
VIDEO_ANALYTICS = SednaKind(
    kind="VideoAnalyticsJob", plural="videoanalyticsjobs", short_names=("va",),
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


def stage_node_names(api: SednaKind, obj: dict) -> dict[str, str]:
    """Stage -> node from the GM's stage annotations on an IL/LL job (empty for other kinds)."""
    if not api.uses_stage_nodes:
        return {}
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return {
        key.split("/", 1)[1]: annotations[key]
        for key in STAGE_NODE_ANNOTATIONS
        if annotations.get(key)
    }


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
