"""Proven node identity and TLS end to end: the dev cluster, a real GM, and real LCs.

Each mode gets the attack of issue 7 item 12: a client that says `Node-Name: edge-node-1`
without edge-node-1's credential. It must be refused (401/403) while the real edge-node-1
LC keeps its one session and keeps receiving its objects.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devcluster import servingcert
from devcluster.servingcert import ServingCert as ServerCert
from gm.app import GlobalManager
from gm.errors import ConfigError
from gm.kube.apierrors import AlreadyExists
from gm.kube.resources import DATASETS, GVR, PODS, SECRETS
from lc.app import LocalController
from lc.config import LCConfig
from lc.link.dialer import GMLink, link_factory
from proto import SUBPROTOCOL
from shared.tls import client_context
from tests.conftest import eventually

NS = "default"
NODE, OTHER = "edge-node-1", "edge-node-2"
TOKEN_1 = "edge-node-1-0123456789abcdef0123"
TOKEN_2 = "edge-node-2-0123456789abcdef0123"
AUDIENCE = "sedna-gm"
LC_ACCOUNT = f"system:serviceaccount:{NS}:sedna-lc"
SERVICE_ACCOUNTS = GVR("", "v1", "serviceaccounts")

DATASET_NAMES = ("d-before", "d-after", "d-tls")
GRACE = 0.5  # the GM's placement grace in test_lc_worker_api_over_https (websocket.placementGraceSeconds: 10 s)

StartLC = Callable[..., Awaitable[LocalController]]


def ws_settings(**extra: str) -> str:
    """The GM's `websocket:` block as YAML flow text (the e2e GM binds 127.0.0.1:0)."""
    items = ", ".join(f"{k}: {v}" for k, v in {"address": "127.0.0.1", "port": "0", **extra}.items())
    return "{" + items + "}"


def dataset(name: str, node: str = NODE) -> dict[str, Any]:
    return {"apiVersion": "sedna.io/v1alpha1", "kind": "Dataset", "metadata": {"name": name, "namespace": NS},
            "spec": {"url": f"/data/{name}.txt", "format": "txt", "nodeName": node}}


@pytest.fixture
async def start_lc(tmp_path: Path) -> AsyncIterator[StartLC]:
    """Start a real LC (store, worker API, production link) for a node against a GM."""
    started: list[LocalController] = []

    async def start(gm: GlobalManager, *, node: str = NODE, scheme: str = "ws", **files: str) -> LocalController:
        home = tmp_path / f"lc-{len(started)}"
        (home / "rootfs" / "data").mkdir(parents=True)
        for name in DATASET_NAMES:  # the LC's dataset monitor counts their samples
            (home / "rootfs" / "data" / f"{name}.txt").write_text("sample-1\nsample-2\n")
        config = LCConfig(gm_address=f"127.0.0.1:{gm.port}", gm_scheme=scheme, gm_token=None, node_name=node,
                          bind_address="127.0.0.1", bind_port=0, rootfs=str(home / "rootfs"),
                          db_path=str(home / "lc.db"), db_synchronous="NORMAL", dataset_period=3600.0,
                          log_level="info", log_format="text", **files)
        lc = LocalController(config, link_factory=link_factory)
        await lc.start()
        started.append(lc)
        return lc

    yield start
    for lc in started:
        await lc.stop()


def write_token(tmp_path: Path, name: str, token: str) -> str:
    path = tmp_path / name
    path.write_text(token + "\n")
    return str(path)


async def lc_objects(lc: LocalController) -> set[str]:
    assert lc.store is not None
    return {name for _, _, name, _ in await lc.store.list_resources()}


async def connected(lc: LocalController) -> LocalController:
    assert isinstance(lc.link, GMLink)
    await lc.link.wait_connected(10.0)
    return lc


async def impersonate(gm: GlobalManager, token: str | None, node: str = NODE) -> int:
    """Dial the GM as `node` with someone else's (or no) token; the HTTP status it answers."""
    headers = {"Node-Name": node} | ({"Authorization": f"Bearer {token}"} if token else {})
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await http.ws_connect(f"http://127.0.0.1:{gm.port}/", headers=headers, protocols=(SUBPROTOCOL,))
    return info.value.status


async def assert_real_session_untouched(gm: GlobalManager, api, lc: LocalController, name: str) -> None:
    """The real LC still has its first session, and a new object of its node still reaches it."""
    assert gm.hub is not None and isinstance(lc.link, GMLink)
    assert gm.hub.stats.sessions_replaced == 0
    assert (lc.link.info.sessions, lc.link.state) == (1, "connected")
    await api.create(DATASETS, dataset(name), namespace=NS)
    await eventually(lambda: _has(lc, name), within=10.0, message=f"{name} reached the real LC")
    assert lc.link.info.sessions == 1


async def _has(lc: LocalController, name: str) -> bool:
    return name in await lc_objects(lc)


# ---- per-node tokens ----------------------------------------------------------------------


