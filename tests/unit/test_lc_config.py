"""LC configuration: upstream env names and defaults, our additions, clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lc.config import load
from lc.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_match_upstream() -> None:
    cfg = load({})
    assert cfg.gm_address is None and cfg.gm_url is None
    assert cfg.bind_port == 9100
    assert cfg.bind_address == "0.0.0.0"
    assert cfg.rootfs == "/rootfs"
    assert cfg.db_path == "/rootfs/var/lib/sedna/database.db"
    assert cfg.db_synchronous == "FULL"
    assert cfg.dataset_period == 60.0
    assert (cfg.log_level, cfg.log_format, cfg.gm_token, cfg.node_name) == ("info", "text", None, "")


def test_full_environment() -> None:
    cfg = load({
        "GM_ADDRESS": "gm.sedna:9000", "NODENAME": "edge-1", "HOSTNAME": "pod-x",
        "BIND_PORT": "9200", "BIND_ADDRESS": "127.0.0.1", "ROOTFS_MOUNT_DIR": "/host/",
        "GM_TOKEN": "s3cret", "LOG_LEVEL": "DEBUG", "LOG_FORMAT": "json",
        "LC_DATASET_PERIOD": "0.5", "LC_DB_SYNCHRONOUS": "normal",
    })
    assert cfg.gm_address == "gm.sedna:9000"
    assert cfg.gm_url == "ws://gm.sedna:9000/"
    assert cfg.node_name == "edge-1"
    assert (cfg.bind_address, cfg.bind_port) == ("127.0.0.1", 9200)
    assert cfg.rootfs == "/host"
    assert cfg.db_path == "/host/var/lib/sedna/database.db"
    assert (cfg.gm_token, cfg.log_level, cfg.log_format) == ("s3cret", "debug", "json")
    assert (cfg.dataset_period, cfg.db_synchronous) == (0.5, "NORMAL")


@pytest.mark.parametrize(("env", "expected"), [
    pytest.param({"NODENAME": "n1", "HOSTNAME": "h"}, "n1", id="nodename-wins"),
    pytest.param({"NODENAME": "", "HOSTNAME": "h"}, "h", id="empty-nodename-falls-back"),
    pytest.param({"HOSTNAME": "h"}, "h", id="hostname-only"),
])
def test_node_name_fallback(env: dict[str, str], expected: str) -> None:
    assert load(env).node_name == expected


@pytest.mark.parametrize(("env", "port"), [
    pytest.param({"BIND_PORT": ""}, 9100, id="empty-is-default"),
    pytest.param({"BIND_PORT": " 9300 "}, 9300, id="spaces"),
    pytest.param({"BIND_PORT": "0"}, 0, id="zero-ephemeral"),
])
def test_bind_port(env: dict[str, str], port: int) -> None:
    assert load(env).bind_port == port


@pytest.mark.parametrize(("env", "rootfs", "db"), [
    pytest.param({}, "/rootfs", "/rootfs/var/lib/sedna/database.db", id="unset"),
    pytest.param({"ROOTFS_MOUNT_DIR": ""}, "", "/var/lib/sedna/database.db", id="empty-no-prefix"),
    pytest.param({"ROOTFS_MOUNT_DIR": "/"}, "", "/var/lib/sedna/database.db", id="slash"),
    pytest.param({"ROOTFS_MOUNT_DIR": "/mnt", "LC_DB_PATH": "/tmp/x.db"}, "/mnt", "/tmp/x.db",
                 id="explicit-db"),
])
def test_rootfs_and_db_path(env: dict[str, str], rootfs: str, db: str) -> None:
    cfg = load(env)
    assert (cfg.rootfs, cfg.db_path) == (rootfs, db)


@pytest.mark.parametrize(("raw", "url"), [
    pytest.param("10.0.0.1:9000", "ws://10.0.0.1:9000/", id="ip"),
    pytest.param("[::1]:9000", "ws://[::1]:9000/", id="ipv6"),
    pytest.param("wss://gm.example:443/", "wss://gm.example:443/", id="wss"),
])
def test_gm_address(raw: str, url: str) -> None:
    assert load({"GM_ADDRESS": raw, "NODENAME": "n"}).gm_url == url


@pytest.mark.parametrize(("env", "message"), [
    pytest.param({"BIND_PORT": "abc"}, "BIND_PORT must be a number, got 'abc'", id="port-text"),
    pytest.param({"BIND_PORT": "70000"}, "BIND_PORT must be between 0 and 65535, got 70000",
                 id="port-range"),
    pytest.param({"GM_ADDRESS": "gm.sedna", "NODENAME": "n"},
                 "GM_ADDRESS must be host:port, got 'gm.sedna'", id="gm-no-port"),
    pytest.param({"GM_ADDRESS": "gm:x", "NODENAME": "n"},
                 "GM_ADDRESS port must be a number, got 'x'", id="gm-bad-port"),
    pytest.param({"GM_ADDRESS": "http://gm:9000", "NODENAME": "n"},
                 "GM_ADDRESS: scheme must be ws or wss, got 'http'", id="gm-scheme"),
    pytest.param({"GM_ADDRESS": "gm:9000"},
                 "NODENAME (or HOSTNAME) must be set when GM_ADDRESS is set", id="no-node"),
    pytest.param({"NODENAME": "edge 1"},
                 "NODENAME must not contain whitespace or control characters: 'edge 1'",
                 id="node-space"),
    pytest.param({"ROOTFS_MOUNT_DIR": "rootfs"},
                 "ROOTFS_MOUNT_DIR must be an absolute path, got 'rootfs'", id="rootfs-relative"),
    pytest.param({"LOG_LEVEL": "verbose"},
                 "LOG_LEVEL must be one of debug, info, warning, error, got 'verbose'", id="level"),
    pytest.param({"LOG_FORMAT": "xml"}, "LOG_FORMAT must be one of text, json, got 'xml'",
                 id="format"),
    pytest.param({"LC_DATASET_PERIOD": "-1"},
                 "LC_DATASET_PERIOD must be a positive finite number, got '-1'", id="period-neg"),
    pytest.param({"LC_DATASET_PERIOD": "soon"},
                 "LC_DATASET_PERIOD must be a number of seconds, got 'soon'", id="period-text"),
    pytest.param({"LC_DB_SYNCHRONOUS": "OFF"},
                 "LC_DB_SYNCHRONOUS must be one of FULL, NORMAL, got 'OFF'", id="sync-off"),
    pytest.param({"LC_OUTBOX_BYTES": "65536"},
                 "LC_OUTBOX_BYTES must be at least 1048576 (1 MiB), got 65536", id="outbox-small"),
    pytest.param({"LC_BODY_BUDGET_BYTES": "1000"},
                 "LC_BODY_BUDGET_BYTES must be at least 1048576 (1 MiB), got 1000",
                 id="budget-small"),
    pytest.param({"LC_BODY_BUDGET_WAIT": "-1"},
                 "LC_BODY_BUDGET_WAIT must be a finite number of seconds, 0 or more, got '-1'",
                 id="budget-wait-negative"),
    pytest.param({"LC_BODY_BUDGET_WAIT": "nan"},
                 "LC_BODY_BUDGET_WAIT must be a finite number of seconds, 0 or more, got 'nan'",
                 id="budget-wait-nan"),
])
def test_bad_values_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(env)
    assert str(info.value) == message


def test_memory_and_outbox_bounds() -> None:
    cfg = load({})
    assert (cfg.outbox_bytes, cfg.store_bounds.outbox_bytes) == (64 << 20, 64 << 20)
    budget = cfg.new_body_budget()
    assert (budget.total, budget.wait) == (16 << 20, 1.0)
    cfg = load({"LC_OUTBOX_BYTES": "2097152", "LC_BODY_BUDGET_BYTES": "3145728",
                "LC_BODY_BUDGET_WAIT": "0"})
    budget = cfg.new_body_budget()
    assert (cfg.store_bounds.outbox_bytes, budget.total, budget.wait) == (2 << 20, 3 << 20, 0.0)
    assert cfg.new_body_budget() is not budget  # one per served app, never shared


@pytest.mark.parametrize(("env", "rc", "text"), [
    pytest.param({"BIND_PORT": "abc"}, 2,
                 "sedna-lc: configuration error: BIND_PORT must be a number, got 'abc'",
                 id="bad-config"),
    pytest.param({"LC_DB_PATH": "{tmp}/corrupt.db"}, 2, "is corrupt: file is not a database",
                 id="corrupt-db"),
])
def test_cli_exits_with_a_clear_message(tmp_path, env: dict[str, str], rc: int, text: str) -> None:
    (tmp_path / "corrupt.db").write_bytes(b"not a database" * 200)
    full = {**os.environ, "ROOTFS_MOUNT_DIR": "", "BIND_PORT": "0", "BIND_ADDRESS": "127.0.0.1",
            "LC_DB_PATH": str(tmp_path / "ok.db"), "GM_ADDRESS": ""}
    full.update({k: v.format(tmp=tmp_path) for k, v in env.items()})
    proc = subprocess.run([sys.executable, "-m", "lc.cli"], env=full, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == rc
    assert text in proc.stderr
