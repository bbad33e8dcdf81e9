"""Protobuf request bodies decoded into JSON (devcluster.protobody), without a server.

Three independent sources of bytes: bodies the real kubectl sent (kubectl_protobuf_bodies.yaml),
bytes written here by hand with a few lines of wire encoding, and messages built with the
protobuf package from the field table and encoded by it (round trips for every kind kubectl's
typed commands and Helm send, including the ones the dev cluster does not serve yet).
"""

from __future__ import annotations

import base64
import datetime as dt
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from devcluster.server import apitypes, protobody
from devcluster.server.apitypes import Field, MessageType
from devcluster.server.protobody import ProtobufBodyError, decode_body, go_duration

GOLDEN = yaml.safe_load((Path(__file__).parent / "kubectl_protobuf_bodies.yaml").read_text())


@pytest.mark.parametrize("case", [pytest.param(c, id=" ".join(c["command"].split()[1:3])) for c in GOLDEN])
def test_bodies_real_kubectl_sent(case):
    assert decode_body(bytes.fromhex(case["body_hex"])) == case["json"]


# -- hand-made wire bytes -------------------------------------------------------------------------

def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def vi(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def ld(number: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def envelope(api_version: str, kind: str, raw: bytes, *, extra: bytes = b"") -> bytes:
    return b"k8s\x00" + ld(1, ld(1, api_version) + ld(2, kind)) + ld(2, raw) + extra


def test_hand_made_configmap_with_an_explicit_false_and_empty_non_pointer_fields():
    meta = ld(1, "cm") + ld(2, "") + ld(3, "") + vi(7, 0) + ld(8, b"") + ld(11, ld(1, "app") + ld(2, "web"))
    body = envelope("v1", "ConfigMap", ld(1, meta) + vi(4, 0) + ld(2, ld(1, "k") + ld(2, "v"))
                    + ld(3, ld(1, "bin") + ld(2, b"\x00\xff")))
    assert decode_body(body) == {
        "kind": "ConfigMap", "apiVersion": "v1",
        "metadata": {"name": "cm", "labels": {"app": "web"}},
        "immutable": False, "data": {"k": "v"}, "binaryData": {"bin": "AP8="},
    }


def test_hand_made_deployment_keeps_replicas_zero_and_drops_a_zero_min_ready_seconds():
    container = ld(1, "app") + ld(2, "img") + ld(8, b"") + ld(10, ld(1, ld(2, ld(1, "/healthz") + ld(2, vi(1, 1) + ld(3, "http")))))
    template = ld(1, b"") + ld(2, ld(2, container) + vi(4, 45))
    spec = vi(1, 0) + ld(2, ld(1, ld(1, "a") + ld(2, "b"))) + ld(3, template) + vi(5, 0)
    body = envelope("apps/v1", "Deployment", ld(1, ld(1, "d") + ld(8, vi(1, 1_700_000_000))) + ld(2, spec))
    assert decode_body(body) == {
        "kind": "Deployment", "apiVersion": "apps/v1",
        "metadata": {"name": "d", "creationTimestamp": "2023-11-14T22:13:20Z"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {}, "spec": {
                "containers": [{"name": "app", "image": "img", "resources": {},
                                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}}}],
                "terminationGracePeriodSeconds": 45}},
        },
    }


def test_hand_made_delete_options_under_any_group_version():
    body = envelope("apps/v1", "DeleteOptions", vi(1, 0) + ld(2, ld(1, "uid-1")) + ld(4, "Orphan") + ld(5, "All"))
    assert decode_body(body) == {"kind": "DeleteOptions", "apiVersion": "apps/v1", "gracePeriodSeconds": 0,
                                 "preconditions": {"uid": "uid-1"}, "propagationPolicy": "Orphan",
                                 "dryRun": ["All"]}


def test_packed_repeated_scalars_decode_like_unpacked():
    unpacked = ld(1, ld(1, "p")) + ld(2, ld(14, vi(4, 1000) + vi(4, 2000)))
    packed = ld(1, ld(1, "p")) + ld(2, ld(14, ld(4, _varint(1000) + _varint(2000))))
    want = {"supplementalGroups": [1000, 2000]}
    for raw in (unpacked, packed):
        assert decode_body(envelope("v1", "Pod", raw))["spec"]["securityContext"] == want


