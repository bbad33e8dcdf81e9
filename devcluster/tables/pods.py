"""The Pod printer: the READY, STATUS, RESTARTS and readiness-gate cells kubectl shows, computed
as the real server's printer computes them (init containers, sidecars, terminations), and the
row conditions of a pod. Pure."""

from __future__ import annotations

from devcluster.tables.columns import (
    AGE,
    NAME,
    Cells,
    age_of,
    as_dict,
    as_list,
    column,
    epoch,
    meta_of,
    name_of,
    since,
)

# --------------------------------------------------------------------------- pods

POD_COLUMNS = [
    NAME,
    column("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
    column("Status", "string", "The aggregate status of the containers in this pod."),
    column("Restarts", "string", "The number of times the containers in this pod have been restarted and when the "
         "last container in this pod has restarted."),
    AGE,
    column("IP", "string", "IP address allocated to the pod. Routable at least within the cluster. Empty if not "
         "yet allocated.", priority=1),
    column("Node", "string", "NodeName is a request to schedule this pod onto a specific node.", priority=1),
    column("Nominated Node", "string", "nominatedNodeName is set only when this pod preempts other pods on the "
         "node, but it cannot be scheduled right away as preemption victims receive their graceful termination "
         "periods.", priority=1),
    column("Readiness Gates", "string", "If specified, all readiness gates will be evaluated for pod readiness.",
         priority=1),
]


class _PodState:
    """What the pod STATUS/READY/RESTARTS cells are computed from (kubectl printPod)."""

    __slots__ = ("reason", "ready", "total", "restarts", "last_restart", "initializing")

    def __init__(self, pod: dict):
        spec, status = as_dict(pod.get("spec")), as_dict(pod.get("status"))
        self.reason = status.get("reason") or status.get("phase") or ""
        if any(as_dict(c).get("type") == "PodScheduled" and as_dict(c).get("reason") == "SchedulingGated"
               for c in as_list(status.get("conditions"))):
            self.reason = "SchedulingGated"
        self.ready = 0
        self.total = len(as_list(spec.get("containers")))
        self.restarts = 0
        self.last_restart: str | None = None
        self.initializing = False


def _sidecars(spec: dict) -> set[str]:
    return {c.get("name") for c in map(as_dict, as_list(spec.get("initContainers"))) if c.get("restartPolicy") == "Always"}


def _finished_at(cs: dict) -> str | None:
    return as_dict(as_dict(cs.get("lastState")).get("terminated")).get("finishedAt")


def _later(a: str | None, b: str | None) -> str | None:
    if not a or not b:
        return a or b
    return a if (epoch(a) or 0) >= (epoch(b) or 0) else b


def _pod_init(state: _PodState, spec: dict, status: dict) -> tuple[int, str | None]:
    """Walk init containers; returns the restarts and last restart of sidecars only."""
    sidecars = _sidecars(spec)
    state.total += len(sidecars)
    n_init = len(as_list(spec.get("initContainers")))
    side_restarts, side_last = 0, None
    for i, cs in enumerate(map(as_dict, as_list(status.get("initContainerStatuses")))):
        state.restarts += int(cs.get("restartCount") or 0)
        state.last_restart = _later(state.last_restart, _finished_at(cs))
        sidecar = cs.get("name") in sidecars
        if sidecar:
            side_restarts += int(cs.get("restartCount") or 0)
            side_last = _later(side_last, _finished_at(cs))
        st = as_dict(cs.get("state"))
        term, wait = st.get("terminated"), st.get("waiting")
        if term is not None and as_dict(term).get("exitCode", 0) == 0:
            continue
        if sidecar and cs.get("started"):
            state.ready += 1 if cs.get("ready") else 0
            continue
        state.initializing = True
        if term is not None:
            state.reason = "Init:" + _terminated_reason(as_dict(term))
        elif wait is not None and as_dict(wait).get("reason") and as_dict(wait).get("reason") != "PodInitializing":
            state.reason = "Init:" + as_dict(wait)["reason"]
        else:
            state.reason = f"Init:{i}/{n_init}"
        break
    return side_restarts, side_last


def _terminated_reason(term: dict) -> str:
    if term.get("reason"):
        return term["reason"]
    if term.get("signal"):
        return f"Signal:{term['signal']}"
    return f"ExitCode:{term.get('exitCode', 0)}"


def _pod_containers(state: _PodState, status: dict) -> None:
    has_running = False
    for cs in reversed([as_dict(c) for c in as_list(status.get("containerStatuses"))]):
        state.restarts += int(cs.get("restartCount") or 0)
        state.last_restart = _later(state.last_restart, _finished_at(cs))
        st = as_dict(cs.get("state"))
        wait, term = st.get("waiting"), st.get("terminated")
        if wait is not None and as_dict(wait).get("reason"):
            state.reason = as_dict(wait)["reason"]
        elif term is not None:
            state.reason = _terminated_reason(as_dict(term))
        elif cs.get("ready") and st.get("running") is not None:
            has_running = True
            state.ready += 1
    if state.reason == "Completed" and has_running:
        ready = any(as_dict(c).get("type") == "Ready" and as_dict(c).get("status") == "True"
                    for c in as_list(status.get("conditions")))
        state.reason = "Running" if ready else "NotReady"


def _pod_initialized(status: dict) -> bool:
    return any(as_dict(c).get("type") == "Initialized" and as_dict(c).get("status") == "True"
               for c in as_list(status.get("conditions")))


def _pod_state(pod: dict) -> _PodState:
    spec, status = as_dict(pod.get("spec")), as_dict(pod.get("status"))
    state = _PodState(pod)
    side_restarts, side_last = _pod_init(state, spec, status)
    if not state.initializing or _pod_initialized(status):
        state.restarts, state.last_restart = side_restarts, side_last
        _pod_containers(state, status)
    if meta_of(pod).get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            state.reason = "Unknown"
        elif status.get("phase") not in ("Succeeded", "Failed"):
            state.reason = "Terminating"
    return state


def pod_row(pod: dict, now: float) -> Cells:
    spec, status = as_dict(pod.get("spec")), as_dict(pod.get("status"))
    state = _pod_state(pod)
    restarts = str(state.restarts)
    if state.restarts and state.last_restart:
        restarts = f"{state.restarts} ({since(state.last_restart, now)} ago)"
    ips = as_list(status.get("podIPs"))
    ip = (as_dict(ips[0]).get("ip") if ips else None) or status.get("podIP") or "<none>"
    return [name_of(pod), f"{state.ready}/{state.total}", state.reason, restarts, age_of(pod, now),
            ip, spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>",
            _readiness_gates(spec, status)]


def _readiness_gates(spec: dict, status: dict) -> str:
    gates = as_list(spec.get("readinessGates"))
    if not gates:
        return "<none>"
    conditions = {as_dict(c).get("type"): as_dict(c).get("status") for c in as_list(status.get("conditions"))}
    true = sum(1 for g in gates if conditions.get(as_dict(g).get("conditionType")) == "True")
    return f"{true}/{len(gates)}"


def pod_conditions(pod: dict) -> list[dict] | None:
    phase = as_dict(pod.get("status")).get("phase")
    if phase == "Succeeded":
        return [{"type": "Completed", "status": "True", "reason": "Succeeded",
                 "message": "The pod has completed successfully."}]
    if phase == "Failed":
        return [{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]
    return None
