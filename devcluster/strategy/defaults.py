"""Server-side defaulting of built-in kinds (what a real API server fills on every write).

Pure functions that edit the body they are given in place (the store owns request
bodies). Defaulting is idempotent, so a Deployment template and the ReplicaSet template
made from it stay equal after both are written, which the Deployment controller relies on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from devcluster.strategy.configdata import fold_string_data


def _d(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """`obj[key]` as a dict, created when absent or not a dict."""
    value = obj.get(key)
    if not isinstance(value, dict):
        value = obj[key] = {}
    return value


def image_pull_policy(image: str) -> str:
    """Always for `:latest` or untagged images, IfNotPresent otherwise (digests count as tagged)."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def default_container(c: dict[str, Any]) -> None:
    if not isinstance(c, dict):
        return
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    if isinstance(c.get("image"), str):
        c.setdefault("imagePullPolicy", image_pull_policy(c["image"]))
    c.setdefault("resources", {})
    for port in c.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    for env in c.get("env") or []:
        ref = env.get("valueFrom", {}).get("fieldRef") if isinstance(env, dict) else None
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if isinstance(c.get(probe), dict):
            default_probe(c[probe])
    for hook in ((c.get("lifecycle") or {}).get(h) for h in ("postStart", "preStop")):
        if isinstance(hook, dict) and isinstance(hook.get("httpGet"), dict):
            default_http_get(hook["httpGet"])


def default_probe(probe: dict[str, Any]) -> None:
    """A probe's timing defaults (SetDefaults_Probe) and its HTTP handler's."""
    probe.setdefault("timeoutSeconds", 1)
    probe.setdefault("periodSeconds", 10)
    probe.setdefault("successThreshold", 1)
    probe.setdefault("failureThreshold", 3)
    if isinstance(probe.get("httpGet"), dict):
        default_http_get(probe["httpGet"])


def default_http_get(action: dict[str, Any]) -> None:
    if not action.get("path"):
        action["path"] = "/"
    action.setdefault("scheme", "HTTP")


# the file mode a volume's files get unless it says otherwise (0644)
DEFAULT_MODE = 420


def default_volumes(spec: dict[str, Any]) -> None:
    """Volume source defaults: file modes, a hostPath's type, a projected token's lifetime."""
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        for source in ("configMap", "secret", "downwardAPI", "projected"):
            if isinstance(volume.get(source), dict):
                volume[source].setdefault("defaultMode", DEFAULT_MODE)
        if isinstance(volume.get("hostPath"), dict):
            volume["hostPath"].setdefault("type", "")
        for item in (volume.get("downwardAPI") or {}).get("items") or []:
            _default_field_ref(item)
        for projection in (volume.get("projected") or {}).get("sources") or []:
            if not isinstance(projection, dict):
                continue
            if isinstance(projection.get("serviceAccountToken"), dict):
                projection["serviceAccountToken"].setdefault("expirationSeconds", 3600)
            for item in (projection.get("downwardAPI") or {}).get("items") or []:
                _default_field_ref(item)


def _default_field_ref(item: Any) -> None:
    ref = item.get("fieldRef") if isinstance(item, dict) else None
    if isinstance(ref, dict):
        ref.setdefault("apiVersion", "v1")


def default_pod_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if account:  # the deprecated field names the account when the other is empty; both end up equal
        spec["serviceAccountName"] = spec["serviceAccount"] = account
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            default_container(c)


def default_pod(obj: dict[str, Any]) -> None:
    spec = _d(obj, "spec")
    default_pod_spec(spec)
    default_volumes(spec)
    spec.setdefault("enableServiceLinks", True)  # a Pod's default, not a pod template's
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            _requests_from_limits(c)


def _requests_from_limits(c: Any) -> None:
    """A Pod's container requests what it limits unless it says otherwise (templates are left as sent)."""
    res = c.get("resources") if isinstance(c, dict) else None
    limits = res.get("limits") if isinstance(res, dict) else None
    if not isinstance(limits, dict) or not limits:
        return
    requests = res.get("requests") if isinstance(res.get("requests"), dict) else {}
    res["requests"] = {**limits, **requests}