def test_fields_the_table_does_not_know_are_skipped():
    raw = ld(1, ld(1, "ns")) + ld(99, "from a newer client") + vi(98, 7)
    assert decode_body(envelope("v1", "Namespace", raw)) == {"kind": "Namespace", "apiVersion": "v1",
                                                             "metadata": {"name": "ns"}}


@pytest.mark.parametrize(("body", "message"), [
    pytest.param(b'{"kind": "Namespace"}', "magic prefix", id="json-sent-as-protobuf"),
    pytest.param(b"k8s\x00\x0a\x05\x0a\x02", "runtime.Unknown envelope", id="truncated-envelope"),
    pytest.param(envelope("v1", "Widget", b""), 'no kind "Widget" is registered for version "v1"', id="unknown-kind"),
    pytest.param(envelope("v1", "Namespace", b"\x0a\x7f\x0a"), "the Namespace message", id="truncated-object"),
    pytest.param(envelope("v1", "Namespace", b"\xff\xff\xff\xff"), "the Namespace message", id="garbage-object"),
    pytest.param(envelope("v1", "Namespace", b"", extra=ld(3, "gzip")), "content encoding", id="gzip"),
    pytest.param(envelope("v1", "Namespace", b"", extra=ld(4, "application/cbor")), "content type", id="cbor"),
    pytest.param(envelope("apps/v1", "ControllerRevision", ld(2, ld(1, b"not json"))), "neither JSON nor",
                 id="raw-extension-not-json"),
])
def test_bodies_that_do_not_decode(body, message):
    with pytest.raises(ProtobufBodyError, match=message):
        decode_body(body)


@pytest.mark.parametrize(("nanos", "text"), [
    (0, "0s"), (999, "999ns"), (1_500, "1.5µs"), (1_500_000, "1.5ms"), (1_500_000_000, "1.5s"),
    (61_000_000_000, "1m1s"), (5_400_000_000_000, "1h30m0s"), (3_600_000_000_001, "1h0m0.000000001s"),
    (-2_000_000_000, "-2s"),
])
def test_go_duration_strings(nanos, text):
    assert go_duration(nanos) == text


# -- round trips through messages the protobuf package encodes from the table -------------------------

def encode(mt: MessageType, obj: dict[str, Any]):
    """A protobuf message of type `mt` holding the JSON object `obj` (the decoder's inverse)."""
    msg = protobody._message_class(mt.name)()
    _fill(msg, mt, obj)
    return msg


def _fill(msg, mt: MessageType, obj: Any) -> None:
    if mt.special:
        _fill_special(msg, mt.special, obj)
        return
    for f in mt.fields:
        if f.inline:
            sub = {k: v for k, v in obj.items() if k in f.message_type.json_fields()}
            if sub:
                _fill(getattr(msg, f.name), f.message_type, sub)
        elif f.json_name in obj:
            _set(msg, f, obj[f.json_name])


def _set(msg, f: Field, value: Any) -> None:
    if f.is_map:
        target = getattr(msg, f.name)
        for k, v in value.items():
            if f.kind == "message":
                _fill(target[k], f.message_type, v)
            else:
                target[k] = _scalar(f, v)
    elif f.repeated:
        target = getattr(msg, f.name)
        for v in value:
            if f.kind == "message":
                _fill(target.add(), f.message_type, v)
            else:
                target.append(_scalar(f, v))
    elif f.kind == "message":
        sub = getattr(msg, f.name)
        sub.SetInParent()
        _fill(sub, f.message_type, value)
    else:
        setattr(msg, f.name, _scalar(f, value))


def _scalar(f: Field, value: Any) -> Any:
    return base64.b64decode(value) if f.kind == "bytes" else value


def _fill_special(msg, special: str, value: Any) -> None:
    if special == "quantity":
        msg.string = value
    elif special == "intorstring":
        if isinstance(value, str):
            msg.type, msg.strVal = 1, value
        else:
            msg.type, msg.intVal = 0, value
    elif special in ("time", "microtime"):
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        msg.seconds, msg.nanos = int(t.timestamp()), t.microsecond * 1000
    elif special == "rawjson":
        setattr(msg, msg.DESCRIPTOR.fields_by_number[1].name, orjson.dumps(value))
    elif special == "stringlist":
        msg.items.extend(value)


