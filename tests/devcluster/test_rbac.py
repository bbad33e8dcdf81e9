"""RBAC enforced for ServiceAccount tokens, through real clients: kubectl with a token
kubeconfig (served over HTTPS: Go clients send a kubeconfig's token only over TLS), the
GM's own KubeClient holding the chart's ServiceAccount token, and plain HTTP requests."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
import yaml

from devcluster import servingcert
from devcluster.cluster import DevCluster
from devcluster.servingcert import ServingCert
from gm.kube import apierrors as kerr
from gm.kube.client import KubeClient
from gm.kube.kubeconfig import ClientSettings
from gm.kube.resources import (
    DEPLOYMENTS,
    EVENTS,
    GVR,
    LEASES,
    NAMESPACES,
    NODES,
    PODS,
    SECRETS,
    SERVICES,
)
from shared import apis
from tests.conftest import assert_no_crashes, eventually, run_kubectl
from tests.helm.chart import render_chart

Run = Callable[..., Awaitable[tuple[int, str, str]]]
RBAC = "/apis/rbac.authorization.k8s.io/v1"
BOT = "system:serviceaccount:default:bot"


class Tls:
    """An HTTPS dev cluster and what a test needs to talk to it as the admin or as a token."""

    def __init__(self, dc: DevCluster, cert: ServingCert, tmp: Path, http: aiohttp.ClientSession) -> None:
        self.dc, self.cert, self.tmp, self.http = dc, cert, tmp, http

    async def admin(self, method: str, path: str, body: object = None, *, token: str | None = None) -> tuple[int, dict]:
        headers = {"Authorization": f"Bearer {token or self.dc.tokens.admin_token}"}
        async with self.http.request(method, self.dc.url + path, json=body, headers=headers) as resp:
            return resp.status, await resp.json(content_type=None)

    async def create(self, path: str, body: dict) -> dict:
        status, obj = await self.admin("POST", path, body)
        assert status == 201, obj
        return obj

    async def token(self, name: str = "bot", namespace: str = "default") -> str:
        await self.admin("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}})
        answer = await self.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", {"spec": {}})
        return answer["status"]["token"]

    def kubectl(self, token: str | None = None, who: str = "admin") -> Run:
        """Run the real kubectl as the admin, or with a kubeconfig holding `token`."""
        path = self.dc.write_kubeconfig(self.tmp / f"kubeconfig-{who}", token=token)

        async def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
            return await run_kubectl(path, self.tmp / f"cache-{who}", *args, stdin=stdin)
        return run


@pytest.fixture
async def tls(tmp_path: Path) -> AsyncIterator[Tls]:
    try:
        cert = servingcert.make(tmp_path / "tls")
    except servingcert.CertError:
        pytest.skip("openssl is needed to serve HTTPS")
    dc = DevCluster(start_delay=0, termination_delay=0, resync=0.5, lease_interval=1.0)
    await dc.start("127.0.0.1", 0, tls=cert)
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=cert.client_context())) as http:
            yield Tls(dc, cert, tmp_path, http)
    finally:
        await dc.stop()
    assert_no_crashes(dc)


POD_READER = """
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader, namespace: default}
rules:
- {apiGroups: [""], resources: [pods, pods/log], verbs: [get, list, watch]}
- {apiGroups: [""], resources: [configmaps], resourceNames: [settings], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bot-reads, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects:
- {kind: ServiceAccount, name: bot}
"""


async def test_kubectl_token_is_forbidden_until_a_role_is_bound(tls: Tls) -> None:
    bot, admin = tls.kubectl(await tls.token(), "bot"), tls.kubectl()
    rc, _, err = await bot("get", "pods")
    assert rc == 1
    assert err.strip() == (f'Error from server (Forbidden): pods is forbidden: User "{BOT}" cannot list resource '
                           '"pods" in API group "" in the namespace "default"')
    rc, out, err = await admin("apply", "-f", "-", stdin=POD_READER)
    assert rc == 0, err
    rc, out, err = await bot("get", "pods")
    assert (rc, out, err.strip()) == (0, "", "No resources found in default namespace.")
    rc, _, err = await bot("get", "pods", "-n", "kube-system")
    assert rc == 1 and 'cannot list resource "pods" in API group "" in the namespace "kube-system"' in err
    rc, _, err = await bot("delete", "pod", "web")
    assert rc == 1 and f'pods "web" is forbidden: User "{BOT}" cannot delete resource "pods"' in err
    rc, _, err = await bot("get", "nodes")
    assert rc == 1 and 'cannot list resource "nodes" in API group "" at the cluster scope' in err


async def test_kubectl_auth_can_i_and_whoami_with_a_token(tls: Tls) -> None:
    bot, admin = tls.kubectl(await tls.token(), "bot"), tls.kubectl()
    assert (await admin("apply", "-f", "-", stdin=POD_READER))[0] == 0
    for args, answer in [
        (("list", "pods"), "yes"),
        (("get", "pods/log"), "yes"),
        (("delete", "pods"), "no"),
        (("list", "pods", "-n", "kube-system"), "no"),
        (("get", "configmaps/settings"), "yes"),
        (("get", "configmaps/other"), "no"),
        (("get", "/healthz"), "yes"),
        (("get", "/devcluster/faults"), "no"),
    ]:
        rc, out, err = await bot("auth", "can-i", *args)
        assert (out.strip(), rc) == (answer, 0 if answer == "yes" else 1), (args, err)
    rc, out, _ = await admin("auth", "can-i", "delete", "pods", f"--as={BOT}")
    assert (rc, out.strip()) == (1, "no")
    rc, out, _ = await admin("auth", "can-i", "list", "pods", f"--as={BOT}")
    assert (rc, out.strip()) == (0, "yes")
    rc, out, err = await bot("auth", "whoami", "-o", "json")
    assert rc == 0, err
    info = yaml.safe_load(out)["status"]["userInfo"]
    assert info["username"] == BOT
    assert info["groups"] == ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]
    rc, out, _ = await bot("auth", "can-i", "--list")
    assert rc == 0 and "pods/log" in out and "selfsubjectaccessreviews.authorization.k8s.io" in out


async def test_token_secret_is_filled_and_dies_with_the_secret(tls: Tls) -> None:
    await tls.admin("POST", "/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "bot"}})
    await tls.create("/api/v1/namespaces/default/secrets", {
        "metadata": {"name": "bot-token", "annotations": {"kubernetes.io/service-account.name": "bot"}},
        "type": "kubernetes.io/service-account-token"})

    async def filled() -> dict | None:
        _, secret = await tls.admin("GET", "/api/v1/namespaces/default/secrets/bot-token")
        return secret if "token" in (secret.get("data") or {}) else None
    secret = await eventually(filled, "the token controller fills the Secret")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data["namespace"] == "default" and data["ca.crt"].startswith("-----BEGIN CERTIFICATE-----")
    _, sa = await tls.admin("GET", "/api/v1/namespaces/default/serviceaccounts/bot")
    assert secret["metadata"]["annotations"]["kubernetes.io/service-account.uid"] == sa["metadata"]["uid"]
    bot = tls.kubectl(data["token"], "bot")
    rc, out, err = await bot("auth", "whoami")
    assert rc == 0 and BOT in out, err
    status, _ = await tls.admin("DELETE", "/api/v1/namespaces/default/secrets/bot-token")
    assert status == 200
    rc, _, err = await bot("get", "pods")
    assert rc == 1 and "error: You must be logged in to the server" in err


async def test_kubectl_create_token_authenticates(tls: Tls) -> None:
    admin = tls.kubectl()
    await tls.admin("POST", "/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "bot"}})
    rc, out, err = await admin("create", "token", "bot", "--duration=20m")
    assert rc == 0, err
    rc, out, err = await tls.kubectl(out.strip(), "bot")("auth", "whoami")
    assert rc == 0 and BOT in out, err


@pytest.mark.parametrize("gone", ["serviceaccount", "pod"])
async def test_a_token_dies_with_what_it_is_bound_to(tls: Tls, gone: str) -> None:
    await tls.admin("POST", "/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "bot"}})
    await tls.create("/api/v1/namespaces/default/pods", {
        "metadata": {"name": "p"}, "spec": {"serviceAccountName": "bot", "containers": [{"name": "c", "image": "x"}]}})
    answer = await tls.create("/api/v1/namespaces/default/serviceaccounts/bot/token",
                              {"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p"}}})
    token = answer["status"]["token"]
    status, review = await tls.admin("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", {}, token=token)
    assert status == 201
    assert review["status"]["userInfo"]["extra"]["authentication.kubernetes.io/pod-name"] == ["p"]
    path = "/api/v1/namespaces/default/" + ("serviceaccounts/bot" if gone == "serviceaccount" else "pods/p")
    status, _ = await tls.admin("DELETE", path, {"gracePeriodSeconds": 0})
    assert status == 200
    status, body = await tls.admin("GET", "/version", token=token)
    assert (status, body["reason"]) == (401, "Unauthorized")


async def test_token_subresource_is_discovered_as_token_request(cluster) -> None:
    async with aiohttp.ClientSession() as http, http.get(cluster.url + "/api/v1") as resp:
        resources = (await resp.json())["resources"]
    [token] = [r for r in resources if r["name"] == "serviceaccounts/token"]
    assert token == {"name": "serviceaccounts/token", "singularName": "", "namespaced": True, "kind": "TokenRequest",
                     "verbs": ["create"], "group": "authentication.k8s.io", "version": "v1"}


# -- the GM under the chart's RBAC ----------------------------------------------------------------

DATASETS = GVR("sedna.io", "v1alpha1", "datasets")
JOINT_INFERENCE = GVR("sedna.io", "v1alpha1", "jointinferenceservices")
FEDERATED = GVR("sedna.io", "v1alpha1", "federatedlearningjobs")
TOKEN_REVIEWS = GVR("authentication.k8s.io", "v1", "tokenreviews", namespaced=False)
CLUSTER_ROLES = GVR("rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False)


async def _gm_client(tls: Tls) -> KubeClient:
    """The chart's ClusterRole, binding and ServiceAccount installed; a KubeClient with its token."""
    rendered = render_chart()
    tls.dc.apply_manifests(apis.CRD_DIR)
    for ns in rendered["namespace.yaml"]:  # the GM's and the LC's
        await tls.create("/api/v1/namespaces", {"metadata": {"name": ns["metadata"]["name"]}})
    for doc in rendered["serviceaccount.yaml"] + rendered["rbac.yaml"]:
        rt = tls.dc.store.registry.for_kind(doc["apiVersion"], doc["kind"])
        tls.dc.store.create(rt, doc["metadata"].get("namespace") if rt.namespaced else None, doc)
    [binding] = [d for d in rendered["rbac.yaml"] if d["kind"] == "ClusterRoleBinding"]
    sa = binding["subjects"][0]
    answer = await tls.create(f"/api/v1/namespaces/{sa['namespace']}/serviceaccounts/{sa['name']}/token",
                              {"spec": {}})
    path = tls.dc.write_kubeconfig(tls.tmp / "gm-kubeconfig", token=answer["status"]["token"])
    return await KubeClient.connect(ClientSettings(kubeconfig=str(path)))


async def test_gm_can_do_its_work_with_the_charts_cluster_role(tls: Tls) -> None:
    gm = await _gm_client(tls)
    await tls.create("/apis/sedna.io/v1alpha1/namespaces/default/datasets", {
        "apiVersion": "sedna.io/v1alpha1", "kind": "Dataset", "metadata": {"name": "ds"},
        "spec": {"url": "/data/train.txt", "format": "txt", "nodeName": "edge-node-1"}})
    async with gm:
        # the informers' resources (the Lease is read by name: the Role in the GM's namespace)
        for gvr in (DATASETS, JOINT_INFERENCE, FEDERATED, PODS, DEPLOYMENTS, SERVICES, NODES):
            await gm.list(gvr)
            async with gm.watch(gvr, timeout_seconds=1):
                pass
        await gm.patch(DATASETS, "ds", {"status": {"numberOfSamples": 3}}, namespace="default", subresource="status")
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"},
               "spec": {"containers": [{"name": "c", "image": "worker"}]}}
        await gm.create(PODS, pod, namespace="default")
        await gm.delete(PODS, "w", namespace="default")
        await gm.create(SERVICES, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"},
                                   "spec": {"ports": [{"port": 80}], "selector": {"a": "b"}}}, namespace="default")
        await gm.create(EVENTS, {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"},
                                 "involvedObject": {"kind": "Dataset", "name": "ds", "namespace": "default"},
                                 "reason": "Test", "message": "m"}, namespace="default")
        lease = await gm.create(LEASES, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                         "metadata": {"name": "sedna-gm"}, "spec": {"holderIdentity": "gm-0"}},
                                namespace="sedna")
        await gm.replace(LEASES, "sedna-gm", {**lease, "spec": {"holderIdentity": "gm-1"}}, namespace="sedna")
        assert (await gm.get(LEASES, "sedna-gm", namespace="sedna"))["spec"]["holderIdentity"] == "gm-1"
        review = await gm.create(TOKEN_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                                 "spec": {"token": "not-a-token"}})
        assert review["status"]["authenticated"] is False


