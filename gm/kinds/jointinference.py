"""JointInferenceService: two Deployments, a Service and optional HPAs per CR.

Every child is updated in place (an edit rolls the Deployments); an unchanged spec builds a
byte-identical template, so nothing rolls. The builders are gm/workers/jointinference.py;
the edge worker's stats reports become `status.metrics`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gm.edge.reports import metrics_report
from gm.kindlib.conditions import deployment_active, deployment_failed, exclusive
from gm.kube.resources import DEPLOYMENTS, HPAS, MODELS, SERVICES
from gm.reconcile.declaration import (
    Children,
    Dependencies,
    KindDeclaration,
    Observed,
    Owns,
    uses_models,
)
from gm.workers import build_ji_children
from shared import apis
from shared.objects import deep_get

CONDITION_TYPES = ("Pending", "Running", "Failed")
WORKERS = 2  # the cloud and the edge Deployment


def build(ji: dict, deps: Dependencies) -> Children:
    children = build_ji_children(
        ji, edge_model=deps.get(MODELS, deep_get(ji, "spec", "edgeWorker", "model", "name")),
        cloud_model=deps.get(MODELS, deep_get(ji, "spec", "cloudWorker", "model", "name")),
        config=deps.config, secrets=deps.secrets)
    return {
        DEPLOYMENTS: [children.cloud_deployment, children.edge_deployment],
        SERVICES: [children.cloud_service],
        HPAS: [h for h in (children.cloud_hpa, children.edge_hpa) if h is not None],
    }


def status(ji: dict, observed: Observed) -> dict:
    return ji_status(ji, observed.of(DEPLOYMENTS), expected=WORKERS, converged_generation=None,
                     problem=observed.problem, now=observed.now)


def ji_status(ji: Mapping[str, Any], deployments: list[Mapping[str, Any]], *, expected: int,
              converged_generation: int | None, problem: tuple[str, str] | None, now: str) -> dict:
    """The JI service's new status: active/failed workers, one condition per type."""
    status = dict(ji.get("status") or {})
    active = sum(1 for d in deployments if deployment_active(d))
    failures = [(deep_get(d, "metadata", "name"), why) for d in deployments
                if (why := deployment_failed(d)) is not None]
    status.update(active=active, failed=len(failures))
    if deployments and not status.get("startTime"):
        status["startTime"] = now
    conditions = list(status.get("conditions") or [])
    if problem is not None:
        conditions = exclusive(conditions, CONDITION_TYPES, "Failed", reason=problem[0],
                                message=problem[1], now=now)
    elif failures:
        name, why = failures[0]
        conditions = exclusive(conditions, CONDITION_TYPES, "Failed", reason="WorkerFailed",
                                message=f"deployment {name}: {why}", now=now)
    elif active >= expected:
        conditions = exclusive(conditions, CONDITION_TYPES, "Running", reason="WorkersAvailable",
                                message="all workers are available", now=now)
    else:
        conditions = exclusive(conditions, CONDITION_TYPES, "Pending", reason="WorkersStarting",
                                message=f"{active}/{expected} workers available", now=now)
    status["conditions"] = conditions
    if converged_generation is not None:
        status["observedGeneration"] = converged_generation
    return status


DECLARATION = KindDeclaration(
    api=apis.JOINT_INFERENCE,
    owns=(Owns(DEPLOYMENTS), Owns(SERVICES), Owns(HPAS)),
    watches=(uses_models(apis.JOINT_INFERENCE),),
    build=build,
    status=status,
    controller="jointinferenceservice",
    component="jointinferenceservice-controller",
    report=metrics_report,
)