def round_trip(obj: dict[str, Any]) -> dict[str, Any]:
    mt = apitypes.type_of(obj["apiVersion"], obj["kind"])
    assert mt is not None, (obj["apiVersion"], obj["kind"])
    raw = encode(mt, obj).SerializeToString()
    unknown = protobody._message_class(protobody.UNKNOWN)()
    unknown.typeMeta.apiVersion, unknown.typeMeta.kind, unknown.raw = obj["apiVersion"], obj["kind"], raw
    return decode_body(protobody.MAGIC + unknown.SerializeToString())


META = {"name": "x", "namespace": "ns", "labels": {"app": "x"}, "annotations": {"note": "a b"},
        "finalizers": ["example.com/keep"],
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-1",
                             "controller": True, "blockOwnerDeletion": False}]}
POD_TEMPLATE = {
    "metadata": {"labels": {"app": "x"}},
    "spec": {
        "nodeSelector": {"node-role.kubernetes.io/edge": ""},
        "tolerations": [{"key": "edge", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}},
        "securityContext": {"runAsUser": 0, "runAsNonRoot": False, "fsGroup": 2000},
        "volumes": [{"name": "data", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 420}},
                    {"name": "tok", "projected": {"sources": [{"serviceAccountToken": {"path": "t",
                                                                                       "expirationSeconds": 3600}}]}}],
        "initContainers": [{"name": "init", "image": "busybox", "command": ["sh", "-c", "true"], "resources": {}}],
        "containers": [{
            "name": "app", "image": "app:1", "args": ["--port=8080"],
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
            "env": [{"name": "A", "value": "1"},
                    {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw", "optional": False}}},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}}],
            "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "250m"}},
            "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"},
                              "initialDelaySeconds": 5, "periodSeconds": 10},
            "readinessProbe": {"exec": {"command": ["cat", "/ready"]}},
            "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }],
        "terminationGracePeriodSeconds": 0,
        "serviceAccountName": "sa",
        "enableServiceLinks": False,
    },
}
OBJECTS = [
    {"kind": "DaemonSet", "apiVersion": "apps/v1", "metadata": META, "spec": {
        "selector": {"matchLabels": {"app": "x"}}, "template": POD_TEMPLATE,
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%", "maxSurge": 0}},
        "revisionHistoryLimit": 0}},
    {"kind": "Job", "apiVersion": "batch/v1", "metadata": META, "spec": {
        "parallelism": 2, "completions": 3, "backoffLimit": 0, "activeDeadlineSeconds": 1 << 40,
        "ttlSecondsAfterFinished": 0, "template": POD_TEMPLATE}},
    {"kind": "CronJob", "apiVersion": "batch/v1", "metadata": META, "spec": {
        "schedule": "*/5 * * * *", "timeZone": "Etc/UTC", "suspend": False, "concurrencyPolicy": "Forbid",
        "jobTemplate": {"metadata": {"labels": {"app": "x"}}, "spec": {"template": POD_TEMPLATE}}}},
    {"kind": "PodDisruptionBudget", "apiVersion": "policy/v1", "metadata": META, "spec": {
        "maxUnavailable": "25%", "selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}},
    {"kind": "PriorityClass", "apiVersion": "scheduling.k8s.io/v1", "metadata": {"name": "zero"}, "value": 0,
     "globalDefault": True, "description": "d", "preemptionPolicy": "Never"},
    {"kind": "ResourceQuota", "apiVersion": "v1", "metadata": META, "spec": {
        "hard": {"cpu": "2", "requests.memory": "1Gi", "pods": "10"},
        "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["hi"]}]}}},
    {"kind": "Ingress", "apiVersion": "networking.k8s.io/v1", "metadata": META, "spec": {
        "ingressClassName": "nginx", "tls": [{"hosts": ["a.example"], "secretName": "tls"}],
        "defaultBackend": {"resource": {"apiGroup": "k8s.example", "kind": "Bucket", "name": "b"}},
        "rules": [{"host": "a.example", "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"name": "http"}}}}]}}]}},
    {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1", "metadata": {"name": "sa"}, "spec": {
        "audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600,
        "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "u-2"}}},
    {"kind": "HorizontalPodAutoscaler", "apiVersion": "autoscaling/v1", "metadata": META, "spec": {
        "scaleTargetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"},
        "minReplicas": 1, "maxReplicas": 3, "targetCPUUtilizationPercentage": 80}},
    {"kind": "HorizontalPodAutoscaler", "apiVersion": "autoscaling/v2", "metadata": META, "spec": {
        "scaleTargetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"}, "maxReplicas": 5,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                                "averageUtilization": 70}}}],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                                   "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}}}},
    {"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1", "metadata": {"name": "agg"},
     "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}],
     "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"rbac.example/aggregate": "true"}}]}},
    {"kind": "Secret", "apiVersion": "v1", "metadata": META, "type": "helm.sh/release.v1",
     "data": {"release": base64.b64encode(bytes(range(256))).decode()}, "immutable": False},
    {"kind": "Service", "apiVersion": "v1", "metadata": META, "spec": {
        "type": "NodePort", "selector": {"app": "x"}, "ports": [{"name": "http", "port": 80, "targetPort": "http",
                                                                  "nodePort": 30080, "protocol": "TCP"}],
        "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}}},
    {"kind": "Event", "apiVersion": "v1", "metadata": {"name": "e", "namespace": "ns"},
     "involvedObject": {"kind": "Pod", "name": "p", "namespace": "ns"}, "reason": "Started",
     "firstTimestamp": "2024-02-29T12:00:00Z", "eventTime": "2024-02-29T12:00:00.123456Z",
     "series": {"count": 2, "lastObservedTime": "2024-02-29T12:00:01.000001Z"}, "type": "Normal"},
    {"kind": "ControllerRevision", "apiVersion": "apps/v1", "metadata": META, "revision": 1,
     "data": {"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}},
    {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "managedFields": [
        {"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "time": "2024-01-01T00:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}]},
     "spec": {"containers": [{"name": "c", "image": "i", "resources": {}}],
              "ephemeralContainers": [{"name": "debug", "image": "busybox", "targetContainerName": "c",
                                       "resources": {}}]}},
    {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "n", "deletionGracePeriodSeconds": 0},
     "spec": {"finalizers": ["kubernetes"]}},
]


@pytest.mark.parametrize("obj", [pytest.param(o, id=f"{o['apiVersion']}/{o['kind']}") for o in OBJECTS])
def test_round_trip_through_the_protobuf_package(obj):
    assert round_trip(obj) == obj


def test_round_trip_covers_every_kind_kubectl_and_helm_send():
    sent = {("v1", "Secret"), ("v1", "Service"), ("apps/v1", "DaemonSet"), ("batch/v1", "Job"),
            ("batch/v1", "CronJob"), ("policy/v1", "PodDisruptionBudget"), ("scheduling.k8s.io/v1", "PriorityClass"),
            ("v1", "ResourceQuota"), ("networking.k8s.io/v1", "Ingress"), ("authentication.k8s.io/v1", "TokenRequest"),
            ("autoscaling/v1", "HorizontalPodAutoscaler"), ("autoscaling/v2", "HorizontalPodAutoscaler"),
            ("rbac.authorization.k8s.io/v1", "ClusterRole")}
    assert sent <= {(o["apiVersion"], o["kind"]) for o in OBJECTS}
    golden = {c["json"]["kind"] for c in GOLDEN}
    assert {"Namespace", "ConfigMap", "ServiceAccount", "Deployment", "Role", "RoleBinding",
            "ClusterRoleBinding"} <= golden


def test_a_zero_scalar_without_keep_zero_is_omitted_like_go_omitempty():
    obj = {"kind": "Service", "apiVersion": "v1", "metadata": {"name": "s"},
           "spec": {"ports": [{"port": 80, "nodePort": 0}], "publishNotReadyAddresses": False}}
    assert round_trip(obj)["spec"] == {"ports": [{"port": 80}]}


def test_map_and_list_entries_without_a_json_value_are_dropped_not_leaked():
    limits = ld(1, ld(1, "cpu") + ld(2, ld(1, "1"))) + ld(1, ld(1, "memory") + ld(2, b""))
    pod = ld(1, ld(1, "p")) + ld(2, ld(2, ld(1, "c") + ld(8, limits)))
    obj = decode_body(envelope("v1", "Pod", pod))
    assert obj["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "1"}}
    orjson.dumps(obj)
