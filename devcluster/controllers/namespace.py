"""What every namespace gets on a real cluster: the `default` ServiceAccount and `kube-root-ca.crt`.

Two kube-controller-manager loops do this for real (the service account controller and the
root CA publisher); both are level-triggered, so a deleted `default` ServiceAccount or CA
ConfigMap comes back, and an edited CA ConfigMap is put back. A namespace that is
terminating gets nothing (its content is being deleted).

`ca.crt` is the CA the API is served with over HTTPS (`ca()`); over plain HTTP it is a
placeholder PEM block: it has the shape clients expect of the file, and nothing verifies a
certificate with it.
"""

from __future__ import annotations

import base64
import textwrap
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from devcluster.controllers.base import Controller
from devcluster.controllers.meta import is_deleting
from devcluster.machinery.errors import ApiError
from devcluster.storage.objects import get_or_none

COMPONENT = "namespace-defaults"
SERVICE_ACCOUNT = "default"
ROOT_CA = "kube-root-ca.crt"
ROOT_CA_DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as "
    "the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of "
    "Kubernetes clusters.")


def placeholder_ca() -> str:
    payload = base64.b64encode(b"sedna devcluster placeholder root CA: the API is served over plain HTTP").decode()
    return "-----BEGIN CERTIFICATE-----\n" + "\n".join(textwrap.wrap(payload, 64)) + "\n-----END CERTIFICATE-----\n"


def root_ca_configmap(namespace: str, ca: str | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": ROOT_CA, "namespace": namespace,
                         "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
            "data": {"ca.crt": ca or placeholder_ca()}}


def default_service_account(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT, "namespace": namespace}}


class NamespaceDefaults(Controller):
    """Keeps `default` and `kube-root-ca.crt` in every active namespace."""

    name = "namespace-defaults"

    def __init__(self, store: Any, *, resync: float = 5.0, ca: Callable[[], str | None] = lambda: None):
        """`ca`: the PEM of the CA the API is served with (None over plain HTTP)."""
        super().__init__(store, resync=resync)
        self.ca = ca
        reg = store.registry
        self.ns_rt = reg.lookup(group="", version="v1", resource="namespaces")
        self.sa_rt = reg.lookup(group="", version="v1", resource="serviceaccounts")
        self.cm_rt = reg.lookup(group="", version="v1", resource="configmaps")

    def keys_for(self, event: Any) -> Iterable[Hashable]:
        meta = event.obj["metadata"]
        if event.rt.key == self.ns_rt.key:
            return [] if event.type == "DELETED" else [meta["name"]]
        if event.rt.key == self.sa_rt.key and meta["name"] == SERVICE_ACCOUNT:
            return [meta["namespace"]]
        if event.rt.key == self.cm_rt.key and meta["name"] == ROOT_CA:
            return [meta["namespace"]]
        return ()

    def resync_keys(self) -> Iterable[Hashable]:
        items, _ = self.store.list(self.ns_rt, None)
        return [o["metadata"]["name"] for o in items]

    async def sync(self, key: Hashable) -> float | None:
        ns = get_or_none(self.store, self.ns_rt, None, key)
        if ns is None:
            return None
        if is_deleting(ns) or (ns.get("status") or {}).get("phase") == "Terminating":
            return None
        name = ns["metadata"]["name"]
        self._ensure(self.sa_rt, name, SERVICE_ACCOUNT, default_service_account(name))
        self._ensure_ca(name)
        return None

    def ensure_service_account(self, namespace: str) -> dict[str, Any] | None:
        """The `default` ServiceAccount of an active namespace, made now when missing; None for a
        namespace that is absent or terminating. The ServiceAccount admission calls this where the
        real one waits for the controller to make it."""
        ns = get_or_none(self.store, self.ns_rt, None, namespace)
        if ns is None:
            return None
        if is_deleting(ns) or (ns.get("status") or {}).get("phase") == "Terminating":
            return None
        return self._ensure(self.sa_rt, namespace, SERVICE_ACCOUNT, default_service_account(namespace))

    def _ensure(self, rt: Any, ns: str, name: str, body: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return self.store.get(rt, ns, name)
        except ApiError as err:
            if err.code != 404:
                raise
        try:
            return self.store.create(rt, ns, body)
        except ApiError as err:
            if err.code in (409, 403):  # raced with a creator, or the namespace began terminating
                return None
            raise

    def _ensure_ca(self, ns: str) -> None:
        want = self.ca() or placeholder_ca()
        cm = self._ensure(self.cm_rt, ns, ROOT_CA, root_ca_configmap(ns, want))
        if cm is None or (cm.get("data") or {}).get("ca.crt") == want:
            return

        def edit(obj: dict[str, Any]) -> None:
            obj["data"] = {**(obj.get("data") or {}), "ca.crt": want}

        self.store.mutate(self.cm_rt, ns, ROOT_CA, edit)
