"""FederatedLearningJob controller: an aggregation pod and Service, one pod per trainer.

Training pods are one-shot, so a spec edit cannot update them in place. Each pod carries
the hash of the spec it was built from; when the hash differs (a spec edit, `recreate`
policy) the reconcile deletes the outdated pod and, once it is gone, creates it again
from the new spec under the same name. A missing pod of a running job is created by the
next reconcile; a deleted job is never reconciled (the garbage collector removes its
pods), and nothing is shared between jobs: every decision is a function of this job's
spec and its own children in the cache.

With `federatedLearning.specEditPolicy: reject`, outdated pods are left running, and a
condition and a Warning event say that the edit was not applied.

What the workers wait on (a pod stuck terminating, a node that does not exist, no node
that fits) is the `Waiting` condition, and a trainer bound to a missing node is not
counted as active. Pods are created in batches with the owner re-checked and progress
status written in between (common.execute), so a deleted job stops growing.
"""

from __future__ import annotations

import logging

from gm.controllers.children import outdated, plan_children
from gm.controllers.common import (
    DATASETS,
    FL,
    MODELS,
    NODES,
    PODS,
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
from gm.controllers.status import fl_status
from gm.controllers.waiting import stranded, summary, waits
from gm.workers import build_fl_children
from shared import apis
from shared.objects import SPEC_HASH_ANNOTATION, deep_get, now_rfc3339, set_condition

log = logging.getLogger("gm.controllers.federatedlearning")

KIND = apis.FEDERATED_LEARNING.kind
FINISHED = ("Succeeded", "Failed")


class FederatedLearningController:
    name = "federatedlearningjob"

    def __init__(self, ctx: Context, enqueue):
        self.ctx = ctx
        self.enqueue = enqueue
        self.jobs = ctx.informer(FL)
        self.models = ctx.informer(MODELS)
        self.datasets = ctx.informer(DATASETS)
        self.nodes = ctx.informer(NODES)
        self.pods = ctx.children(PODS)
        self.svcs = ctx.children(SERVICES)
        self.secrets = ctx.secrets()
        self.jobs.add_indexer("model", _refs(apis.model_names))
        self.jobs.add_indexer("dataset", _refs(apis.dataset_names))
        index_credentials(self.jobs, self.models, self.datasets)
        self._on_model = self._dependents("model")
        self._on_dataset = self._dependents("dataset")
        self._wire()

    def _wire(self) -> None:
        on_any_change(self.jobs, self._on_job)
        for inf in (self.pods, self.svcs):
            on_any_change(inf, self._on_child)
        on_any_change(self.models, self._on_model)
        on_any_change(self.datasets, self._on_dataset)
        on_any_change(self.secrets, self._on_secret)
        self.nodes.add_event_handler(on_add=self._on_node_presence, on_update=self._on_node,
                                     on_delete=self._on_node_presence)

    def _on_job(self, obj: dict) -> None:
        self.enqueue(own_key(obj))

    def _on_child(self, obj: dict) -> None:
        key = owner_key(obj, KIND)
        if key is not None:
            self.enqueue(key)

    def _dependents(self, index: str):
        """A handler enqueuing the jobs that reference the changed Model or Dataset."""
        def handler(obj: dict) -> None:
            for job in self.jobs.store.by_index(index, own_key(obj)):
                self._on_job(job)
        return handler

    def _on_secret(self, obj: dict) -> None:
        """The jobs naming the Secret, directly or through one of their Models or Datasets."""
        for job in using_secret(self.jobs, obj):
            self._on_job(job)
        for model in using_secret(self.models, obj):
            self._on_model(model)
        for dataset in using_secret(self.datasets, obj):
            self._on_dataset(dataset)

    def _on_node(self, old: dict, new: dict) -> None:
        if (old.get("status") or {}).get("addresses") != (new.get("status") or {}).get("addresses"):
            for job in self.jobs.store.list():
                self._on_job(job)

    def _on_node_presence(self, node: dict) -> None:
        """A node came or went: the jobs with pods bound to it wait on it, or stop waiting."""
        name = deep_get(node, "metadata", "name")
        for pod in self.pods.store.list():
            if deep_get(pod, "spec", "nodeName") == name:
                self._on_child(pod)

    # -- reconcile -------------------------------------------------------------------

    async def reconcile(self, key: str) -> Requeue | None:
        namespace, name = split(key)
        job = self.jobs.store.get_by_name(namespace, name)
        if job is None or deep_get(job, "metadata", "deletionTimestamp"):
            return None  # deleted: never recreate anything; the GC removes the pods
        job = {**job, "kind": KIND, "apiVersion": apis.API_VERSION}
        try:
            children = await self._build(job, namespace)
            return await self._converge(job, children, namespace)
        except PROBLEMS as exc:
            await report_problem(self.ctx, job, exc, key=key, write=lambda p: self._write_status(
                job, pods=self._pods(job), all_present=False, converged=False, problem=p))

    async def _build(self, job: dict, namespace: str):
        models = self._named(self.models, namespace, apis.model_names(apis.FEDERATED_LEARNING, job))
        datasets = self._named(self.datasets, namespace, apis.dataset_names(apis.FEDERATED_LEARNING, job))
        secrets = cached_secrets(self.ctx, namespace,
                                 credential_names(job, *models.values(), *datasets.values()))
        return build_fl_children(job, models=models, datasets=datasets, config=self.ctx.workers,
                                 node_addresses=self._node_addresses(), secrets=secrets)

    @staticmethod
    def _named(inf, namespace: str, names: list[str]) -> dict[str, dict]:
        found = {n: inf.store.get_by_name(namespace, n) for n in names}
        return {n: o for n, o in found.items() if o is not None}

    def _node_addresses(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for node in self.nodes.store.list():
            addrs = {a.get("type"): a.get("address") for a in deep_get(node, "status", "addresses", default=[]) or []}
            address = addrs.get("InternalIP") or addrs.get("ExternalIP")
            if address:
                out[node["metadata"]["name"]] = address
        return out

    def _pods(self, job: dict) -> list[dict]:
        return self.pods.store.by_index("owner-uid", job["metadata"]["uid"])

    async def _converge(self, job: dict, children, namespace: str) -> Requeue | None:
        uid = job["metadata"]["uid"]
        desired = {p["metadata"]["name"]: p for p in (children.aggregation_pod, *children.training_pods)}
        observed = children_by_name(self.pods, uid, desired, namespace)
        rejected = self._rejected_edit(job, desired, observed)
        finished = _finished(job)
        if rejected is None:
            plan = plan_children(desired, observed, owner_uid=uid, hash_key=SPEC_HASH_ANNOTATION,
                                 mutable=False, create_missing=not finished)
            await execute(self.ctx, PODS, plan, owner=job, owner_gvr=FL, namespace=namespace,
                          progress=lambda: self._write_progress(job, desired))
        svc = children.aggregation_service
        svc_observed = children_by_name(self.svcs, uid, [svc["metadata"]["name"]], namespace)
        svc_plan = plan_children({svc["metadata"]["name"]: svc}, svc_observed, owner_uid=uid,
                                 hash_key=SPEC_HASH_ANNOTATION, mutable=True)
        await execute(self.ctx, SERVICES, svc_plan, owner=job, owner_gvr=FL, namespace=namespace)
        pods = [p for p in self._pods(job) if p["metadata"]["name"] in desired]
        all_present = set(desired) <= {p["metadata"]["name"] for p in pods}
        converged = rejected is None and not outdated(desired, observed, hash_key=SPEC_HASH_ANNOTATION) \
            and all_present
        await self._write_status(job, pods=pods, all_present=all_present, converged=converged,
                                 rejected=rejected)
        if rejected is not None or finished:
            return None
        return None if converged and svc_plan.converged else Requeue(2.0)

    def _rejected_edit(self, job: dict, desired: dict, observed: dict) -> str | None:
        """Under the `reject` policy, why an edit is not applied (None when nothing is rejected)."""
        if self.ctx.config.federatedLearning.specEditPolicy != "reject":
            return None
        stale = [n for n in outdated(desired, observed, hash_key=SPEC_HASH_ANNOTATION)
                 if not deep_get(observed[n], "metadata", "deletionTimestamp")]
        if not stale:
            return None
        message = (f"spec edit not applied to running workers {', '.join(sorted(stale))} "
                   "(federatedLearning.specEditPolicy is reject); delete and recreate the job to apply it")
        self.ctx.events.warning(job, "SpecEditRejected", message)
        return message

    async def _write_progress(self, job: dict, desired: dict) -> bool:
        """Status between batches of creates: the pods made so far, nothing converged yet."""
        pods = [p for p in self._pods(job) if p["metadata"]["name"] in desired]
        return await self._write_status(job, pods=pods, all_present=False, converged=False)

    async def _write_status(self, job: dict, *, pods: list[dict], all_present: bool, converged: bool,
                            problem: Problem | None = None, rejected: str | None = None) -> bool:
        generation = job["metadata"].get("generation")
        now = now_rfc3339()
        nodes = {n["metadata"]["name"] for n in self.nodes.store.list()}
        cannot_run = stranded(pods, nodes=nodes)
        waiting = summary(waits(self._pods(job), nodes=nodes))
        why = (problem.reason, problem.message) if problem is not None else None

        def mutate(status: dict) -> dict:
            new = fl_status({**job, "status": status}, pods, all_present=all_present,
                            converged_generation=generation if converged else None,
                            problem=why, now=now, stranded=cannot_run, waiting=waiting)
            if rejected is not None:
                new["conditions"] = set_condition(new.get("conditions"), "Training", "True",
                                                  reason="SpecEditRejected", message=rejected, now=now)
            return new

        return await write_status(self.ctx, FL, job, mutate)


def _finished(job: dict) -> bool:
    """A finished job whose spec was not edited since is left alone (no pod comes back)."""
    status = job.get("status") or {}
    return status.get("phase") in FINISHED and \
        status.get("observedGeneration") == job["metadata"].get("generation")


def _refs(names_of):
    def index(obj: dict) -> list[str]:
        ns = (obj.get("metadata") or {}).get("namespace")
        return [f"{ns}/{n}" for n in names_of(apis.FEDERATED_LEARNING, obj)]
    return index


