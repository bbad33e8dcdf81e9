"""Service ClusterIP (10.96.0.0/12) and NodePort (30000-32767) allocation.

Allocation state is derived from the stored Services (`rebuild`), so loading a state
dump or deleting a Service can never leak or double-book an address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")
NODE_PORT_RANGE = range(30000, 32768)
# 10.96.0.1 is the `kubernetes` service and 10.96.0.10 the cluster DNS on a real cluster.
_RESERVED = {int(SERVICE_CIDR.network_address) + 1, int(SERVICE_CIDR.network_address) + 10}


class AllocationError(ValueError):
    """A requested address or port is out of range or already taken."""


class ServiceAllocator:
    """Hands out ClusterIPs and NodePorts; first free value from a moving cursor."""

    def __init__(self) -> None:
        self._ips: dict[int, str] = {}  # ip as int -> owning service key "ns/name"
        self._ports: dict[int, str] = {}  # node port -> owning service key
        self._ip_cursor = int(SERVICE_CIDR.network_address) + 11
        self._port_cursor = NODE_PORT_RANGE.start

    def rebuild(self, services: Iterable[dict[str, Any]]) -> None:
        self._ips.clear()
        self._ports.clear()
        for svc in services:
            key = _key(svc)
            spec = svc.get("spec") or {}
            ip = spec.get("clusterIP")
            if ip and ip != "None":
                self._ips[int(ipaddress.ip_address(ip))] = key
            for port in node_ports(spec):
                self._ports[port] = key

    def allocate_ip(self, owner: str, requested: str | None = None) -> str:
        if requested:
            return self._claim_ip(owner, requested)
        first = int(SERVICE_CIDR.network_address) + 1
        last = int(SERVICE_CIDR.broadcast_address) - 1
        size = last - first + 1
        for i in range(size):
            cand = first + (self._ip_cursor - first + i) % size
            if cand not in self._ips and cand not in _RESERVED:
                self._ips[cand] = owner
                self._ip_cursor = cand + 1
                return str(ipaddress.ip_address(cand))
        raise AllocationError("range is full")

    def _claim_ip(self, owner: str, requested: str) -> str:
        try:
            addr = ipaddress.ip_address(requested)
        except ValueError:
            raise AllocationError("must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)") from None
        if addr not in SERVICE_CIDR:
            raise AllocationError(f"the provided IP ({requested}) is not in the valid range. "
                                  f"The range of valid IPs is {SERVICE_CIDR}")
        value = int(addr)
        holder = self._ips.get(value)
        if holder is not None and holder != owner:
            raise AllocationError("provided IP is already allocated")
        self._ips[value] = owner
        return requested

    def allocate_port(self, owner: str, requested: int | None = None) -> int:
        if requested:
            if requested not in NODE_PORT_RANGE:
                raise AllocationError("provided port is not in the valid range. "
                                      "The range of valid ports is 30000-32767")
            holder = self._ports.get(requested)
            if holder is not None and holder != owner:
                raise AllocationError("provided port is already allocated")
            self._ports[requested] = owner
            return requested
        size = len(NODE_PORT_RANGE)
        for i in range(size):
            cand = NODE_PORT_RANGE.start + (self._port_cursor - NODE_PORT_RANGE.start + i) % size
            if cand not in self._ports:
                self._ports[cand] = owner
                self._port_cursor = cand + 1
                return cand
        raise AllocationError("range is full")

    def release(self, svc: dict[str, Any]) -> None:
        key = _key(svc)
        self._ips = {ip: k for ip, k in self._ips.items() if k != key}
        self._ports = {p: k for p, k in self._ports.items() if k != key}


def _key(svc: dict[str, Any]) -> str:
    m = svc.get("metadata") or {}
    return f"{m.get('namespace', '')}/{m.get('name', '')}"


def node_ports(spec: dict[str, Any]) -> list[int]:
    return [p["nodePort"] for p in spec.get("ports") or [] if isinstance(p, dict) and p.get("nodePort")]
