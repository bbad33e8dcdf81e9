"""The field table of the built-in types: generated from the proto inputs, loaded by devcluster.apitypes."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client import models

from devcluster.server import apitypes
from devcluster.tools import protogen


def test_committed_table_is_what_the_generator_writes():
    assert protogen.OUT.read_text() == protogen.render(protogen.build())


def test_generator_rejects_a_line_it_does_not_understand():
    with pytest.raises(protogen.ProtoError, match="x.proto:3"):
        protogen.parse("package a.b;\nmessage M {\n  optional string name 1;\n}\n", source="x.proto")


def test_deployment_fields_carry_wire_and_json_facts():
    dep = apitypes.type_of("apps/v1", "Deployment")
    assert dep is not None and dep.name == "k8s.io.api.apps.v1.Deployment"
    assert [(f.name, f.number) for f in dep.fields] == [("metadata", 1), ("spec", 2), ("status", 3)]
    spec = dep.field_by_number(2).message_type
    replicas = spec.json_fields()["replicas"]
    assert (replicas.kind, replicas.number, replicas.keep_zero) == ("int32", 1, True)
    template = spec.json_fields()["template"]
    assert template.type_name == "k8s.io.api.core.v1.PodTemplateSpec"


@pytest.mark.parametrize(("message", "json_name", "kind", "key"), [
    pytest.param("k8s.io.api.core.v1.Secret", "data", "bytes", "string", id="secret-data-bytes-map"),
    pytest.param("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta", "labels", "string", "string", id="labels"),
    pytest.param("k8s.io.api.core.v1.ResourceRequirements", "limits", "message", "string", id="quantity-map"),
])
def test_map_fields(message, json_name, kind, key):
    f = apitypes.message(message).json_fields()[json_name]
    assert (f.kind, f.map_key, f.is_map) == (kind, key, True)


def test_inline_fields_expand_in_json_names():
    volume = apitypes.message("k8s.io.api.core.v1.Volume").json_fields()
    assert {"name", "emptyDir", "configMap", "secret", "hostPath"} <= set(volume)
    assert "volumeSource" not in volume
    assert "name" in apitypes.message("k8s.io.api.core.v1.SecretKeySelector").json_fields()
    assert "http" in apitypes.message("k8s.io.api.networking.v1.IngressRule").json_fields()


def test_json_name_differs_from_proto_name_where_go_says_so():
    ref = apitypes.message("k8s.io.api.authentication.v1.BoundObjectReference").field_by_number(4)
    assert (ref.name, ref.json_name) == ("uID", "uid")


@pytest.mark.parametrize(("api_version", "kind"), [
    ("v1", "Namespace"), ("v1", "Secret"), ("v1", "ConfigMap"), ("v1", "ServiceAccount"), ("v1", "Service"),
    ("v1", "ResourceQuota"), ("apps/v1", "Deployment"), ("apps/v1", "DaemonSet"), ("batch/v1", "Job"),
    ("batch/v1", "CronJob"), ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ("policy/v1", "PodDisruptionBudget"),
    ("scheduling.k8s.io/v1", "PriorityClass"), ("networking.k8s.io/v1", "Ingress"),
    ("authentication.k8s.io/v1", "TokenRequest"), ("autoscaling/v1", "HorizontalPodAutoscaler"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"), ("apps/v1", "DeleteOptions"),
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"), ("authentication.k8s.io/v1", "SelfSubjectReview"),
    ("coordination.k8s.io/v1", "Lease"), ("events.k8s.io/v1", "Event"),
])
def test_kinds_kubectl_and_helm_send_are_known(api_version, kind):
    mt = apitypes.type_of(api_version, kind)
    assert mt is not None and mt.short_name == kind


def test_unknown_kind_is_none():
    assert apitypes.type_of("v1", "Deployment") is None
    assert apitypes.type_of("example.com/v1", "Widget") is None


def test_special_types_are_marked():
    specials = {n: apitypes.message(n).special for n in apitypes.message_names() if apitypes.message(n).special}
    assert specials["k8s.io.apimachinery.pkg.api.resource.Quantity"] == "quantity"
    assert specials["k8s.io.apimachinery.pkg.util.intstr.IntOrString"] == "intorstring"
    assert specials["k8s.io.apimachinery.pkg.apis.meta.v1.Time"] == "time"
    assert specials["k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime"] == "microtime"
    assert specials["k8s.io.apimachinery.pkg.runtime.RawExtension"] == "rawjson"


def _client_model(name: str):
    pkg, short = name.rsplit(".", 1)
    return getattr(models, ("V2" if pkg.endswith("autoscaling.v2") else "V1") + short, None)


def test_json_names_agree_with_the_client_models():
    """Every JSON name the Python client's models know is a JSON name of the table's message.

    The client is generated from the server's OpenAPI (JSON side), the table from the proto
    files (wire side): agreement checks the JSON names and the inline expansions. The client
    may be newer than the table, so fields it knows that the table lacks are listed here.
    """
    newer_than_table = {("k8s.io.api.core.v1.PodSpec", "schedulingGroup"),
                        ("k8s.io.api.core.v1.PodStatus", "nodeAllocatableResourceClaimStatuses"),
                        ("k8s.io.apimachinery.pkg.apis.meta.v1.ListMeta", "shardInfo")}
    checked, missing = 0, []
    for name in apitypes.message_names():
        mt = apitypes.message(name)
        cls = _client_model(name)
        if cls is None or mt.special or name == "k8s.io.api.core.v1.Preconditions" or ".autoscaling.v1." in name:
            continue
        checked += 1
        known = set(cls.attribute_map.values()) - {"apiVersion", "kind"}
        missing += [(name, j) for j in known - set(mt.json_fields()) if (name, j) not in newer_than_table]
    assert checked > 300
    assert missing == []
