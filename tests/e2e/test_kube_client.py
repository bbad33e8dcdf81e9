"""The GM's raw API client against the dev cluster: verbs, typed errors, paging, watch."""

from __future__ import annotations

import asyncio

import pytest

from gm.errors import KubeConfigError as ConfigError
from gm.kube.apierrors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Expired,
    Invalid,
    NotFound,
    Unavailable,
    UnsupportedMediaType,
)
from gm.kube.client import KubeClient
from gm.kube.kubeconfig import ClientSettings, load_connection
from gm.kube.resources import CONFIGMAPS, DEPLOYMENTS, GVR, PODS
from shared.metrics import sample
from tests.e2e.conftest import connect

NS = "default"


def cm(name: str, data: dict | None = None, labels: dict | None = None) -> dict:
    # no empty labels map: as on a real server, an applied `labels: {}` is owned (and conflicts) though
    # never written
    meta = {"name": name, "namespace": NS, **({"labels": labels} if labels else {})}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {}}


async def test_create_get_replace_patch_delete_roundtrip(kube):
    created = await kube.create(CONFIGMAPS, cm("a", {"k": "1"}), namespace=NS)
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    got = await kube.get(CONFIGMAPS, "a", namespace=NS)
    assert got["data"] == {"k": "1"}

    got["data"]["k"] = "2"
    replaced = await kube.replace(CONFIGMAPS, "a", got, namespace=NS)
    assert replaced["data"] == {"k": "2"}
    assert int(replaced["metadata"]["resourceVersion"]) > int(got["metadata"]["resourceVersion"])

    merged = await kube.patch(CONFIGMAPS, "a", {"data": {"x": "y"}}, namespace=NS)
    assert merged["data"] == {"k": "2", "x": "y"}
    jp = await kube.patch(CONFIGMAPS, "a", [{"op": "remove", "path": "/data/k"}],
                          namespace=NS, patch_type="json")
    assert jp["data"] == {"x": "y"}

    await kube.delete(CONFIGMAPS, "a", namespace=NS)
    with pytest.raises(NotFound) as info:
        await kube.get(CONFIGMAPS, "a", namespace=NS)
    assert info.value.code == 404 and info.value.reason == "NotFound"
    assert info.value.status["details"]["name"] == "a"


async def test_errors_are_typed(kube):
    await kube.create(CONFIGMAPS, cm("dup"), namespace=NS)
    with pytest.raises(AlreadyExists):
        await kube.create(CONFIGMAPS, cm("dup"), namespace=NS)

    stale = await kube.get(CONFIGMAPS, "dup", namespace=NS)
    await kube.patch(CONFIGMAPS, "dup", {"data": {"n": "1"}}, namespace=NS)
    with pytest.raises(Conflict) as info:
        await kube.replace(CONFIGMAPS, "dup", stale, namespace=NS)
    assert info.value.code == 409 and info.value.reason == "Conflict"

    with pytest.raises(BadRequest):  # a JSON patch must be an array
        await kube.patch(CONFIGMAPS, "dup", {"data": {}}, namespace=NS, patch_type="json")
    with pytest.raises(Invalid):
        await kube.create(CONFIGMAPS, cm("Not_A_Valid_Name"), namespace=NS)
    with pytest.raises(NotFound):
        await kube.list(GVR("nope.example.com", "v1", "things"), namespace=NS)


async def test_strategic_patch_rejected_on_custom_resources(kube):
    crd_gvr = await ensure_widget_crd(kube)
    await kube.create(crd_gvr, widget("w1"), namespace=NS)
    with pytest.raises(UnsupportedMediaType):
        await kube.patch(crd_gvr, "w1", {"spec": {"size": 2}}, namespace=NS,
                         patch_type="strategic")


async def test_delete_with_preconditions_and_propagation(kube):
    obj = await kube.create(CONFIGMAPS, cm("pre"), namespace=NS)
    with pytest.raises(Conflict):
        await kube.delete(CONFIGMAPS, "pre", namespace=NS, preconditions={"uid": "not-the-uid"})
    await kube.delete(CONFIGMAPS, "pre", namespace=NS, propagation_policy="Background",
                      preconditions={"uid": obj["metadata"]["uid"]})
    with pytest.raises(NotFound):
        await kube.get(CONFIGMAPS, "pre", namespace=NS)


