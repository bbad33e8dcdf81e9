"""Every namespace gets the `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap, and keeps them."""

from __future__ import annotations

from devcluster.controllers.namespace import ROOT_CA
from devcluster.machinery.errors import ApiError
from tests.conftest import eventually
from tests.devcluster.helpers import rt


def _has(store, resource, ns, name):
    try:
        store.get(rt(store, resource), ns, name)
        return True
    except ApiError:
        return False


async def test_new_namespace_gets_both_and_deleted_ones_come_back(live):
    store = live.store
    store.create(rt(store, "namespaces"), None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    await eventually(lambda: _has(store, "serviceaccounts", "team", "default")
                     and _has(store, "configmaps", "team", ROOT_CA), message="defaults created")
    cm = store.get(rt(store, "configmaps"), "team", ROOT_CA)
    assert cm["data"]["ca.crt"].startswith("-----BEGIN CERTIFICATE-----\n")
    assert "kube-apiserver" in cm["metadata"]["annotations"]["kubernetes.io/description"]
    sa_uid = store.get(rt(store, "serviceaccounts"), "team", "default")["metadata"]["uid"]
    store.delete(rt(store, "serviceaccounts"), "team", "default")
    store.delete(rt(store, "configmaps"), "team", ROOT_CA)
    await eventually(lambda: _has(store, "serviceaccounts", "team", "default")
                     and _has(store, "configmaps", "team", ROOT_CA), message="defaults recreated")
    assert store.get(rt(store, "serviceaccounts"), "team", "default")["metadata"]["uid"] != sa_uid


async def test_initial_namespaces_have_them_and_an_edited_ca_is_restored(live):
    store = live.store
    for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
        await eventually(lambda ns=ns: _has(store, "serviceaccounts", ns, "default"), message=ns)
    await eventually(lambda: _has(store, "configmaps", "default", ROOT_CA), message="ca in default")
    want = store.get(rt(store, "configmaps"), "default", ROOT_CA)["data"]["ca.crt"]

    def tamper(obj):
        obj["data"]["ca.crt"] = "junk"

    store.mutate(rt(store, "configmaps"), "default", ROOT_CA, tamper)
    await eventually(lambda: store.get(rt(store, "configmaps"), "default", ROOT_CA)["data"]["ca.crt"] == want,
                     message="ca restored")


async def test_namespace_deletion_is_not_blocked_by_the_defaults(live):
    store = live.store
    ns_rt = rt(store, "namespaces")
    store.create(ns_rt, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "brief"}})
    await eventually(lambda: _has(store, "configmaps", "brief", ROOT_CA), message="defaults created")
    store.delete(ns_rt, None, "brief")
    await eventually(lambda: not _has(store, "namespaces", None, "brief"), message="namespace removed")


async def test_kubectl_get_sa_cm_in_a_new_namespace(cluster, kubectl):
    rc, out, err = await kubectl("create", "-f", "-", stdin='{"apiVersion":"v1","kind":"Namespace",'
                                                           '"metadata":{"name":"fresh"}}')
    assert rc == 0, err

    async def listed():
        rc, out, _ = await kubectl("get", "sa,cm", "-n", "fresh", "-o", "name")
        return rc == 0 and sorted(out.split()) == ["configmap/kube-root-ca.crt", "serviceaccount/default"]

    await eventually(listed, message="kubectl get sa,cm")
