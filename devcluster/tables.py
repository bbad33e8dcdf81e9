"""`meta.k8s.io/v1` Table rendering for `kubectl get` (spec §3.6).

kubectl asks for `as=Table` on every get and watch and prints whatever columns the
server sends, so these printers decide what `kubectl get` shows. Like the real server,
every row carries all columns, wide ones (priority 1) included; kubectl drops those
unless `-o wide`. Printers are pure: `now` comes from the caller, so ages are testable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from functools import lru_cache
from typing import Any

from devcluster.machinery.errors import ApiError
from devcluster.machinery.selectors import selector_to_string
from devcluster.strategy import rbac

__all__ = ["to_table", "column_definitions", "human_age"]

Cells = list[Any]
RowFn = Callable[[dict, float], Cells]

_NAME_DESC = (
    "Name must be unique within a namespace. Is required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name automatically. "
    "Name is primarily intended for creation idempotence and configuration definition. Cannot be "
    "updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_AGE_DESC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. "
    "It is represented in RFC3339 form and is in UTC."
)


def _col(name: str, type_: str = "string", desc: str = "", *, priority: int = 0, fmt: str = "") -> dict:
    return {"name": name, "type": type_, "format": fmt, "description": desc, "priority": priority}


_NAME = _col("Name", "string", _NAME_DESC, fmt="name")
_AGE = _col("Age", "string", _AGE_DESC)


# --------------------------------------------------------------------------- durations


def human_age(seconds: float) -> str:
    """A duration as kubectl prints ages (apimachinery `duration.HumanDuration`)."""
    s = int(seconds)  # truncates toward zero, like Go's int(d.Seconds())
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


@lru_cache(maxsize=4096)
def _epoch(timestamp: str) -> float | None:
    try:
        return datetime.fromisoformat(timestamp).timestamp()
    except ValueError:
        return None


def _since(timestamp: Any, now: float) -> str:
    """Age of an RFC 3339 timestamp; `<unknown>` when absent or unreadable."""
    when = _epoch(timestamp) if isinstance(timestamp, str) and timestamp else None
    return "<unknown>" if when is None else human_age(now - when)


def _age(obj: dict, now: float) -> str:
    return _since(_meta(obj).get("creationTimestamp"), now)


def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def _name(obj: dict) -> str:
    return _meta(obj).get("name", "")


def _d(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list:
    return value if isinstance(value, list) else []


# --------------------------------------------------------------------------- pods

_POD_COLUMNS = [
    _NAME,
    _col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
    _col("Status", "string", "The aggregate status of the containers in this pod."),
    _col("Restarts", "string", "The number of times the containers in this pod have been restarted and when the "
         "last container in this pod has restarted."),
    _AGE,
    _col("IP", "string", "IP address allocated to the pod. Routable at least within the cluster. Empty if not "
         "yet allocated.", priority=1),
    _col("Node", "string", "NodeName is a request to schedule this pod onto a specific node.", priority=1),
    _col("Nominated Node", "string", "nominatedNodeName is set only when this pod preempts other pods on the "
         "node, but it cannot be scheduled right away as preemption victims receive their graceful termination "
         "periods.", priority=1),
    _col("Readiness Gates", "string", "If specified, all readiness gates will be evaluated for pod readiness.",
         priority=1),
]


class _PodState:
    """What the pod STATUS/READY/RESTARTS cells are computed from (kubectl printPod)."""

    __slots__ = ("reason", "ready", "total", "restarts", "last_restart", "initializing")

    def __init__(self, pod: dict):
        spec, status = _d(pod.get("spec")), _d(pod.get("status"))
        self.reason = status.get("reason") or status.get("phase") or ""
        if any(_d(c).get("type") == "PodScheduled" and _d(c).get("reason") == "SchedulingGated"
               for c in _l(status.get("conditions"))):
            self.reason = "SchedulingGated"
        self.ready = 0
        self.total = len(_l(spec.get("containers")))
        self.restarts = 0
        self.last_restart: str | None = None
        self.initializing = False


def _sidecars(spec: dict) -> set[str]:
    return {c.get("name") for c in map(_d, _l(spec.get("initContainers"))) if c.get("restartPolicy") == "Always"}


def _finished_at(cs: dict) -> str | None:
    return _d(_d(cs.get("lastState")).get("terminated")).get("finishedAt")


def _later(a: str | None, b: str | None) -> str | None:
    if not a or not b:
        return a or b
    return a if (_epoch(a) or 0) >= (_epoch(b) or 0) else b


def _pod_init(state: _PodState, spec: dict, status: dict) -> tuple[int, str | None]:
    """Walk init containers; returns the restarts and last restart of sidecars only."""
    sidecars = _sidecars(spec)
    state.total += len(sidecars)
    n_init = len(_l(spec.get("initContainers")))
    side_restarts, side_last = 0, None
    for i, cs in enumerate(map(_d, _l(status.get("initContainerStatuses")))):
        state.restarts += int(cs.get("restartCount") or 0)
        state.last_restart = _later(state.last_restart, _finished_at(cs))
        sidecar = cs.get("name") in sidecars
        if sidecar:
            side_restarts += int(cs.get("restartCount") or 0)
            side_last = _later(side_last, _finished_at(cs))
        st = _d(cs.get("state"))
        term, wait = st.get("terminated"), st.get("waiting")
        if term is not None and _d(term).get("exitCode", 0) == 0:
            continue
        if sidecar and cs.get("started"):
            state.ready += 1 if cs.get("ready") else 0
            continue
        state.initializing = True
        if term is not None:
            state.reason = "Init:" + _terminated_reason(_d(term))
        elif wait is not None and _d(wait).get("reason") and _d(wait).get("reason") != "PodInitializing":
            state.reason = "Init:" + _d(wait)["reason"]
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
    for cs in reversed([_d(c) for c in _l(status.get("containerStatuses"))]):
        state.restarts += int(cs.get("restartCount") or 0)
        state.last_restart = _later(state.last_restart, _finished_at(cs))
        st = _d(cs.get("state"))
        wait, term = st.get("waiting"), st.get("terminated")
        if wait is not None and _d(wait).get("reason"):
            state.reason = _d(wait)["reason"]
        elif term is not None:
            state.reason = _terminated_reason(_d(term))
        elif cs.get("ready") and st.get("running") is not None:
            has_running = True
            state.ready += 1
    if state.reason == "Completed" and has_running:
        ready = any(_d(c).get("type") == "Ready" and _d(c).get("status") == "True"
                    for c in _l(status.get("conditions")))
        state.reason = "Running" if ready else "NotReady"


def _pod_initialized(status: dict) -> bool:
    return any(_d(c).get("type") == "Initialized" and _d(c).get("status") == "True"
               for c in _l(status.get("conditions")))


def _pod_state(pod: dict) -> _PodState:
    spec, status = _d(pod.get("spec")), _d(pod.get("status"))
    state = _PodState(pod)
    side_restarts, side_last = _pod_init(state, spec, status)
    if not state.initializing or _pod_initialized(status):
        state.restarts, state.last_restart = side_restarts, side_last
        _pod_containers(state, status)
    if _meta(pod).get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            state.reason = "Unknown"
        elif status.get("phase") not in ("Succeeded", "Failed"):
            state.reason = "Terminating"
    return state


def _pod_row(pod: dict, now: float) -> Cells:
    spec, status = _d(pod.get("spec")), _d(pod.get("status"))
    state = _pod_state(pod)
    restarts = str(state.restarts)
    if state.restarts and state.last_restart:
        restarts = f"{state.restarts} ({_since(state.last_restart, now)} ago)"
    ips = _l(status.get("podIPs"))
    ip = (_d(ips[0]).get("ip") if ips else None) or status.get("podIP") or "<none>"
    return [_name(pod), f"{state.ready}/{state.total}", state.reason, restarts, _age(pod, now),
            ip, spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>",
            _readiness_gates(spec, status)]


def _readiness_gates(spec: dict, status: dict) -> str:
    gates = _l(spec.get("readinessGates"))
    if not gates:
        return "<none>"
    conditions = {_d(c).get("type"): _d(c).get("status") for c in _l(status.get("conditions"))}
    true = sum(1 for g in gates if conditions.get(_d(g).get("conditionType")) == "True")
    return f"{true}/{len(gates)}"


def _pod_conditions(pod: dict) -> list[dict] | None:
    phase = _d(pod.get("status")).get("phase")
    if phase == "Succeeded":
        return [{"type": "Completed", "status": "True", "reason": "Succeeded",
                 "message": "The pod has completed successfully."}]
    if phase == "Failed":
        return [{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]
    return None


# --------------------------------------------------------------------------- workloads

_WORKLOAD_WIDE = [
    _col("Containers", "string", "Names of each container in the template.", priority=1),
    _col("Images", "string", "Images referenced by each container in the template.", priority=1),
    _col("Selector", "string", "Label selector for pods. Existing ReplicaSets whose pods are selected by this "
         "will be the ones affected by this deployment.", priority=1),
]

_DEPLOYMENT_COLUMNS = [
    _NAME,
    _col("Ready", "string", "Number of the pod with ready state"),
    # declared as strings by the real server's printer, though the cells are numbers
    _col("Up-to-date", "string", "Total number of non-terminated pods targeted by this deployment that have the "
         "desired template spec."),
    _col("Available", "string", "Total number of available pods (ready for at least minReadySeconds) targeted "
         "by this deployment."),
    _AGE,
    *_WORKLOAD_WIDE,
]

_REPLICASET_COLUMNS = [
    _NAME,
    _col("Desired", "integer", "Replicas is the number of desired replicas."),
    _col("Current", "integer", "Replicas is the most recently observed number of replicas."),
    _col("Ready", "integer", "The number of ready replicas for this replica set."),
    _AGE,
    *_WORKLOAD_WIDE,
]


def _workload_wide(obj: dict) -> Cells:
    spec = _d(obj.get("spec"))
    containers = [_d(c) for c in _l(_d(_d(spec.get("template")).get("spec")).get("containers"))]
    try:
        selector = selector_to_string(spec.get("selector"))
    except ApiError:  # a stored object with a broken selector still prints
        selector = "<invalid>"
    return [",".join(c.get("name", "") for c in containers),
            ",".join(c.get("image", "") for c in containers), selector]


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _deployment_row(obj: dict, now: float) -> Cells:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    desired = _int(spec.get("replicas"), 1)
    return [_name(obj), f"{_int(status.get('readyReplicas'))}/{desired}", _int(status.get("updatedReplicas")),
            _int(status.get("availableReplicas")), _age(obj, now), *_workload_wide(obj)]


def _replicaset_row(obj: dict, now: float) -> Cells:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    return [_name(obj), _int(spec.get("replicas"), 1), _int(status.get("replicas")),
            _int(status.get("readyReplicas")), _age(obj, now), *_workload_wide(obj)]


_DAEMONSET_COLUMNS = [
    _NAME,
    _col("Desired", "integer", "The desired number of daemon pods."),
    _col("Current", "integer", "The current number of daemon pods."),
    _col("Ready", "integer", "The number of daemon pods that are ready."),
    _col("Up-to-date", "integer", "The number of daemon pods that run the current template."),
    _col("Available", "integer", "The number of daemon pods available for at least minReadySeconds."),
    _col("Node Selector", "string", "The node selector of the daemon pods."),
    _AGE,
    *_WORKLOAD_WIDE,
]


def _daemonset_row(obj: dict, now: float) -> Cells:
    status = _d(obj.get("status"))
    selector = _d(_d(_d(_d(obj.get("spec")).get("template")).get("spec")).get("nodeSelector"))
    shown = ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>"
    counts = [_int(status.get(f)) for f in ("desiredNumberScheduled", "currentNumberScheduled", "numberReady",
                                            "updatedNumberScheduled", "numberAvailable")]
    return [_name(obj), *counts, shown, _age(obj, now), *_workload_wide(obj)]


_JOB_COLUMNS = [
    _NAME,
    _col("Status", "string", "Status of the job."),
    _col("Completions", "string", "The completion status of the job."),
    _col("Duration", "string", "Time required to complete the job."),
    _AGE,
    *_WORKLOAD_WIDE,
]


def _job_status(status: dict) -> str:
    for ctype in ("Failed", "Complete", "Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if any(_d(c).get("type") == ctype and _d(c).get("status") == "True" for c in _l(status.get("conditions"))):
            return ctype
    return "Running"


def _job_row(obj: dict, now: float) -> Cells:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    completions = spec.get("completions")
    succeeded = _int(status.get("succeeded"))
    shown = f"{succeeded}/{completions}" if isinstance(completions, int) else f"{succeeded}/1 of {_int(spec.get('parallelism'), 1)}"
    start, end = _epoch(status.get("startTime") or ""), _epoch(status.get("completionTime") or "")
    duration = "" if start is None else human_age((end if end is not None else now) - start)
    return [_name(obj), _job_status(status), shown, duration, _age(obj, now), *_workload_wide(obj)]


_CRONJOB_COLUMNS = [
    _NAME,
    _col("Schedule", "string", "The schedule in Cron format."),
    _col("Timezone", "string", "The time zone name for the given schedule."),
    _col("Suspend", "boolean", "Whether subsequent executions are suspended."),
    _col("Active", "integer", "The number of currently running jobs."),
    _col("Last Schedule", "string", "The last time the job was successfully scheduled."),
    _AGE,
    _col("Containers", "string", "Names of each container in the template.", priority=1),
    _col("Images", "string", "Images referenced by each container in the template.", priority=1),
    _col("Selector", "string", "The label selector of the job template.", priority=1),
]


def _cronjob_row(obj: dict, now: float) -> Cells:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    job_spec = _d(_d(spec.get("jobTemplate")).get("spec"))
    containers = [_d(c) for c in _l(_d(_d(job_spec.get("template")).get("spec")).get("containers"))]
    last = status.get("lastScheduleTime")
    return [_name(obj), spec.get("schedule", ""), spec.get("timeZone") or "<none>", bool(spec.get("suspend")),
            len(_l(status.get("active"))), _since(last, now) if last else "<none>", _age(obj, now),
            ",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers),
            "<none>"]


# --------------------------------------------------------------------------- services, nodes, namespaces

_SERVICE_COLUMNS = [
    _NAME,
    _col("Type", "string", "type determines how the Service is exposed."),
    _col("Cluster-IP", "string", "clusterIP is the IP address of the service."),
    _col("External-IP", "string", "externalIPs is a list of IP addresses for which nodes in the cluster will also "
         "accept traffic for this service."),
    _col("Port(s)", "string", "The list of ports that are exposed by this service."),
    _AGE,
    _col("Selector", "string", "Route service traffic to pods with label keys and values matching this "
         "selector.", priority=1),
]


def _service_row(obj: dict, now: float) -> Cells:
    spec = _d(obj.get("spec"))
    ips = _l(spec.get("clusterIPs"))
    cluster_ip = (ips[0] if ips else None) or spec.get("clusterIP") or "<none>"
    ports = ",".join(_port_text(_d(p)) for p in _l(spec.get("ports"))) or "<none>"
    selector = _d(spec.get("selector"))
    sel_text = ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>"
    return [_name(obj), spec.get("type", "ClusterIP"), cluster_ip, _external_ip(obj), ports, _age(obj, now),
            sel_text]


def _port_text(port: dict) -> str:
    protocol = port.get("protocol", "TCP")
    if port.get("nodePort"):
        return f"{port.get('port')}:{port['nodePort']}/{protocol}"
    return f"{port.get('port')}/{protocol}"


def _external_ip(obj: dict) -> str:
    spec = _d(obj.get("spec"))
    kind = spec.get("type", "ClusterIP")
    external = [str(ip) for ip in _l(spec.get("externalIPs"))]
    if kind == "ExternalName":
        return spec.get("externalName", "")
    if kind == "LoadBalancer":
        ingress = _l(_d(_d(obj.get("status")).get("loadBalancer")).get("ingress"))
        found = [i.get("ip") or i.get("hostname") for i in map(_d, ingress) if i.get("ip") or i.get("hostname")]
        found += external
        return ",".join(found) if found else "<pending>"
    return ",".join(external) if external else "<none>"


_NODE_COLUMNS = [
    _NAME,
    _col("Status", "string", "The status of the node"),
    _col("Roles", "string", "The roles of the node"),
    _AGE,
    _col("Version", "string", "Kubelet Version reported by the node."),
    _col("Internal-IP", "string", "List of addresses reachable to the node.", priority=1),
    _col("External-IP", "string", "List of addresses reachable to the node.", priority=1),
    _col("OS-Image", "string", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 "
         "(wheezy)).", priority=1),
    _col("Kernel-Version", "string", "Kernel Version reported by the node from 'uname -r' (e.g. "
         "3.16.0-0.bpo.4-amd64).", priority=1),
    _col("Container-Runtime", "string", "Container runtime version reported by the node through runtime remote "
         "API (e.g. containerd://1.4.2).", priority=1),
]


def _node_row(obj: dict, now: float) -> Cells:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    ready = [c for c in map(_d, _l(status.get("conditions"))) if c.get("type") == "Ready"]
    words = ["Ready" if ready[0].get("status") == "True" else "NotReady"] if ready else ["Unknown"]
    if spec.get("unschedulable"):
        words.append("SchedulingDisabled")
    info = _d(status.get("nodeInfo"))
    addresses = [_d(a) for a in _l(status.get("addresses"))]
    return [_name(obj), ",".join(words), ",".join(_node_roles(obj)) or "<none>", _age(obj, now),
            info.get("kubeletVersion", ""), _address(addresses, "InternalIP"), _address(addresses, "ExternalIP"),
            info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>"]


def _node_roles(obj: dict) -> list[str]:
    roles = set()
    for key, value in _d(_meta(obj).get("labels")).items():
        if key.startswith("node-role.kubernetes.io/") and key[len("node-role.kubernetes.io/"):]:
            roles.add(key[len("node-role.kubernetes.io/"):])
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    return sorted(roles)


def _address(addresses: list[dict], kind: str) -> str:
    for a in addresses:
        if a.get("type") == kind and a.get("address"):
            return a["address"]
    return "<none>"


_NAMESPACE_COLUMNS = [_NAME, _col("Status", "string", "The status of the namespace"), _AGE]


def _namespace_row(obj: dict, now: float) -> Cells:
    return [_name(obj), _d(obj.get("status")).get("phase", ""), _age(obj, now)]


# --------------------------------------------------------------------------- events

_EVENT_COLUMNS = [
    _col("Last Seen", "string", "Time of the most recent occurrence of this event."),
    _col("Type", "string", "Type of this event (Normal, Warning), new types could be added in the future."),
    _col("Reason", "string", "This should be a short, machine understandable string that gives the reason for "
         "the transition into the object's current status."),
    _col("Object", "string", "The object that this event is about."),
    _col("Subobject", "string", "The subobject that this event is about.", priority=1),
    _col("Source", "string", "The component reporting this event.", priority=1),
    _col("Message", "string", "A human-readable description of the status of this operation."),
    _col("First Seen", "string", "The time at which the event was first recorded.", priority=1),
    _col("Count", "string", "The number of times this event has occurred.", priority=1),
    _col("Name", "string", _NAME_DESC, priority=1, fmt="name"),
]


def _event_row(obj: dict, now: float) -> Cells:
    series = obj.get("series")
    first = _since(obj.get("firstTimestamp") or obj.get("eventTime"), now)
    last = _since(obj["lastTimestamp"], now) if obj.get("lastTimestamp") else first
    count = _int(obj.get("count"))
    if isinstance(series, dict):
        last = _since(series.get("lastObservedTime"), now)
        count = _int(series.get("count"))
    elif count == 0:
        count = 1
    involved = _d(obj.get("involvedObject"))
    kind = str(involved.get("kind", "")).lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = _d(obj.get("source"))
    component = source.get("component") or obj.get("reportingComponent") or ""
    instance = source.get("host") or obj.get("reportingInstance") or ""
    return [last, obj.get("type", ""), obj.get("reason", ""), target, involved.get("fieldPath", ""),
            f"{component}, {instance}" if instance else component, str(obj.get("message", "")).strip(),
            first, count, _name(obj)]


def _core_event(obj: dict) -> dict:
    from devcluster.storage.views import (
        event_v1_to_core,  # views imports the store side; keep tables pure
    )

    return event_v1_to_core(obj)


# --------------------------------------------------------------------------- config, leases, CRDs

_CONFIGMAP_COLUMNS = [_NAME, _col("Data", "string", "Number of data entries"), _AGE]
_SECRET_COLUMNS = [_NAME, _col("Type", "string", "The type of the secret"),
                   _col("Data", "string", "Number of data entries"), _AGE]
_LEASE_COLUMNS = [_NAME, _col("Holder", "string", "The holder of the lease"), _AGE]
_CRD_COLUMNS = [_NAME, _col("Created At", "date", _AGE_DESC)]
_DEFAULT_COLUMNS = [_NAME, _AGE]
_ROLE_COLUMNS = [_NAME, _col("Created At", "date", _AGE_DESC)]
_BINDING_COLUMNS = [_NAME, _col("Role", "string", "RoleRef of the binding"), _AGE,
                    _col("Users", "string", "User subjects", priority=1),
                    _col("Groups", "string", "Group subjects", priority=1),
                    _col("ServiceAccounts", "string", "ServiceAccount subjects", priority=1)]


def _binding_row(obj: dict, now: float) -> Cells:
    role, users, groups, sas = rbac.binding_cells(obj)
    return [_name(obj), role, _age(obj, now), users, groups, sas]


def _data_count(obj: dict) -> int:
    return len(_d(obj.get("data"))) + len(_d(obj.get("binaryData")))


# --------------------------------------------------------------------------- stored-only kinds

_SERVICE_ACCOUNT_COLUMNS = [_NAME, _col("Secrets", "string", "Secrets is a list of the secrets in the same "
                                        "namespace that pods running using this ServiceAccount are allowed to use."),
                            _AGE]
_HPA_COLUMNS = [
    _NAME,
    _col("Reference", "string", "scaleTargetRef points to the target resource to scale."),
    _col("Targets", "string", "metrics contains the specifications for which to use to calculate the desired "
         "replica count."),
    _col("MinPods", "string", "minReplicas is the lower limit for the number of replicas."),
    _col("MaxPods", "string", "maxReplicas is the upper limit for the number of replicas."),
    _col("Replicas", "string", "currentReplicas is current number of replicas of pods managed by this autoscaler."),
    _AGE,
]


def _hpa_row(obj: dict, now: float) -> Cells:
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    ref = _d(spec.get("scaleTargetRef"))
    minimum = spec.get("minReplicas")
    return [_name(obj), f"{ref.get('kind', '')}/{ref.get('name', '')}", _hpa_targets(obj),
            "<unset>" if minimum is None else str(minimum), _int(spec.get("maxReplicas"), 0),
            _int(status.get("currentReplicas"), 0), _age(obj, now)]


def _hpa_targets(obj: dict) -> str:
    """`cpu: <unknown>/60%` per Resource metric (as an autoscaling/v2 object holds them), the first two."""
    spec, status = _d(obj.get("spec")), _d(obj.get("status"))
    current = {_d(m.get("resource")).get("name"): _d(_d(m.get("resource")).get("current"))
               for m in _l(status.get("currentMetrics")) if isinstance(m, dict) and m.get("type") == "Resource"}
    shown = []
    if spec.get("targetCPUUtilizationPercentage") is not None:  # the autoscaling/v1 view
        seen = status.get("currentCPUUtilizationPercentage")
        shown.append(f"cpu: {'<unknown>' if seen is None else f'{seen}%'}/{spec['targetCPUUtilizationPercentage']}%")
    for metric in _l(spec.get("metrics")):
        res = _d(_d(metric).get("resource"))
        target, now_at = _d(res.get("target")), current.get(res.get("name"), {})
        if _d(metric).get("type") != "Resource":
            shown.append("<unknown>/<unknown>")
        elif target.get("averageUtilization") is not None:
            seen = now_at.get("averageUtilization")
            shown.append(f"{res.get('name')}: {'<unknown>' if seen is None else f'{seen}%'}/{target['averageUtilization']}%")
        else:
            goal = target.get("averageValue") or target.get("value") or "<unknown>"
            shown.append(f"{res.get('name')}: {now_at.get('averageValue') or '<unknown>'}/{goal}")
    if not shown:
        return "<none>"
    more = f" + {len(shown) - 2} more..." if len(shown) > 2 else ""
    return ", ".join(shown[:2]) + more


_PDB_COLUMNS = [_NAME, _col("Min Available", "string", "The minimum number of pods that must be available."),
                _col("Max Unavailable", "string", "The maximum number of pods that may be unavailable."),
                _col("Allowed Disruptions", "integer", "Number of pod disruptions that are currently allowed."),
                _AGE]


def _pdb_row(obj: dict, now: float) -> Cells:
    spec = _d(obj.get("spec"))
    return [_name(obj), str(spec.get("minAvailable", "N/A")), str(spec.get("maxUnavailable", "N/A")),
            _int(_d(obj.get("status")).get("disruptionsAllowed"), 0), _age(obj, now)]


_PRIORITY_CLASS_COLUMNS = [_NAME, _col("Value", "integer", "The value of this priority class."),
                           _col("Global-Default", "boolean", "Whether this is the default priority class."),
                           _AGE, _col("PreemptionPolicy", "string", "The policy for preempting pods.")]


def _priority_class_row(obj: dict, now: float) -> Cells:
    return [_name(obj), _int(obj.get("value"), 0), bool(obj.get("globalDefault")), _age(obj, now),
            obj.get("preemptionPolicy") or "<unset>"]


_QUOTA_COLUMNS = [_NAME, _col("Request", "string", "Request represents a minimum amount of cpu/memory."),
                  _col("Limit", "string", "Limits control the maximum amount of cpu/memory."), _AGE]


def _quota_row(obj: dict, now: float) -> Cells:
    hard, used = _d(_d(obj.get("spec")).get("hard")), _d(_d(obj.get("status")).get("used"))
    requests, limits = [], []
    for name in sorted(hard):
        entry = f"{name}: {used.get(name, '0')}/{hard[name]}"
        (limits if name.startswith("limits.") else requests).append(entry)
    return [_name(obj), ", ".join(requests), ", ".join(limits), _age(obj, now)]


_INGRESS_COLUMNS = [_NAME, _col("Class", "string", "The name of the IngressClass resource."),
                    _col("Hosts", "string", "Hosts that incoming requests are matched against."),
                    _col("Address", "string", "Address is a list containing ingress points for the load-balancer."),
                    _col("Ports", "string", "Ports of TLS configurations that open."), _AGE]


def _ingress_row(obj: dict, now: float) -> Cells:
    spec = _d(obj.get("spec"))
    hosts = [r.get("host") for r in _l(spec.get("rules")) if isinstance(r, dict) and r.get("host")]
    points = _l(_d(_d(_d(obj.get("status")).get("loadBalancer"))).get("ingress"))
    address = ",".join(p.get("ip") or p.get("hostname") or "" for p in points if isinstance(p, dict))
    return [_name(obj), spec.get("ingressClassName") or "<none>", ",".join(hosts) or "*", address,
            "80, 443" if spec.get("tls") else "80", _age(obj, now)]


_PRINTERS: dict[tuple[str, str], tuple[list[dict], RowFn]] = {
    ("", "pods"): (_POD_COLUMNS, _pod_row),
    ("apps", "deployments"): (_DEPLOYMENT_COLUMNS, _deployment_row),
    ("apps", "replicasets"): (_REPLICASET_COLUMNS, _replicaset_row),
    ("", "services"): (_SERVICE_COLUMNS, _service_row),
    ("", "nodes"): (_NODE_COLUMNS, _node_row),
    ("", "namespaces"): (_NAMESPACE_COLUMNS, _namespace_row),
    ("", "events"): (_EVENT_COLUMNS, _event_row),
    ("events.k8s.io", "events"): (_EVENT_COLUMNS, lambda o, now: _event_row(_core_event(o), now)),
    ("apps", "daemonsets"): (_DAEMONSET_COLUMNS, _daemonset_row),
    ("batch", "jobs"): (_JOB_COLUMNS, _job_row),
    ("batch", "cronjobs"): (_CRONJOB_COLUMNS, _cronjob_row),
    ("", "configmaps"): (_CONFIGMAP_COLUMNS, lambda o, now: [_name(o), _data_count(o), _age(o, now)]),
    ("", "secrets"): (_SECRET_COLUMNS,
                      lambda o, now: [_name(o), o.get("type", ""), _data_count(o), _age(o, now)]),
    ("", "serviceaccounts"): (_SERVICE_ACCOUNT_COLUMNS,
                              lambda o, now: [_name(o), len(_l(o.get("secrets"))), _age(o, now)]),
    ("autoscaling", "horizontalpodautoscalers"): (_HPA_COLUMNS, _hpa_row),
    ("policy", "poddisruptionbudgets"): (_PDB_COLUMNS, _pdb_row),
    ("scheduling.k8s.io", "priorityclasses"): (_PRIORITY_CLASS_COLUMNS, _priority_class_row),
    ("", "resourcequotas"): (_QUOTA_COLUMNS, _quota_row),
    ("networking.k8s.io", "ingresses"): (_INGRESS_COLUMNS, _ingress_row),
    ("coordination.k8s.io", "leases"): (
        _LEASE_COLUMNS, lambda o, now: [_name(o), _d(o.get("spec")).get("holderIdentity", ""), _age(o, now)]),
    ("apiextensions.k8s.io", "customresourcedefinitions"): (
        _CRD_COLUMNS, lambda o, now: [_name(o), _meta(o).get("creationTimestamp", "")]),
    **{(rbac.GROUP, plural): (_ROLE_COLUMNS, lambda o, now: [_name(o), _meta(o).get("creationTimestamp", "")])
       for plural in ("roles", "clusterroles")},
    **{(rbac.GROUP, plural): (_BINDING_COLUMNS, _binding_row) for plural in ("rolebindings", "clusterrolebindings")},
}


# --------------------------------------------------------------------------- CR printer columns


@lru_cache(maxsize=512)
def _compile_path(path: str) -> tuple[tuple[str, Any], ...]:
    """A simple JSONPath as steps: ("key", k), ("index", i), ("slice", (a, b)) or
    ("filter", (keys, value))."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    steps: list[tuple[str, Any]] = []
    for match in _STEP.finditer(text):
        key, quoted, index, s_from, s_to, f_path, f_value = match.groups()
        if key is not None or quoted is not None:
            steps.append(("key", key if key is not None else quoted))
        elif index is not None:
            steps.append(("index", int(index)))
        elif s_from is not None:
            steps.append(("slice", (int(s_from) if s_from else None, int(s_to) if s_to else None)))
        else:
            steps.append(("filter", (tuple(f_path.split(".")), _literal(f_value))))
    return tuple(steps)


