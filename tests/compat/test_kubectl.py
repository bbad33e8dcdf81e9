"""The real kubectl (1.32 via the dispatcher) against the in-process dev cluster."""

import asyncio
import json
import sys

import yaml

from devcluster.runtime.process import ImageEntry
from tests.conftest import eventually, run_kubectl

DEPLOY = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: {replicas}
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: nginx
        image: nginx:{tag}
"""

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.test.sedna.io}
spec:
  group: test.sedna.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wg]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Phase, type: string, jsonPath: .status.phase}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
          status: {type: object, properties: {phase: {type: string}}}
"""

WIDGET = """
apiVersion: test.sedna.io/v1
kind: Widget
metadata: {name: w1}
spec: {size: 3}
"""


def _deploy(replicas=2, tag="1"):
    return DEPLOY.replace("{replicas}", str(replicas)).replace("{tag}", tag)


async def _ok(kubectl, *args, stdin=None, within=30.0):
    rc, out, err = await kubectl(*args, stdin=stdin, within=within)
    assert rc == 0, f"kubectl {' '.join(args)} failed: rc={rc}\n{out}\n{err}"
    return out


async def test_apply_get_describe_scale_rollout_delete(kubectl, cluster):
    assert "deployment.apps/web created" in await _ok(kubectl, "apply", "-f", "-", stdin=_deploy())
    assert "deployment.apps/web unchanged" in await _ok(kubectl, "apply", "-f", "-", stdin=_deploy())
    assert "deployment.apps/web configured" in await _ok(kubectl, "apply", "-f", "-", stdin=_deploy(tag="2"))
    out = await _ok(kubectl, "rollout", "status", "deployment/web", "--timeout=20s", within=25)
    assert 'deployment "web" successfully rolled out' in out

    out = await _ok(kubectl, "get", "deploy", "web")
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert row.split()[:4] == ["web", "2/2", "2", "2"]
    doc = yaml.safe_load(await _ok(kubectl, "get", "deployment", "web", "-o", "yaml"))
    assert doc["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    assert doc["status"]["updatedReplicas"] == 2

    assert "deployment.apps/web scaled" in await _ok(kubectl, "scale", "deployment", "web", "--replicas=3")
    await _ok(kubectl, "rollout", "status", "deployment/web", "--timeout=20s", within=25)
    pods = json.loads(await _ok(kubectl, "get", "pods", "-l", "app=web", "-o", "json"))["items"]
    running = [p for p in pods if p["status"]["phase"] == "Running" and not p["metadata"].get("deletionTimestamp")]
    assert len(running) == 3

    out = await _ok(kubectl, "describe", "deployment", "web")
    assert "ScalingReplicaSet" in out and "deployment-controller" in out
    out = await _ok(kubectl, "describe", "pod", running[0]["metadata"]["name"])
    assert "Scheduled" in out and "default-scheduler" in out

    assert 'deployment.apps "web" deleted' in await _ok(kubectl, "delete", "deployment", "web", within=30)
    await eventually(lambda: not cluster.store.list(_rt(cluster, "pods"), "default")[0], within=10,
                   message="pods collected")
    assert "No resources found" in (await kubectl("get", "rs"))[2]


async def test_crd_short_names_printer_columns_status_patch_and_watch(kubectl, cluster):
    await _ok(kubectl, "apply", "-f", "-", stdin=CRD)
    assert "widget.test.sedna.io/w1 created" in await _ok(kubectl, "apply", "-f", "-", stdin=WIDGET)
    out = await _ok(kubectl, "patch", "widget", "w1", "--subresource=status", "--type=merge",
                    "-p", '{"status":{"phase":"Ready"}}')
    assert "widget.test.sedna.io/w1 patched" in out
    out = await _ok(kubectl, "get", "wg")
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "SIZE", "PHASE", "AGE"]
    assert row.split()[:3] == ["w1", "3", "Ready"]

    watcher = asyncio.create_task(kubectl("get", "wg", "w1", "-w", "--request-timeout=3s",
                                          "-o", "custom-columns=NAME:.metadata.name,SIZE:.spec.size"))
    await eventually(lambda: cluster.store.watcher_count() > 0, within=10, message="kubectl watching")
    await _ok(kubectl, "patch", "widget", "w1", "--type=merge", "-p", '{"spec":{"size":7}}')
    rc, out, err = await watcher
    lines = [line.split() for line in out.splitlines()]
    assert ["w1", "7"] in lines, (rc, out, err)
    assert lines.index(["w1", "7"]) > lines.index(["w1", "3"])