@pytest.mark.parametrize("call", [
    pytest.param(lambda k: k.get(PODS, "a/b", namespace=NS), id="slash-in-name"),
    pytest.param(lambda k: k.get(PODS, "", namespace=NS), id="empty-name"),
    pytest.param(lambda k: k.patch(PODS, "p", {}, namespace=NS, patch_type="yaml"), id="patch-type"),
    pytest.param(lambda k: k.patch(PODS, "p", {}, namespace=NS, patch_type="apply"), id="apply-no-manager"),
    pytest.param(lambda k: k.delete(PODS, "p", namespace=NS, propagation_policy="Now"), id="policy"),
    pytest.param(lambda k: k.create(PODS, {"x": {1, 2}}, namespace=NS), id="unserializable"),
])
async def test_bad_arguments_fail_before_any_request(kube, call):
    before = requests_made(kube)
    with pytest.raises(ValueError):
        await call(kube)
    assert requests_made(kube) == before


async def test_list_all_follows_continue_and_fills_kind(kube):
    for i in range(7):
        await kube.create(CONFIGMAPS, cm(f"page-{i}", labels={"set": "paged"}), namespace=NS)
    await kube.create(CONFIGMAPS, cm("other", labels={"set": "else"}), namespace=NS)
    first = await kube.list(CONFIGMAPS, namespace=NS, label_selector="set=paged", limit=3)
    assert len(first["items"]) == 3 and first["metadata"]["continue"]

    items, rv = await kube.list_all(CONFIGMAPS, namespace=NS, label_selector="set=paged",
                                    page_size=3)
    assert sorted(o["metadata"]["name"] for o in items) == [f"page-{i}" for i in range(7)]
    assert all(o["kind"] == "ConfigMap" and o["apiVersion"] == "v1" for o in items)
    assert int(rv) >= max(int(o["metadata"]["resourceVersion"]) for o in items)
    assert sample(kube.metrics.registry, "sedna_gm_api_requests_total", verb="list", code="200") >= 4


async def test_apply_patch_creates_then_merges(kube):
    body = cm("applied", {"a": "1"})
    created = await kube.patch(CONFIGMAPS, "applied", body, namespace=NS, patch_type="apply",
                               field_manager="sedna-gm")
    assert created["data"] == {"a": "1"}
    updated = await kube.patch(CONFIGMAPS, "applied", cm("applied", {"b": "2"}), namespace=NS,
                               patch_type="apply", field_manager="sedna-gm", force=True)
    assert updated["data"] == {"b": "2"}  # the applier dropped `a`, which nobody else owns
    shared = await kube.patch(CONFIGMAPS, "applied", cm("applied", {"c": "3"}), namespace=NS,
                              patch_type="apply", field_manager="other")
    assert shared["data"] == {"b": "2", "c": "3"}


async def test_watch_streams_changes_and_bookmarks_then_ends(kube):
    _, rv = await kube.list_all(CONFIGMAPS, namespace=NS)
    stream = kube.watch(CONFIGMAPS, namespace=NS, resource_version=rv, timeout_seconds=1)
    seen = []
    async with stream:
        await kube.create(CONFIGMAPS, cm("w", {"v": "1"}), namespace=NS)
        await kube.patch(CONFIGMAPS, "w", {"data": {"v": "2"}}, namespace=NS)
        await kube.delete(CONFIGMAPS, "w", namespace=NS)
        async for event_type, obj in stream:
            if event_type != "BOOKMARK":
                seen.append((event_type, obj["metadata"]["name"], obj["data"]["v"]))
    # the server closes the stream after timeoutSeconds: iteration ends cleanly
    assert seen == [("ADDED", "w", "1"), ("MODIFIED", "w", "2"), ("DELETED", "w", "2")]
    assert int(stream.resource_version) > int(rv)


