"""The chart's node identity and TLS settings: each mode renders what the GM and the LC read,
and the two sides agree (audience, token and certificate paths, RBAC for TokenReview). Node
identity (TokenReview) is on by default; turned off, the chart is upstream-compatible."""

from __future__ import annotations

import copy

import yaml

from gm.config import parse_config
from lc.config import load as load_lc_config
from tests.helm.chart import CHART, _allowed, _one, render_chart

VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
NO_REVIEW = {"tokenReview": {"enabled": False}}


def rendered(**flags: dict[str, dict]) -> dict[str, list[dict]]:
    """Render with e.g. auth={"tokenReview": {"enabled": False}} merged over values.yaml."""
    overrides = {}
    for top, blocks in flags.items():
        merged = copy.deepcopy(VALUES[top])
        for block, settings in blocks.items():
            if isinstance(settings, dict):
                merged[block].update(settings)
            else:
                merged[block] = settings
        overrides[top] = merged
    return render_chart(**overrides)


def lc_parts(docs: dict) -> tuple[dict, dict, dict[str, str], dict[str, dict], dict[str, str]]:
    """(pod spec, container, env values, volumes by name, mount paths by volume name)."""
    pod = _one(docs, "DaemonSet")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    return pod, container, env, volumes, mounts


def gm_yaml(docs: dict) -> str:
    return _one(docs, "ConfigMap")["data"]["sedna-gm.yaml"]


def test_default_proves_each_lcs_node_with_a_projected_gm_audience_token() -> None:
    docs = render_chart()
    cfg = parse_config(gm_yaml(docs)).websocket
    review = cfg.tokenReview
    assert (review.enabled, review.audiences, review.serviceAccounts) == (
        True, "sedna-gm", "system:serviceaccount:sedna-lc:sedna-lc")
    assert (cfg.token, cfg.tokenFile, cfg.nodeTokens.secret, cfg.tls.enabled) == ("", "", "", False)
    pod, _, env, volumes, mounts = lc_parts(docs)
    # the LC's own ServiceAccount, in the LC namespace the GM names, with no API token mounted
    assert pod["serviceAccountName"] == "sedna-lc" and pod["automountServiceAccountToken"] is False
    [source] = volumes["gm-token"]["projected"]["sources"]
    assert source == {"serviceAccountToken": {"audience": "sedna-gm", "expirationSeconds": 3600, "path": "token"}}
    assert env["GM_TOKEN_FILE"] == f"{mounts['gm-token']}/token"
    accounts = {(d["metadata"]["namespace"], d["metadata"]["name"]): d for d in docs["serviceaccount.yaml"]}
    assert set(accounts) == {("sedna", "sedna"), ("sedna-lc", "sedna-lc")}
    assert accounts[("sedna-lc", "sedna-lc")]["automountServiceAccountToken"] is False
    assert _one(docs, "DaemonSet")["metadata"]["namespace"] == "sedna-lc"
    assert _allowed(_one(docs, "ClusterRole"), "authentication.k8s.io", "tokenreviews") == {"create"}
    lc = load_lc_config({k: v for k, v in env.items() if v is not None} | {"NODENAME": "edge-node-1"})
    assert lc.gm_token_file == "/var/run/secrets/sedna/token"


def test_node_identity_off_is_upstream_compatible_and_mounts_no_token() -> None:
    docs = rendered(auth=NO_REVIEW)
    cfg = parse_config(gm_yaml(docs)).websocket
    assert (cfg.token, cfg.tokenFile, cfg.nodeTokens.secret, cfg.tokenReview.enabled) == ("", "", "", False)
    pod, _, env, volumes, _ = lc_parts(docs)
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    assert "GM_TOKEN_FILE" not in env and set(volumes) == {"rootfs"}
    assert [d["metadata"]["name"] for d in docs["serviceaccount.yaml"]] == ["sedna"]


