"""Built-in object and CRD validation: exact field paths and messages of the real server."""

from __future__ import annotations

import copy

import pytest

from devcluster.machinery.resource import ResourceType
from devcluster.strategy.crds import validate_crd
from devcluster.strategy.dispatch import validate_object

PODS = ResourceType("", "v1", "pods", "Pod", True)
SERVICES = ResourceType("", "v1", "services", "Service", True)
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", False)
DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True)
REPLICASETS = ResourceType("apps", "v1", "replicasets", "ReplicaSet", True)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True)
CRDS = ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)
JOBS = ResourceType("sedna.io", "v1alpha1", "federatedlearningjobs", "FederatedLearningJob", True, crd=True)

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def pod(**spec):
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}], **spec}}


def deployment(selector=None, labels=None, **spec):
    return {"metadata": {"name": "web"},
            "spec": {"replicas": 1,
                     "selector": {"matchLabels": {"app": "web"}} if selector is None else selector,
                     "template": {"metadata": {"labels": {"app": "web"} if labels is None else labels},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}},
                     **spec}}


def _messages(rt, obj, old=None):
    return [e.message() for e in validate_object(rt, obj, old)]


@pytest.mark.parametrize("rt,obj,expected", [
    pytest.param(PODS, pod(), [], id="pod-ok"),
    pytest.param(PODS, {"metadata": {"name": "Web_1"}, "spec": pod()["spec"]},
                 [f'metadata.name: Invalid value: "Web_1": {SUBDOMAIN_MSG}'], id="name-subdomain"),
    pytest.param(PODS, {"metadata": {"name": "a" * 254}, "spec": pod()["spec"]},
                 [f'metadata.name: Invalid value: "{"a" * 254}": must be no more than 253 characters'], id="name-long"),
    pytest.param(PODS, {"metadata": {}, "spec": pod()["spec"]},
                 ["metadata.name: Required value: name or generateName is required"], id="name-required"),
    pytest.param(PODS, {"metadata": {"generateName": "p-"}, "spec": pod()["spec"]}, [], id="generate-name"),
    pytest.param(NAMESPACES, {"metadata": {"name": "a.b"}}, [f'metadata.name: Invalid value: "a.b": {LABEL_MSG}'],
                 id="namespace-label"),
    pytest.param(SERVICES, {"metadata": {"name": "1svc"}, "spec": {"ports": [{"port": 80}]}},
                 [f'metadata.name: Invalid value: "1svc": {DNS1035_MSG}'], id="service-dns1035"),
    pytest.param(PODS, {"metadata": {"name": "p", "labels": {"app": "-bad"}}, "spec": pod()["spec"]},
                 [f'metadata.labels: Invalid value: "-bad": {LABEL_VALUE_MSG}'], id="label-value"),
    pytest.param(PODS, {"metadata": {"name": "p", "labels": {"a/b/c": "x", "ok": "v" * 64}}, "spec": pod()["spec"]},
                 ['metadata.labels: Invalid value: "a/b/c": a qualified name must consist of alphanumeric characters, '
                  "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or "
                  "'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') "
                  "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                  f'metadata.labels: Invalid value: "{"v" * 64}": must be no more than 63 characters'],
                 id="label-key-and-long-value"),
    pytest.param(PODS, {"metadata": {"name": "p"}, "spec": {"containers": []}},
                 ["spec.containers: Required value"], id="pod-no-containers"),
    pytest.param(PODS, {"metadata": {"name": "p"}, "spec": {"containers": [{"image": "i"}, {"name": "c"}]}},
                 ["spec.containers[0].name: Required value", "spec.containers[1].image: Required value"],
                 id="pod-name-image-required"),
    pytest.param(PODS, {"metadata": {"name": "p"}, "spec": {"initContainers": [{"name": "c", "image": "i"}],
                                                            "containers": [{"name": "c", "image": "i"}]}},
                 ['spec.containers[0].name: Duplicate value: "c"'], id="pod-duplicate-across-init"),
    pytest.param(PODS, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "C", "image": "i"}]}},
                 [f'spec.containers[0].name: Invalid value: "C": {LABEL_MSG}'], id="container-name-label"),
    pytest.param(PODS, pod(restartPolicy="Sometimes"),
                 ['spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", '
                  '"Never"'], id="restart-policy"),
    pytest.param(PODS, {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "i", "ports": [{"containerPort": 0}, {"containerPort": 80, "protocol": "HTTP"}],
         "env": [{"value": "x"}]}]}},
                 ["spec.containers[0].ports[0].containerPort: Invalid value: 0: must be between 1 and 65535, inclusive",
                  'spec.containers[0].ports[1].protocol: Unsupported value: "HTTP": supported values: "SCTP", "TCP", '
                  '"UDP"', "spec.containers[0].env[0].name: Required value"], id="container-ports-env"),
    pytest.param(DEPLOYMENTS, deployment(), [], id="deploy-ok"),
    pytest.param(DEPLOYMENTS, deployment(labels={"app": "db", "x": "y"}),
                 ['spec.template.metadata.labels: Invalid value: map[string]string{"app":"db", "x":"y"}: '
                  "`selector` does not match template `labels`"], id="deploy-selector-mismatch"),
    pytest.param(DEPLOYMENTS, {"metadata": {"name": "web"}, "spec": {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}},
                 ["spec.template.metadata.labels: Invalid value: map[string]string(nil): `selector` does not match "
                  "template `labels`"], id="deploy-template-without-labels"),
    pytest.param(DEPLOYMENTS, deployment(selector={}),
                 ["spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), "
                  "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for deployment"],
                 id="deploy-empty-selector"),
    pytest.param(DEPLOYMENTS, {"metadata": {"name": "web"}, "spec": {"template": deployment()["spec"]["template"]}},
                 ["spec.selector: Required value"], id="deploy-no-selector"),
    pytest.param(DEPLOYMENTS, deployment(replicas=-1, strategy={"type": "Fast"}),
                 ["spec.replicas: Invalid value: -1: must be greater than or equal to 0",
                  'spec.strategy.type: Unsupported value: "Fast": supported values: "Recreate", "RollingUpdate"'],
                 id="deploy-replicas-strategy"),
    pytest.param(DEPLOYMENTS, deployment(strategy={"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}),
                 ["spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'"],
                 id="deploy-recreate-rolling"),
    pytest.param(DEPLOYMENTS, deployment(selector={"matchExpressions": [{"key": "app", "operator": "Like"},
                                                                        {"key": "x", "operator": "In"}]}),
                 ['spec.selector.matchExpressions[0].operator: Invalid value: "Like": not a valid selector operator',
                  "spec.selector.matchExpressions[1].values: Required value: must be specified when `operator` is "
                  "'In' or 'NotIn'"], id="deploy-bad-expressions"),
    pytest.param(REPLICASETS, deployment(selector={"matchExpressions": [{"key": "app", "operator": "Exists"}]}),
                 [], id="rs-expression-selector"),
    pytest.param(REPLICASETS, {**deployment(), "spec": {**deployment()["spec"], "template": {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}},
                 ['spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always"'],
                 id="rs-template-restart-policy"),
    pytest.param(SERVICES, {"metadata": {"name": "s"}, "spec": {"type": "Magic", "ports": [
        {"port": 80, "name": "http"}, {"port": 70000, "name": "http", "protocol": "ICMP"}, {"port": 81}]}},
                 ['spec.type: Unsupported value: "Magic": supported values: "ClusterIP", "ExternalName", '
                  '"LoadBalancer", "NodePort"',
                  'spec.ports[1].name: Duplicate value: "http"',
                  "spec.ports[1].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
                  'spec.ports[1].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"',
                  "spec.ports[2].name: Required value"], id="service-ports"),
    pytest.param(SERVICES, {"metadata": {"name": "s"}, "spec": {}}, ["spec.ports: Required value"],
                 id="service-needs-ports"),
    pytest.param(SERVICES, {"metadata": {"name": "s"}, "spec": {"clusterIP": "None"}}, [], id="headless-no-ports"),
    pytest.param(LEASES, {"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 0}},
                 ["spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"], id="lease-duration"),
    pytest.param(LEASES, {"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 15}}, [], id="lease-ok"),
    pytest.param(JOBS, {"metadata": {"name": "j"}, "spec": {"anything": True}}, [], id="cr-metadata-only"),
])
def test_validate_object(rt, obj, expected):
    before = copy.deepcopy(obj)
    assert _messages(rt, obj) == expected
    assert obj == before


def test_field_error_reasons_for_causes():
    errors = validate_object(PODS, {"metadata": {"name": "p"}, "spec": {"restartPolicy": "x", "containers": [
        {"name": "c"}, {"name": "c", "image": "i"}]}})
    assert [(e.field, e.reason) for e in errors] == [
        ("spec.containers[0].image", "FieldValueRequired"),
        ("spec.containers[1].name", "FieldValueDuplicate"),
        ("spec.restartPolicy", "FieldValueNotSupported")]


@pytest.mark.parametrize("rt,old,new,expected", [
    pytest.param(DEPLOYMENTS, deployment(), deployment(replicas=3), [], id="deploy-scale-ok"),
    pytest.param(DEPLOYMENTS, deployment(), deployment(selector={"matchLabels": {"app": "web", "v": "2"}},
                                                       labels={"app": "web", "v": "2"}),
                 ['spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{"app":"web", '
                  '"v":"2"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable'],
                 id="deploy-selector-immutable"),
    pytest.param(REPLICASETS, deployment(), deployment(selector={"matchExpressions": [
        {"key": "app", "operator": "In", "values": ["web"]}]}),
                 ['spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), '
                  'MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:"app", '
                  'Operator:"In", Values:[]string{"web"}}}}: field is immutable'], id="rs-selector-immutable"),
    pytest.param(PODS, pod(tolerations=[{"key": "a"}]),
                 {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i2"}],
                                                      "tolerations": [{"key": "a"}, {"key": "b"}],
                                                      "activeDeadlineSeconds": 30}}, [], id="pod-allowed-changes"),
    pytest.param(PODS, pod(), pod(nodeName="n1"), [], id="pod-bind-unscheduled"),
])
def test_update_rules(rt, old, new, expected):
    assert _messages(rt, new, old) == expected


POD_FORBIDDEN = (
    "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing "
    "tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


@pytest.mark.parametrize("old,new", [
    pytest.param(pod(nodeName="n1"), pod(nodeName="n2"), id="node-name-moves"),
    pytest.param(pod(tolerations=[{"key": "a"}]), pod(tolerations=[{"key": "b"}]), id="toleration-removed"),
    pytest.param(pod(), pod(restartPolicy="Never"), id="restart-policy"),
    pytest.param(pod(), {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}]}]}}, id="env-changed"),
])
def test_pod_spec_is_immutable_except_listed_fields(old, new):
    assert _messages(PODS, new, old) == [POD_FORBIDDEN]


