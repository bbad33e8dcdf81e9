"""autoscaling/v1 over autoscaling/v2 HPAs and events.k8s.io/v1 over core Events: one object, two views."""

from __future__ import annotations

import json

import aiohttp

from tests.devcluster.helpers import deployment

HPA_V1 = "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers"
HPA_V2 = "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers"
EVENTS_V1 = "/apis/events.k8s.io/v1/namespaces/default/events"
CORE_EVENTS = "/api/v1/namespaces/default/events"


async def _req(cluster, method, path, body=None, ctype="application/json"):
    async with aiohttp.ClientSession() as s:
        data = json.dumps(body) if body is not None else None
        async with s.request(method, cluster.url + path, data=data, headers={"Content-Type": ctype},
                             timeout=aiohttp.ClientTimeout(total=10)) as r:
            return r.status, await r.json()


async def test_hpa_written_as_v1_reads_as_v2_and_back(cluster):
    v1 = {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"},
          "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                   "maxReplicas": 3, "targetCPUUtilizationPercentage": 70}}
    code, created = await _req(cluster, "POST", HPA_V1, v1)
    assert code == 201, created
    assert created["apiVersion"] == "autoscaling/v1"
    assert created["spec"] == {**v1["spec"], "minReplicas": 1}
    code, v2 = await _req(cluster, "GET", f"{HPA_V2}/web")
    assert code == 200
    assert v2["apiVersion"] == "autoscaling/v2"
    assert v2["spec"]["metrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}]
    assert v2["metadata"]["uid"] == created["metadata"]["uid"]
    code, patched = await _req(cluster, "PATCH", f"{HPA_V1}/web", {"spec": {"targetCPUUtilizationPercentage": 50}},
                               "application/merge-patch+json")
    assert code == 200, patched
    assert patched["spec"]["targetCPUUtilizationPercentage"] == 50
    code, v2 = await _req(cluster, "GET", f"{HPA_V2}/web")
    assert v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 50
    assert v2["metadata"]["generation"] == 2
    code, listed = await _req(cluster, "GET", HPA_V1)
    assert listed["kind"] == "HorizontalPodAutoscalerList" and listed["apiVersion"] == "autoscaling/v1"
    assert [i["spec"]["targetCPUUtilizationPercentage"] for i in listed["items"]] == [50]  # items in the v1 shape


async def test_kubectl_autoscale_creates_an_hpa(cluster, kubectl):
    rc, _, err = await kubectl("create", "-f", "-", stdin=json.dumps(deployment("web")))
    assert rc == 0, err
    # kubectl's typed create sends protobuf; its JSON rendering goes through `create -f -`.
    rc, out, err = await kubectl("autoscale", "deploy/web", "--max=3", "--cpu-percent=60", "--dry-run=client",
                                 "-o", "json")
    assert rc == 0, err
    body = json.loads(out)
    assert body["apiVersion"] == "autoscaling/v1"  # what kubectl 1.32's autoscale builds
    rc, out, err = await kubectl("create", "-f", "-", stdin=out)
    assert rc == 0, err
    assert "horizontalpodautoscaler.autoscaling/web created" in out
    rc, out, err = await kubectl("get", "horizontalpodautoscalers.v1.autoscaling", "web",
                                 "-o", "jsonpath={.spec.targetCPUUtilizationPercentage}")
    assert (rc, out) == (0, "60"), err
    code, v2 = await _req(cluster, "GET", f"{HPA_V2}/web")
    assert code == 200
    assert (v2["spec"]["maxReplicas"], v2["spec"]["scaleTargetRef"]["name"]) == (3, "web")
    assert v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 60


async def test_core_event_reads_as_events_k8s_io_and_back(cluster):
    core = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
            "reason": "Pulled", "message": "pulled the image", "type": "Normal",
            "source": {"component": "kubelet", "host": "edge-node-1"}, "count": 2,
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z"}
    code, _ = await _req(cluster, "POST", CORE_EVENTS, core)
    assert code == 201
    code, ev = await _req(cluster, "GET", f"{EVENTS_V1}/e1")
    assert code == 200, ev
    assert ev["apiVersion"] == "events.k8s.io/v1"
    assert ev["note"] == "pulled the image"
    assert ev["regarding"] == core["involvedObject"]
    assert "reportingController" not in ev  # kube-apiserver copies reportingComponent only, never source
    assert ev["deprecatedSource"] == core["source"]
    assert (ev["deprecatedCount"], ev["deprecatedLastTimestamp"]) == (2, "2026-01-01T00:01:00Z")
    assert "message" not in ev and "involvedObject" not in ev
    new = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e2"},
           "eventTime": "2026-01-01T00:02:00.000000Z", "reportingController": "sedna.io/gm",
           "reportingInstance": "gm-0", "action": "Create", "reason": "Created", "type": "Normal",
           "regarding": {"kind": "Pod", "name": "q", "namespace": "default"}, "note": "made it"}
    code, made = await _req(cluster, "POST", EVENTS_V1, new)
    assert code == 201, made
    assert made["note"] == "made it"
    code, back = await _req(cluster, "GET", f"{CORE_EVENTS}/e2")
    assert (back["message"], back["involvedObject"]["name"], back["reportingComponent"]) == (
        "made it", "q", "sedna.io/gm")


async def test_kubectl_get_events_sorted_prints_rows(cluster, kubectl):
    for i, stamp in enumerate(["2026-01-01T00:05:00Z", "2026-01-01T00:01:00Z"]):
        body = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"ev{i}"},
                "involvedObject": {"kind": "Pod", "name": f"pod{i}", "namespace": "default"},
                "reason": f"Reason{i}", "message": f"message {i}", "type": "Normal",
                "firstTimestamp": stamp, "lastTimestamp": stamp}
        code, _ = await _req(cluster, "POST", CORE_EVENTS, body)
        assert code == 201
    rc, out, err = await kubectl("get", "events", "--sort-by=.lastTimestamp", "--field-selector=type=Normal")
    assert rc == 0, err
    rows = [line for line in out.splitlines()[1:] if "pod/pod" in line]
    assert [r.split()[3] for r in rows] == ["pod/pod1", "pod/pod0"]


