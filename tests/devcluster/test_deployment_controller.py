"""Deployment + ReplicaSet controllers through the store: create, self-heal, scale, roll."""

import re

from kubernetes_asyncio.client import ApiClient

from tests.conftest import eventually
from tests.devcluster.helpers import deployment, owned_by, rt


def _state(store, name):
    d = store.get(rt(store, "deployments", "apps"), "default", name)
    rss, _ = store.list(rt(store, "replicasets", "apps"), "default")
    pods, _ = store.list(rt(store, "pods"), "default")
    return d, owned_by(rss, d), pods


def _complete(store, name, replicas):
    d, rss, pods = _state(store, name)
    st = d.get("status") or {}
    return (st.get("observedGeneration", 0) >= d["metadata"]["generation"]
            and st.get("updatedReplicas") == replicas and st.get("replicas") == replicas
            and st.get("availableReplicas") == replicas)


async def test_deployment_creates_rs_and_running_pods(live):
    store = live.store
    store.create(rt(store, "deployments", "apps"), "default", deployment("web", replicas=2))
    await eventually(lambda: _complete(store, "web", 2), message="rollout")
    d, rss, pods = _state(store, "web")
    assert len(rss) == 1
    rs = rss[0]
    h = rs["metadata"]["labels"]["pod-template-hash"]
    assert re.fullmatch(r"[4-9bcdf]{1,10}", h)
    assert rs["metadata"]["name"] == f"web-{h}"
    ann = rs["metadata"]["annotations"]
    assert ann["deployment.kubernetes.io/revision"] == "1"
    assert ann["deployment.kubernetes.io/desired-replicas"] == "2"
    assert ann["deployment.kubernetes.io/max-replicas"] == "3"
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    mine = owned_by(pods, rs)
    assert len(mine) == 2
    assert all(p["metadata"]["name"].startswith(f"web-{h}-") for p in mine)
    assert all(p["status"]["phase"] == "Running" for p in mine)
    conds = {c["type"]: c for c in d["status"]["conditions"]}
    assert conds["Available"]["status"] == "True"
    assert conds["Progressing"]["reason"] == "NewReplicaSetAvailable"
    events, _ = store.list(rt(store, "events"), "default")
    reasons = {(e["reason"], e["source"]["component"]) for e in events}
    assert ("ScalingReplicaSet", "deployment-controller") in reasons
    assert ("SuccessfulCreate", "replicaset-controller") in reasons
    assert ("Scheduled", "default-scheduler") in reasons
    async with ApiClient() as api:  # every object deserializes into the client's models
        deserialize = api._ApiClient__deserialize
        assert deserialize(d, "V1Deployment").status.available_replicas == 2
        assert deserialize(rs, "V1ReplicaSet").spec.replicas == 2
        assert all(deserialize(p, "V1Pod").status.phase == "Running" for p in mine)
        assert {deserialize(e, "CoreV1Event").reason for e in events} >= {"ScalingReplicaSet", "Scheduled"}


async def test_deleted_pod_is_replaced(live):
    store = live.store
    store.create(rt(store, "deployments", "apps"), "default", deployment("heal", replicas=2))
    await eventually(lambda: _complete(store, "heal", 2), message="rollout")
    _, rss, pods = _state(store, "heal")
    victim = owned_by(pods, rss[0])[0]["metadata"]["name"]
    store.delete(rt(store, "pods"), "default", victim)

    def replaced():
        _, _, pods = _state(store, "heal")
        live_pods = [p for p in owned_by(pods, rss[0]) if not p["metadata"].get("deletionTimestamp")]
        names = {p["metadata"]["name"] for p in live_pods}
        return victim not in names and len(live_pods) == 2 and _complete(store, "heal", 2)

    await eventually(replaced, message="replacement pod")
    events, _ = store.list(rt(store, "events"), "default")
    assert any(e["reason"] == "SuccessfulCreate" for e in events)


async def test_scale_through_scale_subresource(live):
    store = live.store
    d_rt = rt(store, "deployments", "apps")
    store.create(d_rt, "default", deployment("sc", replicas=1))
    await eventually(lambda: _complete(store, "sc", 1), message="rollout")
    store.patch(d_rt, "default", "sc", "merge", {"spec": {"replicas": 3}}, subresource="scale")
    await eventually(lambda: _complete(store, "sc", 3), message="scale up")
    store.patch(d_rt, "default", "sc", "merge", {"spec": {"replicas": 1}}, subresource="scale")
    await eventually(lambda: _complete(store, "sc", 1), message="scale down")
    _, rss, pods = _state(store, "sc")
    assert len(rss) == 1 and rss[0]["spec"]["replicas"] == 1
    await eventually(lambda: len(owned_by(_state(store, "sc")[2], rss[0])) == 1, message="pods removed")


async def test_rolling_update_respects_surge_and_keeps_history(live):
    store = live.store
    d_rt = rt(store, "deployments", "apps")
    store.create(d_rt, "default", deployment(
        "roll", replicas=3, strategy={"type": "RollingUpdate",
                                      "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}))
    await eventually(lambda: _complete(store, "roll", 3), message="first rollout")
    pod_rt = rt(store, "pods")
    worst = {"pods": 0, "unavailable": 0}

    def watch(ev):  # sample every change: surge and availability must hold at every step
        if ev.rt.key != pod_rt.key:
            return
        pods, _ = store.list(pod_rt, "default", label_selector="app=roll")
        alive = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        ready = [p for p in alive if p["status"].get("phase") == "Running"]
        worst["pods"] = max(worst["pods"], len(alive))
        worst["unavailable"] = max(worst["unavailable"], 3 - len(ready))

    unsubscribe = store.add_listener(watch)
    try:
        store.patch(d_rt, "default", "roll", "merge",
                    {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}})
        await eventually(lambda: _complete(store, "roll", 3)
                       and len(_state(store, "roll")[1]) == 2, within=10, message="second rollout")
    finally:
        unsubscribe()
    d, rss, _ = _state(store, "roll")
    by_rev = {rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: rs for rs in rss}
    assert set(by_rev) == {"1", "2"}
    assert by_rev["1"]["spec"]["replicas"] == 0
    assert by_rev["2"]["spec"]["replicas"] == 3
    assert by_rev["2"]["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:2"
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    assert worst["pods"] == 4  # the surge was used, and never exceeded (replicas + maxSurge)
    assert worst["unavailable"] == 0  # maxUnavailable 0: three running pods at every step


async def test_revision_history_limit_cleans_old_replicasets(live):
    store = live.store
    d_rt = rt(store, "deployments", "apps")
    store.create(d_rt, "default", deployment("hist", replicas=1, revisionHistoryLimit=1))
    await eventually(lambda: _complete(store, "hist", 1), message="rollout 1")
    for tag in ("2", "3"):
        store.patch(d_rt, "default", "hist", "merge",
                    {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": f"nginx:{tag}"}]}}}})
        await eventually(lambda tag=tag: _complete(store, "hist", 1) and any(
            rs["spec"]["template"]["spec"]["containers"][0]["image"] == f"nginx:{tag}"
            and rs["spec"]["replicas"] == 1 for rs in _state(store, "hist")[1]), message=f"rollout {tag}")
    await eventually(lambda: len(_state(store, "hist")[1]) == 2, message="cleanup")
    revs = sorted(rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                  for rs in _state(store, "hist")[1])
    assert revs == ["2", "3"]


async def test_recreate_strategy_waits_for_old_pods(live):
    store = live.store
    d_rt = rt(store, "deployments", "apps")
    store.create(d_rt, "default", deployment("rec", replicas=2, strategy={"type": "Recreate"}))
    await eventually(lambda: _complete(store, "rec", 2), message="rollout")
    kubelet = live.controller("kubelet")
    kubelet.freeze()  # old pods stay terminating while frozen
    store.patch(d_rt, "default", "rec", "merge",
                {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:9"}]}}}})

    def old_scaled_to_zero():
        rss = _state(store, "rec")[1]
        return len(rss) == 1 and rss[0]["spec"]["replicas"] == 0

    await eventually(old_scaled_to_zero, message="old RS scaled to 0")
    await eventually(lambda: live.controller("deployment-controller").queue.__len__() == 0, message="idle")
    assert len(_state(store, "rec")[1]) == 1  # no new RS while old pods still exist
    kubelet.unfreeze()
    await eventually(lambda: _complete(store, "rec", 2) and len(_state(store, "rec")[1]) == 2,
                   message="recreated")
