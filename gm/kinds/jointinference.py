"""JointInferenceService: two Deployments, a Service and optional HPAs per CR.

Every child is updated in place (an edit rolls the Deployments); an unchanged spec builds a
byte-identical template, so nothing rolls. The edge worker's stats reports become
`status.metrics`.

The children (cloud and edge Deployments, the cloud Service, optional HPAs): names, ports,
labels and env follow upstream (spec/upstream-gm.md §3.2, §4.4) so existing worker images run
unchanged, with two deliberate differences: `WORKER_NAME` is the pod's own name (Downward
API) instead of a random suffix regenerated on every update, and the env order is fixed, so
an unchanged spec yields an identical template and no rollout. `JOB_NAME` is added because
the worker library takes its report owner name from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gm.config import WorkerConfig
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
from gm.reports import metrics_report
from gm.workers.gojson import hem_parameters
from gm.workers.inputs import Secrets, mount_of, ref_name, required
from gm.workers.owned import (
    Owner,
    build_deployment,
    build_hpa,
    build_service,
    check_label_value,
    hpa_name,
    owner_of,
)
from gm.workers.specerrors import InvalidSpec
from gm.workers.storage import WorkerMount, plan_storage
from gm.workers.template import env_value, identity_env, render_template
from shared import apis
from shared.objects import deep_get

KIND = "JointInferenceService"
BIG_MODEL_PORT = 5000
CLOUD, EDGE = "Cloud", "Edge"


@dataclass(frozen=True, slots=True)
class JIChildren:
    """The desired children of one JointInferenceService."""

    cloud_deployment: dict[str, Any]
    edge_deployment: dict[str, Any]
    cloud_service: dict[str, Any]
    cloud_hpa: dict[str, Any] | None
    edge_hpa: dict[str, Any] | None
    edge_node: str

    def objects(self) -> tuple[dict[str, Any], ...]:
        """Every child, in upstream's creation order (cloud, its Service, edge, HPAs)."""
        ordered = (self.cloud_deployment, self.cloud_service, self.edge_deployment,
                   self.cloud_hpa, self.edge_hpa)
        return tuple(o for o in ordered if o is not None)


def deployment_name(service: str, worker_type: str) -> str:
    """`<service>-deployment-<cloud|edge>`."""
    return f"{service}-deployment-{worker_type.lower()}"


def cloud_service_name(service: str) -> str:
    """`<service>-cloud`, the Service edge workers reach the big model through."""
    return f"{service}-cloud"


def hpa_names(service: str) -> tuple[str, str]:
    """Names of the cloud and edge HPAs (for deleting one that is no longer wanted)."""
    return (hpa_name(deployment_name(service, CLOUD)), hpa_name(deployment_name(service, EDGE)))


def build_ji_children(
    ji: Mapping[str, Any],
    *,
    edge_model: Mapping[str, Any] | None,
    cloud_model: Mapping[str, Any] | None,
    config: WorkerConfig,
    secrets: Secrets | None = None,
) -> JIChildren:
    """Desired children of `ji`; Models are the looked-up objects (None when absent),
    `secrets` maps Secret name -> Secret for any credentialName the Models carry."""
    owner = owner_of(ji, kind=KIND)
    check_label_value(f"{owner.name}-{CLOUD}-svc", what="app.sedna.io label value")
    spec = ji["spec"]
    models = {
        EDGE: _model_mount(spec, EDGE, edge_model, owner=owner, secrets=secrets),
        CLOUD: _model_mount(spec, CLOUD, cloud_model, owner=owner, secrets=secrets),
    }
    host = f"{cloud_service_name(owner.name)}.{owner.namespace}"
    edge_env = _edge_env(spec, host=host, config=config)
    cloud = _deployment(owner, CLOUD, spec, models[CLOUD], [env_value(
        "BIG_MODEL_BIND_PORT", str(BIG_MODEL_PORT))], config=config)
    edge = _deployment(owner, EDGE, spec, models[EDGE], edge_env, config=config)
    node = spec["edgeWorker"]["template"].get("spec", {}).get("nodeName") or ""
    return JIChildren(
        cloud_deployment=cloud,
        edge_deployment=edge,
        cloud_service=build_service(owner, name=cloud_service_name(owner.name),
                                    worker_type=CLOUD, port=BIG_MODEL_PORT),
        cloud_hpa=_hpa(owner, CLOUD, spec),
        edge_hpa=_hpa(owner, EDGE, spec),
        edge_node=node,
    )


