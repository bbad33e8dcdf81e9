"""The printers of the built-in kinds other than Pods: their columns and rows, and the table of
printers by (group, resource). Pure."""

from __future__ import annotations

from typing import Any

from devcluster.machinery.errors import ApiError
from devcluster.machinery.selectors import selector_to_string
from devcluster.storage.views import event_v1_to_core
from devcluster.strategy import rbac
from devcluster.tables.columns import (
    AGE,
    AGE_DESC,
    NAME,
    NAME_DESC,
    Cells,
    RowFn,
    age_of,
    as_dict,
    as_list,
    column,
    epoch,
    human_age,
    meta_of,
    name_of,
    since,
)
from devcluster.tables.pods import POD_COLUMNS, pod_row

# --------------------------------------------------------------------------- workloads

_WORKLOAD_WIDE = [
    column("Containers", "string", "Names of each container in the template.", priority=1),
    column("Images", "string", "Images referenced by each container in the template.", priority=1),
    column("Selector", "string", "Label selector for pods. Existing ReplicaSets whose pods are selected by this "
         "will be the ones affected by this deployment.", priority=1),
]

_DEPLOYMENT_COLUMNS = [
    NAME,
    column("Ready", "string", "Number of the pod with ready state"),
    # declared as strings by the real server's printer, though the cells are numbers
    column("Up-to-date", "string", "Total number of non-terminated pods targeted by this deployment that have the "
         "desired template spec."),
    column("Available", "string", "Total number of available pods (ready for at least minReadySeconds) targeted "
         "by this deployment."),
    AGE,
    *_WORKLOAD_WIDE,
]

_REPLICASET_COLUMNS = [
    NAME,
    column("Desired", "integer", "Replicas is the number of desired replicas."),
    column("Current", "integer", "Replicas is the most recently observed number of replicas."),
    column("Ready", "integer", "The number of ready replicas for this replica set."),
    AGE,
    *_WORKLOAD_WIDE,
]


