"""The HTTP API through real requests: discovery, OpenAPI, verbs, errors, subresources, faults."""

from __future__ import annotations

import pytest

from tests.devcluster.conftest import ApiServer, Http, crd, deployment, pod

AGG_ACCEPT = ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
              "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json")
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
PODS = "/api/v1/namespaces/default/pods"
DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"
WIDGETS = "/apis/sedna.io/v1alpha1/namespaces/default/widgets"


async def test_version_and_health(http: Http) -> None:
    code, body = await http.get("/version?timeout=5s")
    assert code == 200 and (body["major"], body["minor"], body["gitVersion"]) == ("1", "32", "v1.32.0")
    for path in ("/healthz", "/readyz", "/livez"):
        assert await http.get(path) == (200, "ok")


async def test_aggregated_discovery(http: Http) -> None:
    async with http.session.get("/apis", headers={"Accept": AGG_ACCEPT}) as resp:
        assert resp.headers["Content-Type"] == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        body = await resp.json(content_type=None)
    assert body["kind"] == "APIGroupDiscoveryList" and body["apiVersion"] == "apidiscovery.k8s.io/v2"
    groups = {g["metadata"]["name"]: g for g in body["items"]}
    assert "" not in groups and "apps" in groups
    deploy = next(r for r in groups["apps"]["versions"][0]["resources"] if r["resource"] == "deployments")
    assert deploy == {
        "resource": "deployments", "responseKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "scope": "Namespaced", "singularResource": "deployment", "shortNames": ["deploy"], "categories": ["all"],
        "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        "subresources": [
            {"subresource": "status", "responseKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
             "verbs": ["get", "patch", "update"]},
            {"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
             "verbs": ["get", "patch", "update"]}]}
    code, core = await http.get("/api", headers={"Accept": AGG_ACCEPT})
    assert core["items"][0]["metadata"] == {"creationTimestamp": None}
    pods = next(r for r in core["items"][0]["versions"][0]["resources"] if r["resource"] == "pods")
    assert pods["shortNames"] == ["po"] and pods["scope"] == "Namespaced"
    nodes = next(r for r in core["items"][0]["versions"][0]["resources"] if r["resource"] == "nodes")
    assert nodes["scope"] == "Cluster"


async def test_legacy_discovery(http: Http, apiserver: ApiServer) -> None:
    code, body = await http.get("/api", headers={"Accept": "application/json, */*"})
    assert body["kind"] == "APIVersions" and body["versions"] == ["v1"]
    assert body["serverAddressByClientCIDRs"][0]["serverAddress"] == apiserver.url.removeprefix("http://")
    code, groups = await http.get("/apis")
    apps = next(g for g in groups["groups"] if g["name"] == "apps")
    assert apps["preferredVersion"] == {"groupVersion": "apps/v1", "version": "v1"}
    code, res = await http.get("/apis/apps/v1")
    names = {r["name"]: r for r in res["resources"]}
    assert names["deployments/scale"]["group"] == "autoscaling" and names["deployments/scale"]["kind"] == "Scale"
    assert names["deployments"]["shortNames"] == ["deploy"]
    assert (await http.get("/apis/nope"))[0] == 404


async def test_openapi_v3_and_hash_change(http: Http) -> None:
    code, index = await http.get("/openapi/v3")
    assert "api/v1" in index["paths"] and "apis/apps/v1" in index["paths"]
    url = index["paths"]["api/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/api/v1?hash=")
    code, doc = await http.get(url)
    op = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert op["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert op["parameters"] == [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}]
    assert "requestBody" not in op
    assert "/api/v1/nodes/{name}" in doc["paths"]
    assert (await http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd()))[0] == 201
    code, index2 = await http.get("/openapi/v3")
    assert "apis/sedna.io/v1alpha1" in index2["paths"]
    code, gv = await http.get(index2["paths"]["apis/sedna.io/v1alpha1"]["serverRelativeURL"])
    assert "/apis/sedna.io/v1alpha1/namespaces/{namespace}/widgets/{name}" in gv["paths"]
    assert (await http.get("/openapi/v3/apis/nope/v1"))[0] == 404


