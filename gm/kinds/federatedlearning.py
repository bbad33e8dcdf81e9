"""FederatedLearningJob: an aggregation pod and Service, one pod per trainer.

Training pods are one-shot, so they are `recreate` children: an edit deletes the outdated
pod and creates it again from the new spec under the same name once it is gone (or, with
`federatedLearning.specEditPolicy: reject`, leaves it running and says so in a condition
and a Warning event). A finished job whose spec was not edited since gets no pod back.

What the workers wait on (a pod stuck terminating, a node that does not exist, no node
that fits) is the `Waiting` condition, and a trainer bound to a missing node is not counted
as active. The builders are gm/workers/federated.py; round reports are gm/edge/status.py's.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from gm.config import GMConfig
from gm.kindlib.conditions import clear_true, exclusive, pod_counts, waiting_condition
from gm.kindlib.waiting import stranded, summary, waits
from gm.kube.resources import DATASETS, MODELS, NODES, PODS, SERVICES
from gm.reconcile.declaration import (
    Children,
    Dependencies,
    KindDeclaration,
    Observed,
    Owns,
    Watches,
    uses_datasets,
    uses_models,
)
from gm.workers import build_fl_children
from shared import apis
from shared.objects import deep_get, set_condition

CONDITION_TYPES = ("Training", "Complete", "Failed")
FINISHED = ("Succeeded", "Failed")


def build(job: dict, deps: Dependencies) -> Children:
    children = build_fl_children(job, models=deps.all(MODELS), datasets=deps.all(DATASETS),
                                 config=deps.config, node_addresses=node_addresses(deps.all(NODES).values()),
                                 secrets=deps.secrets)
    return {PODS: [children.aggregation_pod, *children.training_pods],
            SERVICES: [children.aggregation_service]}


def node_addresses(nodes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Node name -> its InternalIP (else ExternalIP), for a host-network aggregator."""
    out: dict[str, str] = {}
    for node in nodes:
        addrs = {a.get("type"): a.get("address") for a in deep_get(node, "status", "addresses", default=[]) or []}
        address = addrs.get("InternalIP") or addrs.get("ExternalIP")
        if address:
            out[node["metadata"]["name"]] = address
    return out


def status(job: dict, observed: Observed) -> dict:
    nodes = observed.nodes or frozenset()
    pods = observed.wanted(PODS)
    new = fl_status(job, pods, all_present=observed.all_present(PODS), converged_generation=None,
                    problem=observed.problem, now=observed.now, stranded=stranded(pods, nodes=nodes),
                    waiting=summary(waits(observed.of(PODS), nodes=nodes)))
    if observed.rejected is not None:
        new["conditions"] = set_condition(new.get("conditions"), "Training", "True",
                                          reason="SpecEditRejected", message=observed.rejected,
                                          now=observed.now)
    return new


def finished(job: Mapping[str, Any]) -> bool:
    """A finished job whose spec was not edited since is left alone (no pod comes back)."""
    status_ = job.get("status") or {}
    return status_.get("phase") in FINISHED and \
        status_.get("observedGeneration") == (job.get("metadata") or {}).get("generation")


def reject_edits(config: GMConfig) -> str | None:
    if config.federatedLearning.specEditPolicy == "reject":
        return "federatedLearning.specEditPolicy is reject"
    return None


def addresses_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return deep_get(old, "status", "addresses") != deep_get(new, "status", "addresses")


def fl_phase(pods: list[Mapping[str, Any]], *, all_present: bool, stranded: Collection[str] = ()) -> str:
    active, succeeded, failed = pod_counts(pods, stranded=stranded)
    if failed:
        return "Failed"
    if all_present and succeeded and not active and succeeded == len(pods):
        return "Succeeded"
    return "Running" if active or succeeded else "Pending"


def fl_status(job: Mapping[str, Any], pods: list[Mapping[str, Any]], *, all_present: bool,
              converged_generation: int | None, problem: tuple[str, str] | None, now: str,
              stranded: Collection[str] = (), waiting: tuple[str, str] | None = None) -> dict:
    """The FL job's new status. `problem` = (reason, message) of a bad spec, if any;
    `converged_generation` = the generation the pods now run, when they all match it;
    `stranded` = pods that cannot run (not counted active); `waiting` = (reason, message)
    of what the workers wait on (waiting.summary), if anything."""
    status = dict(job.get("status") or {})
    active, succeeded, failed = pod_counts(pods, stranded=stranded)
    phase = fl_phase(pods, all_present=all_present, stranded=stranded)
    status.update(active=active, succeeded=succeeded, failed=failed, phase=phase)
    if pods and not status.get("startTime"):
        status["startTime"] = now
    if phase == "Succeeded" and not status.get("completionTime"):
        status["completionTime"] = now
    conditions = _fl_conditions(list(status.get("conditions") or []), phase, problem, now)
    status["conditions"] = waiting_condition(conditions, waiting, now=now)
    if converged_generation is not None:
        status["observedGeneration"] = converged_generation
    return status


def _fl_conditions(conditions: list[dict], phase: str, problem: tuple[str, str] | None,
                   now: str) -> list[dict]:
    if problem is not None:
        return exclusive(conditions, CONDITION_TYPES, "Failed", reason=problem[0],
                          message=problem[1], now=now)
    if phase == "Failed":
        return exclusive(conditions, CONDITION_TYPES, "Failed", reason="WorkerFailed",
                          message="a worker of the FederatedLearningJob failed", now=now)
    if phase == "Succeeded":
        return exclusive(conditions, CONDITION_TYPES, "Complete", reason="Completed",
                          message="all workers succeeded", now=now)
    if phase == "Running":
        # upstream round reports refine this condition's message: keep it
        return exclusive(conditions, CONDITION_TYPES, "Training", reason="Training",
                          message="the workers are running", now=now, keep=True)
    return clear_true(conditions, now)


DECLARATION = KindDeclaration(
    api=apis.FEDERATED_LEARNING,
    owns=(Owns(PODS, on_edit="recreate", frozen_when_finished=True), Owns(SERVICES)),
    watches=(uses_models(apis.FEDERATED_LEARNING), uses_datasets(apis.FEDERATED_LEARNING),
             Watches(NODES, matters=addresses_changed, credentials=False)),
    build=build,
    status=status,
    controller="federatedlearningjob",
    component="FederatedLearning-controller",
    finished=finished,
    requeue_after=2.0,
    reject_edits=reject_edits,
)
