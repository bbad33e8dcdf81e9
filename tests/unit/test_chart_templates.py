"""Every chart template renders into the objects a cluster needs, with the configuration the GM
and the LC load and the rights the GM uses."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from gm.config import parse_config
from gm.kinds import DECLARATIONS
from gm.reconcile.declaration import KindDeclaration
from lc.config import load as load_lc_config
from shared import apis
from tests.helm.chart import (
    CHART,
    _allowed,
    _one,
    render,
    render_chart,
)


def _chart_meta() -> dict:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())


def test_chart_metadata():
    meta = _chart_meta()
    assert (meta["apiVersion"], meta["name"], meta["type"]) == ("v2", "sedna", "application")
    assert meta["appVersion"] == "0.1.0"


def test_templates_render_to_the_expected_kinds():
    rendered = render_chart()
    kinds = {name: [d["kind"] for d in docs] for name, docs in rendered.items()}
    assert kinds == {
        "gm-configmap.yaml": ["ConfigMap"],
        "gm-deployment.yaml": ["Deployment"],
        "gm-pdb.yaml": ["PodDisruptionBudget"],
        "gm-service.yaml": ["Service"],
        "lc-daemonset.yaml": ["DaemonSet"],
        "namespace.yaml": ["Namespace", "Namespace"],
        "node-tokens-secret.yaml": [],  # auth.nodeTokens.create
        "rbac.yaml": ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"],
        "serviceaccount.yaml": ["ServiceAccount", "ServiceAccount"],
        "dashboards.yaml": [],  # dashboards.enabled
        "servicemonitor.yaml": [],  # serviceMonitor.enabled
    }
    for docs in rendered.values():
        for doc in docs:
            if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding", "Namespace"):
                lc = (doc["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "lc"
                assert doc["metadata"]["namespace"] == ("sedna-lc" if lc else "sedna"), doc["metadata"]


def test_namespace_is_optional():
    gm_ns, lc_ns = render_chart()["namespace.yaml"]
    assert (gm_ns["metadata"]["name"], lc_ns["metadata"]["name"]) == ("sedna", "sedna-lc")
    assert gm_ns["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    [lc_only] = render_chart(createNamespace=False)["namespace.yaml"]
    assert lc_only["metadata"]["name"] == "sedna-lc"


def test_unsupported_template_forms_fail():
    with pytest.raises(ValueError, match="unsupported template function"):
        render("{{ .Values.a | toYaml }}", {"a": 1}, {})


def test_gm_config_is_what_the_gm_loads():
    cm = _one(render_chart(), "ConfigMap")
    assert cm["metadata"]["name"] == "gm-config"
    cfg = parse_config(cm["data"]["sedna-gm.yaml"])
    assert (cfg.kubeConfig, cfg.master, cfg.namespace) == ("", "", "")
    assert (cfg.websocket.address, cfg.websocket.port) == ("0.0.0.0", 9000)
    assert cfg.localController.server == "http://localhost:9100"
    assert cfg.knowledgeBaseServer.server == "http://kb.sedna:9020"
    assert cfg.minResyncPeriodSeconds == 30
    assert (cfg.kubeClient.qps, cfg.kubeClient.burst, cfg.kubeClient.statusQps, cfg.kubeClient.eventQps) == (200.0, 400, 1000.0, 50.0)
    assert cfg.workers == 4
    assert (cfg.leaderElection.enabled, cfg.leaderElection.leaseName,
            cfg.leaderElection.leaseNamespace) == (True, "sedna-gm", "sedna")
    assert (cfg.log.level, cfg.log.format) == ("info", "json")


def test_gm_deployment_and_service():
    rendered = render_chart()
    deploy, svc = _one(rendered, "Deployment"), _one(rendered, "Service")
    pod = deploy["spec"]["template"]
    assert deploy["spec"]["selector"]["matchLabels"] == {"sedna": "gm"}
    assert pod["metadata"]["labels"]["sedna"] == "gm"
    assert pod["spec"]["serviceAccountName"] == rendered["serviceaccount.yaml"][0]["metadata"]["name"] == "sedna"
    [container] = pod["spec"]["containers"]
    assert container["image"] == "sedna-py:0.1.0"
    assert container["command"] == ["sedna-gm", "--config", "/config/sedna-gm.yaml"]
    assert container["ports"] == [{"name": "websocket", "containerPort": 9000, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "websocket"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "websocket"}
    assert container["volumeMounts"] == [{"name": "config", "mountPath": "/config", "readOnly": True}]
    assert pod["spec"]["volumes"] == [{"name": "config", "configMap": {"name": "gm-config"}}]
    [term] = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert term == {"matchExpressions": [{"key": "node-role.kubernetes.io/edge", "operator": "DoesNotExist"}]}
    assert svc["metadata"]["name"] == "gm"
    assert svc["spec"]["selector"] == {"sedna": "gm"}
    assert svc["spec"]["ports"] == [{"name": "tcp-0", "port": 9000, "targetPort": "websocket", "protocol": "TCP"}]


def test_lc_daemonset():
    ds = _one(render_chart(), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/edge": ""}
    assert (pod["hostNetwork"], pod["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    [container] = pod["containers"]
    assert container["command"] == ["sedna-lc"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODENAME"] == {"name": "NODENAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    plain = {name: e["value"] for name, e in env.items() if "value" in e}
    assert plain == {"GM_ADDRESS": "gm.sedna:9000", "BIND_PORT": "9100", "ROOTFS_MOUNT_DIR": "/rootfs",
                     "LOG_LEVEL": "info", "LOG_FORMAT": "json", "GM_TOKEN_FILE": "/var/run/secrets/sedna/token"}
    cfg = load_lc_config({**plain, "NODENAME": "edge-node-1"})
    assert (cfg.gm_url, cfg.node_name, cfg.bind_port, cfg.rootfs) == (
        "ws://gm.sedna:9000/", "edge-node-1", 9100, "/rootfs")
    assert container["ports"] == [{"name": "worker-api", "containerPort": 9100, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "worker-api"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "worker-api"}
    assert container["volumeMounts"][0] == {"name": "rootfs", "mountPath": "/rootfs"}
    assert pod["volumes"][0] == {"name": "rootfs", "hostPath": {"path": "/"}}


def test_cluster_role_covers_what_the_gm_does():
    """The kinds and children the GM works with; tests/helm/test_rbac_rules.py derives the exact
    set from the GM's code."""
    rendered = render_chart()
    role, binding = _one(rendered, "ClusterRole"), _one(rendered, "ClusterRoleBinding")
    for api in apis.ALL_KINDS:
        assert _allowed(role, "sedna.io", api.plural) >= {"get", "list", "watch"}
        assert _allowed(role, "sedna.io", f"{api.plural}/status") == {"patch"}
    for decl in DECLARATIONS:  # owners of children with blockOwnerDeletion
        assert _allowed(role, "sedna.io", f"{decl.api.plural}/finalizers") == {"update"}
    # children: cached by list+watch, relabelled (patch) when an older GM made them
    assert _allowed(role, "", "pods") == {"create", "get", "list", "watch", "delete", "patch"}
    assert _allowed(role, "apps", "deployments") == {"create", "get", "list", "watch", "delete", "update",
                                                     "patch"}
    assert _allowed(role, "autoscaling", "horizontalpodautoscalers") == {"create", "get", "list", "watch",
                                                                         "update", "delete", "patch"}
    assert _allowed(role, "", "services") == {"create", "get", "list", "watch", "update", "delete", "patch"}
    assert _allowed(role, "", "secrets") == {"list", "watch"}  # the Secret informer
    assert _allowed(role, "", "events") == {"create", "patch"}
    assert _allowed(role, "coordination.k8s.io", "leases") == set()  # the Role's, in its namespace
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sedna", "namespace": "sedna"}]
    lease_role, lease_binding = _one(rendered, "Role"), _one(rendered, "RoleBinding")
    assert lease_role["metadata"]["namespace"] == lease_binding["metadata"]["namespace"] == "sedna"
    assert _allowed(lease_role, "coordination.k8s.io", "leases") == {"create", "get", "update"}
    assert lease_binding["subjects"] == binding["subjects"]


def test_cluster_role_lets_the_gm_delete_the_kinds_that_expire():
    """A kind declaring `expired` (ttlSecondsAfterFinished) is deleted by the GM itself."""
    role = _one(render_chart(), "ClusterRole")
    never = next(f.default for f in dataclasses.fields(KindDeclaration) if f.name == "expired")
    expiring = [d.api for d in DECLARATIONS if d.expired is not never]
    assert expiring, "no kind declares expired: the test checks nothing"
    for api in expiring:
        assert "delete" in _allowed(role, "sedna.io", api.plural), api.kind
