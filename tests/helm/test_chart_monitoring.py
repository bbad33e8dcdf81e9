"""The chart's monitoring: the Grafana dashboard ConfigMaps only when dashboards.enabled, the
Prometheus operator's ServiceMonitor and PodMonitor only when serviceMonitor.enabled, and the
prometheus.io annotations otherwise; values.schema.json refusing what a sidecar cannot match."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from tests.dashboards import DASHBOARDS
from tests.helm.helmbin import ROOT, TEMPLATE_TIMEOUT, helm_env, helm_path, helm_template

CHART = ROOT / "charts" / "sedna"
SCRAPE = {"prometheus.io/scrape": "true", "prometheus.io/path": "/metrics"}
MONITORING = ("ConfigMap", "ServiceMonitor", "PodMonitor")


def _docs(**values) -> list[dict]:
    return [doc for text in helm_template(CHART, values).values() for doc in yaml.safe_load_all(text) if doc]


def _of(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def _dashboards(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in _of(docs, "ConfigMap")
            if d["metadata"]["labels"].get("app.kubernetes.io/component") == "dashboards"}


def _pod_annotations(docs: list[dict]) -> tuple[dict, dict]:
    [gm], [lc] = _of(docs, "Deployment"), _of(docs, "DaemonSet")
    return (gm["spec"]["template"]["metadata"].get("annotations") or {},
            lc["spec"]["template"]["metadata"].get("annotations") or {})


def test_by_default_no_dashboards_and_no_monitors_but_scrape_annotations():
    docs = _docs()
    assert not _dashboards(docs) and not _of(docs, "ServiceMonitor") and not _of(docs, "PodMonitor")
    gm, lc = _pod_annotations(docs)
    assert {k: v for k, v in gm.items() if k.startswith("prometheus.io/")} == {**SCRAPE, "prometheus.io/port": "9000"}
    assert lc == {**SCRAPE, "prometheus.io/port": "9100"}


def test_enabled_dashboards_are_one_configmap_each_labelled_for_the_sidecar():
    files = {p.name: p.read_text(encoding="utf-8") for p in DASHBOARDS.glob("*.json")}
    maps = _dashboards(_docs(dashboards={"enabled": True}))
    assert sorted(maps) == sorted(f"{name.removesuffix('.json')}-dashboard" for name in files)
    for cm in maps.values():
        assert cm["metadata"]["namespace"] == "sedna"
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        [(name, text)] = cm["data"].items()
        assert text == files[name].rstrip("\n") and json.loads(text)["uid"]
    custom = _dashboards(_docs(dashboards={"enabled": True, "label": "example.com/dashboard", "labelValue": "sedna",
                                           "namespace": "monitoring", "annotations": {"grafana_folder": "Sedna"}}))
    assert {(c["metadata"]["namespace"], c["metadata"]["labels"].get("example.com/dashboard"),
             c["metadata"]["annotations"]["grafana_folder"], "grafana_dashboard" in c["metadata"]["labels"])
            for c in custom.values()} == {("monitoring", "sedna", "Sedna", False)}


def test_service_and_pod_monitors_replace_the_annotations():
    docs = _docs(serviceMonitor={"enabled": True, "interval": "15s", "labels": {"release": "prom"}},
                 tls={"gm": {"enabled": True}}, gm={"podAnnotations": {"team": "cloud"}})
    [sm], [pm] = _of(docs, "ServiceMonitor"), _of(docs, "PodMonitor")
    assert sm["metadata"]["namespace"] == "sedna" and pm["metadata"]["namespace"] == "sedna-lc"
    assert sm["metadata"]["labels"]["release"] == pm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["selector"] == {"matchLabels": {"sedna": "gm"}}
    assert sm["spec"]["endpoints"] == [{"port": "tcp-0", "path": "/metrics", "interval": "15s", "scheme": "https"}]
    [service] = [s for s in _of(docs, "Service") if s["metadata"]["name"] == "gm"]
    assert sm["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
    [endpoint] = pm["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"], pm["spec"]["selector"]) == (
        "worker-api", "/metrics", {"matchLabels": {"sedna": "lc"}})
    assert endpoint["relabelings"] == [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]
    gm, lc = _pod_annotations(docs)
    assert "prometheus.io/scrape" not in gm and gm["team"] == "cloud" and lc == {}


def test_pod_annotations_win_over_the_scrape_annotations_and_tls_scrapes_https():
    gm, lc = _pod_annotations(_docs(gm={"podAnnotations": {"prometheus.io/scrape": "false"}},
                                    tls={"lc": {"enabled": True}}))
    assert gm["prometheus.io/scrape"] == "false"
    assert lc["prometheus.io/scheme"] == "https"
    gm, lc = _pod_annotations(_docs(metrics={"scrapeAnnotations": False}))
    assert list(gm) == ["checksum/config"] and lc == {}


@pytest.mark.parametrize(("args", "where"), [
    pytest.param(["--set", "dashboards.label=bad label"], "/dashboards/label", id="label"),
    pytest.param(["--set", "dashboards.labelValue=-x"], "/dashboards/labelValue", id="label-value"),
    pytest.param(["--set", "dashboards.namespace=Monitoring"], "/dashboards/namespace", id="namespace"),
    pytest.param(["--set", "serviceMonitor.interval=often"], "/serviceMonitor/interval", id="interval"),
    pytest.param(["--set", "metrics.scrape=true"], "additional properties 'scrape' not allowed", id="misspelt"),
])
def test_values_a_sidecar_or_the_operator_cannot_use_are_refused(args, where):
    done = subprocess.run([str(helm_path()), "template", "sedna", str(CHART), *args], capture_output=True, text=True,
                          timeout=TEMPLATE_TIMEOUT, env=helm_env(ROOT / ".pytest_cache" / "helm-home"), check=False)
    assert done.returncode != 0 and where in done.stderr, done.stderr


def test_helm_lint_is_clean_with_everything_on():
    done = subprocess.run([str(helm_path()), "lint", "--strict", str(CHART), "--set", "dashboards.enabled=true",
                           "--set", "serviceMonitor.enabled=true", "--set", "tls.gm.enabled=true"],
                          capture_output=True, text=True, timeout=TEMPLATE_TIMEOUT,
                          env=helm_env(ROOT / ".pytest_cache" / "helm-home"), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout
