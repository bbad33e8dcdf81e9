"""Store semantics through its verbs (spec §4, §5): defaults, updates, deletion, CRDs, lists."""

from __future__ import annotations

import pytest

from devcluster.machinery.errors import ApiError
from devcluster.storage.store import Store
from tests.devcluster.conftest import crd, deployment, pod


@pytest.fixture
def store() -> Store:
    return Store(seed=3)


def rt(store: Store, resource: str, group: str = "", version: str = "v1"):
    return store.registry.lookup(group=group, version=version, resource=resource)


def err(fn, *args, **kw) -> ApiError:
    with pytest.raises(ApiError) as info:
        fn(*args, **kw)
    return info.value


# -- create -------------------------------------------------------------------------------------

def test_initial_namespaces_and_rv(store: Store) -> None:
    items, rv = store.list(rt(store, "namespaces"), None)
    assert [n["metadata"]["name"] for n in items] == ["default", "kube-node-lease", "kube-public", "kube-system"]
    assert rv == 1004
    assert all(n["status"] == {"phase": "Active"} for n in items)


def test_create_sets_server_fields(store: Store) -> None:
    body = pod("p1")
    body["metadata"].update(uid="client", resourceVersion="", deletionTimestamp="2020-01-01T00:00:00Z")
    body["kind"], body["apiVersion"] = "Wrong", "v9"
    body["status"] = {"phase": "Running"}
    p = store.create(rt(store, "pods"), "default", body)
    m = p["metadata"]
    assert (p["kind"], p["apiVersion"]) == ("Pod", "v1")
    assert m["uid"] != "client" and len(m["uid"]) == 36
    assert m["resourceVersion"] == "1005" and m["namespace"] == "default"
    assert "deletionTimestamp" not in m and m["generation"] == 1  # pods have a generation since 1.33
    assert m["creationTimestamp"].endswith("Z") and len(m["creationTimestamp"]) == 20
    assert p["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    spec = p["spec"]
    assert (spec["restartPolicy"], spec["dnsPolicy"], spec["schedulerName"]) == ("Always", "ClusterFirst", "default-scheduler")
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["containers"][0]["imagePullPolicy"] == "IfNotPresent"


def test_qos_classes(store: Store) -> None:
    guaranteed = pod("g")
    guaranteed["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
    burst = pod("b")
    burst["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    pods = rt(store, "pods")
    assert store.create(pods, "default", guaranteed)["status"]["qosClass"] == "Guaranteed"
    assert store.create(pods, "default", burst)["status"]["qosClass"] == "Burstable"


def test_resource_version_on_create_is_rejected(store: Store) -> None:
    body = pod("p")
    body["metadata"]["resourceVersion"] = "5"
    assert err(store.create, rt(store, "pods"), "default", body).code == 400


def test_generate_name(store: Store) -> None:
    body = pod("")
    body["metadata"] = {"generateName": "x" * 70}
    p = store.create(rt(store, "pods"), "default", body)
    name = p["metadata"]["name"]
    assert len(name) == 63 and name.startswith("x" * 58)
    assert set(name[58:]) <= set("bcdfghjklmnpqrstvwxz2456789")


def test_name_required(store: Store) -> None:
    body = pod("")
    body["metadata"] = {}
    e = err(store.create, rt(store, "pods"), "default", body)
    assert e.code == 422
    assert e.message == 'Pod "" is invalid: metadata.name: Required value: name or generateName is required'


def test_duplicate_is_409(store: Store) -> None:
    store.create(rt(store, "pods"), "default", pod("p"))
    e = err(store.create, rt(store, "pods"), "default", pod("p"))
    assert (e.code, e.reason, e.message) == (409, "AlreadyExists", 'pods "p" already exists')


def test_namespace_rules(store: Store) -> None:
    pods = rt(store, "pods")
    assert err(store.create, pods, "nope", pod("p")).message == 'namespaces "nope" not found'
    body = pod("p")
    body["metadata"]["namespace"] = "kube-system"
    assert err(store.create, pods, "default", body).code == 400
    body = pod("q")
    body["metadata"]["namespace"] = "kube-system"
    assert store.create(pods, None, body)["metadata"]["namespace"] == "kube-system"


def test_deployment_defaults_and_generation(store: Store) -> None:
    deps = rt(store, "deployments", "apps")
    d = store.create(deps, "default", deployment("web"))
    assert d["metadata"]["generation"] == 1 and d["status"] == {}
    spec = d["spec"]
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
    assert (spec["revisionHistoryLimit"], spec["progressDeadlineSeconds"]) == (10, 600)
    assert spec["template"]["spec"]["schedulerName"] == "default-scheduler"
    # annotations bump a Deployment's generation; labels do not; status never does
    d2 = store.mutate(deps, "default", "web", lambda o: o["metadata"].setdefault("annotations", {}).update(a="1"))
    assert d2["metadata"]["generation"] == 2
    d3 = store.mutate(deps, "default", "web", lambda o: o["metadata"].setdefault("labels", {}).update(a="1"))
    assert d3["metadata"]["generation"] == 2
    d4 = store.mutate(deps, "default", "web", lambda o: o.update(status={"replicas": 1}), subresource="status")
    assert d4["metadata"]["generation"] == 2 and d4["status"] == {"replicas": 1}


def test_service_allocation(store: Store) -> None:
    svcs = rt(store, "services")
    a = store.create(svcs, "default", {"metadata": {"name": "a"}, "spec": {"ports": [{"port": 80}]}})
    b = store.create(svcs, "default", {"metadata": {"name": "b"},
                                      "spec": {"type": "NodePort", "ports": [{"port": 80}]}})
    ip_a, ip_b = a["spec"]["clusterIP"], b["spec"]["clusterIP"]
    assert ip_a.startswith("10.9") and ip_a != ip_b and a["spec"]["clusterIPs"] == [ip_a]
    assert a["spec"]["ports"][0] == {"port": 80, "protocol": "TCP", "targetPort": 80}
    assert 30000 <= b["spec"]["ports"][0]["nodePort"] <= 32767
    taken = {"metadata": {"name": "c"}, "spec": {"clusterIP": ip_a, "ports": [{"port": 1}]}}
    assert err(store.create, svcs, "default", taken).code == 422
    # an update without clusterIP keeps the allocated one
    upd = store.update(svcs, "default", "a", {"metadata": {"name": "a"}, "spec": {"ports": [{"port": 81}]}})
    assert upd["spec"]["clusterIP"] == ip_a
    store.delete(svcs, "default", "a")
    assert store.create(svcs, "default", taken)["spec"]["clusterIP"] == ip_a


# -- update -------------------------------------------------------------------------------------

def test_update_conflict_and_unconditional(store: Store) -> None:
    pods = rt(store, "pods")
    p = store.create(pods, "default", pod("p"))
    stale = pod("p", {"a": "1"})
    stale["metadata"]["resourceVersion"] = "1"
    e = err(store.update, pods, "default", "p", stale)
    assert (e.code, e.reason) == (409, "Conflict")
    assert e.message.startswith('Operation cannot be fulfilled on pods "p": the object has been modified')
    new = store.update(pods, "default", "p", pod("p", {"a": "1"}))
    assert new["metadata"]["labels"] == {"a": "1"}
    assert new["metadata"]["uid"] == p["metadata"]["uid"]
    assert new["status"] == p["status"]  # the main endpoint ignores status


def test_noop_update_bumps_nothing(store: Store) -> None:
    pods = rt(store, "pods")
    p = store.create(pods, "default", pod("p"))
    seen = []
    store.add_listener(seen.append)
    same = store.update(pods, "default", "p", pod("p"))
    assert same is p and store.rv == int(p["metadata"]["resourceVersion"]) and seen == []


def test_update_missing_is_404_except_events(store: Store) -> None:
    assert err(store.update, rt(store, "pods"), "default", "x", pod("x")).code == 404
    ev = {"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "x"}, "reason": "R"}
    created = store.update(rt(store, "events"), "default", "e1", ev)
    assert created["metadata"]["name"] == "e1" and created["kind"] == "Event"


def test_update_name_mismatch_is_400(store: Store) -> None:
    store.create(rt(store, "pods"), "default", pod("p"))
    assert err(store.update, rt(store, "pods"), "default", "p", pod("other")).code == 400


def test_status_subresource_takes_only_status(store: Store) -> None:
    pods = rt(store, "pods")
    store.create(pods, "default", pod("p", {"a": "1"}))
    body = pod("p", {"b": "2"})
    body["status"] = {"phase": "Running"}
    new = store.update(pods, "default", "p", body, subresource="status")
    assert new["status"] == {"phase": "Running"} and new["metadata"]["labels"] == {"a": "1"}


def test_finalizers_cannot_be_added_while_deleting(store: Store) -> None:
    cms = rt(store, "configmaps")
    store.create(cms, "default", {"metadata": {"name": "c", "finalizers": ["a/x"]}})
    store.delete(cms, "default", "c")
    e = err(store.mutate, cms, "default", "c", lambda o: o["metadata"]["finalizers"].append("a/y"))
    assert e.code == 422
    assert "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted" in e.message


# -- patch --------------------------------------------------------------------------------------

def test_patch_kinds(store: Store) -> None:
    pods = rt(store, "pods")
    store.create(pods, "default", pod("p", {"a": "1"}))
    p, created = store.patch(pods, "default", "p", "merge", {"metadata": {"labels": {"b": "2", "a": None}}})
    assert p["metadata"]["labels"] == {"b": "2"} and not created
    p, _ = store.patch(pods, "default", "p", "json", [{"op": "add", "path": "/metadata/labels/c", "value": "3"}])
    assert p["metadata"]["labels"] == {"b": "2", "c": "3"}
    e = err(store.patch, pods, "default", "p", "json", {"op": "add"})
    assert (e.code, e.message) == (400, "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    assert err(store.patch, pods, "default", "p", "merge", [1]).code == 422
    stale = {"metadata": {"resourceVersion": "3", "labels": {"x": "y"}}}
    assert err(store.patch, pods, "default", "p", "merge", stale).code == 409
    assert err(store.patch, pods, "default", "p", "merge", {"metadata": {"name": "q"}}).code == 400


def test_apply_creates_and_merges(store: Store) -> None:
    cms = rt(store, "configmaps")
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    obj, created = store.patch(cms, "default", "c", "apply", body, field_manager="me")
    assert created and obj["data"] == {"a": "1"}
    obj, created = store.patch(cms, "default", "c", "apply", {"metadata": {"name": "c"}, "data": {"b": "2"}},
                               field_manager="other")  # `a` stays: "me" still owns it
    assert not created and obj["data"] == {"a": "1", "b": "2"}
    assert err(store.patch, cms, "default", "c", "apply", body).code == 422  # fieldManager required


# -- scale --------------------------------------------------------------------------------------

def test_scale_subresource(store: Store) -> None:
    deps = rt(store, "deployments", "apps")
    store.create(deps, "default", deployment("web", 2))
    sc = store.get_scale(deps, "default", "web")
    assert sc["kind"] == "Scale" and sc["apiVersion"] == "autoscaling/v1"
    assert sc["spec"] == {"replicas": 2} and sc["status"] == {"replicas": 0, "selector": "app=web"}
    sc2, _ = store.patch(deps, "default", "web", "merge", {"spec": {"replicas": 5}}, subresource="scale")
    assert sc2["spec"]["replicas"] == 5
    d = store.get(deps, "default", "web")
    assert d["spec"]["replicas"] == 5 and d["metadata"]["generation"] == 2
    assert err(store.update, deps, "default", "web", {"spec": {"replicas": -1}}, "scale").code == 422


# -- delete -------------------------------------------------------------------------------------

def test_delete_returns_status_or_pod(store: Store) -> None:
    deps = rt(store, "deployments", "apps")
    d = store.create(deps, "default", deployment("web"))
    st = store.delete(deps, "default", "web")
    assert st == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                  "details": {"name": "web", "group": "apps", "kind": "deployments", "uid": d["metadata"]["uid"]}}
    store.create(rt(store, "pods"), "default", pod("p"))
    gone = store.delete(rt(store, "pods"), "default", "p")
    assert gone["kind"] == "Pod" and gone["metadata"]["resourceVersion"] == str(store.rv)
    assert err(store.get, rt(store, "pods"), "default", "p").code == 404


def test_preconditions(store: Store) -> None:
    store.create(rt(store, "pods"), "default", pod("p"))
    e = err(store.delete, rt(store, "pods"), "default", "p", preconditions={"uid": "nope"})
    assert e.code == 409 and "UID in precondition: nope" in e.message


def test_finalizers_two_phase(store: Store) -> None:
    cms = rt(store, "configmaps")
    store.create(cms, "default", {"metadata": {"name": "c", "finalizers": ["x/y"]}})
    events = []
    store.add_listener(events.append)
    marked = store.delete(cms, "default", "c")
    assert marked["metadata"]["deletionTimestamp"] and marked["metadata"]["deletionGracePeriodSeconds"] == 0
    again = store.delete(cms, "default", "c")  # already marked: no-op
    assert again is store.get(cms, "default", "c")
    res = store.mutate(cms, "default", "c", lambda o: o["metadata"].pop("finalizers"))
    assert res["metadata"]["name"] == "c"
    assert [e.type for e in events] == ["MODIFIED", "DELETED"]
    assert err(store.get, cms, "default", "c").code == 404


def test_generation_bumps_once_on_deletion(store: Store) -> None:
    deps = rt(store, "deployments", "apps")
    store.create(deps, "default", deployment("web"))
    d = store.delete(deps, "default", "web", propagation="Foreground")
    assert d["metadata"]["finalizers"] == ["foregroundDeletion"] and d["metadata"]["generation"] == 2
    d = store.delete(deps, "default", "web", propagation="Orphan")
    assert d["metadata"]["finalizers"] == ["orphan"] and d["metadata"]["generation"] == 2
    assert err(store.delete, deps, "default", "web", propagation="Sideways").code == 400


def test_graceful_pod_deletion(store: Store) -> None:
    pods = rt(store, "pods")
    store.create(pods, "default", pod("p", nodeName="n1", terminationGracePeriodSeconds=20))
    marked = store.delete(pods, "default", "p")
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 20
    shorter = store.delete(pods, "default", "p", grace_period=5)
    assert shorter["metadata"]["deletionGracePeriodSeconds"] == 5
    gone = store.delete(pods, "default", "p", grace_period=0)
    assert gone["kind"] == "Pod" and err(store.get, pods, "default", "p").code == 404
    # an unscheduled pod goes at once whatever the grace period
    store.create(pods, "default", pod("q"))
    store.delete(pods, "default", "q", grace_period=30)
    assert err(store.get, pods, "default", "q").code == 404


def test_dry_run_persists_nothing(store: Store) -> None:
    pods = rt(store, "pods")
    rv = store.rv
    obj = store.create(pods, "default", pod("p"), dry_run=True)
    assert obj["metadata"]["name"] == "p" and store.rv == rv
    assert err(store.get, pods, "default", "p").code == 404
    store.create(pods, "default", pod("p"))
    rv = store.rv
    store.delete(pods, "default", "p", dry_run=True)
    store.patch(pods, "default", "p", "merge", {"metadata": {"labels": {"a": "b"}}}, dry_run=True)
    assert store.rv == rv and "labels" not in store.get(pods, "default", "p")["metadata"]  # {} is not written


def test_delete_collection(store: Store) -> None:
    pods = rt(store, "pods")
    for i in range(3):
        store.create(pods, "default", pod(f"p{i}", {"del": "yes" if i < 2 else "no"}))
    gone = store.delete_collection(pods, "default", label_selector="del=yes")
    assert [p["metadata"]["name"] for p in gone] == ["p0", "p1"]
    assert [p["metadata"]["name"] for p in store.list(pods, "default")[0]] == ["p2"]


def test_namespace_deletion_removes_content(store: Store) -> None:
    nss, cms = rt(store, "namespaces"), rt(store, "configmaps")
    store.create(nss, None, {"metadata": {"name": "team"}})
    store.create(cms, "team", {"metadata": {"name": "a"}})
    store.create(cms, "team", {"metadata": {"name": "b", "finalizers": ["x/y"]}})
    ns = store.delete(nss, None, "team")
    assert ns["status"]["phase"] == "Terminating"
    assert err(store.create, cms, "team", {"metadata": {"name": "c"}}).code == 403
    assert [c["metadata"]["name"] for c in store.list(cms, "team")[0]] == ["b"]
    store.mutate(cms, "team", "b", lambda o: o["metadata"].pop("finalizers"))
    assert err(store.get, nss, None, "team").code == 404


# -- CRDs ---------------------------------------------------------------------------------------

def test_crd_registration_and_schema(store: Store) -> None:
    crds = rt(store, "customresourcedefinitions", "apiextensions.k8s.io")
    created = store.create(crds, None, crd())
    conds = {c["type"]: c["status"] for c in created["status"]["conditions"]}
    assert conds == {"NamesAccepted": "True", "Established": "True"}
    assert created["status"]["acceptedNames"]["shortNames"] == ["wd"]
    assert created["status"]["storedVersions"] == ["v1alpha1"]
    widgets = rt(store, "widgets", "sedna.io", "v1alpha1")
    assert widgets.status and widgets.crd and store.registry.for_kind("sedna.io/v1alpha1", "Widget") == widgets
    w = store.create(widgets, "default", {"metadata": {"name": "w"}, "spec": {"size": 1, "junk": 1},
                                          "status": {"phase": "x"}})
    assert w["spec"] == {"size": 1, "mode": "fast"} and "status" not in w  # defaulted, pruned, status dropped
    e = err(store.create, widgets, "default", {"metadata": {"name": "bad"}, "spec": {"size": "big"}})
    assert e.code == 422 and "spec.size" in e.message and e.details["causes"][0]["field"] == "spec.size"
    # PUT without resourceVersion is 422 for CRs
    e = err(store.update, widgets, "default", "w", {"metadata": {"name": "w"}, "spec": {"size": 2}})
    assert e.code == 422 and "metadata.resourceVersion" in e.message
    # strategic merge is 415 on CRs
    assert err(store.patch, widgets, "default", "w", "strategic", {"spec": {"size": 3}}).code == 415


def test_cr_generation_rules(store: Store) -> None:
    crds = rt(store, "customresourcedefinitions", "apiextensions.k8s.io")
    store.create(crds, None, crd())
    widgets = rt(store, "widgets", "sedna.io", "v1alpha1")
    store.create(widgets, "default", {"metadata": {"name": "w"}, "spec": {"size": 1}})
    w = store.mutate(widgets, "default", "w", lambda o: o["spec"].update(size=2))
    assert w["metadata"]["generation"] == 2
    w = store.mutate(widgets, "default", "w", lambda o: o.update(status={"phase": "Running"}), subresource="status")
    assert w["metadata"]["generation"] == 2 and w["status"] == {"phase": "Running"}
    w = store.mutate(widgets, "default", "w", lambda o: o["metadata"].setdefault("labels", {}).update(a="b"))
    assert w["metadata"]["generation"] == 2


def test_crd_deletion_deletes_instances(store: Store) -> None:
    crds = rt(store, "customresourcedefinitions", "apiextensions.k8s.io")
    store.create(crds, None, crd())
    widgets = rt(store, "widgets", "sedna.io", "v1alpha1")
    store.create(widgets, "default", {"metadata": {"name": "w"}, "spec": {"size": 1}})
    gen = store.registry.generation
    store.delete(crds, None, "widgets.sedna.io")
    assert err(store.get, crds, None, "widgets.sedna.io").code == 404
    assert store.registry.find("sedna.io", "v1alpha1", "widgets") is None and store.registry.generation > gen


# -- lists --------------------------------------------------------------------------------------

def test_list_selectors_sorting_and_pages(store: Store) -> None:
    pods = rt(store, "pods")
    store.create(rt(store, "namespaces"), None, {"metadata": {"name": "a"}})
    for ns, name, app in [("default", "z", "x"), ("default", "b", "y"), ("a", "m", "x")]:
        store.create(pods, ns, pod(name, {"app": app}))
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in store.list(pods, None)[0]] == \
        [("a", "m"), ("default", "b"), ("default", "z")]
    assert [p["metadata"]["name"] for p in store.list(pods, None, label_selector="app=x")[0]] == ["m", "z"]
    assert [p["metadata"]["name"] for p in store.list(pods, None, field_selector="metadata.namespace=a")[0]] == ["m"]
    assert err(store.list, pods, None, label_selector="app in ()").code == 400
    page = store.list_page(pods, None, limit=2)
    assert len(page.items) == 2 and page.remaining == 1 and page.continue_token
    store.create(pods, "default", pod("new"))  # pages come from the snapshot
    rest = store.list_page(pods, None, limit=2, continue_token=page.continue_token)
    assert [p["metadata"]["name"] for p in rest.items] == ["z"] and rest.rv == page.rv and not rest.continue_token
    assert err(store.list_page, pods, None, continue_token=page.continue_token).code == 410


def test_list_resource_version_semantics(store: Store) -> None:
    pods = rt(store, "pods")
    assert store.list_page(pods, None, resource_version="0").rv == store.rv
    assert store.list_page(pods, None, resource_version=str(store.rv), resource_version_match="Exact").rv == store.rv
    assert err(store.list_page, pods, None, resource_version=str(store.rv + 5)).code == 504
    store.compact()
    assert err(store.list_page, pods, None, resource_version="1001", resource_version_match="Exact").code == 410


# -- events, listeners, dump --------------------------------------------------------------------

def test_record_event_dedupes(store: Store) -> None:
    p = store.create(rt(store, "pods"), "default", pod("p"))
    e1 = store.record_event(p, reason="Started", message="Started container c", component="kubelet")
    assert e1["metadata"]["name"].startswith("p.") and e1["count"] == 1
    assert e1["involvedObject"]["uid"] == p["metadata"]["uid"] and e1["source"] == {"component": "kubelet"}
    e2 = store.record_event(p, reason="Started", message="Started container c", component="kubelet")
    assert e2["metadata"]["name"] == e1["metadata"]["name"] and e2["count"] == 2
    e3 = store.record_event(p, reason="Killing", message="Stopping", type="Warning", component="kubelet")
    assert e3["metadata"]["name"] != e1["metadata"]["name"] and e3["type"] == "Warning"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u"}}
    assert store.record_event(node, reason="R", message="m")["metadata"]["namespace"] == "default"


@pytest.mark.expect_log_errors(r"store listener failed")
def test_listener_order_and_unsubscribe(store: Store) -> None:
    seen = []
    unsubscribe = store.add_listener(lambda ev: seen.append((ev.type, ev.rv)))
    store.add_listener(lambda ev: 1 / 0)  # a failing listener does not break the write
    pods = rt(store, "pods")
    store.create(pods, "default", pod("p"))
    store.delete(pods, "default", "p")
    assert seen == [("ADDED", 1005), ("DELETED", 1006)]
    unsubscribe()
    store.create(pods, "default", pod("q"))
    assert len(seen) == 2


def test_dump_and_load(store: Store) -> None:
    store.create(rt(store, "customresourcedefinitions", "apiextensions.k8s.io"), None, crd())
    store.create(rt(store, "pods"), "default", pod("p"))
    svc = store.create(rt(store, "services"), "default", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 1}]}})
    data = store.dump()
    other = Store()
    other.load(data)
    assert other.rv == store.rv
    assert other.get(rt(other, "pods"), "default", "p") == store.get(rt(store, "pods"), "default", "p")
    assert other.registry.find("sedna.io", "v1alpha1", "widgets") is not None
    clash = {"metadata": {"name": "s2"}, "spec": {"clusterIP": svc["spec"]["clusterIP"], "ports": [{"port": 1}]}}
    assert err(other.create, rt(other, "services"), "default", clash).code == 422
    with pytest.raises(ValueError):
        other.load(b"not json")