async def test_node_tokens_from_a_secret(start_gm, start_lc, api, tmp_path: Path) -> None:
    table = f"{TOKEN_1}: {NODE}\n{TOKEN_2}: {OTHER}\n"
    await api.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sedna-node-tokens"},
                               "data": {"tokens.yaml": base64.b64encode(table.encode()).decode()}}, namespace=NS)
    await api.create(DATASETS, dataset("d-before"), namespace=NS)
    gm = await start_gm(websocket=ws_settings(nodeTokens=f"{{secret: {NS}/sedna-node-tokens}}"))
    lc = await connected(await start_lc(gm, gm_token_file=write_token(tmp_path, "t1", TOKEN_1)))
    await eventually(lambda: _has(lc, "d-before"), within=10.0, message="the real LC's snapshot")

    assert await impersonate(gm, TOKEN_2) == 403  # edge-node-2's own token, claiming edge-node-1
    assert await impersonate(gm, "x" * 32) == 401
    assert await impersonate(gm, None) == 401
    assert gm.hub is not None and gm.hub.stats.handshakes_rejected == 3
    await assert_real_session_untouched(gm, api, lc, "d-after")

    other = await connected(await start_lc(gm, node=OTHER, gm_token_file=write_token(tmp_path, "t2", TOKEN_2)))
    assert "d-before" not in await lc_objects(other)
    assert sorted(gm.hub.connected_nodes()) == [NODE, OTHER]


# ---- TokenReview --------------------------------------------------------------------------


async def lc_pod(api, node: str) -> str:
    """The LC's pod on `node`, running as its ServiceAccount (made first, as the chart does)."""
    name = f"lc-{node}"
    with contextlib.suppress(AlreadyExists):
        await api.create(SERVICE_ACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount",
                                            "metadata": {"name": "sedna-lc"}}, namespace=NS)
    await api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                            "spec": {"nodeName": node, "serviceAccountName": "sedna-lc",
                                     "containers": [{"name": "lc", "image": "sedna-py:0.1.0"}]}}, namespace=NS)
    return name


async def test_token_review_proves_the_pods_node(start_gm, start_lc, api, cluster, tmp_path: Path) -> None:
    pod_1, pod_2 = await lc_pod(api, NODE), await lc_pod(api, OTHER)
    token_1 = cluster.tokens.issue(NS, pod_1, audiences=[AUDIENCE])
    gm = await start_gm(websocket=ws_settings(tokenReview=(
        f'{{enabled: true, audiences: {AUDIENCE}, serviceAccounts: "{LC_ACCOUNT}", cacheSeconds: 0}}')))
    token_file = write_token(tmp_path, "token", token_1)
    lc = await connected(await start_lc(gm, gm_token_file=token_file))

    assert await impersonate(gm, cluster.tokens.issue(NS, pod_2, audiences=[AUDIENCE])) == 403
    assert await impersonate(gm, cluster.tokens.issue(NS, pod_1, audiences=["https://kubernetes.default.svc"])) == 401
    assert await impersonate(gm, "made-up-token") == 401
    assert await impersonate(gm, None) == 401
    await assert_real_session_untouched(gm, api, lc, "d-after")

    # The token file is read at every dial: after a rotation the next session uses the new one.
    token_1b = cluster.tokens.issue(NS, pod_1, audiences=[AUDIENCE])
    write_token(tmp_path, "token", token_1b)
    cluster.tokens.revoke(token_1)
    assert gm.hub is not None
    gm.hub.forget_node(NODE)
    assert isinstance(lc.link, GMLink)
    await eventually(lambda: lc.link.info.sessions == 2 and lc.link.state == "connected", within=10.0,
                     message="the LC reconnected with the rotated token")
    assert await impersonate(gm, token_1) == 401


async def test_token_of_a_deleted_pod_is_refused(start_gm, api, cluster) -> None:
    pod = await lc_pod(api, NODE)
    token = cluster.tokens.issue(NS, pod, audiences=[AUDIENCE])
    gm = await start_gm(websocket=ws_settings(tokenReview=f"{{enabled: true, audiences: {AUDIENCE}, cacheSeconds: 0}}"))
    await api.delete(PODS, pod, namespace=NS, grace_period_seconds=0)
    await eventually(lambda: not cluster.store.list(cluster.store.registry.lookup(
        group="", version="v1", resource="pods"), NS)[0], message="the LC pod is gone")
    assert await impersonate(gm, token) == 401


# ---- TLS ----------------------------------------------------------------------------------


@pytest.fixture
def server_cert(tmp_path: Path) -> ServerCert:
    return servingcert.make(tmp_path / "pki")  # a CA and a 127.0.0.1/localhost certificate it signs