@pytest.mark.parametrize(("call", "message"), [
    pytest.param(lambda gm: gm.delete(DATASETS, "ds", namespace="default"),
                 'datasets.sedna.io "ds" is forbidden: User "system:serviceaccount:sedna:sedna" cannot delete '
                 'resource "datasets" in API group "sedna.io" in the namespace "default"', id="delete-a-cr"),
    pytest.param(lambda gm: gm.delete(NODES, "edge-node-1"),
                 'cannot delete resource "nodes" in API group "" at the cluster scope', id="delete-a-node"),
    pytest.param(lambda gm: gm.create(NAMESPACES, {"metadata": {"name": "x"}}),
                 'cannot create resource "namespaces"', id="create-a-namespace"),
    pytest.param(lambda gm: gm.patch(SECRETS, "s", {"data": {}}, namespace="default"),
                 'cannot patch resource "secrets"', id="patch-a-secret"),
    pytest.param(lambda gm: gm.list(CLUSTER_ROLES),
                 'cannot list resource "clusterroles" in API group "rbac.authorization.k8s.io"', id="read-rbac"),
    pytest.param(lambda gm: gm.patch(PODS, "p", {}, namespace="default", subresource="status"),
                 'cannot patch resource "pods/status"', id="pod-status"),
    pytest.param(lambda gm: gm.get(LEASES, "sedna-gm", namespace="default"),
                 'cannot get resource "leases" in API group "coordination.k8s.io" in the namespace "default"',
                 id="lease-outside-its-namespace"),
    pytest.param(lambda gm: gm.create(SECRETS, {"metadata": {"name": "s"}}, namespace="default"),
                 'cannot create resource "secrets"', id="create-a-secret"),
    pytest.param(lambda gm: gm.get(SECRETS, "s", namespace="default"),
                 'cannot get resource "secrets"', id="get-a-secret"),
])
async def test_gm_is_forbidden_what_the_chart_does_not_grant(tls: Tls, call, message: str) -> None:
    async with await _gm_client(tls) as gm:
        with pytest.raises(kerr.Forbidden) as info:
            await call(gm)
    assert info.value.code == 403 and message in info.value.message
