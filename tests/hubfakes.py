"""The GM side of the hub's two Protocols as plain dicts, for tests that exercise the hub
or the LC link without a cluster (a stand-in for gm/edge/objects.py's informer view)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proto import ObjKey


class MemSource:
    """Which objects each node needs, held in dicts (implements the hub's ObjectSource)."""

    def __init__(self) -> None:
        self.by_node: dict[str, dict[ObjKey, dict[str, Any]]] = {}

    def put(self, node: str, kind: str, name: str, obj: dict[str, Any], namespace: str = "default") -> None:
        self.by_node.setdefault(node, {})[(kind, namespace, name)] = obj

    def remove(self, node: str, kind: str, name: str, namespace: str = "default") -> None:
        del self.by_node[node][(kind, namespace, name)]

    def objects_for_node(self, node: str) -> list[tuple[str, str, str, Mapping[str, Any]]]:
        return [(*key, obj) for key, obj in self.by_node.get(node, {}).items()]

    def is_assigned(self, node: str, kind: str, namespace: str, name: str) -> bool:
        return (kind, namespace, name) in self.by_node.get(node, {})
