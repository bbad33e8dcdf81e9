"""JointInferenceService controller: two Deployments, a Service and optional HPAs per CR.

Level-triggered: every event only enqueues the service's key; a reconcile builds the
desired children from the spec (gm/workers), diffs them by spec hash against the cache
and converges. Because the children are Deployments, a spec edit is an in-place update of
the Deployment template and Kubernetes rolls the pods; an unchanged spec builds a
byte-identical template, so nothing rolls. Deleting the CR is left to the garbage
collector (every child has a controller ownerReference); a deleted Deployment of a live
service is simply missing at the next reconcile and created again.
"""

from __future__ import annotations

import logging
from typing import Any

from gm.controllers.children import plan_children
from gm.controllers.common import (
    DEPLOYMENTS,
    HPAS,
    JI,
    MODELS,
    SERVICES,
    Context,
    cached_secrets,
    children_by_name,
    credential_names,
    execute,
    index_credentials,
    on_any_change,
    own_key,
    owner_key,
    report_problem,
    split,
    using_secret,
    write_status,
)
from gm.controllers.problems import PROBLEMS, Problem
from gm.controllers.runner import Requeue
from gm.controllers.status import ji_status
from gm.workers import build_ji_children, hpa_names
from shared import apis
from shared.objects import SPEC_HASH_ANNOTATION, deep_get, now_rfc3339

log = logging.getLogger("gm.controllers.jointinference")

KIND = apis.JOINT_INFERENCE.kind


class JointInferenceController:
    name = "jointinferenceservice"

    def __init__(self, ctx: Context, enqueue):
        self.ctx = ctx
        self.enqueue = enqueue
        self.services = ctx.informer(JI)
        self.models = ctx.informer(MODELS)
        self.deployments = ctx.children(DEPLOYMENTS)
        self.svcs = ctx.children(SERVICES)
        self.hpas = ctx.children(HPAS)
        self.secrets = ctx.secrets()
        self.services.add_indexer("model", _model_refs)
        index_credentials(self.models)
        self._wire()

    def _wire(self) -> None:
        on_any_change(self.services, self._on_cr)
        for inf in (self.deployments, self.svcs, self.hpas):
            on_any_change(inf, self._on_child)
        on_any_change(self.models, self._on_model)
        on_any_change(self.secrets, self._on_secret)

    def _on_cr(self, obj: dict) -> None:
        self.enqueue(own_key(obj))

    def _on_child(self, obj: dict) -> None:
        key = owner_key(obj, KIND)
        if key is not None:
            self.enqueue(key)

    def _on_model(self, obj: dict) -> None:
        for ji in self.services.store.by_index("model", own_key(obj)):
            self._on_cr(ji)

    def _on_secret(self, obj: dict) -> None:
        for model in using_secret(self.models, obj):
            self._on_model(model)

    async def reconcile(self, key: str) -> Requeue | None:
        namespace, name = split(key)
        ji = self.services.store.get_by_name(namespace, name)
        if ji is None or deep_get(ji, "metadata", "deletionTimestamp"):
            return None  # deleted: the garbage collector removes the children
        ji = {**ji, "kind": KIND, "apiVersion": apis.API_VERSION}
        try:
            children = await self._build(ji, namespace)
            converged = await self._converge(ji, children, namespace)
        except PROBLEMS as exc:
            await report_problem(self.ctx, ji, exc, key=key,
                                 write=lambda p: self._write_status(ji, problem=p, converged=False))
        await self._write_status(ji, problem=None, converged=converged)
        return None if converged else Requeue(5.0)

    async def _build(self, ji: dict, namespace: str):
        spec = ji.get("spec") or {}
        edge_model = self._model(namespace, deep_get(spec, "edgeWorker", "model", "name"))
        cloud_model = self._model(namespace, deep_get(spec, "cloudWorker", "model", "name"))
        secrets = cached_secrets(self.ctx, namespace, credential_names(edge_model, cloud_model))
        return build_ji_children(ji, edge_model=edge_model, cloud_model=cloud_model,
                                 config=self.ctx.workers, secrets=secrets)

    def _model(self, namespace: str, name: Any) -> dict | None:
        return self.models.store.get_by_name(namespace, name) if isinstance(name, str) and name else None

    async def _converge(self, ji: dict, children, namespace: str) -> bool:
        uid = ji["metadata"]["uid"]
        deps = {d["metadata"]["name"]: d for d in (children.cloud_deployment, children.edge_deployment)}
        svcs = {children.cloud_service["metadata"]["name"]: children.cloud_service}
        hpas = {h["metadata"]["name"]: h for h in (children.cloud_hpa, children.edge_hpa) if h}
        converged = True
        for gvr, inf, desired, extra in (
            (DEPLOYMENTS, self.deployments, deps, ()),
            (SERVICES, self.svcs, svcs, ()),
            (HPAS, self.hpas, hpas, hpa_names(ji["metadata"]["name"])),
        ):
            observed = children_by_name(inf, uid, [*desired, *extra], namespace)
            plan = plan_children(desired, observed, owner_uid=uid, hash_key=SPEC_HASH_ANNOTATION,
                                 mutable=True)
            await execute(self.ctx, gvr, plan, owner=ji, owner_gvr=JI, namespace=namespace)
            converged = converged and plan.converged
        return converged

    async def _write_status(self, ji: dict, *, problem: Problem | None, converged: bool) -> bool:
        deployments = self.deployments.store.by_index("owner-uid", ji["metadata"]["uid"])
        generation = ji["metadata"].get("generation")
        now = now_rfc3339()
        why = (problem.reason, problem.message) if problem is not None else None

        def mutate(status: dict) -> dict:
            return ji_status({**ji, "status": status}, deployments, expected=2,
                             converged_generation=generation if converged else None,
                             problem=why, now=now)

        return await write_status(self.ctx, JI, ji, mutate)


def _model_refs(obj: dict) -> list[str]:
    ns = (obj.get("metadata") or {}).get("namespace")
    return [f"{ns}/{m}" for m in apis.model_names(apis.JOINT_INFERENCE, obj)]
