"""The helm binary `make helm` installs, and a runner for it (no fixture: unit tests use it too)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HELM = Path(os.environ.get("HELM", ROOT / ".venv" / "bin" / "helm"))
TEMPLATE_TIMEOUT = 60.0
_SOURCE = re.compile(r"^# Source: [^/]+/templates/(\S+)$", re.M)


def helm_path() -> Path:
    """The helm binary; outside CI a missing one skips the test (`make helm` installs it)."""
    if not os.access(HELM, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"{HELM} is missing: `make test` runs `make helm` first", pytrace=False)
        pytest.skip(f"{HELM} is missing: run `make helm`")
    return HELM


def helm_env(home: Path) -> dict[str, str]:
    """helm's cache, config and data kept under `home`, so tests leave the user's alone."""
    return {**os.environ, "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data")}


def helm_template(chart: Path, values: dict, *, namespace: str = "sedna", release: str = "sedna",
                  home: Path | None = None) -> dict[str, str]:
    """`helm template` of `chart` with `values` (a values file): template file name -> text."""
    home = home or ROOT / ".pytest_cache" / "helm-home"
    home.mkdir(parents=True, exist_ok=True)
    values_file = home / f"values-{os.getpid()}.json"
    values_file.write_text(json.dumps(values))
    done = subprocess.run([str(helm_path()), "template", release, str(chart), "--namespace", namespace,
                           "--values", str(values_file)], capture_output=True, text=True,
                          timeout=TEMPLATE_TIMEOUT, env=helm_env(home), check=False)
    if done.returncode != 0:
        raise AssertionError(f"helm template failed: {done.stderr}")
    out: dict[str, str] = {}
    parts = _SOURCE.split(done.stdout)
    for name, text in zip(parts[1::2], parts[2::2], strict=True):
        out[name] = out.get(name, "") + "\n---\n" + text
    return out