_STEP = re.compile(
    r"\.([^.\[\]]+)"
    r"|\[['\"]([^'\"]+)['\"]\]"
    r"|\[(-?\d+)\]"
    r"|\[(-?\d*):(-?\d*)\]"
    r"|\[\?\(@\.([\w.\-/]+)\s*==\s*([^)]*?)\s*\)\]"
)


def _literal(text: str) -> Any:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    try:
        return json.loads(text)
    except ValueError:
        return text


def _evaluate(obj: Any, steps: tuple[tuple[str, Any], ...]) -> Any:
    """The first value the path reaches, or None."""
    found = [obj]
    for kind, arg in steps:
        nxt: list[Any] = []
        for node in found:
            if kind == "key" and isinstance(node, dict) and arg in node:
                nxt.append(node[arg])
            elif kind == "index" and isinstance(node, list) and -len(node) <= arg < len(node):
                nxt.append(node[arg])
            elif kind == "slice" and isinstance(node, list):
                nxt.extend(node[arg[0]:arg[1]])
            elif kind == "filter" and isinstance(node, list):
                nxt.extend(item for item in node if _filter_hit(item, arg))
        found = nxt
        if not found:
            return None
    return found[0]


def _filter_hit(item: Any, arg: tuple[tuple[str, ...], Any]) -> bool:
    keys, value = arg
    for key in keys:
        if not isinstance(item, dict) or key not in item:
            return False
        item = item[key]
    return item == value


