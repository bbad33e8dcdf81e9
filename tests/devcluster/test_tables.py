"""Table rendering: column sets, cells as kubectl shows them, ages, CR printer columns."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from devcluster.machinery.resource import ResourceType
from devcluster.tables.columns import human_age
from devcluster.tables.render import column_definitions, to_table

PODS = ResourceType("", "v1", "pods", "Pod", True)
DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True)
REPLICASETS = ResourceType("apps", "v1", "replicasets", "ReplicaSet", True)
SERVICES = ResourceType("", "v1", "services", "Service", True)
NODES = ResourceType("", "v1", "nodes", "Node", False)
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", False)
EVENTS = ResourceType("", "v1", "events", "Event", True)
CRDS = ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True)
WIDGETS = ResourceType("example.com", "v1", "widgets", "Widget", True)  # a kind without a printer

T0 = "2024-01-01T00:00:00Z"
NOW = datetime(2024, 1, 1, 1, 0, 0, tzinfo=UTC).timestamp()  # one hour after T0


def meta(name="x", **extra):
    return {"name": name, "namespace": "default", "uid": "u-1", "creationTimestamp": T0, **extra}


@pytest.mark.parametrize("seconds,text", [
    pytest.param(-5, "<invalid>", id="future"),
    pytest.param(-1.5, "0s", id="clock-skew"),
    pytest.param(0, "0s", id="zero"),
    pytest.param(45.9, "45s", id="seconds-truncate"),
    pytest.param(119, "119s", id="under-two-minutes"),
    pytest.param(120, "2m", id="two-minutes"),
    pytest.param(150, "2m30s", id="mixed-minutes"),
    pytest.param(599, "9m59s", id="under-ten-minutes"),
    pytest.param(600, "10m", id="ten-minutes"),
    pytest.param(179 * 60 + 59, "179m", id="under-three-hours"),
    pytest.param(3 * 3600, "3h", id="three-hours"),
    pytest.param(3 * 3600 + 600, "3h10m", id="mixed-hours"),
    pytest.param(8 * 3600, "8h", id="eight-hours"),
    pytest.param(47 * 3600 + 3599, "47h", id="under-two-days"),
    pytest.param(2 * 86400, "2d", id="two-days"),
    pytest.param(2 * 86400 + 5 * 3600, "2d5h", id="mixed-days"),
    pytest.param(8 * 86400, "8d", id="eight-days"),
    pytest.param(729 * 86400, "729d", id="under-two-years"),
    pytest.param(730 * 86400, "2y", id="two-years"),
    pytest.param(735 * 86400, "2y5d", id="mixed-years"),
    pytest.param(8 * 365 * 86400, "8y", id="eight-years"),
])
def test_human_age(seconds, text):
    assert human_age(seconds) == text


def _names(rt):
    return [(c["name"], c["type"], c["priority"]) for c in column_definitions(rt)]


@pytest.mark.parametrize("rt,columns", [
    pytest.param(PODS, [("Name", "string", 0), ("Ready", "string", 0), ("Status", "string", 0),
                        ("Restarts", "string", 0), ("Age", "string", 0), ("IP", "string", 1), ("Node", "string", 1),
                        ("Nominated Node", "string", 1), ("Readiness Gates", "string", 1)], id="pods"),
    pytest.param(DEPLOYMENTS, [("Name", "string", 0), ("Ready", "string", 0), ("Up-to-date", "string", 0),
                               ("Available", "string", 0), ("Age", "string", 0), ("Containers", "string", 1),
                               ("Images", "string", 1), ("Selector", "string", 1)], id="deployments"),
    pytest.param(REPLICASETS, [("Name", "string", 0), ("Desired", "integer", 0), ("Current", "integer", 0),
                               ("Ready", "integer", 0), ("Age", "string", 0), ("Containers", "string", 1),
                               ("Images", "string", 1), ("Selector", "string", 1)], id="replicasets"),
    pytest.param(SERVICES, [("Name", "string", 0), ("Type", "string", 0), ("Cluster-IP", "string", 0),
                            ("External-IP", "string", 0), ("Port(s)", "string", 0), ("Age", "string", 0),
                            ("Selector", "string", 1)], id="services"),
    pytest.param(NAMESPACES, [("Name", "string", 0), ("Status", "string", 0), ("Age", "string", 0)], id="namespaces"),
    pytest.param(CRDS, [("Name", "string", 0), ("Created At", "date", 0)], id="crds"),
    pytest.param(WIDGETS, [("Name", "string", 0), ("Age", "string", 0)], id="default"),
])
def test_column_definitions(rt, columns):
    assert _names(rt) == columns
    assert column_definitions(rt)[0]["format"] == "name"


def _cells(rt, obj):
    return to_table(rt, [obj], resource_version="7", now=NOW)["rows"][0]["cells"]


def _pod(status, spec=None, **meta_extra):
    return {"metadata": meta("p", **meta_extra),
            "spec": spec or {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": status}


RUNNING = {"running": {"startedAt": T0}}


@pytest.mark.parametrize("pod,cells", [
    pytest.param(_pod({"phase": "Pending"}), ["p", "0/2", "Pending", "0", "60m", "<none>", "n1", "<none>", "<none>"],
                 id="pending"),
    pytest.param(_pod({"phase": "Pending", "containerStatuses": [
        {"name": "a", "ready": False, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}},
        {"name": "b", "ready": False, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
                 ["p", "0/2", "ContainerCreating", "0", "60m", "<none>", "n1", "<none>", "<none>"], id="creating"),
    pytest.param(_pod({"phase": "Running", "podIPs": [{"ip": "10.244.0.5"}], "containerStatuses": [
        {"name": "a", "ready": True, "restartCount": 0, "state": RUNNING},
        {"name": "b", "ready": True, "restartCount": 0, "state": RUNNING}]}),
                 ["p", "2/2", "Running", "0", "60m", "10.244.0.5", "n1", "<none>", "<none>"], id="running"),
    pytest.param(_pod({"phase": "Running", "containerStatuses": [
        {"name": "a", "ready": True, "restartCount": 3, "state": RUNNING,
         "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2024-01-01T00:55:00Z"}}},
        {"name": "b", "ready": False, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
                 ["p", "1/2", "CrashLoopBackOff", "4 (5m ago)", "60m", "<none>", "n1", "<none>", "<none>"],
                 id="crashloop-with-restart-age"),
    pytest.param(_pod({"phase": "Failed", "containerStatuses": [
        {"name": "a", "ready": False, "restartCount": 0, "state": {"terminated": {"exitCode": 2}}},
        {"name": "b", "ready": False, "restartCount": 0, "state": {"terminated": {"exitCode": 0,
                                                                                  "reason": "Completed"}}}]}),
                 ["p", "0/2", "ExitCode:2", "0", "60m", "<none>", "n1", "<none>", "<none>"], id="exit-code"),
    pytest.param(_pod({"phase": "Running", "containerStatuses": [
        {"name": "a", "ready": True, "state": RUNNING}, {"name": "b", "ready": True, "state": RUNNING}]},
        deletionTimestamp="2024-01-01T00:59:00Z"),
                 ["p", "2/2", "Terminating", "0", "60m", "<none>", "n1", "<none>", "<none>"], id="terminating"),
    pytest.param(_pod({"phase": "Pending", "initContainerStatuses": [
        {"name": "init", "ready": False, "restartCount": 0, "state": {"running": {}}}]},
        spec={"initContainers": [{"name": "init"}], "containers": [{"name": "a"}]}),
                 ["p", "0/1", "Init:0/1", "0", "60m", "<none>", "<none>", "<none>", "<none>"], id="init-running"),
    pytest.param(_pod({"phase": "Pending", "initContainerStatuses": [
        {"name": "init", "ready": False, "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]},
        spec={"initContainers": [{"name": "init"}], "containers": [{"name": "a"}]}),
                 ["p", "0/1", "Init:CrashLoopBackOff", "2", "60m", "<none>", "<none>", "<none>", "<none>"],
                 id="init-crashloop"),
    pytest.param(_pod({"phase": "Running", "conditions": [{"type": "ready.example/gate", "status": "True"}]},
                      spec={"containers": [{"name": "a"}], "readinessGates": [
                          {"conditionType": "ready.example/gate"}, {"conditionType": "other"}]}),
                 ["p", "0/1", "Running", "0", "60m", "<none>", "<none>", "<none>", "1/2"], id="readiness-gates"),
])
def test_pod_rows(pod, cells):
    assert _cells(PODS, pod) == cells


def test_succeeded_pod_row_has_completed_condition():
    pod = _pod({"phase": "Succeeded", "containerStatuses": [
        {"name": "a", "ready": False, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]},
        spec={"containers": [{"name": "a"}]})
    row = to_table(PODS, [pod], resource_version="7", now=NOW)["rows"][0]
    assert row["cells"][2] == "Completed"
    assert row["conditions"] == [{"type": "Completed", "status": "True", "reason": "Succeeded",
                                  "message": "The pod has completed successfully."}]


def test_table_shape_and_partial_object_metadata():
    pod = _pod({"phase": "Pending"}, labels={"app": "web"})
    table = to_table(PODS, [pod, _pod({"phase": "Pending"})], resource_version="42", now=NOW)
    assert table["kind"] == "Table"
    assert table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "42"}
    assert len(table["rows"]) == 2
    assert table["rows"][0]["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                          "metadata": pod["metadata"]}
    assert to_table(PODS, [], resource_version="1", now=NOW)["rows"] == []


DEPLOY = {"metadata": meta("web"),
          "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                   "template": {"spec": {"containers": [{"name": "c", "image": "nginx:1"},
                                                        {"name": "s", "image": "side:2"}]}}},
          "status": {"replicas": 3, "updatedReplicas": 2, "readyReplicas": 1, "availableReplicas": 1}}


@pytest.mark.parametrize("rt,obj,cells", [
    pytest.param(DEPLOYMENTS, DEPLOY, ["web", "1/3", 2, 1, "60m", "c,s", "nginx:1,side:2", "app=web"], id="deploy"),
    pytest.param(DEPLOYMENTS, {"metadata": meta("new"), "spec": {"replicas": 2}},
                 ["new", "0/2", 0, 0, "60m", "", "", ""], id="deploy-no-status"),
    pytest.param(REPLICASETS, DEPLOY, ["web", 3, 3, 1, "60m", "c,s", "nginx:1,side:2", "app=web"], id="rs"),
    pytest.param(SERVICES, {"metadata": meta("svc"), "spec": {
        "type": "NodePort", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "selector": {"b": "2", "a": "1"},
        "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]}},
                 ["svc", "NodePort", "10.96.0.10", "<none>", "80:30080/TCP,53/UDP", "60m", "a=1,b=2"], id="svc-nodeport"),
    pytest.param(SERVICES, {"metadata": meta("lb"), "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.1",
                                                             "ports": [{"port": 443}]}},
                 ["lb", "LoadBalancer", "10.0.0.1", "<pending>", "443/TCP", "60m", "<none>"], id="svc-lb-pending"),
    pytest.param(SERVICES, {"metadata": meta("ext"), "spec": {"type": "ExternalName", "externalName": "db.example"}},
                 ["ext", "ExternalName", "<none>", "db.example", "<none>", "60m", "<none>"], id="svc-external-name"),
    pytest.param(NODES, {"metadata": meta("edge-1", labels={"node-role.kubernetes.io/edge": "",
                                                            "node-role.kubernetes.io/agent": "",
                                                            "kubernetes.io/hostname": "edge-1"}),
                         "spec": {"unschedulable": True},
                         "status": {"conditions": [{"type": "Ready", "status": "True"}],
                                    "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}],
                                    "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Linux",
                                                 "kernelVersion": "6.1", "containerRuntimeVersion": "fake://1"}}},
                 ["edge-1", "Ready,SchedulingDisabled", "agent,edge", "60m", "v1.32.0", "10.0.0.2", "<none>",
                  "Linux", "6.1", "fake://1"], id="node"),
    pytest.param(NODES, {"metadata": meta("n2"), "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}},
                 ["n2", "NotReady", "<none>", "60m", "", "<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"],
                 id="node-not-ready"),
    pytest.param(NAMESPACES, {"metadata": meta("ns"), "status": {"phase": "Active"}}, ["ns", "Active", "60m"],
                 id="namespace"),
    pytest.param(EVENTS, {"metadata": meta("p.17a"), "type": "Warning", "reason": "BackOff", "count": 4,
                          "message": " Back-off restarting \n", "firstTimestamp": "2024-01-01T00:30:00Z",
                          "lastTimestamp": "2024-01-01T00:58:00Z",
                          "involvedObject": {"kind": "Pod", "name": "p", "fieldPath": "spec.containers{a}"},
                          "source": {"component": "kubelet", "host": "n1"}},
                 ["2m", "Warning", "BackOff", "pod/p", "spec.containers{a}", "kubelet, n1", "Back-off restarting",
                  "30m", 4, "p.17a"], id="event"),
    pytest.param(EVENTS, {"metadata": meta("e"), "type": "Normal", "reason": "Scheduled", "message": "ok",
                          "eventTime": "2024-01-01T00:59:30.000000Z", "reportingComponent": "sched",
                          "involvedObject": {"kind": "Pod"}},
                 ["30s", "Normal", "Scheduled", "pod", "", "sched", "ok", "30s", 1, "e"], id="event-micro-time"),
    pytest.param(CRDS, {"metadata": meta("models.sedna.io")}, ["models.sedna.io", T0], id="crd"),
    pytest.param(CONFIGMAPS, {"metadata": meta("cm"), "data": {"a": "1", "b": "2"}, "binaryData": {"c": ""}},
                 ["cm", 3, "60m"], id="configmap"),
    pytest.param(WIDGETS, {"metadata": {"name": "r"}}, ["r", "<unknown>"], id="default-no-timestamp"),
])
def test_rows(rt, obj, cells):
    assert _cells(rt, obj) == cells


COLUMNS = (
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "job phase"},
    {"name": "Workers", "type": "integer", "jsonPath": ".spec.workers[-1].replicas"},
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Ratio", "type": "number", "jsonPath": ".status.ratio", "priority": 1},
    {"name": "Paused", "type": "boolean", "jsonPath": ".spec.paused"},
    {"name": "First", "type": "string", "jsonPath": ".spec.workers[0]"},
)
JOBS = ResourceType("sedna.io", "v1alpha1", "federatedlearningjobs", "FederatedLearningJob", True, crd=True,
                    printer_columns=COLUMNS)
JOB = {"metadata": meta("fl"),
       "spec": {"workers": [{"name": "w0", "replicas": 1}, {"name": "w1", "replicas": 4}], "paused": False},
       "status": {"phase": "Running", "ratio": 0.5,
                  "conditions": [{"type": "Training", "status": "True"}, {"type": "Ready", "status": "False"}]}}


def test_cr_printer_columns_with_age_appended():
    assert _names(JOBS) == [("Name", "string", 0), ("Phase", "string", 0), ("Workers", "integer", 0),
                            ("Ready", "string", 0), ("Ratio", "number", 1), ("Paused", "boolean", 0),
                            ("First", "string", 0), ("Age", "string", 0)]
    assert column_definitions(JOBS)[1]["description"] == "job phase"
    assert _cells(JOBS, JOB) == ["fl", "Running", 4, "False", 0.5, False, '{"name":"w0","replicas":1}', "60m"]


def test_cr_missing_values_are_null():
    assert _cells(JOBS, {"metadata": meta("bare")}) == ["bare", None, None, None, None, None, None, "60m"]


def test_cr_date_column_renders_as_age_and_replaces_default_age():
    rt = ResourceType("sedna.io", "v1alpha1", "models", "Model", True, crd=True, printer_columns=(
        {"name": "Updated", "type": "date", "jsonPath": ".status.updateTime"},
        {"name": "Created", "type": "date", "jsonPath": "{.metadata.creationTimestamp}"}))
    obj = {"metadata": meta("m"), "status": {"updateTime": "2024-01-01T00:57:30Z"}}
    assert _names(rt) == [("Name", "string", 0), ("Updated", "date", 0), ("Created", "date", 0)]
    assert _cells(rt, obj) == ["m", "2m30s", "60m"]


def test_cr_without_printer_columns_is_name_and_age():
    rt = ResourceType("sedna.io", "v1alpha1", "datasets", "Dataset", True, crd=True)
    assert _names(rt) == [("Name", "string", 0), ("Age", "string", 0)]
    assert _cells(rt, {"metadata": meta("d")}) == ["d", "60m"]


@pytest.mark.parametrize("path, expected", [
    pytest.param(".status.conditions[-1:].type", "Running", id="slice-last"),
    pytest.param(".status.conditions[0:1].type", "Pending", id="slice-first"),
    pytest.param('.status.conditions[?(@.status=="True")].type', "Running", id="filter-true"),
])
def test_printer_column_slices_and_filters(path, expected):
    from devcluster.tables.custom import _compile_path, _evaluate
    obj = {"status": {"conditions": [{"type": "Pending", "status": "False"},
                                     {"type": "Running", "status": "True"}]}}
    assert _evaluate(obj, _compile_path(path)) == expected
