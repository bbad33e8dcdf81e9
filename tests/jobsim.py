"""A pure stand-in for the generic reconciler over a dict of pods, for the job kinds' tests.

It runs a kind's real `build`, the real child diff (gm/controllers/children.plan_children)
and the kind's real `status`, and applies the plan to an in-memory store: created children
get a fresh uid (pods start Running), deleted ones vanish at once (so a recreated pod is
only created on the next reconcile, as with a real API server's graceful delete). The
end-to-end suite runs the same kinds on the dev cluster; this one makes the job rules
(retries, deadlines, parallelism) cheap to step through.
"""

from __future__ import annotations

import copy
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from gm.config import WorkerConfig
from gm.reconcile.declaration import Dependencies, KindDeclaration, Observed
from gm.reconcile.planning import plan_children
from shared.objects import SPEC_HASH_ANNOTATION, format_rfc3339

CONFIG = WorkerConfig(lc_server="http://lc.sedna:9100")
T0 = datetime(2026, 3, 1, 10, 0, 0, tzinfo=UTC)


class JobSim:
    def __init__(self, decl: KindDeclaration, cr: dict, *, objects: dict | None = None):
        self.decl = decl
        self.cr = copy.deepcopy(cr)
        self.objects = objects or {}
        self.store: dict[str, dict[str, dict]] = {o.gvr.plural: {} for o in decl.owns}
        self.clock = T0
        self._uids = itertools.count(1)

    @property
    def now(self) -> str:
        return format_rfc3339(self.clock)

    def tick(self, seconds: float) -> None:
        self.clock += timedelta(seconds=seconds)

    @property
    def pods(self) -> dict[str, dict]:
        return self.store["pods"]

    @property
    def status(self) -> dict:
        return self.cr.get("status") or {}

    def children(self) -> dict[str, list[dict]]:
        return {plural: list(objs.values()) for plural, objs in self.store.items()}

    def deps(self) -> Dependencies:
        return Dependencies(objects=self.objects, secrets={}, children=self.children(),
                            config=CONFIG, now=self.now)

    def desired(self) -> dict[str, dict[str, dict]]:
        built = self.decl.build(self.cr, self.deps())
        out: dict[str, dict[str, dict]] = {o.gvr.plural: {} for o in self.decl.owns}
        for gvr, objs in built.items():
            out[gvr.plural] = {o["metadata"]["name"]: o for o in objs}
        return out

    def reconcile(self) -> dict:
        """One reconcile; returns the status written."""
        desired = self.desired()
        converged = True
        for owns in self.decl.owns:
            plan = plan_children(desired[owns.gvr.plural], self.store[owns.gvr.plural],
                                 owner_uid=self.cr["metadata"]["uid"], hash_key=SPEC_HASH_ANNOTATION,
                                 mutable=owns.on_edit == "update",
                                 create_missing=not (self.decl.finished(self.cr)
                                                     and owns.frozen_when_finished))
            self._apply(owns.gvr.plural, plan)
            converged = converged and plan.converged
        observed = Observed(children=self.children(), desired=desired, converged=converged,
                            now=self.now)
        self.cr["status"] = self.decl.status(copy.deepcopy(self.cr), observed)
        return self.cr["status"]

    def settle(self, rounds: int = 4) -> dict:
        for _ in range(rounds):
            self.reconcile()
        return self.status

    def _apply(self, plural: str, plan) -> None:
        store = self.store[plural]
        for obj in plan.delete:
            store.pop(obj["metadata"]["name"], None)
        for have, want in plan.update:
            store[have["metadata"]["name"]] = self._stored(want, uid=have["metadata"]["uid"])
        for obj in plan.create:
            store[obj["metadata"]["name"]] = self._stored(obj, uid=f"uid-{next(self._uids)}")

    def _stored(self, obj: dict, *, uid: str) -> dict:
        out = copy.deepcopy(obj)
        out["metadata"]["uid"] = uid
        if out.get("kind") == "Pod":
            out["status"] = {"phase": "Running"}
        return out

    def end(self, name: str, phase: str) -> None:
        """The pod's containers exit: it is Succeeded or Failed."""
        self.pods[name]["status"] = {"phase": phase}

    def edit(self, mutate: Any) -> None:
        mutate(self.cr["spec"])
        meta = self.cr["metadata"]
        meta["generation"] = meta.get("generation", 1) + 1
