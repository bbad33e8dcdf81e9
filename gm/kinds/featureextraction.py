"""FeatureExtractionService: one Deployment from the DeploymentSpec the spec embeds, a
Service in front of it, and the Model mounted as `MODEL_URL`.

Names, port, labels and env are upstream's (spec/upstream-gm.md §3.6, §3.12): Deployment
`<name>-deployment-fe`, Service `<name>-fe` on 6000, worker type `fe`, env `NAMESPACE`,
`SERVICE_NAME`, `WORKER_NAME`, `LC_SERVER`, `MODEL_URL` and `KAFKA_ENABLED=true` with
`kafkaSupport`. Departures, on purpose:

- `replicas` defaults to 1 (upstream crashes the GM when it is omitted), and the user's
  selector, strategy and other DeploymentSpec knobs are honoured (upstream drops them);
  see gm/workers/deployspec.py. A selector that does not select the template is a Failed
  condition (`InvalidSelector`), and so is an edit of the selector once the Deployment
  exists (`SelectorImmutable`): the API server would refuse the update on every reconcile.
- `WORKER_NAME` is the pod's own name (Downward API), not five random letters, and the env
  order is fixed, so an unchanged spec builds an identical template and nothing rolls.
  `JOB_NAME` is added as for JointInferenceService: the worker library names the report's
  owner from it.
- Status comes from the Deployment and is never terminal: upstream counts three
  Deployments where it makes one and so marks every service Failed for good after its
  first sync. Here Failed (a bad spec, a missing Model, a failing Deployment) recovers
  when its cause goes away. `active`/`failed` count the Deployment (1 or 0 each), as for
  JointInferenceService.
- Reports: upstream's handler (op `status`): `output.ownerInfo` without its two times
  becomes `status.metrics`, sorted by key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gm.kindlib.conditions import deployment_active, deployment_failed, exclusive
from gm.kube.resources import DEPLOYMENTS, SERVICES, sedna_gvr
from gm.reconcile.declaration import Dependencies, KindDeclaration, Observed, Owns, uses_models
from gm.reports import metrics_report
from gm.workers.deployspec import InlineDeployment, check_selector_kept, inline_deployment
from gm.workers.inputs import mount_of, ref_name, required
from gm.workers.owned import Owner, build_deployment, build_service, check_label_value, owner_of
from gm.workers.specerrors import InvalidSpec
from gm.workers.storage import WorkerMount, plan_storage
from gm.workers.template import env_value, identity_env, render_template
from shared import apis
from shared.objects import deep_get

API = apis.FEATURE_EXTRACTION
KIND = API.kind
WORKER_TYPE = "fe"
PORT = 6000
MODELS = sedna_gvr(apis.MODEL)
PENDING, RUNNING, FAILED = API.condition_types


def deployment_name(service: str) -> str:
    """`<service>-deployment-fe`."""
    return f"{service}-deployment-{WORKER_TYPE}"


def service_name(service: str) -> str:
    """`<service>-fe`, the Service the workers are reached through."""
    return f"{service}-{WORKER_TYPE}"


# -- build -------------------------------------------------------------------------------


def build(cr: dict, deps: Dependencies) -> dict:
    """The Deployment and the Service of `cr`."""
    owner = owner_of(cr, kind=KIND)
    spec = cr["spec"]
    app_label = f"{owner.name}-{WORKER_TYPE}-svc"
    check_label_value(app_label, what="app.sedna.io label value")
    inline = inline_deployment(spec, where="spec")
    deployment = _deployment(owner, spec, inline, app_label=app_label, deps=deps)
    check_selector_kept(deployment, deps.observed(DEPLOYMENTS), where="spec")
    service = build_service(owner, name=service_name(owner.name), worker_type=WORKER_TYPE,
                            port=PORT)
    return {DEPLOYMENTS: [deployment], SERVICES: [service]}


def _deployment(owner: Owner, spec: Mapping[str, Any], inline: InlineDeployment, *,
                app_label: str, deps: Dependencies) -> dict[str, Any]:
    config = deps.config
    plan = plan_storage([_model_mount(owner, spec, deps)], image=config.storage_initializer_image,
                        pull_policy=config.image_pull_policy)
    env = [
        *identity_env(namespace=owner.namespace, name=owner.name),
        env_value("LC_SERVER", config.lc_server),
        env_value("MODEL_URL", plan.value("MODEL_URL")),
    ]
    if _kafka(spec):
        env.append(env_value("KAFKA_ENABLED", "true"))
    rendered = render_template(spec.get("template"), where="spec.template", env=env, storage=plan)
    return build_deployment(owner, name=deployment_name(owner.name), worker_type=WORKER_TYPE,
                            app_label=app_label, rendered=rendered, inline=inline)


def _model_mount(owner: Owner, spec: Mapping[str, Any], deps: Dependencies) -> WorkerMount:
    name = ref_name(spec, "model", where="spec.model")
    model = required(deps.get(MODELS, name), kind="Model", name=name, namespace=owner.namespace)
    url = mount_of(model, kind="Model", secrets=deps.secrets, namespace=owner.namespace)
    return WorkerMount(env_name="MODEL_URL", urls=(url,))


def _kafka(spec: Mapping[str, Any]) -> bool:
    value = spec.get("kafkaSupport")
    if value is not None and not isinstance(value, bool):
        raise InvalidSpec("InvalidSpec", f"spec.kafkaSupport must be true or false, not {value!r}")
    return bool(value)


# -- status ------------------------------------------------------------------------------


def status(cr: dict, observed: Observed) -> dict:
    """active/failed from the Deployment, one condition per type, reported metrics kept."""
    out = dict(cr.get("status") or {})
    deployments = observed.wanted(DEPLOYMENTS)
    out["active"] = sum(1 for d in deployments if deployment_active(d))
    out["failed"] = sum(1 for d in deployments if deployment_failed(d) is not None)
    if deployments and not out.get("startTime"):
        out["startTime"] = observed.now
    current, reason, message = _condition(deployments, observed.problem, retrying=observed.retrying)
    out["conditions"] = exclusive(list(out.get("conditions") or []), API.condition_types, current,
                                  reason=reason, message=message, now=observed.now)
    return out


def _condition(deployments: list[dict], problem: tuple[str, str] | None, *,
               retrying: bool = False) -> tuple[str, str, str]:
    """(type, reason, message) of the one True condition; a problem the GM retries waits."""
    if problem is not None:
        return (PENDING if retrying else FAILED), *problem
    for dep in deployments:
        why = deployment_failed(dep)
        if why is not None:
            return FAILED, "WorkerFailed", f"deployment {dep['metadata']['name']}: {why}"
    if not deployments:
        return PENDING, "WorkersCreating", "the worker Deployment is being created"
    dep = deployments[0]
    ready = f"{_available(dep)}/{deep_get(dep, 'spec', 'replicas', default=1)} replicas available"
    if deployment_active(dep):
        return RUNNING, "WorkersAvailable", ready
    return PENDING, "WorkersStarting", ready


def _available(dep: Mapping[str, Any]) -> int:
    return deep_get(dep, "status", "availableReplicas", default=0) or 0


DECLARATION = KindDeclaration(
    api=API,
    owns=(Owns(DEPLOYMENTS), Owns(SERVICES)),
    build=build,
    status=status,
    watches=(uses_models(API),),
    controller="featureextractionservice",
    component="featureextractionservice-controller",
    report=metrics_report,
)