# -- the Priority and DefaultTolerationSeconds admission plugins (pod creates) -------------------
# Run after ownership is recorded, as admission runs after the real field manager: what they add is
# owned by no manager.


def admit_pod(pod: dict[str, Any]) -> None:
    """A new pod's priority and default tolerations."""
    spec = _d(pod, "spec")
    default_priority(spec)
    default_toleration_seconds(spec)


# the priority classes every cluster has (scheduling.k8s.io); others are looked up by nobody here
SYSTEM_PRIORITIES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}


def default_priority(spec: dict[str, Any]) -> None:
    """What the Priority admission gives a pod: its class's value (0 without a class: no class here
    is the global default) and the default preemption policy."""
    name = spec.get("priorityClassName") or ""
    if "priority" not in spec and (not name or name in SYSTEM_PRIORITIES):
        spec["priority"] = SYSTEM_PRIORITIES.get(name, 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")


# the taints DefaultTolerationSeconds makes every pod tolerate for five minutes
_DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def default_toleration_seconds(spec: dict[str, Any]) -> None:
    """What the DefaultTolerationSeconds admission adds: a pod that does not tolerate a NoExecute
    not-ready or unreachable taint tolerates it for 300 s."""
    tolerations = spec.get("tolerations") if isinstance(spec.get("tolerations"), list) else []
    added = [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
             for key in _DEFAULT_TOLERATIONS if not any(_tolerates_no_execute(t, key) for t in tolerations)]
    if added:
        spec["tolerations"] = [*tolerations, *added]


def _tolerates_no_execute(t: Any, key: str) -> bool:
    if not isinstance(t, dict) or t.get("effect") not in (None, "", "NoExecute"):
        return False
    return t.get("key") == key or (not t.get("key") and t.get("operator") == "Exists")


APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def _apparmor_annotation(profile: Any) -> str:
    kind = profile.get("type") if isinstance(profile, dict) else None
    if kind == "RuntimeDefault":
        return "runtime/default"
    if kind == "Unconfined":
        return "unconfined"
    if kind == "Localhost":
        return "localhost/" + str(profile.get("localhostProfile") or "")
    return ""


def _apparmor_field(annotation: str) -> dict[str, Any] | None:
    if annotation == "runtime/default":
        return {"type": "RuntimeDefault"}
    if annotation == "unconfined":
        return {"type": "Unconfined"}
    if annotation.startswith("localhost/") and annotation != "localhost/":
        return {"type": "Localhost", "localhostProfile": annotation[len("localhost/"):]}
    return None


def sync_app_armor(pod: dict[str, Any]) -> None:
    """A new pod's AppArmor annotations and fields made to agree, as kube-apiserver does on create: a
    container without the annotation gets its profile's (else the pod's), a container with only the
    annotation gets the field unless the pod's profile says the same. Windows pods are left alone."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    if (spec.get("os") or {}).get("name") == "windows":
        return
    pod_profile = (spec.get("securityContext") or {}).get("appArmorProfile")
    meta = _d(pod, "metadata")
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            name = APPARMOR_ANNOTATION + str(c.get("name", ""))
            profile = (c.get("securityContext") or {}).get("appArmorProfile")
            if name not in annotations:
                value = _apparmor_annotation(profile) if profile is not None else _apparmor_annotation(pod_profile)
                if value:
                    annotations[name] = value
            elif profile is None:
                field = _apparmor_field(str(annotations[name]))
                if field is not None and field != pod_profile:
                    _d(c, "securityContext")["appArmorProfile"] = field
    if annotations:
        meta["annotations"] = annotations


def default_template(spec: dict[str, Any]) -> None:
    tmpl = spec.get("template")
    if isinstance(tmpl, dict):
        template_metadata(tmpl)
        default_pod_spec(_d(tmpl, "spec"))
        default_volumes(tmpl["spec"])


def template_metadata(tmpl: dict[str, Any]) -> None:
    """An embedded ObjectMeta as Go writes it: `creationTimestamp: null` (a zero Time is not omitted)."""
    _d(tmpl, "metadata").setdefault("creationTimestamp", None)


def default_deployment(obj: dict[str, Any]) -> None:
    spec = _d(obj, "spec")
    spec.setdefault("replicas", 1)
    strategy = _d(spec, "strategy")
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        ru = _d(strategy, "rollingUpdate")
        ru.setdefault("maxSurge", "25%")
        ru.setdefault("maxUnavailable", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    default_template(spec)


def default_replicaset(obj: dict[str, Any]) -> None:
    spec = _d(obj, "spec")
    spec.setdefault("replicas", 1)
    default_template(spec)


def default_service(obj: dict[str, Any]) -> None:
    spec = _d(obj, "spec")
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def default_namespace(obj: dict[str, Any]) -> None:
    _d(obj, "spec").setdefault("finalizers", ["kubernetes"])
    meta = _d(obj, "metadata")
    if meta.get("name"):  # always the namespace's own name, whatever the client sent
        _d(meta, "labels")[NAMESPACE_NAME_LABEL] = meta["name"]


def default_secret(obj: dict[str, Any]) -> None:
    fold_string_data(obj)
    obj.setdefault("type", "Opaque")


def default_hpa(obj: dict[str, Any]) -> None:
    _d(obj, "spec").setdefault("minReplicas", 1)


def default_priority_class(obj: dict[str, Any]) -> None:
    obj.setdefault("preemptionPolicy", "PreemptLowerPriority")


def default_lease(obj: dict[str, Any]) -> None:
    _d(obj, "spec")


def default_event(obj: dict[str, Any]) -> None:
    _d(obj, "involvedObject")
    _d(obj, "source")
    for key in ("firstTimestamp", "lastTimestamp", "eventTime"):  # zero times are written as null
        obj.setdefault(key, None)
    obj.setdefault("reportingComponent", "")
    obj.setdefault("reportingInstance", "")


DEFAULTERS: dict[tuple[str, str], Callable[[dict[str, Any]], None]] = {
    ("", "pods"): default_pod,
    ("", "services"): default_service,
    ("", "namespaces"): default_namespace,
    ("", "secrets"): default_secret,
    ("", "events"): default_event,
    ("apps", "deployments"): default_deployment,
    ("apps", "replicasets"): default_replicaset,
    ("autoscaling", "horizontalpodautoscalers"): default_hpa,
    ("coordination.k8s.io", "leases"): default_lease,
    ("scheduling.k8s.io", "priorityclasses"): default_priority_class,
}


# ObjectMeta's maps and lists are `omitempty`: an emptied one is not written at all
_OMITTED_WHEN_EMPTY = ("labels", "annotations", "finalizers", "ownerReferences")


def drop_empty_metadata(obj: dict[str, Any]) -> None:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        for key in _OMITTED_WHEN_EMPTY:
            if key in meta and not meta[key]:
                del meta[key]


# -- create-time status ----------------------------------------------------------------------

_QOS_RESOURCES = ("cpu", "memory")


def qos_class(spec: dict[str, Any]) -> str:
    """Guaranteed / Burstable / BestEffort from the containers' requests and limits."""
    containers = [c for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
                  if isinstance(c, dict)]
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        limits = res.get("limits") or {}
        requests = {**limits, **(res.get("requests") or {})}
        if any(requests.get(r) or limits.get(r) for r in _QOS_RESOURCES):
            any_set = True
        for r in _QOS_RESOURCES:
            if not limits.get(r) or str(requests.get(r)) != str(limits.get(r)):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def core_initial_status(key: tuple[str, str], obj: dict[str, Any], body_status: Any) -> Any:
    """The status a core or apps object starts with (spec §4.3); None means no status key."""
    if key == ("", "pods"):
        return {"phase": "Pending", "qosClass": qos_class(obj.get("spec") or {})}
    if key in (("apps", "deployments"), ("apps", "replicasets"), ("autoscaling", "horizontalpodautoscalers")):
        return {}
    if key == ("", "services"):
        return {"loadBalancer": {}}
    if key == ("", "namespaces"):
        return {"phase": "Active"}
    if key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        return None  # computed by the CRD registration
    return body_status  # nodes and kinds without a status subresource keep what was sent
