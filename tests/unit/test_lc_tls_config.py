"""The LC's credential and TLS settings: consistent combinations load, the rest fail clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from lc.config import load
from lc.errors import ConfigError

BASE = {"GM_ADDRESS": "wss://gm.sedna:9000", "NODENAME": "edge-node-1"}


def test_files_are_loaded(tmp_path: Path) -> None:
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / name).write_text("x")
    cfg = load({**BASE, "GM_TOKEN_FILE": "/var/run/secrets/sedna/token", "GM_CA_FILE": str(tmp_path / "ca.crt"),
                "LC_TLS_CERT_FILE": str(tmp_path / "tls.crt"), "LC_TLS_KEY_FILE": str(tmp_path / "tls.key")})
    assert cfg.gm_url == "wss://gm.sedna:9000/"
    assert (cfg.gm_token, cfg.gm_token_file) == (None, "/var/run/secrets/sedna/token")
    assert (cfg.gm_ca_file, cfg.tls_cert_file, cfg.tls_key_file) == (
        str(tmp_path / "ca.crt"), str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))


def test_defaults_have_no_tls() -> None:
    cfg = load({"GM_ADDRESS": "gm:9000", "NODENAME": "n"})
    assert (cfg.gm_url, cfg.gm_token_file, cfg.gm_ca_file, cfg.tls_cert_file) == ("ws://gm:9000/", None, None, None)


@pytest.mark.parametrize(
    ("env", "error"),
    [
        pytest.param({"GM_TOKEN": "t", "GM_TOKEN_FILE": "/t"}, "not both", id="token-and-file"),
        pytest.param({"GM_ADDRESS": "gm:9000", "GM_CA_FILE": "/ca.crt"}, "not wss", id="ca-without-wss"),
        pytest.param({"LC_TLS_CERT_FILE": "/tls.crt"}, "go together", id="cert-without-key"),
        pytest.param({"GM_CA_FILE": "/no/such/ca.crt"}, "does not exist", id="missing-ca"),
    ],
)
def test_inconsistent_settings_fail(env: dict[str, str], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        load({**BASE, **env})