async def test_table_include_object(cluster):
    async with aiohttp.ClientSession() as s:
        accept = "application/json;as=Table;v=v1;g=meta.k8s.io"

        async def table(query):
            async with s.get(cluster.url + "/api/v1/namespaces" + query, headers={"Accept": accept},
                             timeout=aiohttp.ClientTimeout(total=10)) as r:
                return await r.json()

        whole = await table("?includeObject=Object")
        assert whole["rows"][0]["object"]["kind"] == "Namespace"
        assert "spec" in whole["rows"][0]["object"]
        meta = await table("")
        assert meta["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
        none = await table("?includeObject=None")
        assert "object" not in none["rows"][0]


async def test_namespaces_discovery_has_no_collection_delete(cluster):
    code, doc = await _req(cluster, "GET", "/api/v1")
    assert code == 200
    verbs = {r["name"]: r["verbs"] for r in doc["resources"]}
    assert verbs["namespaces"] == ["create", "delete", "get", "list", "patch", "update", "watch"]
    assert "deletecollection" in verbs["configmaps"]
    code, status = await _req(cluster, "DELETE", "/api/v1/namespaces")
    assert (code, status["reason"]) == (405, "MethodNotAllowed")
    code, _ = await _req(cluster, "GET", "/api/v1/namespaces/default")
    assert code == 200  # nothing was deleted


async def test_watch_through_a_view_streams_the_view_shape(cluster):
    core = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "w1"}, "reason": "Seen", "message": "hello",
            "type": "Normal", "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}}
    async with aiohttp.ClientSession() as s:
        async with s.get(cluster.url + EVENTS_V1 + "?watch=true&fieldSelector=metadata.name%3Dw1",
                         timeout=aiohttp.ClientTimeout(total=10)) as resp:
            assert resp.status == 200
            code, _ = await _req(cluster, "POST", CORE_EVENTS, core)
            assert code == 201
            line = json.loads(await resp.content.readline())
    assert line["type"] == "ADDED"
    assert (line["object"]["apiVersion"], line["object"]["note"]) == ("events.k8s.io/v1", "hello")
    assert "message" not in line["object"]


async def test_manifest_written_through_a_view_is_stored_in_the_storage_shape(cluster, tmp_path):
    path = tmp_path / "hpa.yaml"
    path.write_text(json.dumps({
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "m"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "m"},
                 "maxReplicas": 2, "targetCPUUtilizationPercentage": 40}}))
    assert cluster.apply_manifests(path) == ["HorizontalPodAutoscaler/m"]
    code, v2 = await _req(cluster, "GET", f"{HPA_V2}/m")
    assert (code, v2["apiVersion"]) == (200, "autoscaling/v2")
    assert v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 40
