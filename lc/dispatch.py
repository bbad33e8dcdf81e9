"""Routing between the outside world and the managers: worker reports and GM objects.

Worker reports are routed by `ownerKind`. Upstream drops reports whose ownerKind names no
manager, which loses every federated-learning report (its Python library sends
"default"); here such a report is matched by namespace and owner name against the jobs
this node holds, and if none matches yet it is kept as the worker's last report and
routed as soon as the GM sends the matching job. A report whose owner this node does not
hold (none matched, or its ownerKind named a kind but no such job is here) is kept only
briefly and within its own byte cap (lc/store/bounds.py `StoreBounds`): anyone on the network can
send reports for owners that do not exist. Downstream objects are written to the
store first and then handed to their manager, so a restarted LC replays them (`resume`).

A report is checked against the GM's own limits (proto/limits.py) before anything is
stored or looked up: a report the GM could not decode would otherwise be answered 200
and then never delivered. Every outbox entry a manager builds is checked the same way,
and so is the size of the status it would write (MAX_STATUS_JSON): an object the API
server refuses would fail every status write of its CR.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Literal, NamedTuple

import orjson

from lc.errors import ReportError, ResourceError
from lc.managers.base import Manager, Outgoing
from lc.managers.forward import status_body
from lc.report import WorkerReport
from lc.store.facade import Store
from lc.store.workers import WorkerRecord
from proto.errors import InvalidFrame
from proto.limits import (
    MAX_KIND,
    MAX_NAME,
    MAX_NAMESPACE,
    check_json_like,
    check_name,
    check_object_names,
    check_text,
)
from shared.apis import canonical_kind
from shared.logs import event
from shared.text import clip

log = logging.getLogger(__name__)

Route = Literal["forwarded", "ignored", "unrouted"]
UNKNOWN_KIND = "unknown"  # a report whose job this node does not hold (yet), or not decoded


class Routed(NamedTuple):
    """Where a report went, and the kind of the job it was routed to (`UNKNOWN_KIND` when
    it is kept until its job is known)."""

    route: Route
    kind: str
ResourceKey = tuple[str, str, str]

MAX_STATUS_JSON = 1 << 20
"""The most JSON one report may put into a CR status. The API server refuses an object over
~1.5 MiB (etcd's request limit) and the GM keeps a report's content in the status as JSON
text (a metric's value, a learning condition's `data`), so the content is measured as JSON
inside a JSON string, the larger of the two, with 0.5 MiB left for the rest of the object."""


class Dispatcher:
    """Hands worker reports and downstream objects to the manager of their kind."""

    def __init__(self, store: Store, managers: Iterable[Manager]) -> None:
        self._store = store
        self._managers: Mapping[str, Manager] = {m.kind: m for m in managers}
        # Kinds a report with an unknown ownerKind may belong to, in match order.
        self._job_kinds = tuple(k for k, m in self._managers.items() if m.takes_reports)

    def manager(self, kind: str) -> Manager | None:
        return self._managers.get(canonical_kind(kind))

    # ---- worker reports --------------------------------------------------------------

    async def handle_report(self, report: WorkerReport) -> Routed:
        """Route and durably store one validated report; returns where it went."""
        check_relayable(report)
        _require_owner(report)
        manager = self.manager(report.owner_kind) if report.owner_kind else None
        if manager is None:
            manager = await self._match_owner(report)
        if manager is None:
            await self._store.record_report(report.to_json(), routed_kind=None, entries=[])
            event(log, "report kept until its job is known", worker=report.name,
                  key=f"{report.namespace}/{report.owner_name}", owner_kind=report.owner_kind)
            return Routed("unrouted", UNKNOWN_KIND)
        entries = _checked_entries(manager, report, namespace=report.namespace,
                                   name=report.owner_name, door_checked=True)
        await self._store.record_report(report.to_json(), routed_kind=manager.kind,
                                        entries=[tuple(e) for e in entries])
        return Routed("forwarded" if entries else "ignored", manager.kind)

    async def _match_owner(self, report: WorkerReport) -> Manager | None:
        """The one job kind this node holds under the report's namespace/ownerName."""
        found = [kind for kind in self._job_kinds
                 if await self._store.get_resource(kind, report.namespace, report.owner_name)
                 is not None]
        if len(found) > 1:
            event(log, "report owner is ambiguous", level=logging.WARNING, worker=report.name,
                  key=f"{report.namespace}/{report.owner_name}", kinds=",".join(found))
        return self._managers[found[0]] if len(found) == 1 else None

    async def _route_waiting(self, manager: Manager, namespace: str, name: str) -> None:
        """Forward reports that arrived before this job did."""
        for record in await self._store.unrouted(namespace, name):
            report = _report_of(record)
            try:
                entries = _checked_entries(manager, report, namespace=namespace, name=name)
            except ReportError as exc:
                event(log, "waiting report not relayable, kept unforwarded",
                      level=logging.WARNING, worker=record.name, key=f"{namespace}/{name}",
                      error=exc.message)
                entries = []
            routed = await self._store.route_worker(
                record.namespace, record.name, record.received_at, routed_kind=manager.kind,
                entries=[tuple(e) for e in entries])
            if routed:
                event(log, "waiting report routed", worker=record.name,
                      key=f"{namespace}/{name}", kind=manager.kind)

    # ---- downstream objects ----------------------------------------------------------

    async def upsert(self, kind: str, namespace: str, name: str, obj: dict[str, Any]) -> None:
        """Persist the GM's latest version of an object, then apply it."""
        manager = self._checked(kind, namespace, name)
        if manager.takes_reports:
            await self._forget_replaced(manager, namespace, name, obj)
        await self._store.put_resource(manager.kind, namespace, name, obj)
        await self._apply(manager, namespace, name, obj)

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        """Forget an object this node no longer needs, with its workers' records."""
        manager = self._checked(kind, namespace, name)
        await self._store.delete_resource(manager.kind, namespace, name)
        await manager.delete(namespace, name)
        if manager.takes_reports:
            await self._store.forget_workers(namespace, name, routed_kind=manager.kind,
                                             unrouted=True)

    async def _forget_replaced(self, manager: Manager, namespace: str, name: str,
                               obj: dict[str, Any]) -> None:
        """A job recreated under the same name (new uid): its predecessor's workers go.
        Unrouted records stay, they may be the new job's own early reports."""
        old = await self._store.get_resource(manager.kind, namespace, name)
        old_uid, new_uid = _uid(old), _uid(obj)
        if old_uid and new_uid and old_uid != new_uid:
            await self._store.forget_workers(namespace, name, routed_kind=manager.kind,
                                             unrouted=False)

    async def snapshot(self, objects: Iterable[tuple[str, str, str, dict[str, Any]]]) -> None:
        """Make the node's objects exactly `objects` (after a (re)connect to the GM)."""
        keep: set[ResourceKey] = set()
        for kind, namespace, name, obj in objects:
            await self.upsert(kind, namespace, name, obj)
            keep.add((canonical_kind(kind), namespace, name))
        for kind, namespace, name, _ in await self._store.list_resources():
            if (kind, namespace, name) not in keep:
                await self.delete(kind, namespace, name)

    async def resume(self) -> int:
        """Re-apply every stored object (start-up); returns how many."""
        stored = await self._store.list_resources()
        for kind, namespace, name, obj in stored:
            manager = self._managers.get(kind)
            if manager is not None:
                await self._apply(manager, namespace, name, obj)
        return len(stored)

    async def stop(self) -> None:
        for manager in self._managers.values():
            await manager.stop()

    async def _apply(self, manager: Manager, namespace: str, name: str,
                     obj: dict[str, Any]) -> None:
        await manager.upsert(namespace, name, obj)
        if manager.takes_reports:
            await self._route_waiting(manager, namespace, name)

    def _checked(self, kind: str, namespace: str, name: str) -> Manager:
        manager = self.manager(kind)
        if manager is None:
            raise ResourceError(f"kind {kind!r} is not handled by this LC")
        if not namespace or not name:
            raise ResourceError(f"{kind} object needs a namespace and a name")
        return manager


def check_relayable(report: WorkerReport) -> None:
    """Refuse at the door what the GM would refuse later: the same rules, proto/limits.py.

    The body checked is the upstream status body every job manager forwards, with models,
    i.e. the deepest one a report can become; strings are checked for valid text because
    a lone surrogate can be neither stored (as UTF-8) nor sent.
    """
    try:
        check_name("name", report.name, MAX_NAME)
        check_name("namespace", report.namespace, MAX_NAMESPACE)
        check_name("ownerName", report.owner_name, MAX_NAME)
        check_name("ownerKind", report.owner_kind, MAX_KIND)
        check_text(report.kind, "kind")
        check_text(report.status, "status")
        body = status_body(report, include_models=True)
        check_json_like(body, "report")
    except InvalidFrame as exc:
        raise ReportError(f"report of worker(name={clip(report.name)}) cannot be relayed "
                          f"to the GM: {clip(str(exc))}", reason="limits") from None
    check_status_size(body, f"report of worker(name={report.name})")


def check_status_size(body: Any, what: str) -> None:
    """Refuse (413) a status body that would not fit in a CR status (MAX_STATUS_JSON)."""
    size = status_json_size(body)
    if size > MAX_STATUS_JSON:
        raise ReportError(f"{what} would put {size} bytes of JSON into the status, more than "
                          f"the {MAX_STATUS_JSON} an object the API server takes leaves room "
                          f"for", status=413, reason="status_too_large")


def status_json_size(body: Any) -> int:
    """The length of `body` as JSON text quoted in a JSON string: how the GM stores it."""
    try:
        raw = orjson.dumps(body)
    except TypeError:  # not representable by orjson (e.g. an integer over 64 bits)
        return len(orjson.dumps(json.dumps(body, separators=(",", ":"), ensure_ascii=False)))
    # Counted, not built (a report may be 1 MiB): quoting doubles each quote and backslash
    # and adds the two quotes around it; orjson's output holds no other character to escape.
    return len(raw) + raw.count(b'"') + raw.count(b"\\") + 2


def _checked_entries(manager: Manager, report: WorkerReport, *, namespace: str,
                     name: str, door_checked: bool = False) -> list[Outgoing]:
    """The manager's outbox entries for `report`, each one the GM's decoder accepts. With
    `door_checked` (check_relayable passed), an entry that is the report's status body is
    not walked again."""
    entries = manager.report_entries(report, namespace=namespace, name=name)
    try:
        for entry in entries:
            check_object_names(entry.kind, entry.namespace, entry.name)
            if not (door_checked and _is_status_body(entry.body, report)):
                check_json_like(entry.body, "body")
    except InvalidFrame as exc:
        raise ReportError(f"status for {namespace}/{name} cannot be relayed to the GM: "
                          f"{clip(str(exc))}", reason="limits") from None
    for entry in entries:
        check_status_size(entry.body, f"status for {entry.kind} {namespace}/{name}")
    return entries


_STATUS_KEYS = frozenset(("phase", "status", "output"))
_OUTPUT_KEYS = frozenset(("models", "ownerInfo"))


def _is_status_body(body: Any, report: WorkerReport) -> bool:
    """Whether `body` is the report's status body as check_relayable walked it, or it with
    models null (what a forwarder sends): the same values at the same depths, so within
    every limit that walk checked."""
    if type(body) is not dict or body.keys() != _STATUS_KEYS:
        return False
    output = body["output"]
    return (type(output) is dict and output.keys() == _OUTPUT_KEYS
            and body["phase"] is report.kind and body["status"] is report.status
            and output["ownerInfo"] is report.owner_info
            and (output["models"] is None or output["models"] is report.results))


def _require_owner(report: WorkerReport) -> None:
    missing = [key for key, value in (("namespace", report.namespace),
                                      ("ownerName", report.owner_name)) if not value]
    if missing:
        raise ReportError(f"worker(name={clip(report.name)}) report lacks {' and '.join(missing)}",
                          reason="missing_owner")


def _uid(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return uid if isinstance(uid, str) else ""


def _report_of(record: WorkerRecord) -> WorkerReport:
    r = record.report
    return WorkerReport(name=r["name"], namespace=r["namespace"], owner_name=r["ownerName"],
                        owner_kind=r["ownerKind"], kind=r["kind"], status=r["status"],
                        owner_info=r["ownerInfo"], results=r["results"])


__all__ = ["Dispatcher", "Outgoing", "Route"]
