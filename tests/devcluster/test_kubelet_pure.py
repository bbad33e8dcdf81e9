"""Pure parts of the scheduler and kubelet stand-ins: node choice, pod status, env."""

import base64
from collections import Counter

import pytest

from devcluster.controllers.nodes import build_node
from devcluster.controllers.podenv import EnvError, container_env
from devcluster.controllers.podstatus import ContainerRun, build_status, image_id
from devcluster.controllers.scheduler import pick_node


def _pod(**spec):
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "uid-1",
                         "labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1"}], **spec},
            "status": {"phase": "Pending"}}


def test_pick_node_prefers_fewest_pods_then_name():
    nodes = [build_node("b", 0), build_node("a", 1)]
    assert pick_node(_pod(), nodes, Counter()) == ("a", "")
    assert pick_node(_pod(), nodes, Counter({"a": 2, "b": 1})) == ("b", "")


def test_pick_node_honours_node_selector_and_readiness():
    edge, cloud = build_node("edge-1", 0), build_node("cloud", 1)
    pod = _pod(nodeSelector={"node-role.kubernetes.io/edge": ""})
    assert pick_node(pod, [edge, cloud], Counter()) == ("edge-1", "")
    edge["status"]["conditions"][0]["status"] = "False"
    node, msg = pick_node(pod, [edge, cloud], Counter())
    assert node is None
    assert msg == ("0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
                   "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }. "
                   "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")


def test_build_node_has_required_fields_and_edge_role():
    node = build_node("edge-node-1", 0)
    assert node["metadata"]["labels"]["node-role.kubernetes.io/edge"] == ""
    assert node["status"]["addresses"] == [{"type": "InternalIP", "address": "10.0.0.1"},
                                           {"type": "Hostname", "address": "edge-node-1"}]
    assert len(node["status"]["nodeInfo"]) == 10
    assert all(isinstance(v, str) and v for v in node["status"]["nodeInfo"].values())
    assert "node-role.kubernetes.io/edge" not in build_node("cloud-node", 2)["metadata"]["labels"]


def test_status_pending_then_running_keeps_transition_times():
    pod = _pod(nodeName="n")
    pending = build_status(pod, phase="Pending", run=ContainerRun(state="waiting"), host_ip="10.0.0.1",
                           pod_ip=None)
    cs = pending["containerStatuses"][0]
    assert cs["imageID"] == "" and cs["ready"] is False
    assert cs["state"] == {"waiting": {"reason": "ContainerCreating"}}
    ready = {c["type"]: c for c in pending["conditions"]}["Ready"]
    assert ready["status"] == "False" and ready["message"] == "containers with unready status: [c]"
    pod["status"] = pending
    running = build_status(pod, phase="Running", run=ContainerRun(state="running", started_at="T"),
                           host_ip="10.0.0.1", pod_ip="10.244.0.1")
    cs = running["containerStatuses"][0]
    assert cs["imageID"] == image_id("nginx:1")
    assert cs["imageID"].startswith("docker.io/library/nginx@sha256:")
    assert cs["containerID"].startswith("containerd://") and len(cs["containerID"]) == 13 + 64
    assert cs["state"] == {"running": {"startedAt": "T"}}
    assert running["podIP"] == "10.244.0.1" and running["podIPs"] == [{"ip": "10.244.0.1"}]
    conds = {c["type"]: c for c in running["conditions"]}
    assert {t: c["status"] for t, c in conds.items()} == {
        "PodReadyToStartContainers": "True", "Initialized": "True", "Ready": "True",
        "ContainersReady": "True", "PodScheduled": "True"}
    assert all("lastTransitionTime" in c for c in running["conditions"])


def test_env_resolution():
    secret = {"data": {"pw": base64.b64encode(b"s3cret").decode()}}
    cm = {"data": {"url": "http://x"}}
    objects = {("secrets", "ns", "sec"): secret, ("configmaps", "ns", "cm"): cm}
    pod = _pod(nodeName="edge-1")
    pod["status"]["podIP"] = "10.244.0.9"
    container = {"name": "c", "env": [
        {"name": "A", "value": "1"},
        {"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "pw"}}},
        {"name": "URL", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "url"}}},
        {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k", "optional": True}}},
    ]}
    env = container_env(pod, container, lambda r, ns, n: objects.get((r, ns, n)))
    assert env == {"NODE_NAME": "edge-1", "POD_NAME": "p", "POD_NAMESPACE": "ns", "A": "1", "ME": "p",
                   "NODE": "edge-1", "IP": "10.244.0.9", "APP": "x", "PW": "s3cret", "URL": "http://x"}


def test_env_missing_secret_is_an_error():
    container = {"env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "pw"}}}]}
    with pytest.raises(EnvError, match='secret "sec" not found'):
        container_env(_pod(), container, lambda *a: None)
