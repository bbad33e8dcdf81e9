"""The chart's values for placement, registries, security contexts, annotations and the node
credentials Secret, rendered by the real helm; values.schema.json refusing what would not work."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from gm.edge.auth import NODE_TOKENS_KEY, NodeTokenTable
from tests.helm.helmbin import ROOT, TEMPLATE_TIMEOUT, helm_env, helm_path, helm_template

CHART = ROOT / "charts" / "sedna"
EDGE_TAINT = {"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"}
TOKEN = "0123456789abcdef0123"


def _render(**values) -> dict[str, dict]:
    """kind -> the one rendered object of that kind (the chart's Secret and workloads)."""
    out: dict[str, dict] = {}
    for text in helm_template(CHART, values).values():
        for doc in yaml.safe_load_all(text):
            if doc and doc["kind"] in ("Deployment", "DaemonSet", "Secret"):
                out[doc["kind"]] = doc
    return out


def _pods(rendered: dict) -> tuple[dict, dict]:
    return rendered["Deployment"]["spec"]["template"], rendered["DaemonSet"]["spec"]["template"]


def test_defaults_place_the_gm_off_the_edge_and_the_lc_on_tainted_edge_nodes():
    gm, lc = _pods(_render())
    assert lc["spec"]["tolerations"] == [EDGE_TAINT]
    assert lc["spec"]["nodeSelector"] == {"node-role.kubernetes.io/edge": ""}
    assert "affinity" not in lc["spec"] and "nodeSelector" not in gm["spec"] and "tolerations" not in gm["spec"]
    [term] = gm["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "node-role.kubernetes.io/edge", "operator": "DoesNotExist"}]
    assert "imagePullSecrets" not in gm["spec"] and "imagePullSecrets" not in lc["spec"]
    # the image's user is 65532: the GM keeps it, the LC names root (it reads the host's files)
    assert gm["spec"]["securityContext"]["runAsUser"] == 65532
    assert lc["spec"]["securityContext"] == {"runAsUser": 0, "runAsGroup": 0}
    # and the prometheus.io annotations of metrics.scrapeAnnotations (tests/helm/test_chart_monitoring.py)
    assert [k for k in gm["metadata"]["annotations"] if not k.startswith("prometheus.io/")] == ["checksum/config"]
    assert all(k.startswith("prometheus.io/") for k in lc["metadata"]["annotations"])


def test_placement_registry_and_annotations_values():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["cloud-a"]}]}]}}}
    toleration = {"key": "dedicated", "operator": "Equal", "value": "sedna", "effect": "NoSchedule"}
    gm, lc = _pods(_render(
        imagePullSecrets=[{"name": "regcred"}],
        gm={"nodeSelector": {"disk": "ssd"}, "tolerations": [toleration], "affinity": affinity,
            "podAnnotations": {"prometheus.io/scrape": "true"}},
        lc={"affinity": affinity, "tolerations": [EDGE_TAINT, toleration], "podAnnotations": {"team": "edge"},
            "podSecurityContext": {"runAsUser": 0, "fsGroup": 0}}))
    assert gm["spec"]["imagePullSecrets"] == lc["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert gm["spec"]["nodeSelector"] == {"disk": "ssd"} and gm["spec"]["tolerations"] == [toleration]
    assert gm["spec"]["affinity"] == affinity  # replaces the default, anti-affinity included
    assert lc["spec"]["affinity"] == affinity and lc["spec"]["tolerations"] == [EDGE_TAINT, toleration]
    assert gm["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert "checksum/config" in gm["metadata"]["annotations"]
    assert lc["metadata"]["annotations"]["team"] == "edge"
    # values maps merge into the defaults (Helm's rule): runAsGroup stays
    assert lc["spec"]["securityContext"] == {"runAsUser": 0, "runAsGroup": 0, "fsGroup": 0}


def test_the_node_credentials_secret_is_the_table_the_gm_reads():
    rendered = _render(auth={"tokenReview": {"enabled": False},
                             "nodeTokens": {"enabled": True, "create": True, "tokens": {TOKEN: "edge-node-1"}}})
    secret = rendered["Secret"]
    assert (secret["metadata"]["name"], secret["metadata"]["namespace"]) == ("sedna-node-tokens", "sedna")
    table = NodeTokenTable.parse(secret["stringData"][NODE_TOKENS_KEY], where="chart")
    assert table.node_of(TOKEN) == "edge-node-1" and len(table) == 1
    # not created unless asked: the operator's own Secret is the default
    assert "Secret" not in _render(auth={"tokenReview": {"enabled": False}, "nodeTokens": {"enabled": True}})


def _refused(*args: str) -> str:
    done = subprocess.run([str(helm_path()), "template", "sedna", str(CHART), *args], capture_output=True,
                          text=True, timeout=TEMPLATE_TIMEOUT, env=helm_env(ROOT / ".pytest_cache" / "helm-home"),
                          check=False)
    assert done.returncode != 0, done.stdout[:500]
    return done.stderr


@pytest.mark.parametrize(("args", "message"), [
    pytest.param(["--set", "gm.replcas=3"], "additional properties 'replcas' not allowed", id="misspelt-key"),
    pytest.param(["--set", "gm.replicas=0"], "/gm/replicas", id="no-gm"),
    pytest.param(["--set", "lc.log.level=verbose"], "/lc/log/level", id="log-level"),
    pytest.param(["--set", "podSecurity.gm=strict"], "/podSecurity/gm", id="pod-security-level"),
    pytest.param(["--set", "lc.bindPort=70000"], "/lc/bindPort", id="port"),
    pytest.param(["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy", id="pull-policy"),
    pytest.param(["--set", "auth.nodeTokens.enabled=true", "--set", "auth.nodeTokens.create=true",
                  "--set", "auth.nodeTokens.tokens.short=edge-node-1"], "invalid propertyName 'short'", id="short-token"),
    pytest.param(["--set", "auth.nodeTokens.enabled=true", "--set", "auth.nodeTokens.create=true"],
                 "auth.nodeTokens.create needs auth.nodeTokens.tokens", id="create-without-tokens"),
])
def test_values_that_cannot_work_are_refused(args, message):
    assert message in _refused(*args)


def test_helm_lint_is_clean():
    done = subprocess.run([str(helm_path()), "lint", "--strict", str(CHART)], capture_output=True, text=True,
                          timeout=TEMPLATE_TIMEOUT, env=helm_env(ROOT / ".pytest_cache" / "helm-home"), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout
