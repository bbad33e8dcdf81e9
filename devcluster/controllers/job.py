"""Job controller: run pods until `completions` succeed, or fail the Job on its limits.

Counting: every pod the controller creates carries the `batch.kubernetes.io/job-tracking`
finalizer, so a finished pod cannot vanish before it is counted. A sync first records
finished (or terminating) tracked pods in `status.uncountedTerminatedPods`, then removes
their finalizers, then moves them into `succeeded` / `failed`; each step is one write, and
a pod is counted exactly once whichever step a restart lands on. A terminating pod that
did not succeed counts as failed (podReplacementPolicy TerminatingOrFailed).

Decisions, in order: `activeDeadlineSeconds` since `startTime` -> Failed/DeadlineExceeded;
`failed > backoffLimit` -> Failed/BackoffLimitExceeded; `succeeded >= completions` (or,
without completions, a success and nothing active) -> Complete. Before the final
condition the interim one (FailureTarget / SuccessCriteriaMet) is written and active pods
are deleted, as a 1.32 controller does. Otherwise keep
`min(parallelism, completions - succeeded)` pods active. Differences: failed pods are
replaced at once (no 10 s exponential backoff), Indexed completion mode, pod failure
policies and success policies are not implemented.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Hashable, Iterable
from typing import Any

from devcluster.controllers.base import Controller
from devcluster.controllers.meta import (
    controller_ref,
    finalizers,
    find_condition,
    get_controller_of,
    is_deleting,
    now_time,
    seconds_since,
    set_condition,
)
from devcluster.controllers.podops import create_pod, delete_pod
from devcluster.controllers.replicaset import is_ready
from devcluster.machinery.errors import ApiError
from devcluster.storage.objects import get_or_none

log = logging.getLogger("devcluster.job")

COMPONENT = "job-controller"
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"

BACKOFF = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE = ("DeadlineExceeded", "Job was active longer than specified deadline")
COMPLETED = ("CompletionsReached", "Reached expected number of succeeded pods")


def build_pod(job: dict[str, Any]) -> dict[str, Any]:
    """A pod of `job` from its template, owned by it and tracked by its finalizer."""
    tmpl = copy.deepcopy(job["spec"].get("template") or {})
    tmeta = tmpl.get("metadata") or {}
    meta: dict[str, Any] = {
        "generateName": job["metadata"]["name"] + "-", "namespace": job["metadata"]["namespace"],
        "labels": tmeta.get("labels") or {}, "ownerReferences": [controller_ref(job)],
        "finalizers": [*(tmeta.get("finalizers") or []), TRACKING_FINALIZER],
    }
    if tmeta.get("annotations"):
        meta["annotations"] = tmeta["annotations"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tmpl.get("spec") or {}}


def outcome(pod: dict[str, Any]) -> str | None:
    """"succeeded" / "failed" once a pod is done for the Job's counts, else None (active)."""
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Succeeded":
        return "succeeded"
    if phase == "Failed" or is_deleting(pod):
        return "failed"
    return None


def finished_condition(job: dict[str, Any]) -> str | None:
    """"Complete" or "Failed" once the Job has that condition, else None."""
    conds = (job.get("status") or {}).get("conditions")
    for ctype in ("Complete", "Failed"):
        cond = find_condition(conds, ctype)
        if cond and cond.get("status") == "True":
            return ctype
    return None


def failure(job: dict[str, Any], status: dict[str, Any]) -> tuple[str, str] | None:
    """(reason, message) if the Job has failed by its deadline or backoff limit."""
    spec = job["spec"]
    deadline = spec.get("activeDeadlineSeconds")
    elapsed = seconds_since(status.get("startTime"))
    if deadline is not None and elapsed is not None and elapsed >= deadline:
        return DEADLINE
    if int(status.get("failed") or 0) > int(spec.get("backoffLimit", 6)):
        return BACKOFF
    return None


def succeeded_enough(job: dict[str, Any], status: dict[str, Any], active: int) -> bool:
    completions = job["spec"].get("completions")
    succeeded = int(status.get("succeeded") or 0)
    if completions is None:
        return succeeded > 0 and active == 0
    return succeeded >= completions


