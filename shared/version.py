"""The version of sedna-py a process runs, for `--version` on every command.

The installed distribution's (importlib.metadata), which is what an image or a wheel holds;
run from a source tree that was never installed (`python -m gm.cli` in a fresh checkout),
pyproject.toml's, marked as such. Standard library only: the dev cluster uses it too.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "sedna-py"
_PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def package_version() -> str:
    """The version of the installed sedna-py, else of the source tree this module is in."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    try:
        with _PYPROJECT.open("rb") as file:
            project = tomllib.load(file).get("project") or {}
    except (OSError, tomllib.TOMLDecodeError):
        return "unknown"
    version = project.get("version") if project.get("name") == DISTRIBUTION else None
    return f"{version} (source tree)" if isinstance(version, str) else "unknown"