def _worker_spec(spec: Mapping[str, Any], worker_type: str) -> Mapping[str, Any]:
    key = f"{worker_type.lower()}Worker"
    worker = spec.get(key)
    if not isinstance(worker, Mapping):
        raise InvalidSpec("InvalidSpec", f"spec.{key} is required")
    return worker


def _model_mount(spec, worker_type, model, *, owner: Owner, secrets) -> WorkerMount:
    where = f"spec.{worker_type.lower()}Worker.model"
    name = ref_name(_worker_spec(spec, worker_type), "model", where=where)
    found = required(model, kind="Model", name=name, namespace=owner.namespace)
    url = mount_of(found, kind="Model", secrets=secrets, namespace=owner.namespace)
    return WorkerMount(env_name="MODEL_URL", urls=(url,))


def _edge_env(spec: Mapping[str, Any], *, host: str, config: WorkerConfig) -> list[dict]:
    hem = _worker_spec(spec, EDGE).get("hardExampleMining")
    if not isinstance(hem, Mapping) or not isinstance(hem.get("name"), str) or not hem["name"]:
        raise InvalidSpec("InvalidSpec", "spec.edgeWorker.hardExampleMining.name is required")
    return [
        env_value("LC_SERVER", config.lc_server),
        env_value("BIG_MODEL_IP", host),
        env_value("BIG_MODEL_PORT", str(BIG_MODEL_PORT)),
        env_value("HEM_NAME", hem["name"]),
        env_value("HEM_PARAMETERS", hem_parameters(hem.get("parameters"))),
    ]


def _deployment(owner: Owner, worker_type: str, spec, mount: WorkerMount,
                role_env: list[dict], *, config: WorkerConfig) -> dict[str, Any]:
    plan = plan_storage([mount], image=config.storage_initializer_image,
                        pull_policy=config.image_pull_policy)
    env = [
        *identity_env(namespace=owner.namespace, name=owner.name),
        env_value("MODEL_URL", plan.value("MODEL_URL")),
        *role_env,
    ]
    where = f"spec.{worker_type.lower()}Worker.template"
    rendered = render_template(_worker_spec(spec, worker_type).get("template"), where=where,
                               env=env, storage=plan)
    return build_deployment(owner, name=deployment_name(owner.name, worker_type),
                            worker_type=worker_type, app_label=f"{owner.name}-{worker_type}-svc",
                            rendered=rendered)


def _hpa(owner: Owner, worker_type: str, spec) -> dict[str, Any] | None:
    hpa = _worker_spec(spec, worker_type).get("hpa")
    if hpa is None:
        return None
    return build_hpa(owner, worker_type=worker_type,
                     deployment_name=deployment_name(owner.name, worker_type), hpa=hpa,
                     where=f"spec.{worker_type.lower()}Worker.hpa")


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
                     problem=observed.problem, now=observed.now, retrying=observed.retrying)


def ji_status(ji: Mapping[str, Any], deployments: list[Mapping[str, Any]], *, expected: int,
              converged_generation: int | None, problem: tuple[str, str] | None, now: str,
              retrying: bool = False) -> dict:
    """The JI service's new status: active/failed workers, one condition per type; a
    `retrying` problem (a Model that does not exist yet) is Pending, any other Failed."""
    status = dict(ji.get("status") or {})
    active = sum(1 for d in deployments if deployment_active(d))
    failures = [(deep_get(d, "metadata", "name"), why) for d in deployments
                if (why := deployment_failed(d)) is not None]
    status.update(active=active, failed=len(failures))
    if deployments and not status.get("startTime"):
        status["startTime"] = now
    conditions = list(status.get("conditions") or [])
    if problem is not None:
        conditions = exclusive(conditions, CONDITION_TYPES, "Pending" if retrying else "Failed",
                               reason=problem[0], message=problem[1], now=now)
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
