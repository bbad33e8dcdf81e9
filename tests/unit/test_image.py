"""The image (Dockerfile, .dockerignore, scripts/healthcheck.py) and how docker-compose.yml uses
it. No Docker engine here: the files are read and checked for the structure that matters, and
the health check script runs against real HTTP servers."""

from __future__ import annotations

import asyncio
import fnmatch
import re
import sys
from pathlib import Path

import pytest
import yaml
from aiohttp import web

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import healthcheck  # noqa: E402

SOURCES = ("proto", "shared", "gm", "lc", "devcluster")


def _stages() -> list[list[str]]:
    """The Dockerfile's stages, each a list of its instructions (continuation lines joined)."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    stages: list[list[str]] = []
    for line in lines:
        if line.startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


def _chart_image() -> str:
    image = yaml.safe_load((ROOT / "charts" / "sedna" / "values.yaml").read_text())["image"]
    return f"{image['repository']}:{image['tag']}"


def test_build_stage_installs_dependencies_before_it_copies_the_sources():
    build, _runtime = _stages()
    deps = next(i for i, line in enumerate(build) if "-r requirements.txt" in line)
    first_source = min(i for i, line in enumerate(build) if re.match(rf"COPY ({'|'.join(SOURCES)}) ", line))
    assert deps < first_source
    # before the dependencies, only what names them is copied
    copied = [line.split()[1:-1] for line in build[:deps] if line.startswith("COPY ")]
    assert sorted(f for files in copied for f in files) == ["constraints.txt", "pyproject.toml"]
    assert "-c constraints.txt" in build[deps]
    for package in SOURCES:
        assert f"COPY {package} {package}" in build


def test_runtime_stage_is_slim_non_root_and_checks_health():
    build, runtime = _stages()
    assert build[0].endswith(" AS build") and runtime[0].endswith(" AS runtime")
    # the runtime installs wheels from the build stage, dependencies first, and copies no sources
    from_build = [line for line in runtime if line.startswith("COPY --from=build")]
    assert [line.split()[2] for line in from_build] == ["/wheels/deps", "/wheels/app"]
    assert not [line for line in runtime if re.match(rf"COPY ({'|'.join(SOURCES)})\b", line)]
    [user] = [line for line in runtime if line.startswith("USER ")]
    assert user.split()[1].split(":")[0] not in ("0", "root")
    [check] = [line for line in runtime if line.startswith("HEALTHCHECK ")]
    assert check.endswith('CMD ["sedna-healthcheck"]')
    assert "COPY --chmod=0755 scripts/healthcheck.py /usr/local/bin/sedna-healthcheck" in runtime


def test_dockerignore_keeps_out_local_state_but_not_what_the_image_needs():
    patterns = [p for p in (ROOT / ".dockerignore").read_text().splitlines() if p and not p.startswith("#")]
    for state in (".git", ".venv", ".devcluster", "tests"):
        assert state in patterns
    needed = ["pyproject.toml", "constraints.txt", "README.md", "scripts/healthcheck.py", "examples/workers/sim.py",
              *SOURCES]
    for path in needed:
        assert not [p for p in patterns if fnmatch.fnmatch(path, p) or path.startswith(p + "/")], path


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_builds_the_image_once_and_every_other_service_reuses_it():
    services = _compose()["services"]
    ours = {name: svc for name, svc in services.items() if svc.get("image") == _chart_image()}
    builders = [name for name, svc in services.items() if "build" in svc]
    assert builders == ["gm"]
    assert services["gm"]["build"]["context"] == "." and services["gm"]["image"] == _chart_image()
    assert set(ours) == {"gm", "lc-edge-1", "lc-edge-2", "sim-edge-worker"}
    for name in set(ours) - {"gm"}:
        assert ours[name]["pull_policy"] == "never", name  # the built image, never one of a registry


def test_compose_waits_for_health_where_a_service_needs_another():
    services = _compose()["services"]
    dockerfile_checks = any(line.startswith("HEALTHCHECK ") for line in _stages()[-1])
    for name, svc in services.items():
        for dep, condition in (svc.get("depends_on") or {}).items():
            assert condition == {"condition": "service_healthy"}, name
            target = services[dep]
            assert "healthcheck" in target or (target.get("image") == _chart_image() and dockerfile_checks), dep


@pytest.mark.parametrize(("argv", "env", "url"), [
    pytest.param(["/usr/local/bin/python3.11", "/usr/local/bin/sedna-lc"], {}, "http://127.0.0.1:9100/healthz",
                 id="lc-default"),
    pytest.param(["/usr/local/bin/python3.11", "/usr/local/bin/sedna-lc"],
                 {"BIND_PORT": "9300", "LC_TLS_CERT_FILE": "/etc/sedna/tls/tls.crt"},
                 "https://127.0.0.1:9300/healthz", id="lc-port-and-tls"),
    pytest.param(["python", "-m", "lc.cli"], {}, "http://127.0.0.1:9100/healthz", id="lc-module"),
    pytest.param(["/usr/local/bin/python3.11", "/usr/local/bin/sedna-gm", "--config", "/missing.yaml"], {},
                 "http://127.0.0.1:9000/healthz", id="gm-without-config"),
    pytest.param(["sedna-devcluster", "--port", "6443"], {}, None, id="devcluster-nothing-to-check"),
    pytest.param(["python", "examples/workers/sim.py"], {"SEDNA_HEALTH_URL": "http://127.0.0.1:1/x"},
                 "http://127.0.0.1:1/x", id="override"),
])
def test_health_target(argv, env, url):
    assert healthcheck.target(argv, env) == url


def test_health_target_reads_the_gm_config(tmp_path):
    config = tmp_path / "gm.yaml"
    config.write_text("WebSocket:\n  port: 9443\n  tls:\n    certFile: /etc/sedna/tls/tls.crt\n")
    argv = ["/usr/local/bin/python3.11", "/usr/local/bin/sedna-gm", "--config", str(config)]
    assert healthcheck.target(argv, {}) == "https://127.0.0.1:9443/healthz"


async def test_health_probe_answers(aiohttp_server):
    status = {"code": 200}

    async def healthz(_request):
        return web.Response(status=status["code"], text="ok")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    server = await aiohttp_server(app)
    url = f"http://127.0.0.1:{server.port}/healthz"
    assert await asyncio.to_thread(healthcheck.healthy, url) is True
    status["code"] = 503
    assert await asyncio.to_thread(healthcheck.healthy, url) is False
    await server.close()
    assert await asyncio.to_thread(healthcheck.healthy, url, timeout=1.0) is False