def _containers_and_images(spec: dict) -> Cells:
    """The names and the images of the containers in `spec`'s pod template: two cells."""
    containers = [as_dict(c) for c in as_list(as_dict(as_dict(spec.get("template")).get("spec")).get("containers"))]
    return [",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers)]


def _workload_wide(obj: dict) -> Cells:
    spec = as_dict(obj.get("spec"))
    try:
        selector = selector_to_string(spec.get("selector"))
    except ApiError:  # a stored object with a broken selector still prints
        selector = "<invalid>"
    return [*_containers_and_images(spec), selector]


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _deployment_row(obj: dict, now: float) -> Cells:
    spec, status = as_dict(obj.get("spec")), as_dict(obj.get("status"))
    desired = _int(spec.get("replicas"), 1)
    return [name_of(obj), f"{_int(status.get('readyReplicas'))}/{desired}", _int(status.get("updatedReplicas")),
            _int(status.get("availableReplicas")), age_of(obj, now), *_workload_wide(obj)]


def _replicaset_row(obj: dict, now: float) -> Cells:
    spec, status = as_dict(obj.get("spec")), as_dict(obj.get("status"))
    return [name_of(obj), _int(spec.get("replicas"), 1), _int(status.get("replicas")),
            _int(status.get("readyReplicas")), age_of(obj, now), *_workload_wide(obj)]


_DAEMONSET_COLUMNS = [
    NAME,
    column("Desired", "integer", "The desired number of daemon pods."),
    column("Current", "integer", "The current number of daemon pods."),
    column("Ready", "integer", "The number of daemon pods that are ready."),
    column("Up-to-date", "integer", "The number of daemon pods that run the current template."),
    column("Available", "integer", "The number of daemon pods available for at least minReadySeconds."),
    column("Node Selector", "string", "The node selector of the daemon pods."),
    AGE,
    *_WORKLOAD_WIDE,
]


def _daemonset_row(obj: dict, now: float) -> Cells:
    status = as_dict(obj.get("status"))
    selector = as_dict(as_dict(as_dict(as_dict(obj.get("spec")).get("template")).get("spec")).get("nodeSelector"))
    shown = ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>"
    counts = [_int(status.get(f)) for f in ("desiredNumberScheduled", "currentNumberScheduled", "numberReady",
                                            "updatedNumberScheduled", "numberAvailable")]
    return [name_of(obj), *counts, shown, age_of(obj, now), *_workload_wide(obj)]


_JOB_COLUMNS = [
    NAME,
    column("Status", "string", "Status of the job."),
    column("Completions", "string", "The completion status of the job."),
    column("Duration", "string", "Time required to complete the job."),
    AGE,
    *_WORKLOAD_WIDE,
]


def _job_status(status: dict) -> str:
    for ctype in ("Failed", "Complete", "Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if any(as_dict(c).get("type") == ctype and as_dict(c).get("status") == "True" for c in as_list(status.get("conditions"))):
            return ctype
    return "Running"


def _job_row(obj: dict, now: float) -> Cells:
    spec, status = as_dict(obj.get("spec")), as_dict(obj.get("status"))
    completions = spec.get("completions")
    succeeded = _int(status.get("succeeded"))
    shown = f"{succeeded}/{completions}" if isinstance(completions, int) else f"{succeeded}/1 of {_int(spec.get('parallelism'), 1)}"
    start, end = epoch(status.get("startTime") or ""), epoch(status.get("completionTime") or "")
    duration = "" if start is None else human_age((end if end is not None else now) - start)
    return [name_of(obj), _job_status(status), shown, duration, age_of(obj, now), *_workload_wide(obj)]


_CRONJOB_COLUMNS = [
    NAME,
    column("Schedule", "string", "The schedule in Cron format."),
    column("Timezone", "string", "The time zone name for the given schedule."),
    column("Suspend", "boolean", "Whether subsequent executions are suspended."),
    column("Active", "integer", "The number of currently running jobs."),
    column("Last Schedule", "string", "The last time the job was successfully scheduled."),
    AGE,
    column("Containers", "string", "Names of each container in the template.", priority=1),
    column("Images", "string", "Images referenced by each container in the template.", priority=1),
    column("Selector", "string", "The label selector of the job template.", priority=1),
]


def _cronjob_row(obj: dict, now: float) -> Cells:
    spec, status = as_dict(obj.get("spec")), as_dict(obj.get("status"))
    job_spec = as_dict(as_dict(spec.get("jobTemplate")).get("spec"))
    last = status.get("lastScheduleTime")
    return [name_of(obj), spec.get("schedule", ""), spec.get("timeZone") or "<none>", bool(spec.get("suspend")),
            len(as_list(status.get("active"))), since(last, now) if last else "<none>", age_of(obj, now),
            *_containers_and_images(job_spec), "<none>"]


# --------------------------------------------------------------------------- services, nodes, namespaces

_SERVICE_COLUMNS = [
    NAME,
    column("Type", "string", "type determines how the Service is exposed."),
    column("Cluster-IP", "string", "clusterIP is the IP address of the service."),
    column("External-IP", "string", "externalIPs is a list of IP addresses for which nodes in the cluster will also "
         "accept traffic for this service."),
    column("Port(s)", "string", "The list of ports that are exposed by this service."),
    AGE,
    column("Selector", "string", "Route service traffic to pods with label keys and values matching this "
         "selector.", priority=1),
]


def _service_row(obj: dict, now: float) -> Cells:
    spec = as_dict(obj.get("spec"))
    ips = as_list(spec.get("clusterIPs"))
    cluster_ip = (ips[0] if ips else None) or spec.get("clusterIP") or "<none>"
    ports = ",".join(_port_text(as_dict(p)) for p in as_list(spec.get("ports"))) or "<none>"
    selector = as_dict(spec.get("selector"))
    sel_text = ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>"
    return [name_of(obj), spec.get("type", "ClusterIP"), cluster_ip, _external_ip(obj), ports, age_of(obj, now),
            sel_text]


def _port_text(port: dict) -> str:
    protocol = port.get("protocol", "TCP")
    if port.get("nodePort"):
        return f"{port.get('port')}:{port['nodePort']}/{protocol}"
    return f"{port.get('port')}/{protocol}"


def _external_ip(obj: dict) -> str:
    spec = as_dict(obj.get("spec"))
    kind = spec.get("type", "ClusterIP")
    external = [str(ip) for ip in as_list(spec.get("externalIPs"))]
    if kind == "ExternalName":
        return spec.get("externalName", "")
    if kind == "LoadBalancer":
        ingress = as_list(as_dict(as_dict(obj.get("status")).get("loadBalancer")).get("ingress"))
        found = [i.get("ip") or i.get("hostname") for i in map(as_dict, ingress) if i.get("ip") or i.get("hostname")]
        found += external
        return ",".join(found) if found else "<pending>"
    return ",".join(external) if external else "<none>"


_NODE_COLUMNS = [
    NAME,
    column("Status", "string", "The status of the node"),
    column("Roles", "string", "The roles of the node"),
    AGE,
    column("Version", "string", "Kubelet Version reported by the node."),
    column("Internal-IP", "string", "List of addresses reachable to the node.", priority=1),
    column("External-IP", "string", "List of addresses reachable to the node.", priority=1),
    column("OS-Image", "string", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 "
         "(wheezy)).", priority=1),
    column("Kernel-Version", "string", "Kernel Version reported by the node from 'uname -r' (e.g. "
         "3.16.0-0.bpo.4-amd64).", priority=1),
    column("Container-Runtime", "string", "Container runtime version reported by the node through runtime remote "
         "API (e.g. containerd://1.4.2).", priority=1),
]


def _node_row(obj: dict, now: float) -> Cells:
    spec, status = as_dict(obj.get("spec")), as_dict(obj.get("status"))
    ready = [c for c in map(as_dict, as_list(status.get("conditions"))) if c.get("type") == "Ready"]
    words = ["Ready" if ready[0].get("status") == "True" else "NotReady"] if ready else ["Unknown"]
    if spec.get("unschedulable"):
        words.append("SchedulingDisabled")
    info = as_dict(status.get("nodeInfo"))
    addresses = [as_dict(a) for a in as_list(status.get("addresses"))]
    return [name_of(obj), ",".join(words), ",".join(_node_roles(obj)) or "<none>", age_of(obj, now),
            info.get("kubeletVersion", ""), _address(addresses, "InternalIP"), _address(addresses, "ExternalIP"),
            info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>"]


def _node_roles(obj: dict) -> list[str]:
    roles = set()
    for key, value in as_dict(meta_of(obj).get("labels")).items():
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


_NAMESPACE_COLUMNS = [NAME, column("Status", "string", "The status of the namespace"), AGE]


def _namespace_row(obj: dict, now: float) -> Cells:
    return [name_of(obj), as_dict(obj.get("status")).get("phase", ""), age_of(obj, now)]


# --------------------------------------------------------------------------- events

_EVENT_COLUMNS = [
    column("Last Seen", "string", "Time of the most recent occurrence of this event."),
    column("Type", "string", "Type of this event (Normal, Warning), new types could be added in the future."),
    column("Reason", "string", "This should be a short, machine understandable string that gives the reason for "
         "the transition into the object's current status."),
    column("Object", "string", "The object that this event is about."),
    column("Subobject", "string", "The subobject that this event is about.", priority=1),
    column("Source", "string", "The component reporting this event.", priority=1),
    column("Message", "string", "A human-readable description of the status of this operation."),
    column("First Seen", "string", "The time at which the event was first recorded.", priority=1),
    column("Count", "string", "The number of times this event has occurred.", priority=1),
    column("Name", "string", NAME_DESC, priority=1, fmt="name"),
]


def _event_row(obj: dict, now: float) -> Cells:
    series = obj.get("series")
    first = since(obj.get("firstTimestamp") or obj.get("eventTime"), now)
    last = since(obj["lastTimestamp"], now) if obj.get("lastTimestamp") else first
    count = _int(obj.get("count"))
    if isinstance(series, dict):
        last = since(series.get("lastObservedTime"), now)
        count = _int(series.get("count"))
    elif count == 0:
        count = 1
    involved = as_dict(obj.get("involvedObject"))
    kind = str(involved.get("kind", "")).lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = as_dict(obj.get("source"))
    component = source.get("component") or obj.get("reportingComponent") or ""
    instance = source.get("host") or obj.get("reportingInstance") or ""
    return [last, obj.get("type", ""), obj.get("reason", ""), target, involved.get("fieldPath", ""),
            f"{component}, {instance}" if instance else component, str(obj.get("message", "")).strip(),
            first, count, name_of(obj)]


def _core_event(obj: dict) -> dict:
    return event_v1_to_core(obj)


# --------------------------------------------------------------------------- config, leases, CRDs

_CONFIGMAP_COLUMNS = [NAME, column("Data", "string", "Number of data entries"), AGE]
_SECRET_COLUMNS = [NAME, column("Type", "string", "The type of the secret"),
                   column("Data", "string", "Number of data entries"), AGE]
_LEASE_COLUMNS = [NAME, column("Holder", "string", "The holder of the lease"), AGE]
_CRD_COLUMNS = [NAME, column("Created At", "date", AGE_DESC)]
DEFAULT_COLUMNS = [NAME, AGE]
_ROLE_COLUMNS = [NAME, column("Created At", "date", AGE_DESC)]
_BINDING_COLUMNS = [NAME, column("Role", "string", "RoleRef of the binding"), AGE,
                    column("Users", "string", "User subjects", priority=1),
                    column("Groups", "string", "Group subjects", priority=1),
                    column("ServiceAccounts", "string", "ServiceAccount subjects", priority=1)]


def _binding_row(obj: dict, now: float) -> Cells:
    role, users, groups, sas = rbac.binding_cells(obj)
    return [name_of(obj), role, age_of(obj, now), users, groups, sas]


def _data_count(obj: dict) -> int:
    return len(as_dict(obj.get("data"))) + len(as_dict(obj.get("binaryData")))


# --------------------------------------------------------------------------- stored-only kinds

_SERVICE_ACCOUNT_COLUMNS = [NAME, column("Secrets", "string", "Secrets is a list of the secrets in the same "
                                        "namespace that pods running using this ServiceAccount are allowed to use."),
                            AGE]
_HPA_COLUMNS = [
    NAME,
    column("Reference", "string", "scaleTargetRef points to the target resource to scale."),
    column("Targets", "string", "metrics contains the specifications for which to use to calculate the desired "
         "replica count."),
    column("MinPods", "string", "minReplicas is the lower limit for the number of replicas."),
    column("MaxPods", "string", "maxReplicas is the upper limit for the number of replicas."),
    column("Replicas", "string", "currentReplicas is current number of replicas of pods managed by this autoscaler."),
    AGE,
]


def _hpa_row(obj: dict, now: float) -> Cells:
    spec, status = as_dict(obj.get("spec")), as_dict(obj.get("status"))
    ref = as_dict(spec.get("scaleTargetRef"))
    minimum = spec.get("minReplicas")
    return [name_of(obj), f"{ref.get('kind', '')}/{ref.get('name', '')}", _hpa_targets(obj),
            "<unset>" if minimum is None else str(minimum), _int(spec.get("maxReplicas"), 0),
            _int(status.get("currentReplicas"), 0), age_of(obj, now)]


def _hpa_targets(obj: dict) -> str:
    """`cpu: <unknown>/60%` per Resource metric (as an autoscaling/v2 object holds them), the first two."""
    spec, status = as_dict(obj.get("spec")), as_dict(obj.get("status"))
    current = {as_dict(m.get("resource")).get("name"): as_dict(as_dict(m.get("resource")).get("current"))
               for m in as_list(status.get("currentMetrics")) if isinstance(m, dict) and m.get("type") == "Resource"}
    shown = []
    if spec.get("targetCPUUtilizationPercentage") is not None:  # the autoscaling/v1 view
        seen = status.get("currentCPUUtilizationPercentage")
        shown.append(f"cpu: {'<unknown>' if seen is None else f'{seen}%'}/{spec['targetCPUUtilizationPercentage']}%")
    for metric in as_list(spec.get("metrics")):
        res = as_dict(as_dict(metric).get("resource"))
        target, now_at = as_dict(res.get("target")), current.get(res.get("name"), {})
        if as_dict(metric).get("type") != "Resource":
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


_PDB_COLUMNS = [NAME, column("Min Available", "string", "The minimum number of pods that must be available."),
                column("Max Unavailable", "string", "The maximum number of pods that may be unavailable."),
                column("Allowed Disruptions", "integer", "Number of pod disruptions that are currently allowed."),
                AGE]


def _pdb_row(obj: dict, now: float) -> Cells:
    spec = as_dict(obj.get("spec"))
    return [name_of(obj), str(spec.get("minAvailable", "N/A")), str(spec.get("maxUnavailable", "N/A")),
            _int(as_dict(obj.get("status")).get("disruptionsAllowed"), 0), age_of(obj, now)]


_PRIORITY_CLASS_COLUMNS = [NAME, column("Value", "integer", "The value of this priority class."),
                           column("Global-Default", "boolean", "Whether this is the default priority class."),
                           AGE, column("PreemptionPolicy", "string", "The policy for preempting pods.")]


def _priority_class_row(obj: dict, now: float) -> Cells:
    return [name_of(obj), _int(obj.get("value"), 0), bool(obj.get("globalDefault")), age_of(obj, now),
            obj.get("preemptionPolicy") or "<unset>"]


_QUOTA_COLUMNS = [NAME, column("Request", "string", "Request represents a minimum amount of cpu/memory."),
                  column("Limit", "string", "Limits control the maximum amount of cpu/memory."), AGE]


def _quota_row(obj: dict, now: float) -> Cells:
    hard, used = as_dict(as_dict(obj.get("spec")).get("hard")), as_dict(as_dict(obj.get("status")).get("used"))
    requests, limits = [], []
    for name in sorted(hard):
        entry = f"{name}: {used.get(name, '0')}/{hard[name]}"
        (limits if name.startswith("limits.") else requests).append(entry)
    return [name_of(obj), ", ".join(requests), ", ".join(limits), age_of(obj, now)]


_INGRESS_COLUMNS = [NAME, column("Class", "string", "The name of the IngressClass resource."),
                    column("Hosts", "string", "Hosts that incoming requests are matched against."),
                    column("Address", "string", "Address is a list containing ingress points for the load-balancer."),
                    column("Ports", "string", "Ports of TLS configurations that open."), AGE]


def _ingress_row(obj: dict, now: float) -> Cells:
    spec = as_dict(obj.get("spec"))
    hosts = [r.get("host") for r in as_list(spec.get("rules")) if isinstance(r, dict) and r.get("host")]
    points = as_list(as_dict(as_dict(as_dict(obj.get("status")).get("loadBalancer"))).get("ingress"))
    address = ",".join(p.get("ip") or p.get("hostname") or "" for p in points if isinstance(p, dict))
    return [name_of(obj), spec.get("ingressClassName") or "<none>", ",".join(hosts) or "*", address,
            "80, 443" if spec.get("tls") else "80", age_of(obj, now)]


PRINTERS: dict[tuple[str, str], tuple[list[dict], RowFn]] = {
    ("", "pods"): (POD_COLUMNS, pod_row),
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
    ("", "configmaps"): (_CONFIGMAP_COLUMNS, lambda o, now: [name_of(o), _data_count(o), age_of(o, now)]),
    ("", "secrets"): (_SECRET_COLUMNS,
                      lambda o, now: [name_of(o), o.get("type", ""), _data_count(o), age_of(o, now)]),
    ("", "serviceaccounts"): (_SERVICE_ACCOUNT_COLUMNS,
                              lambda o, now: [name_of(o), len(as_list(o.get("secrets"))), age_of(o, now)]),
    ("autoscaling", "horizontalpodautoscalers"): (_HPA_COLUMNS, _hpa_row),
    ("policy", "poddisruptionbudgets"): (_PDB_COLUMNS, _pdb_row),
    ("scheduling.k8s.io", "priorityclasses"): (_PRIORITY_CLASS_COLUMNS, _priority_class_row),
    ("", "resourcequotas"): (_QUOTA_COLUMNS, _quota_row),
    ("networking.k8s.io", "ingresses"): (_INGRESS_COLUMNS, _ingress_row),
    ("coordination.k8s.io", "leases"): (
        _LEASE_COLUMNS, lambda o, now: [name_of(o), as_dict(o.get("spec")).get("holderIdentity", ""), age_of(o, now)]),
    ("apiextensions.k8s.io", "customresourcedefinitions"): (
        _CRD_COLUMNS, lambda o, now: [name_of(o), meta_of(o).get("creationTimestamp", "")]),
    **{(rbac.GROUP, plural): (_ROLE_COLUMNS, lambda o, now: [name_of(o), meta_of(o).get("creationTimestamp", "")])
       for plural in ("roles", "clusterroles")},
    **{(rbac.GROUP, plural): (_BINDING_COLUMNS, _binding_row) for plural in ("rolebindings", "clusterrolebindings")},
}
