"""ReidJob: re-identification workers run as a Kubernetes-style Job (gm/kindlib/jobs.py).

Upstream starts one pod `<job>-reid-<random>` and ignores the JobSpec; here the pods are
`<job>-reid-<i>` per completion index, retried up to `backoffLimit`, bounded by
`activeDeadlineSeconds` and deleted with the CR `ttlSecondsAfterFinished` after it ends.
Env as upstream (§3.8): `WORKER_NAME` (the pod's own name), `JOB_NAME`, `NAMESPACE`,
`LC_SERVER`, `KAFKA_ENABLED=true` when `kafkaSupport`; plus `JOB_COMPLETION_INDEX`. No
Service (upstream's `ReidPort` constant is unused). Reports: see `jobs.declaration`.
"""

from __future__ import annotations

from gm.kindlib import jobs
from gm.kube.resources import PODS
from gm.reconcile.declaration import Children, Dependencies
from gm.workers.owned import owner_of
from gm.workers.storage import StoragePlan
from gm.workers.template import env_value
from shared import apis

KIND = apis.REID.kind
ROLE = "reid"


def build(cr: dict, deps: Dependencies) -> Children:
    def worker() -> jobs.Worker:
        env = (env_value("LC_SERVER", deps.config.lc_server), *jobs.kafka_env(cr["spec"]))
        return jobs.Worker(role=ROLE, env=env, storage=StoragePlan())

    return {PODS: jobs.build_job_pods(cr, deps, owner=owner_of(cr, kind=KIND), worker=worker)}


DECLARATION = jobs.declaration(apis.REID, role=ROLE, build=build, controller="reidjob",
                               component="Reid-controller")
