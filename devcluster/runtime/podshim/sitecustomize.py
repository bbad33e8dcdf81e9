"""Run-time path rewrite for Python processes of the dev cluster's process runtime.

The runtime cannot mount a pod's volumes, so it hands a process the mount table in
DEVCLUSTER_MOUNTS (JSON: container path -> host directory) and puts this directory first on
PYTHONPATH. Python then imports this module at start-up, and file access through `open`,
`os.stat` (so `os.path.isfile/exists`), `os.access`, `os.listdir`, `os.scandir` and the
certificate loaders of `ssl` sees a mounted path (`/var/run/secrets/kubernetes.io/...`) at
its host directory. Paths outside the table are untouched; without the variable this module
does nothing. Any other sitecustomize on the path still runs after it.
"""

from __future__ import annotations

import builtins
import importlib.util
import io
import json
import os
import ssl
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _table() -> list[tuple[str, str]]:
    try:
        raw = json.loads(os.environ.get("DEVCLUSTER_MOUNTS") or "{}")
    except ValueError:
        return []
    pairs = [(str(k).rstrip("/"), str(v).rstrip("/")) for k, v in raw.items()] if isinstance(raw, dict) else []
    return sorted(pairs, key=lambda kv: len(kv[0]), reverse=True)


_MOUNTS = _table()


def rewrite(path):  # type: ignore[no-untyped-def]
    """The host path of `path` when it lies under a mount; anything else unchanged."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path.startswith("/"):
        return path
    for target, host in _MOUNTS:
        if path == target or path.startswith(target + "/"):
            return host + path[len(target):]
    return path


def _wrap(fn):  # type: ignore[no-untyped-def]
    def wrapper(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        return fn(rewrite(path), *args, **kwargs)

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    wrapper.__name__ = getattr(fn, "__name__", "wrapper")
    return wrapper


def _install() -> None:
    builtins.open = io.open = _wrap(io.open)  # type: ignore[assignment]
    for name in ("stat", "lstat", "access", "listdir", "scandir"):
        setattr(os, name, _wrap(getattr(os, name)))
    load_verify = ssl.SSLContext.load_verify_locations
    load_chain = ssl.SSLContext.load_cert_chain

    def load_verify_locations(self, cafile=None, capath=None, cadata=None):  # type: ignore[no-untyped-def]
        return load_verify(self, rewrite(cafile) if cafile else cafile, rewrite(capath) if capath else capath,
                           cadata)

    def load_cert_chain(self, certfile, keyfile=None, password=None):  # type: ignore[no-untyped-def]
        return load_chain(self, rewrite(certfile), rewrite(keyfile) if keyfile else keyfile, password)

    ssl.SSLContext.load_verify_locations = load_verify_locations  # type: ignore[method-assign]
    ssl.SSLContext.load_cert_chain = load_cert_chain  # type: ignore[method-assign]


def _chain() -> None:
    """Import the sitecustomize this one shadows, if there is one further down the path."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = None
    for entry in rest:
        candidate = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_sitecustomize_next", candidate)
            break
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


if _MOUNTS:
    _install()
_chain()
