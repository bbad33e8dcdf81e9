"""docker-compose.yml and the Dockerfile stay consistent with the code (no Docker engine here)."""

from __future__ import annotations

from pathlib import Path

import yaml

from gm.config import parse_config
from lc.config import load as load_lc_config

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_services_and_volumes():
    doc = compose()
    assert set(doc["services"]) == {"k3s", "gm", "lc-edge-1", "lc-edge-2", "sim-edge-worker"}
    for name, svc in doc["services"].items():
        for vol in svc.get("volumes", []):
            source = vol.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in doc["volumes"], f"{name} uses undeclared volume {source}"
        for dep in svc.get("depends_on", []):
            assert dep in doc["services"]


def test_gm_config_file_parses():
    gm = compose()["services"]["gm"]
    mount = next(v for v in gm["volumes"] if v.endswith("/config/gm.yaml:ro"))
    cfg_text = (ROOT / mount.split(":")[0]).read_text()
    # kubeConfig names a file inside the container: validate everything else
    cfg = parse_config(cfg_text.replace("kubeConfig: /k3s-output/kubeconfig.yaml", "kubeConfig: ''"))
    assert cfg.master == "https://k3s:6443"
    assert cfg.websocket.port == 9000
    assert gm["command"] == ["sedna-gm", "--config", "/config/gm.yaml"]


def test_lc_environments_load(tmp_path):
    for name in ("lc-edge-1", "lc-edge-2"):
        env = dict(compose()["services"][name]["environment"])
        env["ROOTFS_MOUNT_DIR"] = str(tmp_path)  # the container path does not exist here
        cfg = load_lc_config(env)
        assert cfg.node_name == env["NODENAME"] and cfg.bind_port == 9100
        assert cfg.gm_address == "gm:9000"


def test_dockerfile_installs_the_console_scripts():
    text = (ROOT / "Dockerfile").read_text()
    for package in ("proto", "shared", "gm", "lc", "devcluster"):
        assert f"COPY {package} {package}" in text
    pyproject = (ROOT / "pyproject.toml").read_text()
    for script in ("sedna-gm", "sedna-lc", "sedna-devcluster"):
        assert script in pyproject
