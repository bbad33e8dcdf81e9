"""gm/kube/config.py: kubeconfig and in-cluster settings resolved without kubernetes_asyncio,
which is imported only for exec-plugin and auth-provider users."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from devcluster import servingcert
from gm.errors import KubeConfigError as ConfigError
from gm.kube.client import KubeClient
from gm.kube.kubeconfig import ClientSettings, TokenFile, in_cluster, load_connection
from gm.kube.resources import GVR
from tests.conftest import served_cluster

NAMESPACES = GVR("", "v1", "namespaces", namespaced=False)
ROOT = Path(__file__).resolve().parents[2]


def kubeconfig(path: Path, *, cluster: dict, user: dict, name: str = "dev") -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": cluster}], "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}]}))
    return path


@pytest.fixture
def pki(tmp_path: Path) -> servingcert.ServingCert:
    return servingcert.make(tmp_path / "pki")


async def namespaces(settings: ClientSettings) -> list[str]:
    async with await KubeClient.connect(settings) as client:
        body = await client.list(NAMESPACES)
    return [n["metadata"]["name"] for n in body["items"]]


async def test_the_dev_clusters_kubeconfig_reaches_it(tmp_path: Path):
    async with served_cluster(tmp_path):
        assert "default" in await namespaces(ClientSettings(kubeconfig=str(tmp_path / "kubeconfig")))


async def test_https_with_an_inline_ca_and_a_token(tmp_path: Path, pki: servingcert.ServingCert):
    from devcluster.cluster import DevCluster

    dc = DevCluster(start_delay=0, termination_delay=0)
    await dc.start("127.0.0.1", 0, tls=pki)
    try:
        dc.write_kubeconfig(tmp_path / "kubeconfig")
        doc = yaml.safe_load((tmp_path / "kubeconfig").read_text())
        assert doc["clusters"][0]["cluster"]["server"].startswith("https://")
        assert "default" in await namespaces(ClientSettings(kubeconfig=str(tmp_path / "kubeconfig")))
        # the CA as a file next to the kubeconfig, named relative to it
        cluster = dict(doc["clusters"][0]["cluster"])
        (tmp_path / "ca.pem").write_bytes(base64.b64decode(cluster.pop("certificate-authority-data")))
        cluster["certificate-authority"] = "ca.pem"
        user = doc["users"][0]["user"]
        rel = kubeconfig(tmp_path / "rel.yaml", cluster=cluster, user=user)
        assert "default" in await namespaces(ClientSettings(kubeconfig=str(rel)))
        # without the CA the server's certificate is not trusted; insecure-skip-tls-verify says so
        cluster.pop("certificate-authority")
        bare = kubeconfig(tmp_path / "bare.yaml", cluster={**cluster, "insecure-skip-tls-verify": True},
                          user=user)
        assert "default" in await namespaces(ClientSettings(kubeconfig=str(bare)))
    finally:
        await dc.stop()


async def test_an_exec_plugin_user_is_delegated_and_its_token_sent(tmp_path: Path):
    credential = json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                             "status": {"token": "from-exec"}})
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
                     "args": ["-c", f"print({credential!r})"], "interactiveMode": "Never"}}
    path = kubeconfig(tmp_path / "exec.yaml", cluster={"server": "http://127.0.0.1:1"}, user=user)
    conn = await load_connection(ClientSettings(kubeconfig=str(path)))
    assert conn.base_url == "http://127.0.0.1:1"
    assert await conn.auth_headers() == {"Authorization": "Bearer from-exec"}


def test_a_plain_kubeconfig_never_imports_kubernetes_asyncio(tmp_path: Path):
    path = kubeconfig(tmp_path / "k.yaml", cluster={"server": "http://127.0.0.1:1"}, user={"token": "t"})
    code = ("import asyncio, sys; from gm.kube.kubeconfig import ClientSettings, load_connection; "
            f"asyncio.run(load_connection(ClientSettings(kubeconfig={str(path)!r}))); "
            "print(any(m.startswith('kubernetes_asyncio') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    assert out.stdout.strip() == "False"


async def test_users_token_file_and_basic(tmp_path: Path):
    cluster = {"server": "http://127.0.0.1:1"}
    (tmp_path / "tok").write_text("abc\n")
    conn = await load_connection(ClientSettings(kubeconfig=str(kubeconfig(
        tmp_path / "a.yaml", cluster=cluster, user={"tokenFile": "tok"}))))
    assert await conn.auth_headers() == {"Authorization": "Bearer abc"}
    conn = await load_connection(ClientSettings(kubeconfig=str(kubeconfig(
        tmp_path / "b.yaml", cluster=cluster, user={"username": "u", "password": "p"}))))
    assert await conn.auth_headers() == {"Authorization": f"Basic {base64.b64encode(b'u:p').decode()}"}
    conn = await load_connection(ClientSettings(kubeconfig=str(kubeconfig(tmp_path / "c.yaml", cluster=cluster,
                                                                          user={}))))
    assert await conn.auth_headers() == {}


async def test_a_token_file_is_read_again_when_it_rotates(tmp_path: Path):
    path = tmp_path / "token"
    path.write_text("one")
    source = TokenFile(str(path))
    assert await source() == {"Authorization": "Bearer one"}
    path.write_text("two-rotated")
    assert await source() == {"Authorization": "Bearer two-rotated"}
    path.unlink()  # mid-rotation: the last token stays in use
    assert await source() == {"Authorization": "Bearer two-rotated"}


def test_in_cluster_uses_the_service_account_mount(tmp_path: Path, pki: servingcert.ServingCert,
                                                  monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_bytes(pki.ca.read_bytes())
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    conn = in_cluster(str(tmp_path))
    assert conn.base_url == "https://[fd00::1]:443"
    assert conn.ssl_context is not None and conn.ssl_context.get_ca_certs()


def test_client_certificate_data_is_loaded_and_a_wrong_key_refused(tmp_path: Path, pki: servingcert.ServingCert):
    from gm.kube.kubeconfig import resolve

    cert, key = base64.b64encode(pki.cert.read_bytes()).decode(), base64.b64encode(pki.key.read_bytes()).decode()
    cluster = {"server": "https://127.0.0.1:1", "certificate-authority": str(pki.ca)}
    conn = resolve(ClientSettings(kubeconfig=str(kubeconfig(
        tmp_path / "a.yaml", cluster=cluster, user={"client-certificate-data": cert, "client-key-data": key}))))
    assert conn.ssl_context is not None
    other = servingcert.make(tmp_path / "other")
    wrong = base64.b64encode(other.key.read_bytes()).decode()
    with pytest.raises(ConfigError, match="client certificate"):
        resolve(ClientSettings(kubeconfig=str(kubeconfig(
            tmp_path / "b.yaml", cluster=cluster, user={"client-certificate-data": cert, "client-key-data": wrong}))))


@pytest.mark.parametrize("doc, message", [
    ({"current-context": "x", "contexts": []}, "no context named 'x'"),
    ({"contexts": [{"name": "x", "context": {"cluster": "c"}}]}, "no context given"),
    ({"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c"}}],
      "clusters": [{"name": "c", "cluster": {}}]}, "has no server"),
    ({"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c"}}],
      "clusters": [{"name": "c", "cluster": {"server": "https://h", "certificate-authority-data": "%%"}}]},
     "not base64"),
    ("- a list", "not a mapping"),
])
async def test_an_unusable_kubeconfig_is_a_config_error(tmp_path: Path, doc, message):
    path = tmp_path / "k.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=message):
        await load_connection(ClientSettings(kubeconfig=str(path)))