async def test_crud_and_errors(http: Http) -> None:
    code, created = await http.post(PODS + "?fieldManager=kubectl-create&fieldValidation=Strict", pod("p1"))
    assert code == 201 and created["metadata"]["name"] == "p1"
    code, got = await http.get(PODS + "/p1")
    assert code == 200 and got == created
    code, body = await http.post(PODS, pod("p1"))
    assert (code, body["reason"], body["kind"]) == (409, "AlreadyExists", "Status")
    code, body = await http.get(PODS + "/nope")
    assert code == 404 and body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                    "message": 'pods "nope" not found', "reason": "NotFound",
                                    "details": {"name": "nope", "kind": "pods"}, "code": 404}
    code, body = await http.get(DEPLOYS + "/nope")
    assert body["message"] == 'deployments.apps "nope" not found' and body["details"]["group"] == "apps"
    assert (await http.get("/api/v1/namespaces/default/nothings"))[0] == 404
    assert (await http.get("/api/v1/pods/p1"))[0] == 404  # a namespaced object needs its namespace
    assert (await http.post(PODS, raw=b"{not json"))[0] == 400
    assert (await http.get(PODS + "?labelSelector=a%20in%20()"))[0] == 400
    assert (await http.get(PODS + "?fieldSelector=spec.bogus%3Dx"))[0] == 400
    assert (await http.get(PODS + "?watch=yes"))[0] == 400
    code, lst = await http.get("/api/v1/pods?limit=500")
    assert lst["kind"] == "PodList" and [p["metadata"]["name"] for p in lst["items"]] == ["p1"]
    assert "kind" not in lst["items"][0] and "apiVersion" not in lst["items"][0]  # a typed list's items have none


async def test_not_acceptable(http: Http) -> None:
    code, body = await http.get(PODS, headers={"Accept": "application/vnd.kubernetes.protobuf"})
    assert code == 406 and body["reason"] == "NotAcceptable"
    code, _ = await http.get(PODS, headers={"Accept": "application/vnd.kubernetes.protobuf,application/json"})
    assert code == 200


async def test_update_conflict_and_cr_rules(http: Http) -> None:
    code, p = await http.post(PODS, pod("p"))
    p["metadata"]["labels"] = {"a": "b"}
    code, updated = await http.put(PODS + "/p", p)
    assert code == 200 and updated["metadata"]["labels"] == {"a": "b"}
    code, body = await http.put(PODS + "/p", p)  # p still carries the old RV
    assert code == 409 and body["reason"] == "Conflict"
    await http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd())
    code, w = await http.post(WIDGETS, {"apiVersion": "sedna.io/v1alpha1", "kind": "Widget",
                                        "metadata": {"name": "w"}, "spec": {"size": 1}})
    assert code == 201
    del w["metadata"]["resourceVersion"]
    code, body = await http.put(WIDGETS + "/w", w)
    assert code == 422 and body["reason"] == "Invalid"
    code, body = await http.post(WIDGETS, {"metadata": {"name": "bad"}, "spec": {"size": "big"}})
    assert code == 422 and body["details"]["causes"][0]["field"] == "spec.size"


async def test_patch_content_types(http: Http) -> None:
    await http.post(PODS, pod("p", {"a": "1"}))
    code, body = await http.patch(PODS + "/p", {"metadata": {"labels": {"b": "2"}}},
                                  ctype="application/merge-patch+json; charset=utf-8")
    assert code == 200 and body["metadata"]["labels"] == {"a": "1", "b": "2"}
    code, body = await http.patch(PODS + "/p", {"metadata": {"labels": {"c": "3"}}}, ctype="application/json-patch+json")
    assert code == 400 and body["message"] == "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
    smp = {"spec": {"$setElementOrder/containers": [{"name": "c"}],
                    "containers": [{"name": "c", "image": "nginx:1.28"}]}}
    code, body = await http.patch(PODS + "/p", smp, ctype="application/strategic-merge-patch+json")
    assert code == 200 and body["spec"]["containers"][0]["image"] == "nginx:1.28"
    assert "$setElementOrder/containers" not in body["spec"]
    assert (await http.patch(PODS + "/p", {}, ctype="text/plain"))[0] == 415
    await http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd())
    await http.post(WIDGETS, {"metadata": {"name": "w"}, "spec": {"size": 1}})
    code, body = await http.patch(WIDGETS + "/w", {"spec": {"size": 2}}, ctype="application/strategic-merge-patch+json")
    assert code == 415 and body["reason"] == "UnsupportedMediaType"


