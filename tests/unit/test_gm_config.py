import pytest

from gm.config import GMConfig, load_config, parse_config
from gm.errors import ConfigError


def test_defaults_match_upstream():
    cfg = parse_config("")
    assert cfg == GMConfig()
    assert (cfg.websocket.address, cfg.websocket.port) == ("0.0.0.0", 9000)
    assert cfg.localController.server == "http://localhost:9100"
    assert cfg.knowledgeBaseServer.server == "http://localhost:9020"
    assert cfg.minResyncPeriodSeconds == 30
    assert cfg.federatedLearning.specEditPolicy == "recreate"


def test_upstream_helm_config_parses():
    # What upstream's Helm chart renders: nulls keep defaults, keys in upstream's spelling.
    text = """
kubeConfig:
master: ""
namespace: ""
websocket:
  address: 0.0.0.0
  port: 9000
localController:
  server: http://localhost:9100
knowledgeBaseServer:
  server: http://kb.sedna:9020
"""
    cfg = parse_config(text)
    assert cfg.kubeConfig == ""
    assert cfg.knowledgeBaseServer.server == "http://kb.sedna:9020"


def test_keys_are_case_insensitive_and_unknown_keys_ignored():
    cfg = parse_config("WebSocket: {PORT: 9100}\nsomethingElse: 3\nKUBECLIENT: {qps: 5, burst: 7}")
    assert cfg.websocket.port == 9100
    assert (cfg.kubeClient.qps, cfg.kubeClient.burst) == (5.0, 7)


@pytest.mark.parametrize(
    "text, message",
    [
        pytest.param("websocket: {port: abc}", "websocket.port: expected int, got 'abc'", id="wrong-type"),
        pytest.param("websocket: 3", "websocket: expected a mapping, got int", id="not-mapping"),
        pytest.param("workers: 0", "workers: must be at least 1", id="workers"),
        pytest.param("- a", "the configuration must be a mapping", id="list"),
        pytest.param("a: [", "not valid YAML", id="yaml"),
        pytest.param("kubeConfig: /nonexistent/kc", "kubeConfig: file '/nonexistent/kc' does not exist", id="kubeconfig"),
        pytest.param("federatedLearning: {specEditPolicy: keep}", "specEditPolicy: must be", id="policy"),
        pytest.param("websocket: {port: 70000}", "websocket.port: 70000 is not a valid port", id="port-range"),
        pytest.param("websocket: {placementGraceSeconds: -1}", "websocket.placementGraceSeconds: must be within 0..300",
                     id="placement-grace"),
        pytest.param("leaderElection: {leaseDurationSeconds: 10, renewDeadlineSeconds: 15}",
                     "leaderElection: need leaseDurationSeconds > renewDeadlineSeconds > retryPeriodSeconds"
                     " > 0, got 10 / 15 / 2", id="renew-deadline-over-lease"),
        pytest.param("leaderElection: {retryPeriodSeconds: 0}", "retryPeriodSeconds > 0", id="retry-zero"),
        pytest.param("leaderElection: {enabled: true, leaseNamespace: ''}", "leaseNamespace must be set",
                     id="no-lease-namespace"),
        pytest.param("cacheSyncTimeoutSeconds: 0", "cacheSyncTimeoutSeconds: must be > 0", id="sync-timeout"),
        pytest.param("identity: {serviceAccount: Sedna_GM}", "identity.serviceAccount: 'Sedna_GM' is not a valid name",
                     id="identity-name"),
    ],
)
def test_bad_config_names_the_key(text, message):
    with pytest.raises(ConfigError) as exc:
        parse_config(text)
    assert message in str(exc.value)


def test_load_config_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(str(tmp_path / "nope.yaml"))


def test_token_from_file(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    cfg = parse_config(f"websocket: {{tokenFile: {token}}}")
    assert cfg.websocket_token() == "s3cret"


@pytest.mark.parametrize("text, env, expected", [
    pytest.param("", {}, ("", "", False), id="unknown"),
    pytest.param("identity: {namespace: sedna, serviceAccount: sedna}", {}, ("sedna", "sedna", True), id="file"),
    pytest.param("", {"POD_NAMESPACE": "sedna", "POD_SERVICE_ACCOUNT": "gm"}, ("sedna", "gm", True), id="env"),
    pytest.param("identity: {serviceAccount: sedna}", {"POD_NAMESPACE": "ops", "POD_SERVICE_ACCOUNT": "other"},
                 ("ops", "sedna", True), id="file-first-env-fills-blanks"),
    pytest.param("", {"POD_NAMESPACE": "sedna"}, ("sedna", "", False), id="half-known"),
])
def test_identity_from_the_file_then_the_env(tmp_path, text, env, expected):
    path = tmp_path / "gm.yaml"
    path.write_text(text)
    identity = load_config(str(path), env=env).identity
    assert (identity.namespace, identity.serviceAccount, identity.known) == expected


def test_parse_config_reads_no_env(monkeypatch):
    monkeypatch.setenv("POD_NAMESPACE", "sedna")
    monkeypatch.setenv("POD_SERVICE_ACCOUNT", "sedna")
    assert not parse_config("").identity.known


def test_load_config_reads_the_process_env(tmp_path, monkeypatch):
    monkeypatch.setenv("POD_NAMESPACE", "sedna")
    monkeypatch.setenv("POD_SERVICE_ACCOUNT", "gm")
    path = tmp_path / "gm.yaml"
    path.write_text("")
    assert load_config(str(path)).identity.serviceAccount == "gm"
