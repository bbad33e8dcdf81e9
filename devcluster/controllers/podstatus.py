"""Pod status documents the kubelet stand-in writes (spec §7.5). Pure.

Every container status carries `imageID` (possibly "") and every condition its
`lastTransitionTime`, which kubernetes_asyncio needs to deserialize a pod.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Any

from devcluster.controllers.meta import now_time, set_condition

PHASE_ANNOTATION = "devcluster.sedna.io/phase"


def image_id(image: str) -> str:
    """A digest reference for `image`, stable per image name."""
    repo = image.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo = repo[: repo.rfind(":")]
    if "/" not in repo:
        repo = f"library/{repo}"
    if repo.count("/") == 1 or "." not in repo.split("/", 1)[0]:
        repo = f"docker.io/{repo}"
    return f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def container_id(pod_uid: str, name: str, restarts: int) -> str:
    return "containerd://" + hashlib.sha256(f"{pod_uid}/{name}/{restarts}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ContainerRun:
    """What the runtime says about a pod's main container; None fields mean "not yet"."""

    state: str  # "waiting" | "running" | "terminated"
    reason: str = ""
    exit_code: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    restart_count: int = 0
    last_exit_code: int | None = None
    last_started_at: str | None = None
    last_finished_at: str | None = None
    message: str = ""


def _state(run: ContainerRun, cid: str) -> dict[str, Any]:
    if run.state == "running":
        return {"running": {"startedAt": run.started_at or now_time()}}
    if run.state == "terminated":
        term = {
            "exitCode": run.exit_code if run.exit_code is not None else 0,
            "reason": run.reason or ("Completed" if not run.exit_code else "Error"),
            "startedAt": run.started_at or now_time(),
            "finishedAt": run.finished_at or now_time(),
            "containerID": cid,
        }
        if run.message:
            term["message"] = run.message
        return {"terminated": term}
    waiting: dict[str, Any] = {"reason": run.reason or "ContainerCreating"}
    if run.message:
        waiting["message"] = run.message
    return {"waiting": waiting}


def container_status(pod: dict[str, Any], c: dict[str, Any], run: ContainerRun) -> dict[str, Any]:
    """One `containerStatuses[]` entry."""
    uid = pod["metadata"].get("uid", "")
    pulled = run.state != "waiting" or run.restart_count > 0
    cid = container_id(uid, c.get("name", ""), run.restart_count)
    out: dict[str, Any] = {
        "name": c.get("name", ""),
        "image": c.get("image", ""),
        "imageID": image_id(c.get("image", "")) if pulled else "",
        "ready": run.state == "running",
        "started": run.state == "running",
        "restartCount": run.restart_count,
        "state": _state(run, cid),
        "lastState": {},
    }
    if run.state != "waiting":
        out["containerID"] = cid
    if run.last_exit_code is not None:
        out["lastState"] = {"terminated": {
            "exitCode": run.last_exit_code,
            "reason": "Completed" if run.last_exit_code == 0 else "Error",
            "startedAt": run.last_started_at or now_time(),
            "finishedAt": run.last_finished_at or now_time(),
            "containerID": container_id(uid, c.get("name", ""), max(0, run.restart_count - 1)),
        }}
    return out


def build_status(
    pod: dict[str, Any], *, phase: str, run: ContainerRun, host_ip: str, pod_ip: str | None,
    start_time: str | None = None,
) -> dict[str, Any]:
    """The whole pod status for one observed state; conditions keep their transition times."""
    old = pod.get("status") or {}
    status = copy.deepcopy(old)
    containers = pod.get("spec", {}).get("containers") or []
    # the runtime state describes the first container; the others follow it
    statuses = [container_status(pod, c, run) for c in containers]
    ready = run.state == "running" and phase == "Running"
    status.update(phase=phase, hostIP=host_ip, hostIPs=[{"ip": host_ip}],
                  startTime=old.get("startTime") or start_time or now_time(),
                  containerStatuses=statuses)
    if pod_ip:
        status.update(podIP=pod_ip, podIPs=[{"ip": pod_ip}])
    inits = pod.get("spec", {}).get("initContainers") or []
    if inits:
        done = ContainerRun(state="terminated", exit_code=0, reason="Completed")
        status["initContainerStatuses"] = [container_status(pod, c, done) for c in inits]
    _conditions(status, containers, phase=phase, run=run, ready=ready)
    return status


def _conditions(status: dict[str, Any], containers: list[dict[str, Any]], *, phase: str,
                run: ContainerRun, ready: bool) -> None:
    conds = status.setdefault("conditions", [])
    sandbox = run.state != "waiting" or run.restart_count > 0
    if phase in ("Succeeded", "Failed"):
        sandbox = False
    set_condition(conds, "PodReadyToStartContainers", "True" if sandbox else "False")
    set_condition(conds, "Initialized", "True")
    names = ",".join(c.get("name", "") for c in containers)
    if ready:
        set_condition(conds, "Ready", "True")
        set_condition(conds, "ContainersReady", "True")
    else:
        reason = "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"
        msg = "" if reason == "PodCompleted" else f"containers with unready status: [{names}]"
        set_condition(conds, "Ready", "False", reason=reason, message=msg)
        set_condition(conds, "ContainersReady", "False", reason=reason, message=msg)
    set_condition(conds, "PodScheduled", "True")
    order = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
    conds.sort(key=lambda c: order.index(c["type"]) if c["type"] in order else len(order))
    for c in conds:  # a pod condition's zero probe time is written as null
        c.setdefault("lastProbeTime", None)


def requested_phase(pod: dict[str, Any]) -> str | None:
    """The test-only phase annotation, when it names a terminal phase."""
    value = (pod.get("metadata", {}).get("annotations") or {}).get(PHASE_ANNOTATION)
    return value if value in ("Succeeded", "Failed") else None