async def test_lc_connects_over_wss_verifying_the_gm(start_gm, start_lc, api, server_cert: ServerCert,
                                                     tmp_path: Path) -> None:
    await api.create(DATASETS, dataset("d-tls"), namespace=NS)
    gm = await start_gm(websocket=ws_settings(tls=f"{{certFile: {server_cert.cert}, keyFile: {server_cert.key}}}"))
    lc = await connected(await start_lc(gm, scheme="wss", gm_ca_file=str(server_cert.ca)))
    await eventually(lambda: _has(lc, "d-tls"), within=10.0, message="snapshot over wss")
    assert lc.link is not None and lc.link.info.mode == "native"

    ssl = client_context(str(server_cert.ca), setting="test")
    async with aiohttp.ClientSession() as http:
        async with http.get(f"https://127.0.0.1:{gm.port}/readyz", ssl=ssl) as resp:
            assert resp.status == 200
        with pytest.raises(aiohttp.ClientError):  # plain ws/http is not served on a TLS port
            await http.ws_connect(f"http://127.0.0.1:{gm.port}/", headers={"Node-Name": OTHER})


async def test_lc_with_the_wrong_ca_does_not_connect(start_gm, start_lc, server_cert: ServerCert,
                                                     tmp_path: Path) -> None:
    other_ca = servingcert.make(tmp_path / "other-pki").ca
    gm = await start_gm(websocket=ws_settings(tls=f"{{certFile: {server_cert.cert}, keyFile: {server_cert.key}}}"))
    lc = await start_lc(gm, scheme="wss", gm_ca_file=str(other_ca))
    assert isinstance(lc.link, GMLink)
    await eventually(lambda: "GM certificate not trusted" in lc.link.info.last_error, within=10.0,
                     message="a certificate verification failure")
    assert "certificate verify failed" in lc.link.info.last_error
    assert lc.link.info.sessions == 0 and gm.hub is not None and gm.hub.connected_nodes() == []


async def test_lc_worker_api_over_https(start_gm, start_lc, server_cert: ServerCert) -> None:
    # the refusal below comes after the GM's placement grace: a short one (the point here is TLS)
    gm = await start_gm(websocket=ws_settings(placementGraceSeconds=f"{GRACE}"))
    lc = await start_lc(gm, tls_cert_file=str(server_cert.cert), tls_key_file=str(server_cert.key))
    ssl = client_context(str(server_cert.ca), setting="test")
    report = {"name": "w1", "namespace": NS, "ownerName": "job", "ownerKind": "incrementallearningjob",
              "kind": "train", "status": "running", "results": []}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"https://127.0.0.1:{lc.port}/healthz", ssl=ssl) as resp:
            assert resp.status == 200
        async with http.post(f"https://127.0.0.1:{lc.port}/sedna/workers/w1/info", json=report, ssl=ssl) as resp:
            assert (resp.status, await resp.json()) == (200, {"Status": 200, "Message": "OK"})
        with pytest.raises(aiohttp.ClientError):
            async with http.get(f"http://127.0.0.1:{lc.port}/healthz") as resp:
                await resp.read()
    # the report was stored and relayed; the GM has no such job, so it refuses it once its
    # placement grace (the wait for a CR its caches may not hold yet) is over
    assert gm.hub is not None
    await eventually(lambda: gm.hub.stats.refused == 1, within=GRACE + 10.0,
                     message="the report reached the GM")


async def test_unreadable_token_secret_answers_503(start_gm) -> None:
    """The GM cannot tell who is who: the LC is told to come back, never admitted unchecked."""
    gm = await start_gm(websocket=ws_settings(nodeTokens=f"{{secret: {NS}/no-such-secret}}"))
    assert await impersonate(gm, TOKEN_1) == 503
    assert gm.hub is not None and gm.hub.connected_nodes() == []


async def test_unloadable_certificate_fails_the_start(start_gm, tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("not a certificate\n")
    key.write_text("not a key\n")
    with pytest.raises(ConfigError, match="websocket.tls: cannot load"):
        await start_gm(websocket=ws_settings(tls=f"{{certFile: {cert}, keyFile: {key}}}"))


async def test_node_token_secret_rotation_is_followed(start_gm, api) -> None:
    def data(table: str) -> dict[str, str]:
        return {"tokens.yaml": base64.b64encode(table.encode()).decode()}
    await api.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tokens"},
                               "data": data(f"{TOKEN_1}: {NODE}\n")}, namespace=NS)
    gm = await start_gm(websocket=ws_settings(nodeTokens=f"{{secret: {NS}/tokens, refreshSeconds: 0.1}}"))
    assert await impersonate(gm, TOKEN_2) == 401
    await api.patch(SECRETS, "tokens", {"data": data(f"{TOKEN_2}: {NODE}\n")}, namespace=NS)

    async def admitted(token: str) -> bool:
        async with aiohttp.ClientSession() as http:
            try:
                ws = await http.ws_connect(f"http://127.0.0.1:{gm.port}/", protocols=(SUBPROTOCOL,),
                                           headers={"Node-Name": NODE, "Authorization": f"Bearer {token}"})
            except aiohttp.WSServerHandshakeError:
                return False
            await ws.close()
            return True
    await eventually(lambda: admitted(TOKEN_2), within=10.0, message="the rotated token is accepted")
    assert await impersonate(gm, TOKEN_1) == 401
