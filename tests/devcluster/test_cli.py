"""`sedna-devcluster` as a user runs it: HTTPS by default with its CA in the kubeconfig it
writes (reused across restarts), ServiceAccount tokens from `kubectl create token` held to
RBAC, and plain HTTP behind `--insecure-http`."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from devcluster import servingcert
from tests.conftest import run_kubectl

pytestmark = pytest.mark.skipif(not servingcert.available(), reason="openssl is needed to serve HTTPS")

RBAC = """
apiVersion: v1
kind: ServiceAccount
metadata: {name: bot}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: cm-reader}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bot-reads-configmaps}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm-reader}
subjects:
- {kind: ServiceAccount, name: bot}
"""


class Cli:
    """One `sedna-devcluster` process and the URL it printed."""

    def __init__(self, proc: asyncio.subprocess.Process, url: str, line: str):
        self.proc, self.url, self.line = proc, url, line

    async def stop(self) -> int:
        self.proc.terminate()
        return await asyncio.wait_for(self.proc.wait(), 20)


async def start_cli(tmp_path: Path, *args: str) -> Cli:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "devcluster.cli", "--port", "0", "--kubeconfig", str(tmp_path / "kc"),
        "--log-level", "WARNING", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
    if not line.startswith("devcluster serving "):
        proc.kill()
        _, err = await proc.communicate()
        raise AssertionError(f"sedna-devcluster did not start: {line!r} {err.decode()}")
    return Cli(proc, line.split()[2], line)


@pytest.fixture
async def cli(tmp_path: Path) -> AsyncIterator[Cli]:
    c = await start_cli(tmp_path, "--state", str(tmp_path / "state" / "state.json"))
    try:
        yield c
    finally:
        assert await c.stop() == 0


async def _ok(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    rc, out, err = await run_kubectl(kubeconfig, kubeconfig.parent / f"cache-{kubeconfig.name}", *args, stdin=stdin)
    assert rc == 0, f"kubectl {' '.join(args)}: rc={rc}\n{out}\n{err}"
    return out


def _cluster(kubeconfig: Path) -> dict:
    return yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]


async def test_serves_https_with_its_ca_in_the_kubeconfig(cli, tmp_path):
    kc = tmp_path / "kc"
    assert cli.url.startswith("https://127.0.0.1:")
    pki = tmp_path / "state" / "pki"
    assert f"CA {pki / 'ca.crt'}" in cli.line
    assert base64.b64decode(_cluster(kc)["certificate-authority-data"]) == (pki / "ca.crt").read_bytes()
    assert kc.stat().st_mode & 0o077 == 0  # it holds the admin token
    assert "kube-system" in await _ok(kc, "get", "ns", "-o", "name")
    # Pods and token Secrets find the same CA where a real cluster publishes it.
    published = await _ok(kc, "get", "configmap", "kube-root-ca.crt", "-o", r"jsonpath={.data.ca\.crt}")
    assert published == (pki / "ca.crt").read_text()
    # kubectl verifies the server: a kubeconfig without the CA is refused.
    bare = yaml.safe_load(kc.read_text())
    del bare["clusters"][0]["cluster"]["certificate-authority-data"]
    (tmp_path / "kc-bare").write_text(yaml.safe_dump(bare))
    rc, _, err = await run_kubectl(tmp_path / "kc-bare", tmp_path / "cache-bare", "get", "ns")
    assert rc != 0 and "certificate" in err, err


async def test_a_token_from_kubectl_create_token_is_held_to_rbac(cli, tmp_path):
    admin = tmp_path / "kc"
    await _ok(admin, "apply", "-f", "-", stdin=RBAC)
    token = (await _ok(admin, "create", "token", "bot")).strip()
    bot = tmp_path / "kc-bot"
    bot.write_text(admin.read_text())
    await _ok(bot, "config", "set-credentials", "bot", f"--token={token}")
    await _ok(bot, "config", "set-context", "--current", "--user=bot")
    assert "system:serviceaccount:default:bot" in await _ok(bot, "auth", "whoami")
    assert "kube-root-ca.crt" in await _ok(bot, "get", "configmaps", "-o", "name")
    rc, _, err = await run_kubectl(bot, tmp_path / "cache-bot", "get", "pods")
    assert rc == 1
    assert ('pods is forbidden: User "system:serviceaccount:default:bot" cannot list resource "pods" '
            'in API group "" in the namespace "default"') in err
    rc, out, _ = await run_kubectl(bot, tmp_path / "cache-bot", "auth", "can-i", "create", "configmaps")
    assert (rc, out.strip()) == (1, "no")


async def test_the_ca_and_certificate_outlive_a_restart(tmp_path):
    state = ["--state", str(tmp_path / "state.json")]
    first = await start_cli(tmp_path, *state)
    try:
        ca = _cluster(tmp_path / "kc")["certificate-authority-data"]
        cert = (tmp_path / "pki" / "apiserver.crt").read_bytes()
    finally:
        assert await first.stop() == 0
    second = await start_cli(tmp_path, *state)
    try:
        assert _cluster(tmp_path / "kc")["certificate-authority-data"] == ca
        assert (tmp_path / "pki" / "apiserver.crt").read_bytes() == cert
        await _ok(tmp_path / "kc", "get", "ns", "default")
    finally:
        assert await second.stop() == 0


async def test_insecure_http_serves_plain_http(tmp_path):
    c = await start_cli(tmp_path, "--insecure-http")
    try:
        assert c.url.startswith("http://127.0.0.1:")
        assert _cluster(tmp_path / "kc") == {"server": c.url}
        await _ok(tmp_path / "kc", "get", "ns", "default")
    finally:
        assert await c.stop() == 0


def _sans(cert: Path) -> str:
    out = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", str(cert)],
                         capture_output=True, text=True, check=True, timeout=30)
    return out.stdout


def test_the_serving_certificate_names_the_bind_host_and_is_made_again_for_another(tmp_path):
    first = servingcert.make(tmp_path, hosts=["10.1.2.3"])
    assert "IP Address:127.0.0.1, DNS:localhost" in _sans(first.cert)
    assert "IP Address:10.1.2.3" in _sans(first.cert)
    ca, cert = first.ca.read_bytes(), first.cert.read_bytes()
    assert servingcert.make(tmp_path, hosts=["10.1.2.3"]).cert.read_bytes() == cert  # reused
    again = servingcert.make(tmp_path, hosts=["devbox.example"])
    assert "DNS:devbox.example" in _sans(again.cert) and "10.1.2.3" not in _sans(again.cert)
    assert again.ca.read_bytes() == ca  # the CA stays: kubeconfigs that carry it keep working
    subprocess.run(["openssl", "verify", "-CAfile", str(again.ca), str(again.cert)], check=True,
                   capture_output=True, timeout=30)
