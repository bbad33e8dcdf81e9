"""Nodes of the dev cluster and their heartbeat Leases (spec §7.5 "Nodes").

The node list is configuration: each configured node is created once at start (a node a
test deletes stays deleted), and every existing configured node gets a Lease in
`kube-node-lease` renewed each `lease_interval` seconds.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Hashable, Iterable
from typing import Any

from devcluster.controllers.base import Controller
from devcluster.controllers.meta import now_micro, now_time
from devcluster.machinery.errors import ApiError
from devcluster.storage.objects import get_or_none

LEASE_NAMESPACE = "kube-node-lease"
DEFAULT_NODES = ("edge-node-1", "edge-node-2", "cloud-node")


def node_ip(index: int) -> str:
    return f"10.0.0.{index + 1}"


def _stable_id(name: str, salt: str) -> str:
    return hashlib.sha256(f"{salt}:{name}".encode()).hexdigest()[:32]


def build_node(name: str, index: int) -> dict[str, Any]:
    """A Ready node with every field kubernetes_asyncio requires."""
    now = now_time()
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
    }
    if name.startswith("edge"):  # as KubeEdge's edgecore registers its node
        labels["node-role.kubernetes.io/edge"] = ""
        labels["node-role.kubernetes.io/agent"] = ""
    resources = {"cpu": "8", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"podCIDR": f"10.244.{index}.0/24"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "kubelet is posting ready status",
                 "lastHeartbeatTime": now, "lastTransitionTime": now},
                *({"type": kind, "status": "False", "reason": reason, "message": message,
                   "lastHeartbeatTime": now, "lastTransitionTime": now} for kind, reason, message in _PRESSURES),
            ],
            "addresses": [
                {"type": "InternalIP", "address": node_ip(index)},
                {"type": "Hostname", "address": name},
            ],
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": _stable_id(name, "machine"),
                "systemUUID": str(uuid.UUID(_stable_id(name, "system"))),
                "bootID": str(uuid.uuid4()),
                "kernelVersion": "6.1.0-devcluster",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.0",
                "kubeletVersion": "v1.32.0",
                "kubeProxyVersion": "v1.32.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def build_lease(node: dict[str, Any], *, duration: int) -> dict[str, Any]:
    name = node["metadata"]["name"]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"],
            }],
        },
        "spec": {"holderIdentity": name, "leaseDurationSeconds": duration, "renewTime": now_micro()},
    }


# the conditions a kubelet reports besides Ready, none of them true here
_PRESSURES = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)


def node_is_ready(node: dict[str, Any]) -> bool:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


class NodeController(Controller):
    """Creates the configured nodes once and keeps their Leases renewed."""

    name = "node-lifecycle"

    def __init__(self, store: Any, *, nodes: Iterable[str] = DEFAULT_NODES, lease_interval: float = 10.0,
                 resync: float = 30.0):
        super().__init__(store, resync=resync)
        self.nodes = list(nodes)
        self.lease_interval = lease_interval
        self._created: set[str] = set()
        reg = store.registry
        self.node_rt = reg.lookup(group="", version="v1", resource="nodes")
        self.lease_rt = reg.lookup(group="coordination.k8s.io", version="v1", resource="leases")
        self.ns_rt = reg.lookup(group="", version="v1", resource="namespaces")

    def prime(self) -> None:
        try:
            self.store.create(self.ns_rt, None, {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": LEASE_NAMESPACE}})
        except ApiError as err:
            if err.code != 409:
                raise
        for i, name in enumerate(self.nodes):
            self._ensure_node(name, i)

    def _ensure_node(self, name: str, index: int) -> None:
        if name in self._created:
            return
        try:
            self.store.create(self.node_rt, None, build_node(name, index))
        except ApiError as err:
            if err.code != 409:
                raise
        self._created.add(name)

    def keys_for(self, event: Any) -> Iterable[Hashable]:
        return ()

    def resync_keys(self) -> Iterable[Hashable]:
        return list(self.nodes)

    async def sync(self, key: Hashable) -> float | None:
        node = get_or_none(self.store, self.node_rt, None, key)
        if node is None:
            return None
        self._renew(node)
        return self.lease_interval

    def _renew(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        duration = max(1, int(self.lease_interval * 4))

        def edit(obj: dict[str, Any]) -> None:
            obj["spec"]["renewTime"] = now_micro()

        try:
            self.store.mutate(self.lease_rt, LEASE_NAMESPACE, name, edit)
        except ApiError as err:
            if err.code != 404:
                raise
            self.store.create(self.lease_rt, LEASE_NAMESPACE, build_lease(node, duration=duration))