SCHEMA = {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object"}}}}


def crd(**overrides):
    body = {"metadata": {"name": "models.sedna.io"},
            "spec": {"group": "sedna.io", "scope": "Namespaced",
                     "names": {"plural": "models", "singular": "model", "kind": "Model", "listKind": "ModelList"},
                     "versions": [{"name": "v1alpha1", "served": True, "storage": True, "schema": SCHEMA}]}}
    body["spec"].update(overrides)
    return body


@pytest.mark.parametrize("obj,expected", [
    pytest.param(crd(), [], id="ok"),
    pytest.param(crd(group="sedna"), ['metadata.name: Invalid value: "models.sedna.io": must be '
                                      'spec.names.plural+"."+spec.group',
                                      'spec.group: Invalid value: "sedna": should be a domain with at least one dot'],
                 id="group-without-dot"),
    pytest.param(crd(scope="Global"), ['spec.scope: Unsupported value: "Global": supported values: "Cluster", '
                                       '"Namespaced"'], id="scope"),
    pytest.param(crd(names={"plural": "models"}), ["spec.names.kind: Required value"], id="kind-required"),
    pytest.param(crd(names={"plural": "Models", "kind": "Model"}),
                 ['metadata.name: Invalid value: "models.sedna.io": must be spec.names.plural+"."+spec.group',
                  f'spec.names.plural: Invalid value: "Models": {DNS1035_MSG}'], id="plural-syntax"),
    pytest.param(crd(versions=[{"name": "v1", "served": True, "storage": True, "schema": SCHEMA},
                               {"name": "v2", "served": True, "storage": True, "schema": SCHEMA}]),
                 ["spec.versions: Invalid value: must have exactly one version marked as storage version"],
                 id="two-storage-versions"),
    pytest.param(crd(versions=[{"name": "v1", "served": True, "storage": True}]),
                 ["spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"], id="no-schema"),
    pytest.param(crd(versions=[{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
        "type": "object", "properties": {"spec": {"properties": {}}}}},
        "additionalPrinterColumns": [{"name": "S", "type": "enum", "jsonPath": ".status.s"}]}]),
                 ["spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be "
                  "empty for specified object fields",
                  'spec.versions[0].additionalPrinterColumns[0].type: Unsupported value: "enum": supported values: '
                  '"boolean", "date", "integer", "number", "string"'], id="schema-and-columns"),
])
def test_validate_crd(obj, expected):
    assert [e.message() for e in validate_crd(obj)] == expected


def test_crd_metadata_is_checked_by_validate_object_and_spec_by_validate_crd():
    body = crd()
    body["metadata"] = {"name": "Models.sedna.io", "labels": {"k": "-"}}
    assert _messages(CRDS, body) == [f'metadata.name: Invalid value: "Models.sedna.io": {SUBDOMAIN_MSG}',
                                     f'metadata.labels: Invalid value: "-": {LABEL_VALUE_MSG}']
    assert [e.message() for e in validate_crd(body)] == [
        'metadata.name: Invalid value: "Models.sedna.io": must be spec.names.plural+"."+spec.group']
