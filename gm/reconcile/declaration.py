"""What a kind declares to be reconciled: the data the one generic controller runs on.

In the spirit of a controller builder (`For`, `Owns`, `Watches`), but as values: a kind
module (gm/kinds/) fills in one `KindDeclaration` and writes two pure functions, and
gm/reconcile/reconciler.py does everything else (informers, handlers, the work queue,
diffing, batched writes with owner re-checks, problems as conditions and events, status
writes, requeues). Nothing here does I/O.

- `Owns(gvr, on_edit=...)`: a child type. `"update"` children (Deployments, Services,
  HPAs) are updated in place when their spec hash changes, so a Deployment rolls;
  `"recreate"` children (worker Pods) are deleted and created again under the same name
  once the old one is gone. `frozen_when_finished` stops new children of the type once
  the CR is finished (a finished job's pods never come back).
- `Watches(gvr, refs=...)`: an object type the CR depends on. `refs(cr)` names the objects
  (in the CR's namespace) it uses; the reconciler indexes CRs by them, so a change to one
  enqueues exactly its users. `refs=None` means every CR depends on every object of the
  type (Nodes: their addresses), and `matters(old, new)` filters updates that do not.
  Secrets need no declaration: every `credentialName` in the CR or in a watched object is
  followed through one Secret cache.
- `build(cr, deps) -> {gvr: [child, ...]}`: the desired children, pure. It raises the
  builders' `SpecError` for a bad spec or a missing dependency. A child type absent from
  the result has no desired children (observed ones are deleted).
- `status(cr, observed) -> status`: the CR's new status, pure, from the old one
  (`cr["status"]`) and what is observed. `observedGeneration` is the reconciler's: it is
  set when the children match the current generation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gm.config import GMConfig, WorkerConfig
from gm.kube.resources import GVR, sedna_gvr
from shared import apis

Obj = Mapping[str, Any]
Children = Mapping[GVR, Iterable[dict]]
Build = Callable[[dict, "Dependencies"], Children]
Status = Callable[[dict, "Observed"], dict]
# An upstream report's body -> the status mutation it asks for (None: nothing to apply).
# Raises gm.reports.ReportInvalid for a malformed body.
Mutation = Callable[[dict], dict]
ReportRule = Callable[[Mapping[str, Any], str], "Mutation | None"]


def _never(*_args: Any) -> bool:
    return False


def _always(_old: Obj, _new: Obj) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Owns:
    gvr: GVR
    on_edit: Literal["update", "recreate"] = "update"
    frozen_when_finished: bool = False


@dataclass(frozen=True, slots=True)
class Watches:
    gvr: GVR
    refs: Callable[[Obj], Iterable[str]] | None = None
    matters: Callable[[Obj, Obj], bool] = _always
    # whether its objects name Secrets (`credentialName`) that the CR then uses
    credentials: bool = True
    # what `refs` reads of the CR, as dotted paths (`index_reads`); None: it may read anything
    refs_read: tuple[str, ...] | None = None


def uses_models(api: apis.SednaKind) -> Watches:
    """Watch the Models at the kind's registered model paths."""
    return Watches(sedna_gvr(apis.MODEL), refs=lambda cr: apis.model_names(api, dict(cr)),
                   refs_read=_paths_read(api.model_paths))


def uses_datasets(api: apis.SednaKind) -> Watches:
    """Watch the Datasets at the kind's registered dataset paths."""
    return Watches(sedna_gvr(apis.DATASET), refs=lambda cr: apis.dataset_names(api, dict(cr)),
                   refs_read=_paths_read(api.dataset_paths))


def _paths_read(paths: tuple[apis.FieldPath, ...]) -> tuple[str, ...]:
    """The top-level fields (`spec`) that a kind's registered paths start in."""
    return tuple(sorted({path[0] for path in paths}))


