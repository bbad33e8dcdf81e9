"""What every manager offers the dispatcher, and the shape of an outbox entry.

A manager owns one Sedna kind on this node. The dispatcher persists downstream objects
and then tells the manager (`upsert`/`delete`); for worker reports it asks the manager
which outbox entries the report becomes. Managers never touch HTTP or the link.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from lc.report import WorkerReport


class Outgoing(NamedTuple):
    """One report for the GM: the target object and the status body (upstream shape)."""

    kind: str
    namespace: str
    name: str
    body: Any


class Manager(Protocol):
    """One kind's local logic."""

    kind: str  # CamelCase Sedna kind, e.g. "Dataset"
    takes_reports: bool  # whether worker reports of this kind are forwarded to the GM

    async def upsert(self, namespace: str, name: str, obj: dict[str, Any]) -> None:
        """The GM sent (or the store replayed) the latest version of an object."""

    async def delete(self, namespace: str, name: str) -> None:
        """The object is gone from this node."""

    def report_entries(self, report: WorkerReport, *, namespace: str,
                       name: str) -> list[Outgoing]:
        """The outbox entries a worker report for object namespace/name turns into."""

    async def stop(self) -> None:
        """Cancel and await every task the manager owns."""
