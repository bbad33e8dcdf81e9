"""Generate devcluster/fieldtable.json from the Kubernetes proto definitions in tools/protos/.

Usage: python -m devcluster.tools.protogen [--check]

The inputs are the public `generated.proto` files of k8s.io/api and k8s.io/apimachinery,
reduced to their wire facts (message names, field names, numbers, types, labels): no
comments or descriptions are kept. The proto files say nothing about the JSON side of a
field beyond its name, so three small fact tables below add what the Go types say:

- INLINE: fields whose Go struct is embedded with `json:",inline"` (JSON lifts the
  message's fields into the parent);
- JSON_NAMES: the few fields whose proto name differs from their JSON name;
- KEEP_ZERO: scalar fields whose zero value is still a value in JSON (Go pointers such as
  `replicas`, or fields without `omitempty` such as `ServicePort.port`). Every other
  scalar that arrives with its zero value is omitted, as Go's JSON encoder would omit it.

`--check` regenerates in memory and exits 1 when the committed table differs.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTOS = HERE / "protos"
OUT = HERE.parent / "fieldtable.json"

# proto file -> the apiVersion its kinds are served under (None: not a served group)
GROUPS = {
    "core_v1.proto": "v1",
    "apps_v1.proto": "apps/v1",
    "batch_v1.proto": "batch/v1",
    "rbac_v1.proto": "rbac.authorization.k8s.io/v1",
    "policy_v1.proto": "policy/v1",
    "scheduling_v1.proto": "scheduling.k8s.io/v1",
    "networking_v1.proto": "networking.k8s.io/v1",
    "authentication_v1.proto": "authentication.k8s.io/v1",
    "autoscaling_v1.proto": "autoscaling/v1",
    "autoscaling_v2.proto": "autoscaling/v2",
    "authorization_v1.proto": "authorization.k8s.io/v1",
    "coordination_v1.proto": "coordination.k8s.io/v1",
    "events_v1.proto": "events.k8s.io/v1",
    "meta_v1.proto": None,
    "runtime.proto": None,
    "resource.proto": None,
    "intstr.proto": None,
}

META = "k8s.io.apimachinery.pkg.apis.meta.v1"
# Types with their own JSON form (devcluster/README.md, "Protobuf request bodies").
SPECIAL = {
    "k8s.io.apimachinery.pkg.api.resource.Quantity": "quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": "intorstring",
    f"{META}.Time": "time",
    f"{META}.MicroTime": "microtime",
    f"{META}.Duration": "duration",
    f"{META}.FieldsV1": "rawjson",
    "k8s.io.apimachinery.pkg.runtime.RawExtension": "rawjson",
    f"{META}.Verbs": "stringlist",
    "k8s.io.api.authentication.v1.ExtraValue": "stringlist",
    "k8s.io.api.authorization.v1.ExtraValue": "stringlist",
}
# Meta kinds every group version accepts (DeleteOptions bodies of DELETE requests...).
META_KINDS = ("DeleteOptions", "Status", "CreateOptions", "UpdateOptions", "PatchOptions",
              "GetOptions", "ListOptions", "WatchEvent")

INLINE = {
    "k8s.io.api.core.v1.Volume": ("volumeSource",),
    "k8s.io.api.core.v1.Probe": ("handler",),
    "k8s.io.api.core.v1.EphemeralContainer": ("ephemeralContainerCommon",),
    "k8s.io.api.core.v1.PersistentVolumeSpec": ("persistentVolumeSource",),
    "k8s.io.api.core.v1.ConfigMapEnvSource": ("localObjectReference",),
    "k8s.io.api.core.v1.ConfigMapKeySelector": ("localObjectReference",),
    "k8s.io.api.core.v1.ConfigMapProjection": ("localObjectReference",),
    "k8s.io.api.core.v1.ConfigMapVolumeSource": ("localObjectReference",),
    "k8s.io.api.core.v1.SecretEnvSource": ("localObjectReference",),
    "k8s.io.api.core.v1.SecretKeySelector": ("localObjectReference",),
    "k8s.io.api.core.v1.SecretProjection": ("localObjectReference",),
    "k8s.io.api.networking.v1.IngressRule": ("ingressRuleValue",),
}

JSON_NAMES = {
    "k8s.io.api.authentication.v1.BoundObjectReference.uID": "uid",
    "k8s.io.api.networking.v1.IngressClassParametersReference.aPIGroup": "apiGroup",
}

_KEEP_ZERO = {
    "k8s.io.api.core.v1": {
        "PodSpec": "terminationGracePeriodSeconds activeDeadlineSeconds automountServiceAccountToken "
                   "shareProcessNamespace priority enableServiceLinks setHostnameAsFQDN hostUsers",
        "ContainerPort": "containerPort",
        "SecurityContext": "privileged runAsUser runAsGroup runAsNonRoot readOnlyRootFilesystem "
                           "allowPrivilegeEscalation",
        "PodSecurityContext": "runAsUser runAsGroup runAsNonRoot fsGroup",
        "Probe": "terminationGracePeriodSeconds",
        "Toleration": "tolerationSeconds",
        "TopologySpreadConstraint": "maxSkew minDomains",
        "ConfigMapVolumeSource": "defaultMode optional",
        "SecretVolumeSource": "defaultMode optional",
        "DownwardAPIVolumeSource": "defaultMode",
        "ProjectedVolumeSource": "defaultMode",
        "ConfigMapProjection": "optional",
        "SecretProjection": "optional",
        "ConfigMapKeySelector": "optional",
        "SecretKeySelector": "optional",
        "ConfigMapEnvSource": "optional",
        "SecretEnvSource": "optional",
        "KeyToPath": "mode",
        "DownwardAPIVolumeFile": "mode",
        "ServiceAccountTokenProjection": "expirationSeconds",
        "ConfigMap": "immutable",
        "Secret": "immutable",
        "ServiceAccount": "automountServiceAccountToken",
        "ServicePort": "port",
        "ServiceSpec": "allocateLoadBalancerNodePorts",
        "ClientIPConfig": "timeoutSeconds",
        "WeightedPodAffinityTerm": "weight",
        "PreferredSchedulingTerm": "weight",
        "GRPCAction": "port",
        "ReplicationControllerSpec": "replicas",
        "ReplicationControllerStatus": "replicas",
        "ContainerStatus": "ready restartCount",
        "CSIVolumeSource": "readOnly",
        "LinuxContainerUser": "uid gid",
        "Ulimit": "hard soft",
        "SleepAction": "seconds",
    },
    META: {
        "ObjectMeta": "deletionGracePeriodSeconds",
        "OwnerReference": "controller blockOwnerDeletion",
        "DeleteOptions": "gracePeriodSeconds orphanDependents ignoreStoreReadErrorWithClusterBreakingPotential",
        "ListMeta": "remainingItemCount",
        "APIResource": "namespaced",
    },
    "k8s.io.api.apps.v1": {
        "DeploymentSpec": "replicas revisionHistoryLimit progressDeadlineSeconds",
        "ReplicaSetSpec": "replicas",
        "StatefulSetSpec": "replicas revisionHistoryLimit",
        "DaemonSetSpec": "revisionHistoryLimit",
        "RollingUpdateStatefulSetStrategy": "partition",
        "StatefulSetOrdinals": "start",
        "ControllerRevision": "revision",
        "DaemonSetStatus": "currentNumberScheduled numberMisscheduled desiredNumberScheduled numberReady",
        "ReplicaSetStatus": "replicas",
        "StatefulSetStatus": "replicas",
    },
    "k8s.io.api.batch.v1": {
        "JobSpec": "parallelism completions activeDeadlineSeconds backoffLimit backoffLimitPerIndex "
                   "maxFailedIndexes manualSelector ttlSecondsAfterFinished suspend",
        "CronJobSpec": "startingDeadlineSeconds suspend successfulJobsHistoryLimit failedJobsHistoryLimit",
        "SuccessPolicyRule": "succeededCount",
        "JobStatus": "ready terminating",
    },
    "k8s.io.api.autoscaling.v1": {
        "HorizontalPodAutoscalerSpec": "minReplicas maxReplicas targetCPUUtilizationPercentage",
        "HorizontalPodAutoscalerStatus": "currentReplicas desiredReplicas",
    },
    "k8s.io.api.autoscaling.v2": {
        "HorizontalPodAutoscalerSpec": "minReplicas maxReplicas",
        "HPAScalingRules": "stabilizationWindowSeconds",
        "HPAScalingPolicy": "value periodSeconds",
        "MetricTarget": "averageUtilization",
        "HorizontalPodAutoscalerStatus": "desiredReplicas",
    },
    "k8s.io.api.scheduling.v1": {"PriorityClass": "value"},
    "k8s.io.api.policy.v1": {
        "PodDisruptionBudgetStatus": "disruptionsAllowed currentHealthy desiredHealthy expectedPods",
    },
    "k8s.io.api.networking.v1": {"NetworkPolicyPort": "endPort"},
    "k8s.io.api.authentication.v1": {"TokenRequestSpec": "expirationSeconds"},
    "k8s.io.api.authorization.v1": {"SubjectAccessReviewStatus": "allowed", "SubjectRulesReviewStatus": "incomplete"},
    "k8s.io.api.coordination.v1": {"LeaseSpec": "leaseDurationSeconds leaseTransitions"},
    "k8s.io.api.events.v1": {"EventSeries": "count"},
}
KEEP_ZERO = {f"{pkg}.{msg}.{f}" for pkg, msgs in _KEEP_ZERO.items() for msg, fs in msgs.items() for f in fs.split()}

SCALARS = {"string", "bool", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "bytes", "double", "float",
           "fixed32", "fixed64"}
_PACKAGE = re.compile(r"^package\s+([\w.]+)\s*;")
_MESSAGE = re.compile(r"^message\s+(\w+)\s*\{\s*(\})?$")
_FIELD = re.compile(r"^(optional|repeated)\s+([\w.]+)\s+(\w+)\s*=\s*(\d+)\s*;$")
_MAP = re.compile(r"^map<\s*(\w+)\s*,\s*([\w.]+)\s*>\s+(\w+)\s*=\s*(\d+)\s*;$")


class ProtoError(ValueError):
    """A proto input line the generator does not understand."""


def parse(text: str, *, source: str) -> tuple[str, dict[str, list[dict]]]:
    """The package and its messages (name -> fields in declaration order) of one proto file."""
    package, messages, current = "", {}, None
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("//", 1)[0].strip()
        if not line or line.startswith(("syntax ", "import ", "option ")):
            continue
        if m := _PACKAGE.match(line):
            package = m.group(1)
        elif m := _MESSAGE.match(line):
            current = messages.setdefault(m.group(1), [])
            if m.group(2):
                current = None
        elif line == "}":
            current = None
        elif current is not None and (f := _field(line)):
            current.append(f)
        else:
            raise ProtoError(f"{source}:{no}: cannot parse {raw!r}")
    return package, messages


def _field(line: str) -> dict | None:
    if m := _FIELD.match(line):
        label, typ, name, number = m.groups()
        return {"name": name, "number": int(number), "type": typ, "repeated": label == "repeated", "map_key": None}
    if m := _MAP.match(line):
        key, typ, name, number = m.groups()
        return {"name": name, "number": int(number), "type": typ, "repeated": False, "map_key": key}
    return None


def _resolve(typ: str, package: str, local: set[str]) -> tuple[str, str | None]:
    """(kind, full message name) of a field type written in `package`."""
    if typ in SCALARS:
        return typ, None
    if typ.startswith("."):
        return "message", typ[1:]
    if "." in typ:
        return "message", typ
    if typ in local:
        return "message", f"{package}.{typ}"
    raise ProtoError(f"{package}: unknown type {typ}")


def build(protos: Path = PROTOS) -> dict:
    """The whole table: messages with resolved fields, plus the kinds each apiVersion serves."""
    messages: dict[str, dict] = {}
    kinds: dict[str, dict[str, str]] = {}
    for filename, api_version in GROUPS.items():
        package, parsed = parse((protos / filename).read_text(), source=filename)
        for name, fields in parsed.items():
            full = f"{package}.{name}"
            messages[full] = {"fields": [_entry(full, f, package, set(parsed)) for f in fields]}
            if full in SPECIAL:
                messages[full]["special"] = SPECIAL[full]
            if api_version and _is_kind(name, fields):
                kinds.setdefault(api_version, {})[name] = full
    _check_references(messages)
    return {"messages": messages, "kinds": kinds, "metaKinds": {k: f"{META}.{k}" for k in META_KINDS}}


def _entry(message: str, f: dict, package: str, local: set[str]) -> dict:
    kind, type_name = _resolve(f["type"], package, local)
    key = f"{message}.{f['name']}"
    entry = {"name": f["name"], "json": JSON_NAMES.get(key, f["name"]), "number": f["number"], "kind": kind}
    if type_name:
        entry["type"] = type_name
    if f["repeated"]:
        entry["repeated"] = True
    if f["map_key"]:
        entry["mapKey"] = f["map_key"]
    if f["name"] in INLINE.get(message, ()):
        entry["inline"] = True
    if key in KEEP_ZERO:
        entry["keepZero"] = True
    return entry


def _is_kind(name: str, fields: list[dict]) -> bool:
    """Top-level objects and lists: their first field is `metadata` (ObjectMeta or ListMeta)."""
    first = fields[0] if fields else None
    if not first or first["name"] != "metadata" or first["number"] != 1:
        return False
    return not name.endswith("Spec") and name != "PersistentVolumeClaimTemplate"


def _check_references(messages: dict[str, dict]) -> None:
    for name, msg in messages.items():
        for f in msg["fields"]:
            if f.get("type") and f["type"] not in messages:
                raise ProtoError(f"{name}.{f['name']}: type {f['type']} is not in the inputs")


def render(table: dict) -> str:
    """Stable JSON, one message per line, so a regenerated table diffs by message."""
    lines = ['{"kinds": ' + json.dumps(table["kinds"], sort_keys=True) + ",",
             ' "metaKinds": ' + json.dumps(table["metaKinds"], sort_keys=True) + ",",
             ' "messages": {']
    names = sorted(table["messages"])
    for i, name in enumerate(names):
        sep = "," if i < len(names) - 1 else ""
        lines.append(f"  {json.dumps(name)}: {json.dumps(table['messages'][name], separators=(',', ':'))}{sep}")
    lines.append(" }}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render(build())
    if "--check" in argv:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is out of date: run python -m devcluster.tools.protogen", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT} ({text.count(chr(10)) - 4} messages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
