"""The chart's Pod Security: the GM's namespace enforces `restricted` and the GM pod complies
with it in every mode; the LC, which needs the host network and the host's /, has a namespace
of its own that enforces `privileged`.

`violations` checks a pod spec against the Pod Security Standards (baseline, then restricted)
as the API server's admission does; the cluster tier checks the same pods against a real
kube-apiserver (tests/cluster/test_chart.py).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from gm.config import parse_config
from tests.helm.chart import CHART, _one, render_chart
from tests.helm.helmbin import ROOT, helm_env, helm_path
from tests.unit.test_chart_auth import NO_REVIEW, VALUES, gm_yaml, rendered

BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
# fields whose only allowed values (at both levels) we leave unset rather than enumerate
UNSET = ("appArmorProfile", "seLinuxOptions", "procMount", "sysctls", "windowsOptions")


def containers(pod: dict) -> Iterator[dict]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from pod.get(key) or ()


def violations(pod: dict, level: str) -> list[str]:
    """What keeps `pod` (a pod spec) out of a namespace enforcing `level` (baseline | restricted)."""
    found = _baseline(pod)
    if level == "restricted":
        found += _restricted(pod)
    return found


def _baseline(pod: dict) -> list[str]:
    found = [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if pod.get(key)]
    found += [f"hostPath volume {v['name']}" for v in pod.get("volumes") or () if "hostPath" in v]
    contexts = [("pod", pod.get("securityContext") or {})]
    for c in containers(pod):
        sc = c.get("securityContext") or {}
        contexts.append((c["name"], sc))
        if sc.get("privileged"):
            found.append(f"{c['name']}: privileged")
        added = set((sc.get("capabilities") or {}).get("add") or ()) - BASELINE_CAPABILITIES
        found += [f"{c['name']}: adds capability {cap}" for cap in sorted(added)]
        found += [f"{c['name']}: hostPort {p['hostPort']}" for p in c.get("ports") or () if p.get("hostPort")]
    for who, sc in contexts:
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            found.append(f"{who}: seccomp Unconfined")
        found += [f"{who}: {key} set" for key in UNSET if sc.get(key)]
    return found


def _restricted(pod: dict) -> list[str]:
    found = [f"volume {v['name']} of a type restricted refuses" for v in pod.get("volumes") or ()
             if not set(v) - {"name"} <= RESTRICTED_VOLUMES]
    psc = pod.get("securityContext") or {}
    for c in containers(pod):
        sc, name = c.get("securityContext") or {}, c["name"]
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation is not false")
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            found.append(f"{name}: runAsNonRoot is not true")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            found.append(f"{name}: runAsUser 0")
        if (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault",
                                                                                             "Localhost"):
            found.append(f"{name}: no RuntimeDefault or Localhost seccomp profile")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or ()):
            found.append(f"{name}: capabilities not dropped (ALL)")
        found += [f"{name}: adds capability {cap}" for cap in caps.get("add") or () if cap != "NET_BIND_SERVICE"]
    if psc.get("runAsUser") == 0:
        found.append("pod: runAsUser 0")
    return found


def pod_of(docs: dict, kind: str) -> dict:
    return _one(docs, kind)["spec"]["template"]["spec"]


def labels(ns: dict) -> dict[str, str]:
    return {k: v for k, v in ns["metadata"]["labels"].items() if k.startswith("pod-security.kubernetes.io/")}


def psa(level: str, version: str = "latest") -> dict[str, str]:
    return {f"pod-security.kubernetes.io/{mode}{suffix}": value for mode in ("enforce", "warn", "audit")
            for suffix, value in (("", level), ("-version", version))}


def test_the_checker_knows_a_restricted_pod_from_a_baseline_one():
    good = {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": False,
                                                             "capabilities": {"drop": ["ALL"]}}}]}
    assert violations(good, "restricted") == []
    assert violations({"containers": [{"name": "c"}]}, "baseline") == []
    assert violations({"containers": [{"name": "c"}]}, "restricted") == [
        "c: allowPrivilegeEscalation is not false", "c: runAsNonRoot is not true",
        "c: no RuntimeDefault or Localhost seccomp profile", "c: capabilities not dropped (ALL)"]
    bad = {"hostPID": True, "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
           "containers": [{"name": "c", "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
                           "ports": [{"containerPort": 80, "hostPort": 80}]}]}
    assert violations(bad, "baseline") == ["hostPID=true", "hostPath volume h", "c: privileged",
                                           "c: adds capability SYS_ADMIN", "c: hostPort 80"]


def test_namespaces_enforce_restricted_for_the_gm_and_privileged_for_the_lc():
    gm_ns, lc_ns = render_chart()["namespace.yaml"]
    assert (gm_ns["metadata"]["name"], labels(gm_ns)) == ("sedna", psa("restricted"))
    assert (lc_ns["metadata"]["name"], labels(lc_ns)) == ("sedna-lc", psa("privileged"))
    assert gm_ns["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert "annotations" not in lc_ns["metadata"]  # uninstall deletes it, and the LC with it
    gm_ns, lc_ns = render_chart(podSecurity={"gm": "baseline", "lc": "privileged", "version": "v1.33"})["namespace.yaml"]
    assert (labels(gm_ns), labels(lc_ns)) == (psa("baseline", "v1.33"), psa("privileged", "v1.33"))


@pytest.mark.parametrize("flags", [
    pytest.param({}, id="defaults"),
    pytest.param({"auth": {**NO_REVIEW, "sharedToken": {"enabled": True}}}, id="shared-token"),
    pytest.param({"auth": {**NO_REVIEW, "nodeTokens": {"enabled": True}}}, id="node-tokens"),
    pytest.param({"tls": {"gm": {"enabled": True}, "lc": {"enabled": True}}}, id="tls"),
])
def test_the_gm_pod_complies_with_restricted_in_every_mode(flags):
    docs = rendered(**flags)
    assert violations(pod_of(docs, "Deployment"), "restricted") == []


def test_the_lc_needs_privileged_and_runs_without_privilege_escalation():
    pod = pod_of(render_chart(), "DaemonSet")
    assert violations(pod, "baseline") == ["hostNetwork=true", "hostPath volume rootfs"]
    [lc] = pod["containers"]
    assert lc["securityContext"] == {"allowPrivilegeEscalation": False, "seccompProfile": {"type": "RuntimeDefault"}}
    # on the tainted edge nodes (keadm join --with-edge-taint)
    assert pod["tolerations"] == [{"key": "node-role.kubernetes.io/edge", "operator": "Exists",
                                   "effect": "NoSchedule"}]


def test_the_gm_knows_its_own_service_account():
    docs = render_chart()
    identity = parse_config(gm_yaml(docs)).identity
    binding = _one(docs, "ClusterRoleBinding")["subjects"][0]
    assert (identity.namespace, identity.serviceAccount) == (binding["namespace"], binding["name"]) == (
        "sedna", pod_of(docs, "Deployment")["serviceAccountName"])


def test_without_create_namespace_only_the_lc_namespace_is_made():
    [lc_ns] = render_chart(createNamespace=False)["namespace.yaml"]
    assert (lc_ns["metadata"]["name"], labels(lc_ns)) == ("sedna-lc", psa("privileged"))


def test_one_namespace_for_both_is_refused_unless_it_admits_the_lc():
    args = [str(helm_path()), "template", "sedna", str(CHART), "--namespace", "sedna", "--set", "lc.namespace=sedna"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False,
                          env=helm_env(ROOT / ".pytest_cache" / "helm-home"))
    assert done.returncode != 0
    assert "lc.namespace is the release namespace" in done.stderr
    docs = render_chart(lc={**VALUES["lc"], "namespace": "sedna"}, podSecurity={**VALUES["podSecurity"],
                                                                               "gm": "privileged"})
    [ns] = docs["namespace.yaml"]
    assert labels(ns)["pod-security.kubernetes.io/enforce"] == "privileged"
    assert _one(docs, "DaemonSet")["metadata"]["namespace"] == "sedna"
