#!/usr/bin/env python3
"""The image's HEALTHCHECK: GET /healthz of whichever service the container runs.

One image runs the GM (`sedna-gm --config FILE`, /healthz on `websocket.port`, 9000 by default,
https with `websocket.tls`) and the LC (`sedna-lc`, /healthz on `BIND_PORT`, 9100 by default,
https with `LC_TLS_CERT_FILE`). The container's processes say which one runs, and its
config file or environment says where. `SEDNA_HEALTH_URL` overrides all of that. A container
running anything else (the dev cluster, a simulated worker) has nothing to check and is healthy.

Exit status 0: healthy (or nothing to check); 1: unhealthy. Standard library and PyYAML only.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

GM_PORT, LC_PORT = 9000, 9100
TIMEOUT = 3.0


def command_line(pid: int) -> list[str]:
    """The argv of `pid`, empty when unreadable (gone, or not ours to read)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def service_commands() -> list[list[str]]:
    """The argv of every process, the container's first one first (an init such as
    `docker run --init` puts the service right after it)."""
    pids = sorted(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
    return [argv for argv in map(command_line, pids) if argv]


def _key(mapping: object, name: str) -> object:
    """`mapping[name]`, matched case-insensitively as the GM reads its keys; None when absent."""
    if not isinstance(mapping, Mapping):
        return None
    return next((v for k, v in mapping.items() if str(k).lower() == name.lower()), None)


def gm_url(argv: Sequence[str]) -> str:
    """The GM's /healthz from the `--config` file its command names."""
    config: object = {}
    if "--config" in argv[:-1]:
        try:
            config = yaml.safe_load(Path(argv[argv.index("--config") + 1]).read_text()) or {}
        except (OSError, yaml.YAMLError):
            config = {}
    websocket = _key(config, "websocket")
    port = _key(websocket, "port") or GM_PORT
    tls = _key(websocket, "tls")
    scheme = "https" if _key(tls, "certFile") else "http"
    return f"{scheme}://127.0.0.1:{port}/healthz"


def lc_url(env: Mapping[str, str]) -> str:
    """The LC's /healthz from its environment."""
    scheme = "https" if env.get("LC_TLS_CERT_FILE") else "http"
    return f"{scheme}://127.0.0.1:{env.get('BIND_PORT') or LC_PORT}/healthz"


def target(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The URL to probe for the service `argv` runs, or None when it serves no health check."""
    if env.get("SEDNA_HEALTH_URL"):
        return env["SEDNA_HEALTH_URL"]
    programs = {os.path.basename(arg) for arg in argv[:2]}
    modules = set(argv[1:3]) if argv and os.path.basename(argv[0]).startswith("python") else set()
    if "sedna-gm" in programs or "gm.cli" in modules:
        return gm_url(argv)
    if "sedna-lc" in programs or "lc.cli" in modules:
        return lc_url(env)
    return None


def healthy(url: str, *, timeout: float = TIMEOUT) -> bool:
    """True if `url` answers 200. The certificate is not verified: the probe dials loopback,
    which a service certificate does not name."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def main() -> int:
    url = next((u for argv in service_commands() if (u := target(argv, os.environ))), None)
    if url is None:
        return 0
    if healthy(url):
        return 0
    print(f"unhealthy: GET {url} did not answer 200", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
