"""Forwarding worker reports to the GM as status bodies, in upstream's shape.

Upstream's LC turns a worker report into `{"phase": <kind>, "status": <status>,
"output": {"models": <results>, "ownerInfo": <ownerInfo>}}` (upstream-lc.md section 2.7),
with `null` for what the worker left out, and our GM must accept upstream LCs, so this
is the one body shape for every job kind. Keeping it in one place means the JI, FL, IL
and LL managers differ only in what they add around it.
"""

from __future__ import annotations

from typing import Any

from lc.managers.base import Outgoing
from lc.report import WorkerReport


def status_body(report: WorkerReport, *, include_models: bool) -> dict[str, Any]:
    """The upstream status content for one worker report."""
    return {
        "phase": report.kind,
        "status": report.status,
        "output": {
            "models": report.results if include_models else None,
            "ownerInfo": report.owner_info,
        },
    }


class ReportForwarder:
    """A manager whose only job is relaying worker reports for its kind."""

    takes_reports = True
    include_models = True

    def __init__(self, kind: str) -> None:
        self.kind = kind

    async def upsert(self, namespace: str, name: str, obj: dict[str, Any]) -> None:
        """Nothing to do beyond the store, which the dispatcher already wrote."""

    async def delete(self, namespace: str, name: str) -> None:
        """Nothing to do beyond the store."""

    def report_entries(self, report: WorkerReport, *, namespace: str,
                       name: str) -> list[Outgoing]:
        body = status_body(report, include_models=self.include_models)
        return [Outgoing(self.kind, namespace, name, body)]

    async def stop(self) -> None:
        """No tasks to stop."""