def test_lc_namespace_moves_the_lc_and_the_name_the_gm_admits() -> None:
    docs = rendered(lc={"namespace": "edge-agents"})
    assert parse_config(gm_yaml(docs)).websocket.tokenReview.serviceAccounts == (
        "system:serviceaccount:edge-agents:sedna-lc")
    assert _one(docs, "DaemonSet")["metadata"]["namespace"] == "edge-agents"
    assert [d["metadata"]["namespace"] for d in docs["serviceaccount.yaml"]] == ["sedna", "edge-agents"]
    assert [d["metadata"]["name"] for d in docs["namespace.yaml"]] == ["sedna", "edge-agents"]


def test_node_tokens_mode_reads_the_secret_and_each_nodes_own_file() -> None:
    docs = rendered(auth={**NO_REVIEW, "nodeTokens": {"enabled": True}})
    assert parse_config(gm_yaml(docs)).websocket.nodeTokens.secret == "sedna/sedna-node-tokens"
    _, _, env, _, mounts = lc_parts(docs)
    assert env["GM_TOKEN_FILE"] == "/rootfs/etc/sedna/node-token"
    assert mounts["rootfs"] == "/rootfs"


def test_shared_token_mode_mounts_the_secret_on_both_sides() -> None:
    docs = rendered(auth={**NO_REVIEW, "sharedToken": {"enabled": True}})
    assert yaml.safe_load(gm_yaml(docs))["websocket"]["tokenFile"] == "/etc/sedna/gm-token/token"
    deploy = _one(docs, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "gm-token", "secret": {"secretName": "sedna-gm-token"}} in deploy["volumes"]
    _, _, env, volumes, mounts = lc_parts(docs)
    assert volumes["gm-shared-token"] == {"name": "gm-shared-token", "secret": {"secretName": "sedna-gm-token"}}
    assert env["GM_TOKEN_FILE"] == f"{mounts['gm-shared-token']}/token"


def test_two_modes_at_once_give_each_lc_one_credential() -> None:
    """The GM may accept several modes (a migration); an LC presents exactly one token."""
    docs = rendered(auth={"tokenReview": {"enabled": True}, "sharedToken": {"enabled": True}})
    _, container, env, _, mounts = lc_parts(docs)
    assert [e["name"] for e in container["env"]].count("GM_TOKEN_FILE") == 1
    assert env["GM_TOKEN_FILE"] == f"{mounts['gm-token']}/token"
    docs = rendered(auth={**NO_REVIEW, "nodeTokens": {"enabled": True}, "sharedToken": {"enabled": True}})
    _, container, env, _, _ = lc_parts(docs)
    assert [e["name"] for e in container["env"]].count("GM_TOKEN_FILE") == 1
    assert env["GM_TOKEN_FILE"] == "/rootfs/etc/sedna/node-token"


def test_gm_tls_serves_wss_and_lcs_verify_against_the_ca() -> None:
    docs = rendered(tls={"gm": {"enabled": True}})
    tls = yaml.safe_load(gm_yaml(docs))["websocket"]["tls"]  # files exist only in the pod
    deploy = _one(docs, "Deployment")["spec"]["template"]["spec"]
    [container] = deploy["containers"]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "tls"]
    assert tls == {"certFile": f"{mount['mountPath']}/tls.crt", "keyFile": f"{mount['mountPath']}/tls.key"}
    assert {"name": "tls", "secret": {"secretName": "sedna-gm-tls"}} in deploy["volumes"]
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    _, _, env, volumes, mounts = lc_parts(docs)
    assert env["GM_ADDRESS"] == "wss://gm.sedna:9000"
    assert volumes["gm-ca"]["configMap"] == {"name": "sedna-gm-ca"}
    assert env["GM_CA_FILE"] == f"{mounts['gm-ca']}/ca.crt"


def test_lc_tls_serves_the_worker_api_over_https() -> None:
    docs = rendered(tls={"lc": {"enabled": True}})
    _, container, env, volumes, mounts = lc_parts(docs)
    assert (env["LC_TLS_CERT_FILE"], env["LC_TLS_KEY_FILE"]) == (
        f"{mounts['tls']}/tls.crt", f"{mounts['tls']}/tls.key")
    assert volumes["tls"]["secret"] == {"secretName": "sedna-lc-tls"}
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert env["GM_ADDRESS"] == "gm.sedna:9000"
