"""DaemonSet controller through the store and through the real kubectl: placement, pods, rolls, status."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devcluster.controllers.daemonset import HASH_LABEL
from tests.conftest import eventually
from tests.devcluster.helpers import rt


def daemonset(name: str, *, image: str = "lc:1", strategy: dict | None = None, **pod_spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "c", "image": image}], **pod_spec}},
            **({"updateStrategy": strategy} if strategy else {}),
        },
    }


def _ds(store, name):
    return store.get(rt(store, "daemonsets", "apps"), "default", name)


def _pods(store, ds):
    return store.controlled_by(rt(store, "pods"), ds["metadata"]["uid"], "default")


def _rolled_out(store, name, desired):
    ds = _ds(store, name)
    st = ds.get("status") or {}
    return (st.get("observedGeneration", 0) >= ds["metadata"]["generation"]
            and st.get("desiredNumberScheduled") == desired
            and st.get("updatedNumberScheduled") == desired and st.get("numberAvailable") == desired
            and len([p for p in _pods(store, ds) if not p["metadata"].get("deletionTimestamp")]) == desired)


async def test_one_pod_per_selected_node_named_labelled_owned_and_pinned(live):
    store = live.store
    store.create(rt(store, "daemonsets", "apps"), "default",
                 daemonset("lc", nodeSelector={"node-role.kubernetes.io/edge": ""}, hostNetwork=True))
    await eventually(lambda: _rolled_out(store, "lc", 2), message="ds on both edge nodes")
    ds = _ds(store, "lc")
    pods = _pods(store, ds)
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["edge-node-1", "edge-node-2"]
    for pod in pods:
        meta = pod["metadata"]
        assert meta["name"].startswith("lc-") and len(meta["name"]) == len("lc-") + 5
        assert meta["labels"]["app"] == "lc"
        assert meta["labels"][HASH_LABEL] and meta["labels"]["pod-template-generation"] == "1"
        assert meta["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "lc",
                                            "uid": ds["metadata"]["uid"], "controller": True,
                                            "blockOwnerDeletion": True}]
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms == {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [pod["spec"]["nodeName"]]}]}]}
        keys = {(t["key"], t["effect"]) for t in pod["spec"]["tolerations"]}
        assert ("node.kubernetes.io/not-ready", "NoExecute") in keys
        assert ("node.kubernetes.io/unschedulable", "NoSchedule") in keys
        assert ("node.kubernetes.io/network-unavailable", "NoSchedule") in keys  # hostNetwork
    st = ds["status"]
    assert (st["currentNumberScheduled"], st["numberReady"], st["numberMisscheduled"]) == (2, 2, 0)
    assert "numberUnavailable" not in st


async def test_taints_and_tolerations_decide_the_nodes(live):
    store = live.store
    nodes = rt(store, "nodes")

    def taint(obj):
        obj["spec"]["taints"] = [{"key": "dedicated", "value": "gm", "effect": "NoSchedule"}]

    store.mutate(nodes, None, "cloud-node", taint)
    store.create(rt(store, "daemonsets", "apps"), "default", daemonset("plain"))
    store.create(rt(store, "daemonsets", "apps"), "default", daemonset(
        "tolerant", tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gm", "effect": "NoSchedule"}]))
    await eventually(lambda: _rolled_out(store, "plain", 2), message="plain ds skips the tainted node")
    await eventually(lambda: _rolled_out(store, "tolerant", 3), message="tolerant ds on all three")
    assert "cloud-node" not in {p["spec"]["nodeName"] for p in _pods(store, _ds(store, "plain"))}


async def test_deleted_pod_comes_back_and_node_affinity_is_honoured(live):
    store = live.store
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "node-role.kubernetes.io/edge", "operator": "DoesNotExist"}]}]}}}
    store.create(rt(store, "daemonsets", "apps"), "default", daemonset("cloudonly", affinity=affinity))
    await eventually(lambda: _rolled_out(store, "cloudonly", 1), message="one pod on the cloud node")
    [pod] = _pods(store, _ds(store, "cloudonly"))
    assert pod["spec"]["nodeName"] == "cloud-node"
    store.delete(rt(store, "pods"), "default", pod["metadata"]["name"], grace_period=0)

    def replaced():
        pods = [p for p in _pods(store, _ds(store, "cloudonly")) if not p["metadata"].get("deletionTimestamp")]
        return len(pods) == 1 and pods[0]["metadata"]["uid"] != pod["metadata"]["uid"]

    await eventually(replaced, message="pod recreated")


async def test_rolling_update_replaces_every_pod_and_on_delete_waits(live):
    store = live.store
    ds_rt = rt(store, "daemonsets", "apps")
    store.create(ds_rt, "default", daemonset("roll"))
    store.create(ds_rt, "default", daemonset("manual", strategy={"type": "OnDelete"}))
    await eventually(lambda: _rolled_out(store, "roll", 3) and _rolled_out(store, "manual", 3), message="initial")
    old_manual = {p["metadata"]["uid"] for p in _pods(store, _ds(store, "manual"))}

    def bump(obj):
        obj["spec"]["template"]["spec"]["containers"][0]["image"] = "lc:2"

    store.mutate(ds_rt, "default", "roll", bump)
    store.mutate(ds_rt, "default", "manual", bump)
    await eventually(lambda: _rolled_out(store, "roll", 3), message="rolled to lc:2")
    ds = _ds(store, "roll")
    assert ds["metadata"]["generation"] == 2
    assert {p["spec"]["containers"][0]["image"] for p in _pods(store, ds)} == {"lc:2"}
    assert {p["metadata"]["labels"]["pod-template-generation"] for p in _pods(store, ds)} == {"2"}
    manual = _ds(store, "manual")
    await eventually(lambda: _ds(store, "manual")["status"].get("observedGeneration") == 2, message="observed")
    assert {p["metadata"]["uid"] for p in _pods(store, manual)} == old_manual  # OnDelete: nothing replaced
    assert "updatedNumberScheduled" not in _ds(store, "manual")["status"]  # 0 is not written (omitempty)


async def test_kubectl_rollout_status_and_get_ds(cluster, kubectl):
    rc, out, err = await kubectl("create", "-f", "-", stdin=json.dumps(daemonset("agent")))
    assert rc == 0, err
    rc, out, err = await kubectl("rollout", "status", "ds/agent", "--timeout=20s", within=30)
    assert rc == 0, err
    assert 'daemon set "agent" successfully rolled out' in out
    rc, out, err = await kubectl("get", "ds", "agent")
    assert rc == 0, err
    header, row = out.splitlines()
    assert header.split()[:6] == ["NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE"]
    assert row.split()[:7] == ["agent", "3", "3", "3", "3", "3", "<none>"]


@pytest.mark.parametrize("patch, field", [
    pytest.param({"spec": {"selector": None}}, "spec.selector", id="no-selector"),
    pytest.param({"spec": {"template": {"spec": {"restartPolicy": "Never"}}}}, "spec.template.spec.restartPolicy",
                 id="restart-never"),
])
async def test_invalid_daemonsets_are_422(live, patch, field):
    from devcluster.machinery.errors import ApiError
    from devcluster.storage.patch import merge_patch

    body = merge_patch(daemonset("bad"), patch)
    with pytest.raises(ApiError) as info:
        live.store.create(rt(live.store, "daemonsets", "apps"), "default", body)
    assert info.value.code == 422
    assert field in info.value.message
