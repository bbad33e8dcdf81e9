"""Kubelet stand-in (spec §7.5): pod status on Ready nodes, start and termination delays.

Pods bound to an existing Ready node go Pending (ContainerCreating) at once and Running
after `start_delay`. With a process runtime, pods whose image is in the image map run
as local processes and their phase follows the process. A pod marked for deletion has
its containers stopped and is then deleted with grace 0 and a uid precondition, after
`termination_delay` (simulated) or once the process has exited (process runtime).
The test annotation `devcluster.sedna.io/phase: Succeeded|Failed` ends a pod.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable, Iterable
from typing import Any

from devcluster.controllers.base import Controller
from devcluster.controllers.meta import now_time
from devcluster.controllers.nodes import node_is_ready
from devcluster.controllers.podenv import EnvError, container_env
from devcluster.controllers.podstatus import ContainerRun, build_status, requested_phase
from devcluster.machinery.errors import ApiError
from devcluster.storage.objects import get_or_none

log = logging.getLogger("devcluster.kubelet")

COMPONENT = "kubelet"
TERMINAL = ("Succeeded", "Failed")


def node_ip_of(node: dict[str, Any]) -> str:
    for a in (node.get("status") or {}).get("addresses") or []:
        if a.get("type") == "InternalIP":
            return a.get("address", "")
    return ""


class PodIPs:
    """Pod addresses from 10.244.0.0/16, one per pod uid."""

    def __init__(self) -> None:
        self._next = 0
        self._by_uid: dict[str, str] = {}

    def get(self, uid: str) -> str:
        ip = self._by_uid.get(uid)
        if ip is None:
            n = self._next
            self._next += 1
            ip = self._by_uid[uid] = f"10.244.{(n // 254) % 256}.{n % 254 + 1}"
        return ip

    def release(self, uid: str) -> None:
        self._by_uid.pop(uid, None)


class Kubelet(Controller):
    """Drives pods on every Ready node of the store."""

    name = "kubelet"

    def __init__(self, store: Any, *, start_delay: float = 0.2, termination_delay: float = 0.1,
                 runtime: Any = None, resync: float = 5.0):
        super().__init__(store, resync=resync)
        self.start_delay = start_delay
        self.termination_delay = termination_delay
        self.runtime = runtime
        self.ips = PodIPs()
        self._seen: dict[str, float] = {}  # pod uid -> loop time the kubelet first reported it
        self._dying: dict[str, float] = {}  # pod uid -> loop time its deletion was noticed
        self._uids: dict[Hashable, str] = {}  # (ns, name) -> uid of the pod the kubelet runs there
        reg = store.registry
        self.pod_rt = reg.lookup(group="", version="v1", resource="pods")
        self.node_rt = reg.lookup(group="", version="v1", resource="nodes")
        self.secret_rt = reg.lookup(group="", version="v1", resource="secrets")
        self.cm_rt = reg.lookup(group="", version="v1", resource="configmaps")
        if runtime is not None:
            runtime.on_change = lambda ns, name: self.queue.add((ns, name))

    # -- triggers -------------------------------------------------------------------

    def keys_for(self, event: Any) -> Iterable[Hashable]:
        if event.rt.key == self.node_rt.key:
            return self._pods_on(event.obj["metadata"]["name"])
        if event.rt.key != self.pod_rt.key:
            return ()
        meta = event.obj["metadata"]
        key = (meta["namespace"], meta["name"])
        if event.obj.get("spec", {}).get("nodeName") or key in self._uids:
            return [key]
        return ()

    def _pods_on(self, node: str) -> list[Hashable]:
        items, _ = self.store.list(self.pod_rt, None)
        return [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in items
                if p.get("spec", {}).get("nodeName") == node]

    def resync_keys(self) -> Iterable[Hashable]:
        items, _ = self.store.list(self.pod_rt, None)
        keys = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in items if p["spec"].get("nodeName")}
        return keys | set(self._uids)

    # -- reconcile ------------------------------------------------------------------

    async def sync(self, key: Hashable) -> float | None:
        ns, name = key  # type: ignore[misc]
        pod = self._get(self.pod_rt, ns, name)
        self._reap_replaced(key, pod)
        if pod is None or not pod["spec"].get("nodeName"):
            return None
        node = self._get(self.node_rt, None, pod["spec"]["nodeName"])
        if node is None or not node_is_ready(node):
            return None  # a node event brings the pod back
        self._uids[key] = pod["metadata"]["uid"]
        if pod["metadata"].get("deletionTimestamp"):
            return self._terminate(key, pod)
        if pod.get("status", {}).get("phase") in TERMINAL:
            self._stop_process(pod, 0)
            return None
        phase = requested_phase(pod)
        if phase is not None:
            return self._finish(pod, node, phase)
        if self.runtime is not None and self.runtime.handles(pod):
            return self._sync_process(pod, node)
        return self._sync_simulated(pod, node)

    def _get(self, rt: Any, ns: str | None, name: str) -> dict[str, Any] | None:
        return get_or_none(self.store, rt, ns, name)

    def _reap_replaced(self, key: Hashable, pod: dict[str, Any] | None) -> None:
        """Forget (and kill) what ran for an earlier pod of the same name."""
        old = self._uids.get(key)
        if old is None or (pod is not None and pod["metadata"]["uid"] == old):
            return
        del self._uids[key]
        self._seen.pop(old, None)
        self._dying.pop(old, None)
        self.ips.release(old)
        if self.runtime is not None:
            self.runtime.stop(old, 0)
            self.runtime.forget(old)

    def _elapsed(self, table: dict[str, float], uid: str) -> float:
        now = asyncio.get_running_loop().time()
        return now - table.setdefault(uid, now)

    def _write(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        if status == pod.get("status"):
            return

        def edit(obj: dict[str, Any]) -> None:
            obj["status"] = status

        meta = pod["metadata"]
        self.store.mutate(self.pod_rt, meta["namespace"], meta["name"], edit, subresource="status")

    def _event(self, pod: dict[str, Any], reason: str, message: str, type: str = "Normal") -> None:
        self.store.record_event(pod, reason=reason, message=message, type=type, component=COMPONENT)

    # -- simulated containers ------------------------------------------------------------

    def _pending(self, pod: dict[str, Any], node: dict[str, Any], run: ContainerRun | None = None) -> None:
        self._write(pod, build_status(pod, phase="Pending", run=run or ContainerRun(state="waiting"),
                                      host_ip=node_ip_of(node), pod_ip=None))

    def _sync_simulated(self, pod: dict[str, Any], node: dict[str, Any]) -> float | None:
        uid = pod["metadata"]["uid"]
        if pod["status"].get("phase") == "Running":
            return None
        remaining = self.start_delay - self._elapsed(self._seen, uid)
        if remaining > 0:
            self._pending(pod, node)
            return remaining
        started = now_time()
        status = build_status(pod, phase="Running", run=ContainerRun(state="running", started_at=started),
                              host_ip=node_ip_of(node), pod_ip=self.ips.get(uid), start_time=started)
        self._write(pod, status)
        for c in pod["spec"].get("containers") or []:
            self._event(pod, "Started", f"Started container {c.get('name', '')}")
        return None

    def _finish(self, pod: dict[str, Any], node: dict[str, Any], phase: str) -> None:
        """End the pod in a terminal phase (the test annotation)."""
        uid = pod["metadata"]["uid"]
        self._stop_process(pod, 0)
        run = ContainerRun(state="terminated", exit_code=0 if phase == "Succeeded" else 1,
                           started_at=_running_since(pod), finished_at=now_time())
        pod_ip = pod["status"].get("podIP") or self.ips.get(uid)
        self._write(pod, build_status(pod, phase=phase, run=run, host_ip=node_ip_of(node), pod_ip=pod_ip))
        return None

    # -- process runtime -------------------------------------------------------------

    def _sync_process(self, pod: dict[str, Any], node: dict[str, Any]) -> float | None:
        uid = pod["metadata"]["uid"]
        run = self.runtime.state(uid)
        if run is None:
            remaining = self.start_delay - self._elapsed(self._seen, uid)
            if remaining > 0:
                self._pending(pod, node)
                return remaining
            run = self._start_process(pod, node)
            if run is None:
                return 1.0  # env could not be resolved; retry (the secret may appear)
        phase = "Running"
        if run.state == "terminated":
            phase = "Succeeded" if run.exit_code == 0 else "Failed"
        elif run.state == "waiting" and run.restart_count == 0:
            phase = "Pending"
        self._write(pod, build_status(pod, phase=phase, run=run, host_ip=node_ip_of(node),
                                      pod_ip=self.ips.get(uid)))
        return None

    def _start_process(self, pod: dict[str, Any], node: dict[str, Any]) -> ContainerRun | None:
        uid = pod["metadata"]["uid"]
        view = {**pod, "status": {**pod.get("status", {}), "podIP": self.ips.get(uid),
                                  "hostIP": node_ip_of(node)}}
        try:
            env = container_env(view, pod["spec"]["containers"][0], self._lookup)
            self.runtime.start(view, env)  # projecting a volume may fail the same way
        except EnvError as err:
            self._pending(pod, node, ContainerRun(state="waiting", reason="CreateContainerConfigError",
                                                  message=str(err)))
            self._event(pod, "Failed", f"Error: {err}", "Warning")
            return None
        self._event(pod, "Started", f"Started container {pod['spec']['containers'][0].get('name', '')}")
        return self.runtime.state(uid)

    def _lookup(self, resource: str, ns: str, name: str) -> dict[str, Any] | None:
        rt = self.secret_rt if resource == "secrets" else self.cm_rt
        return self._get(rt, ns, name)

    def _stop_process(self, pod: dict[str, Any], grace: float) -> bool:
        """Stop the pod's process if any; True while it is still running."""
        if self.runtime is None:
            return False
        uid = pod["metadata"]["uid"]
        if not self.runtime.running(uid):
            return False
        self.runtime.stop(uid, grace)
        return True

    # -- deletion -------------------------------------------------------------------

    def _terminate(self, key: Hashable, pod: dict[str, Any]) -> float | None:
        uid = pod["metadata"]["uid"]
        grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
        first = uid not in self._dying
        waited = self._elapsed(self._dying, uid)
        if first:
            for c in pod["spec"].get("containers") or []:
                self._event(pod, "Killing", f"Stopping container {c.get('name', '')}")
        if self._stop_process(pod, grace):
            return max(grace, 1.0)  # the process exit re-enqueues the pod sooner
        self._mark_terminated(pod)
        remaining = self.termination_delay - waited
        if remaining > 0:
            return remaining
        meta = pod["metadata"]
        try:
            self.store.delete(self.pod_rt, meta["namespace"], meta["name"], grace_period=0,
                              preconditions={"uid": uid})
        except ApiError as err:
            if err.code not in (404, 409):
                raise
        return None

    def _mark_terminated(self, pod: dict[str, Any]) -> None:
        """Containers of a deleted pod show as terminated before it goes away."""
        uid = pod["metadata"]["uid"]
        run = self.runtime.state(uid) if self.runtime is not None else None
        if run is None or run.state != "terminated":
            if pod["status"].get("phase") in TERMINAL:
                return
            run = ContainerRun(state="terminated", exit_code=0, started_at=_running_since(pod),
                               finished_at=now_time())
        node = self._get(self.node_rt, None, pod["spec"]["nodeName"]) or {}
        self._write(pod, build_status(pod, phase=pod["status"].get("phase", "Pending"), run=run,
                                      host_ip=node_ip_of(node), pod_ip=pod["status"].get("podIP")))


def _running_since(pod: dict[str, Any]) -> str | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        running = (cs.get("state") or {}).get("running")
        if running:
            return running.get("startedAt")
    return None
