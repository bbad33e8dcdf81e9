"""VideoAnalyticsJob: video analytics workers run as a Kubernetes-style Job (gm/kindlib/jobs.py),
with their Model and a Service in front of them.

As upstream (§3.9): the Model (`spec.model.name`, required) is downloaded and mounted as
`MODEL_URL`, env `WORKER_NAME` (the pod's own name), `JOB_NAME`, `NAMESPACE`,
`MODEL_NAME`, `LC_SERVER`, `KAFKA_ENABLED=true` when `kafkaSupport`, plus
`JOB_COMPLETION_INDEX`; Service `<job>-videoanalytics` on port 4000 selecting the workers.
The pods are `<job>-videoanalytics-<i>` per completion index (upstream: one random name).
The Service is an `update` child and stays while the CR exists, finished or not. A
finished job no longer needs its Model: it keeps its pods as they are even if the Model
is gone.
"""

from __future__ import annotations

from gm.kindlib import jobs
from gm.kube.resources import PODS, SERVICES, sedna_gvr
from gm.reconcile.declaration import Children, Dependencies, Owns, uses_models
from gm.workers.inputs import mount_of, ref_name, required
from gm.workers.owned import Owner, build_service, owner_of
from gm.workers.storage import StoragePlan, WorkerMount, plan_storage
from gm.workers.template import env_value
from shared import apis

KIND = apis.VIDEO_ANALYTICS.kind
ROLE = "videoanalytics"
PORT = 4000
MODELS = sedna_gvr(apis.MODEL)


def service_name(job: str) -> str:
    return f"{job}-{ROLE}"


def build(cr: dict, deps: Dependencies) -> Children:
    owner = owner_of(cr, kind=KIND)
    service = build_service(owner, name=service_name(owner.name), worker_type=ROLE, port=PORT)

    def worker() -> jobs.Worker:
        model_name, storage = _model(cr, deps, owner)
        env = (env_value("MODEL_NAME", model_name), env_value("LC_SERVER", deps.config.lc_server),
               *jobs.kafka_env(cr["spec"]))
        return jobs.Worker(role=ROLE, env=env, storage=storage)

    return {PODS: jobs.build_job_pods(cr, deps, owner=owner, worker=worker), SERVICES: [service]}


def _model(cr: dict, deps: Dependencies, owner: Owner) -> tuple[str, StoragePlan]:
    name = ref_name(cr["spec"], "model", where="spec.model")
    found = required(deps.get(MODELS, name), kind="Model", name=name, namespace=owner.namespace)
    url = mount_of(found, kind="Model", secrets=deps.secrets, namespace=owner.namespace)
    plan = plan_storage([WorkerMount(env_name="MODEL_URL", urls=(url,))],
                        image=deps.config.storage_initializer_image,
                        pull_policy=deps.config.image_pull_policy)
    return name, plan


DECLARATION = jobs.declaration(
    apis.VIDEO_ANALYTICS, role=ROLE, build=build, controller="videoanalyticsjob",
    component="VideoAnalytics-controller", owns=(Owns(SERVICES),),
    watches=(uses_models(apis.VIDEO_ANALYTICS),))
