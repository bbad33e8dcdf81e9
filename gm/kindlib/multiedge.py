"""What ObjectSearchService and ObjectTrackingService share: the re-identification
Deployment and its Service, the tracking worker pods and the status rules.

Both kinds run one tracking worker per camera (a Pod per `spec.trackingWorkers` entry) that
sends what it sees to a pool of re-identification workers (the embedded DeploymentSpec
`spec.reidWorkers`) behind the EdgeMesh Service `<name>-reidworker` on 9378. Names, ports,
worker types and env follow upstream's ObjectSearch controller (spec/upstream-gm.md §3.7,
§3.12); departures, on purpose:

- Tracking pods are named `<name>-trackingworker-<i>` (upstream: a generateName suffix), and
  every worker's `WORKER_NAME` is its pod's own name (upstream: `trackingworker-<5 random>`,
  new on every create). A tracking pod's spec hash covers its own template only, so editing
  one camera's worker recreates that pod alone, under the same name.
- The reid Deployment honours the whole DeploymentSpec `spec.reidWorkers` the way every
  embedded DeploymentSpec is honoured (gm/workers/deployspec.py, as FeatureExtractionService
  does; upstream copies replicas and the template only): `replicas` defaults to 1, the
  rollout knobs (`strategy`, `minReadySeconds`, `paused`, `progressDeadlineSeconds`,
  `revisionHistoryLimit`) are checked and copied, and the user's `selector` is kept with
  the CR's worker labels added. A selector that does not select the template is a Failed
  condition (`InvalidSelector`), and so is an edit of the selector once the Deployment
  exists (`SelectorImmutable`): the API server refuses such an update, so the running
  Deployment is left as it is until the user restores the selector or recreates the CR.
  The user worker's Deployment (ObjectSearchService) is not an embedded DeploymentSpec:
  one replica, selected by the worker labels.
- The reid workers get `NAMESPACE`, `SERVICE_NAME` and `WORKER_NAME` like the other workers
  (upstream gives them no env at all).
- A tracking pod keeps its template's restartPolicy (upstream forces none either). A failed
  tracking pod or Deployment makes the service Failed, but not for good (upstream: terminal):
  the service keeps being reconciled and goes back to Running once its workers are healthy
  again (e.g. after the failed pod is deleted and so recreated). A tracking pod that ended
  successfully is neither: it counts as not running (the service shows Pending with the
  count) until it is deleted, and so recreated, or edited.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gm.kindlib.conditions import deployment_active, deployment_failed, exclusive
from gm.kube.resources import DEPLOYMENTS, PODS, SERVICES
from gm.reconcile.declaration import Build, KindDeclaration, Observed, Owns
from gm.reports import metrics_report
from gm.workers.deployspec import InlineDeployment, check_selector_kept, inline_deployment
from gm.workers.inputs import object_list
from gm.workers.owned import (
    Owner,
    build_deployment,
    build_pod,
    build_service,
    check_label_value,
    owner_of,
)
from gm.workers.specerrors import InvalidSpec
from gm.workers.storage import StoragePlan
from gm.workers.template import env_field, env_value, render_template
from shared import apis
from shared.objects import deep_get

REID, TRACKING, USER = "reidworker", "trackingworker", "userworker"
REID_PORT = 9378
CONDITION_TYPES = ("Pending", "Running", "Failed")
OWNS = (Owns(DEPLOYMENTS), Owns(SERVICES), Owns(PODS, on_edit="recreate"))
REID_WHERE = "spec.reidWorkers"

def deployment_name(service: str, worker_type: str) -> str:
    """`<service>-deployment-<worker type>`."""
    return f"{service}-deployment-{worker_type}"


def service_name(service: str, worker_type: str) -> str:
    """`<service>-<worker type>`, the EdgeMesh Service in front of that worker type."""
    return f"{service}-{worker_type}"


def service_host(owner: Owner, worker_type: str, port: int) -> str:
    """`<service>-<worker type>.<namespace>:<port>`, how the workers reach each other."""
    return f"{service_name(owner.name, worker_type)}.{owner.namespace}:{port}"


def tracking_pod_name(service: str, index: int) -> str:
    return f"{service}-trackingworker-{index}"


def checked_owner(cr: Mapping[str, Any], *, kind: str) -> Owner:
    """The CR's owner identity, with the Deployments' `app.sedna.io` label value checked."""
    owner = owner_of(cr, kind=kind)
    check_label_value(f"{owner.name}-{REID}-svc", what="app.sedna.io label value")
    return owner


def worker_env(owner: Owner, *, name: str | None = None) -> list[dict[str, Any]]:
    """`NAMESPACE`, `SERVICE_NAME` and `WORKER_NAME`: the pod's name, given for a Pod,
    else read through the Downward API (a Deployment's pods)."""
    return [
        env_value("NAMESPACE", owner.namespace),
        env_value("SERVICE_NAME", owner.name),
        env_value("WORKER_NAME", name) if name else env_field("WORKER_NAME", "metadata.name"),
    ]


def worker_deployment(owner: Owner, worker_type: str, template: Any, *, where: str,
                      inline: InlineDeployment) -> dict[str, Any]:
    """A Deployment `<service>-deployment-<worker type>` running `template`, shaped by the
    checked DeploymentSpec `inline`."""
    rendered = render_template(template, where=where, env=worker_env(owner), storage=StoragePlan())
    return build_deployment(owner, name=deployment_name(owner.name, worker_type),
                            worker_type=worker_type, app_label=f"{owner.name}-{worker_type}-svc",
                            rendered=rendered, inline=inline)


def worker_service(owner: Owner, worker_type: str, port: int) -> dict[str, Any]:
    return build_service(owner, name=service_name(owner.name, worker_type),
                         worker_type=worker_type, port=port)


def reid_children(owner: Owner, spec: Mapping[str, Any],
                  observed: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The reid Deployment (from the embedded DeploymentSpec) and its Service on 9378;
    `observed` are the CR's Deployments now, against which a selector edit is refused."""
    reid = spec.get("reidWorkers")
    if not isinstance(reid, Mapping):
        raise InvalidSpec("InvalidSpec", "spec.reidWorkers must be a DeploymentSpec object")
    inline = inline_deployment(reid, where=REID_WHERE)
    deployment = worker_deployment(owner, REID, reid.get("template"),
                                   where=f"{REID_WHERE}.template", inline=inline)
    check_selector_kept(deployment, observed, where=REID_WHERE)
    return deployment, worker_service(owner, REID, REID_PORT)


def tracking_pods(owner: Owner, spec: Mapping[str, Any],
                  urls: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """One Pod per tracking worker, with the common env and then `urls` (name, value)."""
    pods = []
    for i, worker in enumerate(object_list(spec, "trackingWorkers", what="worker")):
        name = tracking_pod_name(owner.name, i)
        env = [*worker_env(owner, name=name), *(env_value(k, v) for k, v in urls)]
        rendered = render_template(worker.get("template"), where=f"spec.trackingWorkers[{i}].template",
                                   env=env, storage=StoragePlan())
        pods.append(build_pod(owner, name=name, worker_type=TRACKING, rendered=rendered))
    return pods


def reid_url(owner: Owner) -> tuple[str, str]:
    """`EDGEMESH_URL`: where a tracking worker sends its crops (the reid Service)."""
    return ("EDGEMESH_URL", service_host(owner, REID, REID_PORT))


def declaration(api: apis.SednaKind, build: Build, *, controller: str,
                component: str) -> KindDeclaration:
    """A multi-edge kind: it owns Deployments and Services (updated in place, so they roll)
    and Pods (recreated under the same name), watches nothing, shares the status rules, and
    its reports' `ownerInfo` becomes `status.metrics`."""
    return KindDeclaration(api=api, owns=OWNS, build=build, status=service_status,
                           controller=controller, component=component, report=metrics_report)


# -- status ---------------------------------------------------------------------------


def service_status(cr: Mapping[str, Any], observed: Observed) -> dict[str, Any]:
    """active = available Deployments + running tracking pods, failed = failed Deployments +
    failed tracking pods, and one Pending/Running/Failed condition with its reason."""
    status = dict(cr.get("status") or {})
    deployments, pods = observed.wanted(DEPLOYMENTS), observed.wanted(PODS)
    available = sum(1 for d in deployments if deployment_active(d))
    running = sum(1 for p in pods if _running(p))
    failures = _failures(deployments, pods)
    status.update(active=available + running, failed=len(failures))
    if (deployments or pods) and not status.get("startTime"):
        status["startTime"] = observed.now
    expected = observed.desired_count(DEPLOYMENTS) + observed.desired_count(PODS)
    status["conditions"] = _conditions(list(status.get("conditions") or []), observed,
                                       failures=failures, active=available + running,
                                       expected=expected)
    return status


def _running(pod: Mapping[str, Any]) -> bool:
    return (deep_get(pod, "status", "phase") == "Running"
            and not deep_get(pod, "metadata", "deletionTimestamp"))


def _failures(deployments: list[dict], pods: list[dict]) -> list[tuple[str, str]]:
    """(reason, message) per failed worker, tracking pods first (as upstream ranks them)."""
    out = []
    for pod in pods:
        if deep_get(pod, "status", "phase") == "Failed":
            why = deep_get(pod, "status", "message") or deep_get(pod, "status", "reason") or "phase Failed"
            out.append(("PodFailed", f"tracking worker {pod['metadata']['name']} failed: {why}"))
    for dep in deployments:
        if (why := deployment_failed(dep)) is not None:
            out.append(("DeploymentFailed", f"deployment {dep['metadata']['name']}: {why}"))
    return out


def _conditions(conditions: list[dict], observed: Observed, *, failures: list[tuple[str, str]],
                active: int, expected: int) -> list[dict]:
    now = observed.now
    if observed.problem is not None:
        reason, message = observed.problem
        if observed.retrying:  # a missing object the GM waits for
            return exclusive(conditions, CONDITION_TYPES, "Pending", reason=reason, message=message, now=now)
    elif failures:
        reason, message = failures[0]
    elif expected and active >= expected and observed.all_present(DEPLOYMENTS) \
            and observed.all_present(PODS):
        return exclusive(conditions, CONDITION_TYPES, "Running", reason="WorkersAvailable",
                         message="all workers are available", now=now)
    else:
        return exclusive(conditions, CONDITION_TYPES, "Pending", reason="WorkersStarting",
                         message=f"{active}/{expected} workers available", now=now)
    return exclusive(conditions, CONDITION_TYPES, "Failed", reason=reason, message=message, now=now)