async def test_server_side_apply_yaml_creates(http: Http) -> None:
    path = "/api/v1/namespaces/default/configmaps/cfg?fieldManager=kubectl&force=false"
    yaml_body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: '1'\n"
    code, body = await http.call("PATCH", path, raw=yaml_body, ctype="application/apply-patch+yaml")
    assert code == 201 and body["data"] == {"a": "1"}
    code, body = await http.patch(path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
                                         "data": {"b": "2"}}, ctype="application/apply-patch+yaml")
    # The same manager no longer sends `a`, and nobody else owns it: it is removed.
    assert code == 200 and body["data"] == {"b": "2"}


async def test_status_and_scale_subresources(http: Http) -> None:
    await http.post(DEPLOYS, deployment("web", 2))
    code, d = await http.get(DEPLOYS + "/web")
    d["status"] = {"replicas": 7}
    d["spec"]["replicas"] = 3
    code, st = await http.put(DEPLOYS + "/web/status", d)
    assert code == 200 and st["status"] == {"replicas": 7} and st["spec"]["replicas"] == 2
    assert st["metadata"]["generation"] == 1
    code, main = await http.patch(DEPLOYS + "/web", {"status": {"replicas": 1}, "spec": {"paused": True}})
    assert main["status"] == {"replicas": 7} and main["metadata"]["generation"] == 2
    code, scale = await http.get(DEPLOYS + "/web/scale")
    assert scale["kind"] == "Scale" and scale["spec"] == {"replicas": 2} and scale["status"]["replicas"] == 7
    code, scale = await http.patch(DEPLOYS + "/web/scale", {"spec": {"replicas": 4}})
    assert code == 200 and scale["apiVersion"] == "autoscaling/v1" and scale["spec"]["replicas"] == 4
    assert (await http.get(DEPLOYS + "/web"))[1]["spec"]["replicas"] == 4
    assert (await http.get("/api/v1/namespaces/default/configmaps/x/status"))[0] == 404


async def test_delete_options_and_finalizers(http: Http) -> None:
    cm = {"metadata": {"name": "c", "finalizers": ["example.com/hold"]}}
    await http.post("/api/v1/namespaces/default/configmaps", cm)
    code, body = await http.delete("/api/v1/namespaces/default/configmaps/c", {"propagationPolicy": "Foreground"})
    assert code == 200 and body["metadata"]["finalizers"] == ["example.com/hold", "foregroundDeletion"]
    code, body = await http.delete("/api/v1/namespaces/default/configmaps/c?propagationPolicy=Orphan")
    assert body["metadata"]["finalizers"] == ["example.com/hold", "orphan"]
    code, body = await http.patch("/api/v1/namespaces/default/configmaps/c", {"metadata": {"finalizers": None}})
    assert code == 200
    assert (await http.get("/api/v1/namespaces/default/configmaps/c"))[0] == 404
    await http.post(DEPLOYS, deployment("web"))
    code, body = await http.delete(DEPLOYS + "/web")
    assert body["kind"] == "Status" and body["status"] == "Success" and body["details"]["kind"] == "deployments"
    await http.post(PODS, pod("p"))
    code, body = await http.delete(PODS + "/p", {"preconditions": {"uid": "x"}})
    assert code == 409
    code, body = await http.delete(PODS + "/p?gracePeriodSeconds=0")
    assert code == 200 and body["kind"] == "Pod"


async def test_dry_run_and_deletecollection(http: Http, apiserver: ApiServer) -> None:
    rv = apiserver.store.rv
    code, body = await http.post(PODS + "?dryRun=All", pod("dry"))
    assert code == 201 and body["metadata"]["name"] == "dry" and apiserver.store.rv == rv
    assert (await http.get(PODS + "/dry"))[0] == 404
    assert (await http.post(PODS + "?dryRun=Some", pod("dry")))[0] == 400
    for i in range(3):
        await http.post(PODS, pod(f"p{i}", {"g": "a" if i else "b"}))
    code, body = await http.delete(PODS + "?labelSelector=g%3Da")
    assert code == 200 and body["kind"] == "PodList" and len(body["items"]) == 2
    code, lst = await http.get(PODS)
    assert [p["metadata"]["name"] for p in lst["items"]] == ["p0"]


