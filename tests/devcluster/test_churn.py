"""FL-sized churn on the dev cluster, under asyncio and uvloop: every pod reaches its final state.

A FederatedLearningJob owning 601 pods is created, run to Running, its trainers finished
and the job deleted, twice; then a Deployment is scaled up and down in quick bursts and
must settle at the last count each time. Small start/termination delays keep the
kubelet's delayed requeues (often under a millisecond) in play, the path on which a
controller used to die under uvloop. No supervised task may crash. The same workloads,
bigger and timed, are bench/devcluster_churn.py.
"""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from bench.devcluster_churn import BURSTS, deployment, fl_cycle, install_fl_crd, scale_burst
from devcluster.cluster import DevCluster
from tests.conftest import assert_no_crashes

LOOPS = [pytest.param(asyncio.new_event_loop, id="asyncio"), pytest.param(uvloop.new_event_loop, id="uvloop")]


async def churn() -> DevCluster:
    dc = DevCluster(start_delay=0.01, termination_delay=0.005, resync=5.0)
    dc.start_controllers()
    try:
        install_fl_crd(dc)
        for i in range(2):
            cycle = await fl_cycle(dc, f"fl-{i}", trainers=600, within=60)
            assert cycle.pods == 601
        d_rt = dc.store.registry.lookup(group="apps", version="v1", resource="deployments")
        dc.store.create(d_rt, "default", deployment("burst", 0))
        for counts in BURSTS:
            await scale_burst(dc, "burst", counts, within=60)
        pods, _ = dc.store.list(dc.store.registry.lookup(group="", version="v1", resource="pods"), None)
        assert len(pods) == BURSTS[-1][-1]  # nothing of the FL jobs is left behind
    finally:
        await dc.stop()
    return dc


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_fl_sized_job_and_deployment_bursts_reach_their_final_state(loop_factory):
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        dc = runner.run(asyncio.wait_for(churn(), 150))
    assert_no_crashes(dc)
