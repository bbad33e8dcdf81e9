"""kubernetes_asyncio 36 against the server: typed CRUD, watch/resume/410, and model deserialization."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.rest import ApiException

from tests.devcluster.conftest import ApiServer, crd, deployment, pod


@pytest.fixture
async def api(apiserver: ApiServer) -> AsyncIterator[client.ApiClient]:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(apiserver.kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api_client:
        yield api_client


async def test_core_crud_and_conflict(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod("default", pod("p1", {"app": "x"}))
    assert isinstance(created, client.V1Pod) and created.status.phase == "Pending"
    assert created.metadata.creation_timestamp is not None
    read = await core.read_namespaced_pod("p1", "default")
    assert read.metadata.uid == created.metadata.uid
    pods = await core.list_namespaced_pod("default", label_selector="app=x")
    assert [p.metadata.name for p in pods.items] == ["p1"]
    patched = await core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"b": "2"}}})
    assert patched.metadata.labels == {"app": "x", "b": "2"}
    read.metadata.labels = {"stale": "yes"}
    with pytest.raises(ApiException) as info:
        await core.replace_namespaced_pod("p1", "default", read)
    assert info.value.status == 409
    with pytest.raises(ApiException) as info:
        await core.read_namespaced_pod("nope", "default")
    assert info.value.status == 404
    deleted = await core.delete_namespaced_pod("p1", "default", propagation_policy="Foreground")
    assert deleted.metadata.name == "p1"


async def test_apps_scale_and_status(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    d = await apps.create_namespaced_deployment("default", deployment("web", 2))
    assert d.spec.strategy.type == "RollingUpdate" and d.metadata.generation == 1
    scale = await apps.patch_namespaced_deployment_scale("web", "default", {"spec": {"replicas": 5}},
                                                         _content_type="application/merge-patch+json")
    assert isinstance(scale, client.V1Scale) and scale.spec.replicas == 5
    d = await apps.read_namespaced_deployment("web", "default")
    d.status = client.V1DeploymentStatus(replicas=5, observed_generation=d.metadata.generation)
    st = await apps.replace_namespaced_deployment_status("web", "default", d)
    assert st.status.replicas == 5 and st.status.observed_generation == 2


async def test_custom_objects(api: client.ApiClient, apiserver: ApiServer) -> None:
    ext = client.ApiextensionsV1Api(api)
    created = await ext.create_custom_resource_definition(crd())
    assert any(c.type == "Established" and c.status == "True" for c in created.status.conditions)
    co = client.CustomObjectsApi(api)
    args = ("sedna.io", "v1alpha1", "default", "widgets")
    w = await co.create_namespaced_custom_object(*args, {"apiVersion": "sedna.io/v1alpha1", "kind": "Widget",
                                                         "metadata": {"name": "w"}, "spec": {"size": 1}})
    assert w["spec"] == {"size": 1, "mode": "fast"}
    with pytest.raises(ApiException) as info:
        await co.patch_namespaced_custom_object(*args, "w", {"spec": {"size": 2}})  # goes out as json-patch
    assert info.value.status == 400
    w = await co.patch_namespaced_custom_object(*args, "w", {"spec": {"size": 2}},
                                                _content_type="application/merge-patch+json")
    assert w["spec"]["size"] == 2 and w["metadata"]["generation"] == 2
    w["status"] = {"phase": "Running"}
    st = await co.replace_namespaced_custom_object_status(*args, "w", w)
    assert st["status"] == {"phase": "Running"} and st["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as info:
        await co.create_namespaced_custom_object(*args, {"metadata": {"name": "bad"}, "spec": {"size": -1}})
    assert info.value.status == 422 and "spec.size" in info.value.body


async def test_watch_resume_and_410(api: client.ApiClient, apiserver: ApiServer) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("a"))
    listed = await core.list_namespaced_pod("default")
    rv = listed.metadata.resource_version
    await core.create_namespaced_pod("default", pod("b"))
    await core.delete_namespaced_pod("a", "default")
    seen = []
    async with watch.Watch() as w:
        async for ev in w.stream(core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=1):
            seen.append((ev["type"], ev["object"].metadata.name))
            if len(seen) == 2:
                break
    assert seen == [("ADDED", "b"), ("DELETED", "a")]
    apiserver.store.compact()
    with pytest.raises(ApiException) as info:
        async with watch.Watch() as w:
            async for _ in w.stream(core.list_namespaced_pod, "default", resource_version=rv):
                pass
    assert info.value.status == 410
    relisted = await core.list_namespaced_pod("default")  # the client's recovery: list again, watch from there
    assert [p.metadata.name for p in relisted.items] == ["b"]


async def test_watch_with_bookmarks_ends_at_timeout(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    types = []
    async with asyncio.timeout(5), watch.Watch() as w:
        async for ev in w.stream(core.list_namespaced_pod, "default", allow_watch_bookmarks=True, timeout_seconds=1):
            types.append(ev["type"])
    assert types and set(types) == {"BOOKMARK"}


async def test_every_kind_deserializes(api: client.ApiClient, apiserver: ApiServer) -> None:
    store = apiserver.store
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    coord = client.CoordinationV1Api(api)
    node = {"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "status": {"nodeInfo": {k: "x" for k in (
                "machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion",
                "kubeletVersion", "kubeProxyVersion", "operatingSystem", "architecture")},
                       "conditions": [{"type": "Ready", "status": "True"}]}}
    await core.create_node(node)
    assert (await core.read_node("n1")).status.node_info.kubelet_version == "x"
    p = await core.create_namespaced_pod("default", pod("p", nodeName="n1"))
    store.record_event(store.get(store.registry.for_kind("v1", "Pod"), "default", "p"),
                       reason="Started", message="Started container c", component="kubelet")
    events = await core.list_namespaced_event("default", field_selector=f"involvedObject.uid={p.metadata.uid}")
    assert events.items[0].involved_object.name == "p" and events.items[0].count == 1
    svc = await core.create_namespaced_service("default", {"metadata": {"name": "s"},
                                                           "spec": {"type": "NodePort", "ports": [{"port": 80}]}})
    assert svc.spec.cluster_ip and svc.spec.ports[0].node_port >= 30000
    lease = {"metadata": {"name": "gm"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15,
                                                   "renewTime": "2026-01-01T00:00:05.123456Z"}}
    created = await coord.create_namespaced_lease("default", lease)
    assert created.spec.holder_identity == "a"
    created.spec.holder_identity = "b"
    assert (await coord.replace_namespaced_lease("gm", "default", created)).spec.holder_identity == "b"
    with pytest.raises(ApiException) as info:
        await coord.replace_namespaced_lease("gm", "default", created)  # stale RV: lost election race
    assert info.value.status == 409
    await apps.create_namespaced_deployment("default", deployment("web"))
    assert (await apps.list_namespaced_deployment("default")).items[0].spec.replicas == 1
    assert (await apps.list_namespaced_replica_set("default")).items == []
    for ns in (await core.list_namespace()).items:
        assert ns.status.phase == "Active"