async def test_pagination_over_http(http: Http) -> None:
    for i in range(5):
        await http.post(PODS, pod(f"p{i}"))
    code, page = await http.get(PODS + "?limit=2")
    assert len(page["items"]) == 2 and page["metadata"]["remainingItemCount"] == 3
    names = [p["metadata"]["name"] for p in page["items"]]
    token = page["metadata"]["continue"]
    while token:
        code, page = await http.get(PODS + f"?limit=2&continue={token}")
        names += [p["metadata"]["name"] for p in page["items"]]
        token = page["metadata"].get("continue")
    assert names == [f"p{i}" for i in range(5)]
    code, body = await http.get(PODS + "?limit=2&continue=" + "Zm9vOjE")
    assert code == 410 and body["reason"] == "Expired"


async def test_table_responses(http: Http) -> None:
    await http.post(PODS, pod("p1"))
    code, table = await http.get(PODS + "?limit=500", headers={"Accept": TABLE_ACCEPT})
    assert code == 200 and table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert table["columnDefinitions"][0]["name"] == "Name"
    row = table["rows"][0]
    assert row["cells"][0] == "p1" and row["object"]["kind"] == "PartialObjectMetadata"
    code, one = await http.get(PODS + "/p1", headers={"Accept": TABLE_ACCEPT})
    assert one["kind"] == "Table" and len(one["rows"]) == 1


async def test_binding_and_log(http: Http, apiserver: ApiServer) -> None:
    await http.post(PODS, pod("p"))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    code, body = await http.post(PODS + "/p/binding", binding)
    assert code == 201 and body["status"] == "Success"
    code, p = await http.get(PODS + "/p")
    assert p["spec"]["nodeName"] == "n1"
    assert any(c["type"] == "PodScheduled" and c["status"] == "True" for c in p["status"]["conditions"])
    assert (await http.post(PODS + "/p/binding", binding))[0] == 409
    assert (await http.get(PODS + "/p/log"))[0] == 404
    apiserver.logs[("default", "p", "c")] = "one\ntwo\nthree\n"
    async with http.session.get(PODS + "/p/log?container=c&tailLines=2") as resp:
        assert resp.status == 200 and resp.content_type == "text/plain"
        assert await resp.text() == "two\nthree\n"
    assert (await http.get(PODS + "/nope/log"))[0] == 404


async def test_method_not_allowed(http: Http) -> None:
    assert (await http.put(PODS, pod("x")))[0] == 405
    await http.post(PODS, pod("p"))
    assert (await http.post(PODS + "/p/status", {}))[0] == 405


@pytest.mark.parametrize("code", [500, 429])
async def test_fault_injection(http: Http, apiserver: ApiServer, code: int) -> None:
    status, body = await http.post("/devcluster/faults", {"errors": [{"rate": 1.0, "verb": "list",
                                                                       "resource": "pods", "code": code}]})
    assert status == 200 and body["errors"][0]["code"] == code
    status, body = await http.get(PODS)
    assert status == code and body["code"] == code
    assert body["reason"] == ("InternalError" if code == 500 else "TooManyRequests")
    assert (await http.get("/api/v1/namespaces/default/configmaps"))[0] == 200  # other resources unaffected
    assert (await http.post(PODS, pod("p")))[0] == 201  # other verbs unaffected
    assert (await http.post("/devcluster/faults", {"errors": [{"rate": 2}]}))[0] == 400
    assert (await http.post("/devcluster/faults", {"bogus": 1}))[0] == 400
    await http.post("/devcluster/faults", {"reset": True})
    assert (await http.get(PODS))[0] == 200


async def test_fault_rate_is_seeded(apiserver: ApiServer, http: Http) -> None:
    async def run() -> list[int]:
        await http.post("/devcluster/faults", {"reset": True, "seed": 42,
                                               "errors": [{"rate": 0.5, "verb": "get"}]})
        return [(await http.get(PODS + "/x"))[0] for _ in range(12)]
    first, second = await run(), await run()
    assert first == second and set(first) == {404, 500}


async def test_body_media_types(http: Http) -> None:
    code, body = await http.post(PODS, raw=b"\x6b\x38\x73\x00", ctype="application/vnd.kubernetes.protobuf")
    assert code == 400 and body["reason"] == "BadRequest"  # protobuf is decoded: a bare magic names no kind
    code, body = await http.post(PODS, raw=b"{}", ctype="application/cbor")
    assert code == 415 and body["reason"] == "UnsupportedMediaType"
    yaml_pod = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: y\nspec:\n  containers: [{name: c, image: nginx}]\n"
    code, body = await http.post(PODS, raw=yaml_pod, ctype="application/yaml")
    assert code == 201 and body["metadata"]["name"] == "y"
