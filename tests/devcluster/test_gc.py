"""Garbage collector through the store: background, foreground, orphan, dangling owners."""

import copy

import pytest

from tests.conftest import eventually
from tests.devcluster.helpers import deployment, names, owned_by, rt

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.sedna.io"},
    "spec": {"group": "test.sedna.io", "scope": "Namespaced",
             "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wg"]},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}


def _exists(store, rtype, name, ns="default"):
    try:
        return store.get(rtype, ns, name)
    except Exception as err:  # ApiError 404
        if getattr(err, "code", None) == 404:
            return None
        raise


def _widget_with_children(store):
    store.create(rt(store, "customresourcedefinitions", "apiextensions.k8s.io"), None, copy.deepcopy(CRD))
    w_rt = rt(store, "widgets", "test.sedna.io")
    owner = store.create(w_rt, "default", {"apiVersion": "test.sedna.io/v1", "kind": "Widget",
                                           "metadata": {"name": "w1"}, "spec": {}})
    ref = {"apiVersion": "test.sedna.io/v1", "kind": "Widget", "name": "w1",
           "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    cm_rt = rt(store, "configmaps")
    for i in range(2):
        store.create(cm_rt, "default", {"metadata": {"name": f"child-{i}", "ownerReferences": [ref]},
                                        "data": {"i": str(i)}})
    return w_rt, cm_rt, owner


async def test_deleting_deployment_removes_replicasets_and_pods(live):
    store = live.store
    d_rt, rs_rt, pod_rt = rt(store, "deployments", "apps"), rt(store, "replicasets", "apps"), rt(store, "pods")
    store.create(d_rt, "default", deployment("gone", replicas=2))
    await eventually(lambda: len(store.list(pod_rt, "default", label_selector="app=gone")[0]) == 2,
                   message="pods")
    store.delete(d_rt, "default", "gone")
    await eventually(lambda: not store.list(rs_rt, "default")[0]
                   and not store.list(pod_rt, "default", label_selector="app=gone")[0],
                   message="cascade")


async def test_deleting_custom_owner_removes_dependents(live):
    store = live.store
    w_rt, cm_rt, _ = _widget_with_children(store)
    store.delete(w_rt, "default", "w1")
    await eventually(lambda: not [c for c in store.list(cm_rt, "default")[0]
                                if c["metadata"]["name"].startswith("child-")], message="children collected")


async def test_orphan_keeps_dependents_without_the_reference(live):
    store = live.store
    w_rt, cm_rt, owner = _widget_with_children(store)
    store.delete(w_rt, "default", "w1", propagation="Orphan")
    await eventually(lambda: _exists(store, w_rt, "w1") is None, message="owner removed")
    children = [c for c in store.list(cm_rt, "default")[0] if c["metadata"]["name"].startswith("child-")]
    assert names(children) == ["child-0", "child-1"]
    assert all("ownerReferences" not in c["metadata"] for c in children)


async def test_foreground_keeps_owner_until_blocking_dependents_are_gone(live):
    store = live.store
    d_rt, pod_rt = rt(store, "deployments", "apps"), rt(store, "pods")
    store.create(d_rt, "default", deployment("fg", replicas=2))
    await eventually(lambda: len([p for p in store.list(pod_rt, "default", label_selector="app=fg")[0]
                                if p["status"].get("phase") == "Running"]) == 2, message="running")
    live.controller("kubelet").freeze()  # pods stay terminating, so they keep blocking
    store.delete(d_rt, "default", "fg", propagation="Foreground")

    def pods_terminating():
        pods = store.list(pod_rt, "default", label_selector="app=fg")[0]
        return pods and all(p["metadata"].get("deletionTimestamp") for p in pods)

    await eventually(pods_terminating, message="pods marked for deletion")
    d = _exists(store, d_rt, "fg")
    assert d is not None and d["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert d["metadata"]["deletionTimestamp"]
    live.controller("kubelet").unfreeze()
    await eventually(lambda: _exists(store, d_rt, "fg") is None, message="owner removed last")
    assert not store.list(pod_rt, "default", label_selector="app=fg")[0]


@pytest.mark.parametrize("uid", [pytest.param("never-existed", id="unknown-uid"),
                                 pytest.param(None, id="recreated-owner")])
async def test_dangling_owner_uid_is_collected(live, uid):
    store = live.store
    cm_rt = rt(store, "configmaps")
    owner = store.create(cm_rt, "default", {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid or owner["metadata"]["uid"]}
    if uid is None:  # the owner is replaced by a new object with the same name
        store.delete(cm_rt, "default", "owner")
        store.create(cm_rt, "default", {"metadata": {"name": "owner"}})
    store.create(cm_rt, "default", {"metadata": {"name": "dep", "ownerReferences": [ref]}})
    await eventually(lambda: _exists(store, cm_rt, "dep") is None, message="dangling dependent collected")
    assert _exists(store, cm_rt, "owner") is not None


async def test_solid_owner_keeps_dependent_and_prunes_dangling_ref(live):
    store = live.store
    cm_rt = rt(store, "configmaps")
    owner = store.create(cm_rt, "default", {"metadata": {"name": "keeper"}})
    refs = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "keeper", "uid": owner["metadata"]["uid"]},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "ghost", "uid": "ghost-uid"}]
    store.create(cm_rt, "default", {"metadata": {"name": "dep2", "ownerReferences": refs}})
    await eventually(lambda: len(store.get(cm_rt, "default", "dep2")["metadata"]["ownerReferences"]) == 1,
                   message="dangling reference pruned")
    assert store.get(cm_rt, "default", "dep2")["metadata"]["ownerReferences"][0]["name"] == "keeper"


async def test_rs_owned_pods_follow_owner_chain(live):
    store = live.store
    d_rt, rs_rt = rt(store, "deployments", "apps"), rt(store, "replicasets", "apps")
    d = store.create(d_rt, "default", deployment("chain", replicas=1))
    await eventually(lambda: owned_by(store.list(rs_rt, "default")[0], d), message="rs")
    rs = owned_by(store.list(rs_rt, "default")[0], d)[0]
    store.delete(rs_rt, "default", rs["metadata"]["name"])  # the deployment recreates it
    await eventually(lambda: [r for r in owned_by(store.list(rs_rt, "default")[0], d)
                            if r["metadata"]["uid"] != rs["metadata"]["uid"]], message="rs recreated")
