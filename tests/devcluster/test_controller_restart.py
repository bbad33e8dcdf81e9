"""Each dev cluster controller, killed once, comes back and does its work.

A controller's task is ended from outside (cancelled) or from inside (its worker raises
after finishing a key); the supervisor must record exactly that crash, restart the
controller, and a Deployment must then go through its whole life (ReplicaSet, scheduled
and Running pods, cascade delete) while the node leases keep being renewed.
"""

from __future__ import annotations

import pytest

from devcluster.cluster import DevCluster
from tests.conftest import eventually
from tests.devcluster.helpers import deployment, rt

CONTROLLERS = ["node-lifecycle", "garbage-collector", "replicaset-controller", "deployment-controller",
               "default-scheduler", "kubelet"]


@pytest.fixture
async def dc():
    cluster = DevCluster(start_delay=0, termination_delay=0, resync=0.5, lease_interval=0.2)
    cluster.start_controllers()
    try:
        yield cluster
    finally:
        await cluster.stop()


def raise_once_after_done(ctl) -> None:
    """The next key this controller finishes ends its task with an error (the key itself is
    released first, as a bug after `done` would leave it)."""
    done = ctl.queue.done

    def failing_done(key) -> None:
        done(key)
        ctl.queue.done = done
        raise RuntimeError(f"injected failure in {ctl.name}")

    ctl.queue.done = failing_done


def _running(store, app: str) -> int:
    pods = store.list(rt(store, "pods"), "default", label_selector=f"app={app}")[0]
    return sum(1 for p in pods if p["status"].get("phase") == "Running" and p["spec"].get("nodeName"))


def lease_renewed_since(store, rv: int) -> bool:
    leases, _ = store.list(rt(store, "leases", "coordination.k8s.io"), "kube-node-lease")
    return len(leases) == 3 and all(int(le["metadata"]["resourceVersion"]) > rv for le in leases)


async def run_deployment_through_its_life(store, name: str) -> None:
    d_rt, rs_rt, pod_rt = rt(store, "deployments", "apps"), rt(store, "replicasets", "apps"), rt(store, "pods")
    store.create(d_rt, "default", deployment(name, replicas=3))

    def running():
        return len(store.list(pod_rt, "default", label_selector=f"app={name}")[0]) == 3 and _running(store, name) == 3

    await eventually(running, message="3 pods scheduled and Running")
    await eventually(lambda: store.get(d_rt, "default", name)["status"].get("availableReplicas") == 3,
                     message="deployment status available=3")
    store.delete(d_rt, "default", name)
    await eventually(lambda: not store.list(rs_rt, "default", label_selector=f"app={name}")[0]
                     and not store.list(pod_rt, "default", label_selector=f"app={name}")[0],
                     message="ReplicaSet and pods removed by cascade")


@pytest.mark.parametrize("name", CONTROLLERS)
@pytest.mark.parametrize("how", ["cancel", "raise"])
@pytest.mark.expect_log_errors(r"devcluster\.supervisor: task=controller:\S+ component=\S+ crashed")
async def test_killed_controller_comes_back_and_works(dc, name, how):
    store, ctl = dc.store, dc.controller(name)
    await eventually(lambda: lease_renewed_since(store, 0), message="leases exist")
    first = ctl.task
    if how == "cancel":
        first.cancel()
    else:
        raise_once_after_done(ctl)
        # work for every controller (the node controller has its lease renewals)
        store.create(rt(store, "deployments", "apps"), "default", deployment("trigger", replicas=1))
    await eventually(lambda: dc.crashes, message=f"{name} crashed")
    await eventually(lambda: ctl.task is not first and not ctl.task.done(), message=f"{name} restarted")
    rv = store.rv
    await run_deployment_through_its_life(store, "after")
    if how == "raise":  # what was in progress when it crashed converged too
        await eventually(lambda: _running(store, "trigger") == 1, message="trigger pod Running")
    await eventually(lambda: lease_renewed_since(store, rv), message="leases renewed after the restart")
    assert [c.task for c in dc.crashes] == [f"controller:{name}"]
    expected = "cancelled from outside" if how == "cancel" else f"RuntimeError: injected failure in {name}"
    assert expected in dc.crashes[0].error
    assert dc.supervisor.get(f"controller:{name}").restarts == 1
    assert dc.supervisor.unhealthy() == {}