def wanted_active(job: dict[str, Any], status: dict[str, Any]) -> int:
    spec = job["spec"]
    if spec.get("suspend"):
        return 0
    parallelism = int(spec.get("parallelism", 1))
    completions = spec.get("completions")
    if completions is None:
        return 0 if int(status.get("succeeded") or 0) > 0 else parallelism
    return max(0, min(parallelism, completions - int(status.get("succeeded") or 0)))


def _set(conds: list[dict[str, Any]], ctype: str, reason_message: tuple[str, str]) -> None:
    set_condition(conds, ctype, "True", reason=reason_message[0], message=reason_message[1],
                  heartbeat_field="lastProbeTime")


class JobController(Controller):
    """Runs Jobs to completion or failure."""

    name = "job-controller"

    def __init__(self, store: Any, *, resync: float = 5.0):
        super().__init__(store, resync=resync)
        reg = store.registry
        self.job_rt = reg.lookup(group="batch", version="v1", resource="jobs")
        self.pod_rt = reg.lookup(group="", version="v1", resource="pods")

    def keys_for(self, event: Any) -> Iterable[Hashable]:
        if event.rt.key == self.job_rt.key:
            return [(event.obj["metadata"]["namespace"], event.obj["metadata"]["name"])]
        if event.rt.key != self.pod_rt.key:
            return ()
        ref = get_controller_of(event.obj)
        if ref is not None and ref.get("kind") == "Job":
            return [(event.obj["metadata"]["namespace"], ref["name"])]
        return ()

    def resync_keys(self) -> Iterable[Hashable]:
        items, _ = self.store.list(self.job_rt, None)
        return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items]

    async def sync(self, key: Hashable) -> float | None:
        ns, name = key  # type: ignore[misc]
        job = get_or_none(self.store, self.job_rt, ns, name)
        if job is None:
            self._release_orphans(ns, name)
            return None
        pods = self._pods(job)
        job = self._count(job, pods)
        if is_deleting(job):
            return None
        if finished_condition(job) is not None:
            self._delete_active(job, self._pods(job))  # a finished Job keeps no pod running
            return None
        return self._reconcile(job)

    def _pods(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        return self.store.controlled_by(self.pod_rt, job["metadata"]["uid"], job["metadata"]["namespace"])

    # -- counting ---------------------------------------------------------------------

    def _count(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
        """Move finished tracked pods into the counts: record, release, count."""
        if finished_condition(job) is not None:  # pods deleted after the end are not counted
            for pod in pods:
                if outcome(pod) and TRACKING_FINALIZER in finalizers(pod):
                    self._release(pod)
            return job
        status = job.get("status") or {}
        uncounted = status.get("uncountedTerminatedPods") or {}
        listed = {uid for uids in uncounted.values() for uid in uids}
        fresh: dict[str, list[str]] = {"succeeded": [], "failed": []}
        for pod in pods:
            result = outcome(pod)
            if result and TRACKING_FINALIZER in finalizers(pod) and pod["metadata"]["uid"] not in listed:
                fresh[result].append(pod["metadata"]["uid"])
        if fresh["succeeded"] or fresh["failed"]:
            job = self._edit_status(job, lambda st: _record_uncounted(st, fresh))
        listed |= set(fresh["succeeded"]) | set(fresh["failed"])
        for pod in pods:
            if pod["metadata"]["uid"] in listed:
                self._release(pod)
        if listed:
            job = self._edit_status(job, _move_uncounted)
        return job

    def _release_orphans(self, ns: str, name: str) -> None:
        """A Job that is gone counts nothing: its pods' finalizers must not keep them alive."""
        pods, _ = self.store.list(self.pod_rt, ns)
        for pod in pods:
            ref = get_controller_of(pod)
            if (ref is not None and ref.get("kind") == "Job" and ref.get("name") == name
                    and TRACKING_FINALIZER in finalizers(pod)):
                self._release(pod)

    def _release(self, pod: dict[str, Any]) -> None:
        def edit(obj: dict[str, Any]) -> None:
            obj["metadata"]["finalizers"] = [f for f in finalizers(obj) if f != TRACKING_FINALIZER]

        try:
            self.store.mutate(self.pod_rt, pod["metadata"]["namespace"], pod["metadata"]["name"], edit)
        except ApiError as err:
            if err.code != 404:
                raise

    # -- decisions --------------------------------------------------------------------

    def _reconcile(self, job: dict[str, Any]) -> float | None:
        status = job.get("status") or {}
        if not status.get("startTime") and not job["spec"].get("suspend"):
            job = self._edit_status(job, lambda st: st.__setitem__("startTime", now_time()))
            status = job["status"]
        active = [p for p in self._pods(job) if outcome(p) is None]
        failed = failure(job, status)
        if failed is not None:
            self._finish(job, active, "FailureTarget", "Failed", failed)
            return None
        if succeeded_enough(job, status, len(active)):
            self._finish(job, active, "SuccessCriteriaMet", "Complete", COMPLETED)
            return None
        self._scale(job, active, wanted_active(job, status))
        self._write_active(job)
        return self._deadline_in(job)

    def _scale(self, job: dict[str, Any], active: list[dict[str, Any]], want: int) -> None:
        for _ in range(want - len(active)):
            self._create_pod(job)
        for pod in sorted(active, key=lambda p: p["metadata"].get("creationTimestamp", ""))[want:]:
            self._delete_pod(job, pod)

    def _finish(self, job: dict[str, Any], active: list[dict[str, Any]], interim: str, final: str,
                why: tuple[str, str]) -> None:
        """Interim condition, active pods deleted, then the final condition (and an event)."""
        job = self._edit_status(job, lambda st: _set(st.setdefault("conditions", []), interim, why))
        self._delete_active(job, active)
        completed = final == "Complete"

        def edit(st: dict[str, Any]) -> None:
            _set(st.setdefault("conditions", []), final, why)
            st["active"] = 0
            if completed:
                st["completionTime"] = now_time()

        self._edit_status(job, edit)
        if completed:
            self.store.record_event(job, reason="Completed", message="Job completed", component=COMPONENT)
        else:
            self.store.record_event(job, reason=why[0], message=why[1], type="Warning", component=COMPONENT)

    def _delete_active(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            if outcome(pod) is None:
                self._delete_pod(job, pod)

    def _deadline_in(self, job: dict[str, Any]) -> float | None:
        deadline = job["spec"].get("activeDeadlineSeconds")
        elapsed = seconds_since((job.get("status") or {}).get("startTime"))
        if deadline is None or elapsed is None:
            return None
        return max(0.05, deadline - elapsed)

    # -- writes -----------------------------------------------------------------------

    def _create_pod(self, job: dict[str, Any]) -> None:
        create_pod(self.store, self.pod_rt, job, build_pod(job), component=COMPONENT)

    def _delete_pod(self, job: dict[str, Any], pod: dict[str, Any]) -> None:
        delete_pod(self.store, self.pod_rt, job, pod, component=COMPONENT)

    def _write_active(self, job: dict[str, Any]) -> None:
        pods = self._pods(job)
        active = [p for p in pods if outcome(p) is None]

        def edit(st: dict[str, Any]) -> None:
            st["active"] = len(active)
            st["ready"] = sum(1 for p in active if is_ready(p))
            st["terminating"] = sum(1 for p in pods if is_deleting(p))
            st.setdefault("uncountedTerminatedPods", {})
            if not st["active"]:
                st.pop("active")

        self._edit_status(job, edit)

    def _edit_status(self, job: dict[str, Any], fn: Any) -> dict[str, Any]:
        def edit(obj: dict[str, Any]) -> None:
            st = obj.setdefault("status", {})
            fn(st)

        meta = job["metadata"]
        return self.store.mutate(self.job_rt, meta["namespace"], meta["name"], edit, subresource="status")


def _record_uncounted(status: dict[str, Any], fresh: dict[str, list[str]]) -> None:
    uncounted = status.setdefault("uncountedTerminatedPods", {})
    for result, uids in fresh.items():
        if uids:
            uncounted[result] = [*(uncounted.get(result) or []), *uids]


def _move_uncounted(status: dict[str, Any]) -> None:
    uncounted = status.get("uncountedTerminatedPods") or {}
    for result in ("succeeded", "failed"):
        n = len(uncounted.get(result) or [])
        if n:
            status[result] = int(status.get(result) or 0) + n
    status["uncountedTerminatedPods"] = {}
