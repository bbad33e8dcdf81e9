"""A Deployment whose rollout stalls gets Progressing=False/ProgressDeadlineExceeded; kubectl reports it."""

from __future__ import annotations

import json

from tests.conftest import eventually
from tests.devcluster.helpers import deployment, rt


def _progressing(store, name):
    d = store.get(rt(store, "deployments", "apps"), "default", name)
    return next((c for c in (d.get("status") or {}).get("conditions") or [] if c["type"] == "Progressing"), None)


async def test_stalled_rollout_exceeds_its_deadline_and_recovers_on_progress(live):
    store = live.store
    d_rt = rt(store, "deployments", "apps")
    stuck = deployment("stuck", replicas=1, progressDeadlineSeconds=1)
    stuck["spec"]["template"]["spec"]["nodeSelector"] = {"disk": "ssd"}  # no node has it: pods stay Pending
    store.create(d_rt, "default", stuck)
    await eventually(lambda: (_progressing(store, "stuck") or {}).get("reason") == "ProgressDeadlineExceeded",
                     message="deadline exceeded")
    cond = _progressing(store, "stuck")
    assert cond["status"] == "False"
    assert cond["message"].startswith('ReplicaSet "stuck-') and cond["message"].endswith(
        '" has timed out progressing.')

    def fix(obj):
        obj["spec"]["template"]["spec"].pop("nodeSelector")

    store.mutate(d_rt, "default", "stuck", fix)
    await eventually(lambda: (_progressing(store, "stuck") or {}).get("reason") == "NewReplicaSetAvailable",
                     message="progressing again after the fix")
    assert _progressing(store, "stuck")["status"] == "True"


async def test_healthy_rollout_never_times_out(live):
    store = live.store
    store.create(rt(store, "deployments", "apps"), "default", deployment("fine", replicas=2,
                                                                         progressDeadlineSeconds=1))
    await eventually(lambda: (_progressing(store, "fine") or {}).get("reason") == "NewReplicaSetAvailable",
                     message="complete")
    assert _progressing(store, "fine")["status"] == "True"


async def test_kubectl_rollout_status_reports_the_exceeded_deadline(cluster, kubectl):
    body = deployment("late", replicas=1, progressDeadlineSeconds=1)
    body["spec"]["template"]["spec"]["nodeSelector"] = {"disk": "ssd"}
    rc, _, err = await kubectl("create", "-f", "-", stdin=json.dumps(body))
    assert rc == 0, err
    rc, out, err = await kubectl("rollout", "status", "deploy/late", "--timeout=20s", within=30)
    assert rc != 0
    assert 'deployment "late" exceeded its progress deadline' in err