async def test_watch_from_compacted_rv_raises_expired(kube, cluster):
    await kube.create(CONFIGMAPS, cm("old"), namespace=NS)
    _, rv = await kube.list_all(CONFIGMAPS, namespace=NS)
    await kube.create(CONFIGMAPS, cm("newer"), namespace=NS)
    cluster.store.compact()
    with pytest.raises(Expired) as info:
        async with kube.watch(CONFIGMAPS, namespace=NS, resource_version=rv,
                              timeout_seconds=5) as stream:
            async for _ in stream:
                pass
    assert info.value.code == 410


async def test_transport_failure_is_unavailable_and_counted(cluster):
    conn = await load_connection(ClientSettings(master="http://127.0.0.1:9"))  # discard port
    async with KubeClient(conn, settings=ClientSettings(master=conn.base_url, timeout=2)) as k:
        with pytest.raises(Unavailable) as info:
            await k.get(PODS, "p", namespace=NS)
        assert info.value.code == 0
        assert sample(k.metrics.registry, "sedna_gm_api_requests_total", verb="get", code="error") == 1


@pytest.mark.parametrize("code,reason", [
    pytest.param(500, "InternalError", id="500"),
    pytest.param(503, "ServiceUnavailable", id="503"),
    pytest.param(429, "TooManyRequests", id="429"),
])
async def test_server_errors_are_unavailable(kube, cluster, code, reason):
    cluster.faults.configure({"errors": [{"rate": 1, "verb": "get", "resource": "configmaps",
                                          "code": code}]})
    with pytest.raises(Unavailable) as info:
        await kube.get(CONFIGMAPS, "any", namespace=NS)
    assert (info.value.code, info.value.reason) == (code, reason)
    assert sample(kube.metrics.registry, "sedna_gm_api_requests_total", verb="get", code=str(code)) == 1
    cluster.faults.configure({"reset": True})
    with pytest.raises(NotFound):
        await kube.get(CONFIGMAPS, "any", namespace=NS)


async def test_client_qps_limit_spaces_requests(cluster, tmp_path):
    async with await connect(cluster, tmp_path, qps=50, burst=1) as k:
        loop = asyncio.get_running_loop()
        start = loop.time()
        for _ in range(6):
            await k.list(CONFIGMAPS, namespace=NS, limit=1)
        assert loop.time() - start >= 5 / 50 * 0.9
        assert sample(k.metrics.registry, "sedna_gm_api_rate_limiter_wait_seconds_count") >= 4


async def test_missing_kubeconfig_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        await load_connection(ClientSettings(kubeconfig=str(tmp_path / "absent")))


async def test_deployments_path_for_group_resources(kube):
    dep = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": NS},
           "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    created = await kube.create(DEPLOYMENTS, dep, namespace=NS)
    assert created["metadata"]["generation"] == 1
    status = await kube.get(DEPLOYMENTS, "web", namespace=NS, subresource="status")
    assert status["metadata"]["name"] == "web"


# -- a small CRD for tests that need a custom resource -------------------------------------

WIDGETS = GVR("test.sedna.io", "v1", "widgets")


def widget(name: str, size: int = 1) -> dict:
    return {"apiVersion": "test.sedna.io/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": NS}, "spec": {"size": size}}


async def ensure_widget_crd(kube: KubeClient) -> GVR:
    crds = GVR("apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False)
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    body = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.test.sedna.io"},
            "spec": {"group": "test.sedna.io", "scope": "Namespaced",
                     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                               "listKind": "WidgetList"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": schema},
                                   "subresources": {"status": {}}}]}}
    try:
        await kube.create(crds, body)
    except AlreadyExists:
        pass
    async with asyncio.timeout(5):
        while True:
            try:
                await kube.list(WIDGETS, namespace=NS, limit=1)
                return WIDGETS
            except NotFound:
                await asyncio.sleep(0.02)


def requests_made(kube: KubeClient) -> float:
    """API requests of every verb and code so far."""
    return sum(s.value for family in kube.metrics.registry.collect() for s in family.samples
               if s.name == "sedna_gm_api_requests_total")