def _cr_columns(rt: Any) -> list[dict]:
    cols = [_NAME]
    for pc in rt.printer_columns:
        cols.append(_col(pc.get("name", ""), pc.get("type", "string"), pc.get("description", ""),
                         priority=int(pc.get("priority", 0)), fmt=pc.get("format", "")))
    if not any(pc.get("type") == "date" for pc in rt.printer_columns):
        cols.append(_AGE)
    return cols


def _cr_row_fn(rt: Any) -> RowFn:
    specs = [(_compile_path(pc.get("jsonPath", "")), pc.get("type", "string")) for pc in rt.printer_columns]
    add_age = not any(t == "date" for _, t in specs)

    def row(obj: dict, now: float) -> Cells:
        cells: Cells = [_name(obj)]
        cells.extend(_cell(_evaluate(obj, steps), kind, now) for steps, kind in specs)
        if add_age:
            cells.append(_age(obj, now))
        return cells

    return row


def _cell(value: Any, kind: str, now: float) -> Any:
    if value is None:
        return None
    if kind == "date":
        return _since(value, now) if isinstance(value, str) and _epoch(value) is not None else value
    if kind == "integer":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if kind == "number":
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


# --------------------------------------------------------------------------- the table


def _printer(rt: Any) -> tuple[list[dict], RowFn]:
    if rt.crd:
        return _cr_columns(rt), _cr_row_fn(rt)
    # events.k8s.io Events print with the core Event columns: both are views of one storage.
    found = _PRINTERS.get((rt.group, rt.resource))
    return found or (_DEFAULT_COLUMNS, lambda o, now: [_name(o), _age(o, now)])


def column_definitions(rt: Any) -> list[dict]:
    """The Table columns for resource type `rt`, wide ones marked with priority 1."""
    return _printer(rt)[0]


def row_object(obj: dict, include_object: str | None) -> dict | None:
    """What a row carries per `includeObject`: Metadata (default), the whole Object, or None."""
    if include_object == "None":
        return None
    if include_object == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": _meta(obj)}


def to_table(rt: Any, objs: list[dict], *, resource_version: str, now: float,
             include_object: str | None = None) -> dict:
    """A `meta.k8s.io/v1` Table of `objs`, each row with all cells and, per `include_object`, the
    object's metadata (default), the whole object (`kubectl get --sort-by` needs it) or nothing."""
    columns, row_fn = _printer(rt)
    rows = []
    for obj in objs:
        row: dict[str, Any] = {"cells": row_fn(obj, now)}
        shown = row_object(obj, include_object)
        if shown is not None:
            row["object"] = shown
        if rt.group == "" and rt.resource == "pods":
            conditions = _pod_conditions(obj)
            if conditions:
                row["conditions"] = conditions
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": columns, "rows": rows}