@dataclass(frozen=True, slots=True)
class Dependencies:
    """What `build` may read besides the CR: the watched objects it names, their Secrets,
    its own observed children (a job counts its retries from them), the configs and now."""

    objects: Mapping[str, Mapping[str, dict]]  # watched plural -> name -> object (found ones)
    secrets: Mapping[str, dict]  # Secret name -> Secret, for every credentialName found
    children: Mapping[str, list[dict]]  # owned plural -> the children the CR controls now
    config: WorkerConfig
    gm: GMConfig | None = None
    now: str = ""

    def get(self, gvr: GVR, name: Any) -> dict | None:
        """The watched object `name` (None when absent or when `name` is not a name)."""
        if not isinstance(name, str) or not name:
            return None
        return (self.objects.get(gvr.plural) or {}).get(name)

    def all(self, gvr: GVR) -> Mapping[str, dict]:
        return self.objects.get(gvr.plural) or {}

    def observed(self, gvr: GVR) -> list[dict]:
        return list(self.children.get(gvr.plural) or ())


@dataclass(frozen=True, slots=True)
class Observed:
    """What `status` sees: the CR's children now, what was desired, and how the reconcile went.

    `desired` is None when the build failed (`problem` says why, `retrying` whether the GM
    retries it by itself, so the kind shows a wait rather than a failure); `in_progress` is True for
    the status written between batches of a large plan; `rejected` is why an edit was not
    applied (`KindDeclaration.reject_edits`); `nodes` holds the known node names when the
    kind watches Nodes."""

    children: Mapping[str, list[dict]]
    desired: Mapping[str, Mapping[str, dict]] | None
    converged: bool
    now: str
    problem: tuple[str, str] | None = None
    retrying: bool = False  # the problem is one the GM retries (a missing Model): a wait, not a failure
    in_progress: bool = False
    rejected: str | None = None
    nodes: frozenset[str] | None = None

    def of(self, gvr: GVR) -> list[dict]:
        """Every child of the type the CR controls."""
        return list(self.children.get(gvr.plural) or ())

    def wanted(self, gvr: GVR) -> list[dict]:
        """The children of the type the spec asks for (all of them when the build failed)."""
        if self.desired is None:
            return self.of(gvr)
        names = self.desired.get(gvr.plural) or {}
        return [c for c in self.of(gvr) if c["metadata"]["name"] in names]

    def desired_count(self, gvr: GVR) -> int:
        return len((self.desired or {}).get(gvr.plural) or {})

    def all_present(self, gvr: GVR) -> bool:
        """Every desired child of the type is observed (False while in progress or failed)."""
        if self.desired is None or self.in_progress:
            return False
        have = {c["metadata"]["name"] for c in self.of(gvr)}
        return set(self.desired.get(gvr.plural) or {}) <= have


@dataclass(frozen=True, slots=True)
class KindDeclaration:
    api: apis.SednaKind
    owns: tuple[Owns, ...]
    build: Build
    status: Status
    watches: tuple[Watches, ...] = ()
    # the work queue's and the metrics' name, and the event source component (upstream's)
    controller: str = ""
    component: str = ""
    # a finished CR gets no new `frozen_when_finished` children and no periodic requeue
    finished: Callable[[Obj], bool] = _never
    # how long to look again while the children have not converged
    requeue_after: float = 5.0
    # the setting under which an edit is not applied to `recreate` children (a condition
    # says so, quoting it), or None when edits apply
    reject_edits: Callable[[GMConfig], str | None] = lambda _config: None
    # seconds until the CR must be looked at again although nothing changes (a deadline)
    wake: Callable[[Obj, str], float | None] | None = None
    # True when the CR itself is to be deleted (ttlSecondsAfterFinished)
    expired: Callable[[Obj, str], bool] = _never
    # how an upstream status report for the kind becomes status (None: reports refused)
    report: ReportRule | None = None
    # annotations the copy sent to the edge carries, from the CR (what an LC reads that the
    # CR itself does not say, e.g. where an IL job's hot-update config lives)
    edge_annotations: Callable[[Obj], Mapping[str, str]] | None = None

    @property
    def kind(self) -> str:
        return self.api.kind

    @property
    def name(self) -> str:
        return self.controller or self.api.singular

    def owned(self, gvr: GVR) -> Owns | None:
        return next((o for o in self.owns if o.gvr == gvr), None)
