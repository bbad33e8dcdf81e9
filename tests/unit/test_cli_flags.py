"""The flags every command shares (shared/cliflags.py): klog's `-v` in each form upstream's GM
and LC are started with, and `--version` on sedna-gm, sedna-lc and sedna-devcluster."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from gm import cli as gm_cli
from lc import cli as lc_cli
from shared import cliflags, version

ROOT = Path(__file__).resolve().parents[2]
FORMS = [pytest.param(argv, id=" ".join(argv)) for argv in
         (["-v", "2"], ["-v2"], ["-v=2"], ["--v=2"], ["--v", "2"])]
PARSERS = [pytest.param(gm_cli.parse_args, id="sedna-gm"), pytest.param(lc_cli.parse_args, id="sedna-lc")]


@pytest.mark.parametrize("parse", PARSERS)
@pytest.mark.parametrize("argv", FORMS)
def test_every_klog_form_of_v_is_taken(parse, argv: list[str]) -> None:
    assert parse(argv).verbosity == 2


@pytest.mark.parametrize("parse", PARSERS)
def test_without_v_there_is_no_verbosity(parse) -> None:
    assert parse([]).verbosity is None


@pytest.mark.parametrize("parse", PARSERS)
@pytest.mark.parametrize("argv", [["-v", "x"], ["-v=-1"], ["--v=2.5"], ["-v"]])
def test_a_bad_verbosity_is_a_usage_error(parse, argv: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 2
    assert "-v/--v" in capsys.readouterr().err


def test_the_gm_keeps_its_config_flag_beside_v() -> None:
    args = gm_cli.parse_args(["--config", "/etc/sedna/gm.yaml", "-v", "4"])
    assert (args.config, args.verbosity, args.log_level) == ("/etc/sedna/gm.yaml", 4, None)


@pytest.mark.parametrize(("v", "level"), [(0, "info"), (1, "info"), (2, "info"), (3, "info"),
                                          (4, "debug"), (9, "debug")])
def test_verbosity_maps_onto_log_levels(v: int, level: str) -> None:
    assert cliflags.log_level_of(v) == level


@pytest.mark.parametrize(("verbosity", "explicit", "level"), [
    pytest.param(None, None, "warning", id="the-config"),
    pytest.param(5, None, "debug", id="v-over-the-config"),
    pytest.param(1, None, "info", id="low-v-over-the-config"),
    pytest.param(5, "error", "error", id="log-level-over-v"),
])
def test_which_log_level_wins(verbosity: int | None, explicit: str | None, level: str) -> None:
    args = argparse.Namespace(verbosity=verbosity)
    assert cliflags.chosen_log_level(args, configured="warning", explicit=explicit) == level


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", *argv], env=full, cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.mark.parametrize(("module", "prog"), [("gm.cli", "sedna-gm"), ("lc.cli", "sedna-lc"),
                                              ("devcluster.cli", "sedna-devcluster")])
def test_version_prints_the_package_version_and_exits_0(module: str, prog: str) -> None:
    done = _run(module, "--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{prog} {version.package_version()}\n", "")


def test_the_gm_started_as_upstream_is_gets_past_its_flags(tmp_path: Path) -> None:
    """`sedna-gm -v2 --config FILE` was refused as unrecognized; now the config is what fails."""
    done = _run("gm.cli", "-v2", "--config", str(tmp_path / "missing.yaml"))
    assert done.returncode == 2, done.stderr
    assert "unrecognized arguments" not in done.stderr
    assert done.stderr.startswith("sedna-gm: "), done.stderr


def test_the_lc_started_as_upstream_is_gets_past_its_flags() -> None:
    done = _run("lc.cli", "--v=2", env={"BIND_PORT": "abc"})
    assert done.returncode == 2, done.stderr
    assert "sedna-lc: configuration error: BIND_PORT" in done.stderr


def test_the_version_of_a_source_tree_never_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(version.metadata, "version", missing)
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version.package_version() == f"{declared} (source tree)"
    monkeypatch.setattr(version, "_PYPROJECT", ROOT / "no-such-pyproject.toml")
    assert version.package_version() == "unknown"


def test_the_installed_version_is_the_distributions() -> None:
    assert version.package_version() == metadata.version("sedna-py")
