"""Server-side apply, managedFields, merge order and generation, through the real kubectl."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import eventually

REPO = Path(__file__).resolve().parents[2]

DEPLOY = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {{app: web{extra_label}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        env: [{{name: A, value: "1"}}{extra_env}]
"""


def _deploy(replicas: int = 2, *, label: bool = False, env: bool = False) -> str:
    return DEPLOY.format(replicas=replicas, extra_label=", tier: fe" if label else "",
                         extra_env=', {name: B, value: "2"}' if env else "")


async def _ok(kubectl, *args, stdin=None):
    rc, out, err = await kubectl(*args, stdin=stdin)
    assert rc == 0, f"kubectl {' '.join(args)} failed: rc={rc}\n{out}\n{err}"
    return out


def _rt(cluster, kind: str = "Deployment", api_version: str = "apps/v1"):
    return cluster.store.registry.for_kind(api_version, kind)


def _get(cluster, name: str = "web", kind: str = "Deployment", api_version: str = "apps/v1"):
    return cluster.store.get(_rt(cluster, kind, api_version), "default", name)


async def test_server_side_apply_twice_is_unchanged_and_records_the_applier(kubectl, cluster):
    out = await _ok(kubectl, "apply", "--server-side", "-f", "-", stdin=_deploy())
    assert "deployment.apps/web serverside-applied" in out
    # The controller's own writes (revision annotation, status) settle first.
    await eventually(lambda: _get(cluster).get("status", {}).get("observedGeneration") == 1,
                     message="the controller observed generation 1")
    before = _get(cluster)["metadata"]["resourceVersion"]
    await _ok(kubectl, "apply", "--server-side", "-f", "-", stdin=_deploy())
    after = _get(cluster)
    assert after["metadata"]["resourceVersion"] == before
    assert after["metadata"]["generation"] == 1

    shown = yaml.safe_load(await _ok(kubectl, "get", "deploy", "web", "-o", "yaml", "--show-managed-fields"))
    apply_entry = shown["metadata"]["managedFields"][0]
    assert (apply_entry["manager"], apply_entry["operation"], apply_entry["apiVersion"]) == \
        ("kubectl", "Apply", "apps/v1")
    containers = apply_entry["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
    assert containers == {'k:{"name":"web"}': {".": {}, "f:env": {'k:{"name":"A"}': {".": {}, "f:name": {},
                                                                                      "f:value": {}}},
                                                "f:image": {}, "f:name": {}}}
    hidden = yaml.safe_load(await _ok(kubectl, "get", "deploy", "web", "-o", "yaml"))
    assert "managedFields" not in hidden["metadata"]


async def test_server_side_apply_removes_what_the_applier_dropped(kubectl, cluster):
    await _ok(kubectl, "apply", "--server-side", "-f", "-", stdin=_deploy(label=True, env=True))
    assert _get(cluster)["metadata"]["labels"] == {"app": "web", "tier": "fe"}
    await _ok(kubectl, "apply", "--server-side", "-f", "-", stdin=_deploy())
    d = _get(cluster)
    assert d["metadata"]["labels"] == {"app": "web"}
    assert d["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]


async def test_scale_then_apply_conflicts_until_forced(kubectl, cluster):
    await _ok(kubectl, "apply", "--server-side", "-f", "-", stdin=_deploy(replicas=2))
    assert "deployment.apps/web scaled" in await _ok(kubectl, "scale", "deployment", "web", "--replicas=4")
    rc, out, err = await kubectl("apply", "--server-side", "-f", "-", stdin=_deploy(replicas=3))
    assert rc != 0
    assert "Apply failed with 1 conflict: conflict with" in err and ".spec.replicas" in err, err
    assert _get(cluster)["spec"]["replicas"] == 4
    await _ok(kubectl, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=_deploy(replicas=3))
    d = _get(cluster)
    assert d["spec"]["replicas"] == 3
    owners = {(m["manager"], m["operation"]): m["fieldsV1"] for m in d["metadata"]["managedFields"]}
    assert "f:replicas" in owners[("kubectl", "Apply")]["f:spec"]
    assert all("f:replicas" not in f.get("f:spec", {}) for k, f in owners.items() if k != ("kubectl", "Apply"))
    # Re-applying the same replicas after the takeover is clean.
    await _ok(kubectl, "apply", "--server-side", "-f", "-", stdin=_deploy(replicas=3))


async def test_client_side_apply_records_its_manager_and_then_edits_by_update(kubectl, cluster):
    await _ok(kubectl, "apply", "-f", "-", stdin=_deploy())
    entries = _get(cluster)["metadata"]["managedFields"]
    mine = [e for e in entries if e["manager"] == "kubectl-client-side-apply"]
    assert len(mine) == 1 and mine[0]["operation"] == "Update"
    annotations = mine[0]["fieldsV1"]["f:metadata"]["f:annotations"]
    assert annotations == {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}


async def test_strategic_patch_puts_added_containers_and_env_first(kubectl, cluster):
    await _ok(kubectl, "apply", "-f", "-", stdin=_deploy())
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "side", "image": "busybox:1.36"},
        {"name": "web", "env": [{"name": "Z", "value": "26"}]}]}}}}
    await _ok(kubectl, "patch", "deployment", "web", "-p", json.dumps(patch))
    containers = _get(cluster)["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["side", "web"]
    assert [e["name"] for e in containers[1]["env"]] == ["Z", "A"]


async def test_generation_is_one_after_create_and_moves_by_one_per_template_change(kubectl, cluster):
    await _ok(kubectl, "apply", "-f", "-", stdin=_deploy())
    await eventually(lambda: _get(cluster).get("status", {}).get("observedGeneration") == 1,
                     message="the controller observed generation 1")
    assert _get(cluster)["metadata"]["generation"] == 1
    assert _get(cluster)["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    await _ok(kubectl, "set", "image", "deployment/web", "web=nginx:1.28")
    await eventually(lambda: _get(cluster)["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
                     and _get(cluster).get("status", {}).get("observedGeneration") == 2,
                     message="the controller observed the new template")
    assert _get(cluster)["metadata"]["generation"] == 2


async def test_every_upstream_example_server_side_applies_twice_unchanged(kubectl, cluster):
    await _ok(kubectl, "apply", "--server-side", "-f", str(REPO / "charts" / "sedna" / "crds"))
    examples = sorted((REPO / "examples" / "upstream").glob("*.yaml"))
    for path in examples:
        assert "serverside-applied" in await _ok(kubectl, "apply", "--server-side", "-f", str(path))
    before = {name: obj["metadata"]["resourceVersion"] for name, obj in _sedna_objects(cluster)}
    assert before
    for path in examples:
        await _ok(kubectl, "apply", "--server-side", "-f", str(path))
    after = {name: obj["metadata"]["resourceVersion"] for name, obj in _sedna_objects(cluster)}
    assert after == before


def _sedna_objects(cluster):
    for rt in cluster.store.registry.all():
        if rt.group == "sedna.io" and rt.storage:
            for obj in cluster.store.list(rt, None)[0]:
                yield f"{rt.kind}/{obj['metadata']['name']}", obj


async def test_kubectl_moves_client_side_apply_ownership_to_server_side_apply(kubectl, cluster):
    await _ok(kubectl, "apply", "-f", "-", stdin=_deploy(replicas=2))
    # Before any server-side apply, the client-side-apply manager owns replicas: a change conflicts.
    rc, _, err = await kubectl("apply", "--server-side", "-f", "-", stdin=_deploy(replicas=3))
    assert rc != 0 and 'conflict with "kubectl-client-side-apply" using apps/v1: .spec.replicas' in err, err
    # An apply that agrees succeeds; kubectl then hands the client-side fields to its applier
    # (a JSON patch on managedFields), after which a change no longer conflicts.
    await _ok(kubectl, "apply", "--server-side", "-f", "-", stdin=_deploy(replicas=2))
    managers = {(m["manager"], m["operation"]) for m in _get(cluster)["metadata"]["managedFields"]}
    assert ("kubectl", "Apply") in managers
    assert ("kubectl-client-side-apply", "Update") not in managers
    await _ok(kubectl, "apply", "--server-side", "-f", "-", stdin=_deploy(replicas=3))
    assert _get(cluster)["spec"]["replicas"] == 3


async def test_kubectl_replace_with_managed_fields_keeps_the_ownership_of_spec(kubectl, cluster):
    # Issue: a custom resource written back with its managedFields was refused under strict
    # validation (`unknown field "metadata.managedFields[0].fieldsV1.f:metadata"`) and lost the
    # ownership of spec under --validate=warn; fieldsV1 is opaque JSON to a real server.
    await _ok(kubectl, "apply", "-f", str(REPO / "charts" / "sedna" / "crds"))
    await _ok(kubectl, "apply", "-f", str(REPO / "examples" / "upstream" / "joint-inference-helmet-detection.yaml"))
    name = "helmet-detection-inference-example"

    def owners() -> dict[str, dict]:
        entries = _get(cluster, name, "JointInferenceService", "sedna.io/v1alpha1")["metadata"]["managedFields"]
        return {e["manager"]: e["fieldsV1"] for e in entries}

    assert "f:spec" in owners()["kubectl-client-side-apply"]
    for validate in ("strict", "warn"):
        shown = await _ok(kubectl, "get", "ji", name, "-o", "json", "--show-managed-fields")
        rc, out, err = await kubectl("replace", f"--validate={validate}", "-f", "-", stdin=shown)
        assert rc == 0 and "replaced" in out, err
        assert "unknown field" not in err
        assert "f:spec" in owners()["kubectl-client-side-apply"], validate
    # A write that changes spec hands the changed field to its manager, the rest stays put.
    shown = json.loads(await _ok(kubectl, "get", "ji", name, "-o", "json", "--show-managed-fields"))
    shown["spec"]["edgeWorker"]["hardExampleMining"]["name"] = "CrossEntropy"
    await _ok(kubectl, "replace", "-f", "-", stdin=json.dumps(shown))
    after = owners()
    # (kubectl replace also rewrites the last-applied annotation it finds, hence f:metadata)
    assert after["kubectl-replace"]["f:spec"] == {"f:edgeWorker": {"f:hardExampleMining": {"f:name": {}}}}
    assert "f:cloudWorker" in after["kubectl-client-side-apply"]["f:spec"]
    assert "f:name" not in after["kubectl-client-side-apply"]["f:spec"]["f:edgeWorker"]["f:hardExampleMining"]
