"""kubernetes_asyncio's typed clients on the workload APIs: models deserialize, status moves."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client, config

from tests.conftest import eventually
from tests.devcluster.test_daemonset import daemonset
from tests.devcluster.test_job import job


@pytest.fixture
async def api(cluster, tmp_path) -> AsyncIterator[client.ApiClient]:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(tmp_path / "kubeconfig"), client_configuration=cfg)
    async with client.ApiClient(cfg) as api_client:
        yield api_client


async def test_typed_daemonset_and_job(api: client.ApiClient) -> None:
    apps, batch = client.AppsV1Api(api), client.BatchV1Api(api)
    created = await apps.create_namespaced_daemon_set("default", daemonset("agent"))
    assert isinstance(created, client.V1DaemonSet)
    assert created.status.desired_number_scheduled == 0

    async def ds_ready():
        ds = await apps.read_namespaced_daemon_set_status("agent", "default")
        return ds.status.number_available == 3 and ds.status.observed_generation == 1

    await eventually(ds_ready, message="daemon set available on three nodes")
    made = await batch.create_namespaced_job("default", job("once"))
    assert made.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": made.metadata.uid}

    async def complete():
        j = await batch.read_namespaced_job_status("once", "default")
        return any(c.type == "Complete" and c.status == "True" for c in j.status.conditions or [])

    await eventually(complete, message="job complete")
    j = await batch.read_namespaced_job("once", "default")
    assert j.status.succeeded == 1 and j.status.completion_time is not None
    hpa = await client.AutoscalingV1Api(api).create_namespaced_horizontal_pod_autoscaler("default", {
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "agent"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "agent"},
                 "maxReplicas": 2, "targetCPUUtilizationPercentage": 50}})
    assert hpa.spec.target_cpu_utilization_percentage == 50
    v2 = await client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler("agent", "default")
    assert v2.spec.metrics[0].resource.target.average_utilization == 50
