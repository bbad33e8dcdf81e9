"""ReidJob: re-identification workers run as a Kubernetes-style Job (gm/kinds/jobs.py).

Upstream starts one pod `<job>-reid-<random>` and ignores the JobSpec; here the pods are
`<job>-reid-<i>` per completion index, retried up to `backoffLimit`, bounded by
`activeDeadlineSeconds` and deleted with the CR `ttlSecondsAfterFinished` after it ends.
Env as upstream (§3.8): `WORKER_NAME` (the pod's own name), `JOB_NAME`, `NAMESPACE`,
`LC_SERVER`, `KAFKA_ENABLED=true` when `kafkaSupport`; plus `JOB_COMPLETION_INDEX`. No
Service (upstream's `ReidPort` constant is unused). Reports: see `jobs.report`.
"""

from __future__ import annotations

from gm.controllers.declare import Children, Dependencies, KindDeclaration, Observed, Owns
from gm.kinds import jobs
from gm.kube.resources import PODS
from gm.workers.children import owner_of
from gm.workers.storage import StoragePlan
from gm.workers.template import env_value
from shared import apis

KIND = apis.REID.kind
ROLE = "reid"


def build(cr: dict, deps: Dependencies) -> Children:
    owner = owner_of(cr, kind=KIND)
    pods = deps.observed(PODS)
    if jobs.finished(cr):
        return {PODS: jobs.final_pods(pods)}
    env = (env_value("LC_SERVER", deps.config.lc_server), *jobs.kafka_env(cr["spec"]))
    worker = jobs.Worker(role=ROLE, env=env, storage=StoragePlan())
    return {PODS: jobs.build_job_pods(cr, pods, owner=owner, worker=worker, now=deps.now)}


def status(cr: dict, observed: Observed) -> dict:
    return jobs.job_status(cr, observed, role=ROLE, kind=KIND)


DECLARATION = KindDeclaration(
    api=apis.REID,
    owns=(Owns(PODS, on_edit="recreate", frozen_when_finished=True),),
    build=build,
    status=status,
    controller="reidjob",
    component="Reid-controller",
    finished=jobs.finished,
    wake=jobs.wake,
    expired=jobs.expired,
    report=jobs.report,
)