async def test_orphan_cascade_and_raw_api(kubectl, cluster):
    raw = json.loads(await _ok(kubectl, "get", "--raw", "/api"))
    assert raw["kind"] == "APIVersions" and raw["versions"] == ["v1"]
    await _ok(kubectl, "apply", "-f", "-", stdin=_deploy(replicas=1))
    await _ok(kubectl, "rollout", "status", "deployment/web", "--timeout=20s", within=25)
    out = await _ok(kubectl, "delete", "deployment", "web", "--cascade=orphan", within=30)
    assert 'deployment.apps "web" deleted' in out
    rs = json.loads(await _ok(kubectl, "get", "rs", "-l", "app=web", "-o", "json"))["items"]
    assert len(rs) == 1
    assert "ownerReferences" not in rs[0]["metadata"]
    pods = json.loads(await _ok(kubectl, "get", "pods", "-l", "app=web", "-o", "json"))["items"]
    assert len(pods) == 1 and pods[0]["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"


async def test_logs_of_a_process_pod(kubectl, cluster):
    cluster.runtime.image_map["sim/echo:v1"] = ImageEntry(
        (sys.executable, "-c", "import os; print('hi', os.environ['POD_NAME'])"))
    pod = ("apiVersion: v1\nkind: Pod\nmetadata: {name: echo}\n"
           "spec: {restartPolicy: Never, containers: [{name: main, image: 'sim/echo:v1'}]}\n")
    assert "pod/echo created" in await _ok(kubectl, "apply", "-f", "-", stdin=pod)
    await _ok(kubectl, "wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/echo", "--timeout=20s",
              within=25)
    assert await _ok(kubectl, "logs", "echo") == "hi echo\n"
    assert await _ok(kubectl, "logs", "echo", "-c", "main", "--tail=1") == "hi echo\n"


def _rt(cluster, resource, group=""):
    return cluster.store.registry.lookup(group=group, version="v1", resource=resource)


async def _start_cli(tmp_path, *args):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "devcluster.cli", "--port", "0", "--kubeconfig", str(tmp_path / "kc"),
        "--log-level", "WARNING", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    line = await asyncio.wait_for(proc.stdout.readline(), 20)
    assert line.startswith(b"devcluster serving https://127.0.0.1:"), line
    return proc


async def _stop_cli(proc):
    proc.terminate()
    await asyncio.wait_for(proc.wait(), 20)
    return proc.returncode


async def test_cli_serves_kubectl_and_keeps_state(tmp_path):
    state = tmp_path / "state.json"
    proc = await _start_cli(tmp_path, "--nodes", "edge-a,cloud-b", "--state", str(state))
    try:
        rc, out, err = await run_kubectl(tmp_path / "kc", tmp_path / "cache", "get", "nodes",
                                         "-o", "jsonpath={.items[*].metadata.name}")
        assert (rc, out) == (0, "cloud-b edge-a"), err
        rc, out, err = await run_kubectl(tmp_path / "kc", tmp_path / "cache", "apply", "-f", "-",
                                         stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: keep}\ndata: {k: v}\n")
        assert rc == 0, err
    finally:
        assert await _stop_cli(proc) == 0
    assert state.exists()
    proc = await _start_cli(tmp_path, "--nodes", "edge-a,cloud-b", "--state", str(state))
    try:
        rc, out, err = await run_kubectl(tmp_path / "kc", tmp_path / "cache2", "get", "configmap", "keep",
                                         "-o", "jsonpath={.data.k}")
        assert (rc, out) == (0, "v"), err
    finally:
        assert await _stop_cli(proc) == 0


async def test_cli_rejects_bad_arguments(tmp_path):
    for args, needle in [
        (["--fault-error-rate", "bogus"], "expected VERB:RESOURCE=RATE"),
        (["--fault-error-rate", "create:pods=2"], "rate must be between 0 and 1"),
        (["--image-map", str(tmp_path / "missing.yaml")], "cannot read image map"),
        (["--nodes", ","], "--nodes needs at least one node name"),
    ]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "devcluster.cli", "--port", "0", *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 20)
        assert proc.returncode == 2, (args, out, err)
        assert needle in err.decode(), (args, err)
