"""Label and field selectors: every query form, selector objects, and the 400 messages."""

from __future__ import annotations

import pytest

from devcluster.machinery.errors import ApiError
from devcluster.machinery.resource import ResourceType
from devcluster.machinery.selectors import (
    label_selector_from_object,
    parse_field_selector,
    parse_label_selector,
    selector_to_string,
)

PODS = ResourceType("", "v1", "pods", "Pod", True)
NODES = ResourceType("", "v1", "nodes", "Node", False)
EVENTS = ResourceType("", "v1", "events", "Event", True)
NEW_EVENTS = ResourceType("events.k8s.io", "v1", "events", "Event", True)
REPLICASETS = ResourceType("apps", "v1", "replicasets", "ReplicaSet", True)
DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True)
JOBS = ResourceType("sedna.io", "v1alpha1", "federatedlearningjobs", "FederatedLearningJob", True, crd=True)

LABELS = {"app": "web", "tier": "fe", "n": "5", "empty": ""}


@pytest.mark.parametrize("text,expected", [
    pytest.param("", True, id="empty-selects-all"),
    pytest.param("   ", True, id="blank-selects-all"),
    pytest.param("app", True, id="exists"),
    pytest.param("nope", False, id="exists-missing"),
    pytest.param("!nope", True, id="not-exists"),
    pytest.param("!app", False, id="not-exists-present"),
    pytest.param("app=web", True, id="eq"),
    pytest.param("app==web", True, id="double-eq"),
    pytest.param("app=db", False, id="eq-other"),
    pytest.param("app!=db", True, id="neq"),
    pytest.param("app!=web", False, id="neq-same"),
    pytest.param("nope!=x", True, id="neq-matches-missing-key"),
    pytest.param("empty=", True, id="empty-value"),
    pytest.param("nope=", False, id="empty-value-needs-key"),
    pytest.param("app in (db,web)", True, id="in"),
    pytest.param("app in (db)", False, id="in-miss"),
    pytest.param("nope in (x)", False, id="in-missing-key"),
    pytest.param("app notin (db, x)", True, id="notin"),
    pytest.param("app notin (web)", False, id="notin-hit"),
    pytest.param("nope notin (x)", True, id="notin-matches-missing-key"),
    pytest.param("n>4", True, id="gt"),
    pytest.param("n>5", False, id="gt-equal"),
    pytest.param("n<6", True, id="lt"),
    pytest.param("app>1", False, id="gt-non-integer-label"),
    pytest.param("nope<9", False, id="lt-needs-key"),
    pytest.param(" app = web , tier in ( fe ) , !x ", True, id="spaces"),
    pytest.param("app=web,tier=be", False, id="and"),
    pytest.param("example.com/role!=db", True, id="prefixed-key"),
])
def test_label_selector_query_forms(text, expected):
    assert parse_label_selector(text).matches(LABELS) is expected


def test_label_selector_on_objects_without_labels():
    assert parse_label_selector("a!=b,!c,x notin (y)").matches(None) is True
    assert parse_label_selector("a").matches(None) is False
    assert parse_label_selector("").empty is True
    assert parse_label_selector("a").empty is False


@pytest.mark.parametrize("text,message", [
    pytest.param("a in ()", "values for 'a in' can't be empty", id="empty-set"),
    pytest.param("a b", "found 'b', expected: in, notin, =, ==, !=, >, <", id="two-words"),
    pytest.param("a=b=c", "found '=', expected: ',' or end of string", id="double-op"),
    pytest.param("a in (x", "found '', expected: ',' or ')'", id="unclosed"),
    pytest.param("a in x", "found 'x', expected: '('", id="no-paren"),
    pytest.param("a,", "found '', expected: identifier after ','", id="trailing-comma"),
    pytest.param("=x", "found '=', expected: identifier", id="no-key"),
    pytest.param("n>x", "for '>' and '<' the value of 'n' must be an integer, found 'x'", id="gt-non-integer"),
    pytest.param("a/b/c=x", 'invalid label key "a/b/c": a qualified name must consist of alphanumeric characters, '
                 "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or "
                 "'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') "
                 "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')", id="bad-key"),
    pytest.param("a=-x", 'invalid label value "-x": a valid label must be an empty string or consist of '
                 "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character "
                 "(e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is "
                 "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')", id="bad-value"),
])
def test_label_selector_parse_errors_are_400_naming_the_bad_part(text, message):
    with pytest.raises(ApiError) as err:
        parse_label_selector(text)
    assert err.value.code == 400
    assert err.value.reason == "BadRequest"
    assert err.value.message == f'unable to parse label selector "{text}": {message}'


@pytest.mark.parametrize("sel,labels,expected", [
    pytest.param({}, {"a": "b"}, True, id="empty-object-all"),
    pytest.param(None, {"a": "b"}, False, id="none-nothing"),
    pytest.param({"matchLabels": {"a": "b"}}, {"a": "b", "c": "d"}, True, id="match-labels"),
    pytest.param({"matchLabels": {"a": "b"}}, {"a": "c"}, False, id="match-labels-miss"),
    pytest.param({"matchExpressions": [{"key": "a", "operator": "In", "values": ["x", "b"]}]}, {"a": "b"}, True, id="in"),
    pytest.param({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["b"]}]}, {}, True, id="notin-absent"),
    pytest.param({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True, id="exists"),
    pytest.param({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False, id="dne"),
    pytest.param({"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "c", "operator": "Exists"}]},
                 {"a": "b"}, False, id="and"),
])
def test_label_selector_objects(sel, labels, expected):
    assert label_selector_from_object(sel).matches(labels) is expected


@pytest.mark.parametrize("sel,message", [
    pytest.param({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]},
                 '"Equals" is not a valid label selector operator', id="bad-operator"),
    pytest.param({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
                 "values: for 'in', 'notin' operators, values set can't be empty (key \"a\")", id="in-empty"),
    pytest.param({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
                 "values: values set must be empty for exists and does not exist (key \"a\")", id="exists-values"),
    pytest.param({"matchLabels": {"a": 1}}, 'invalid label value for key "a": 1', id="non-string-value"),
])
def test_label_selector_object_errors(sel, message):
    with pytest.raises(ApiError) as err:
        label_selector_from_object(sel)
    assert (err.value.code, err.value.message) == (400, message)


@pytest.mark.parametrize("sel,text", [
    pytest.param({}, "", id="empty"),
    pytest.param({"matchLabels": {"b": "1", "a": "2"}}, "a=2,b=1", id="sorted-by-key"),
    pytest.param({"matchLabels": {"app": "web"},
                  "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]},
                                       {"key": "x", "operator": "NotIn", "values": ["b"]},
                                       {"key": "canary", "operator": "DoesNotExist"},
                                       {"key": "b", "operator": "Exists"}]},
                 "app=web,b,!canary,env in (dev,prod),x notin (b)", id="all-operators"),
])
def test_selector_to_string(sel, text):
    assert selector_to_string(sel) == text
    assert str(parse_label_selector(text)) == text


POD = {"metadata": {"name": "p1", "namespace": "ns"},
       "spec": {"nodeName": "n1", "restartPolicy": "Always"},
       "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.7"}], "podIP": "10.0.0.7"}}


@pytest.mark.parametrize("rt,text,obj,expected", [
    pytest.param(PODS, "", POD, True, id="empty"),
    pytest.param(PODS, "metadata.name=p1", POD, True, id="name"),
    pytest.param(PODS, "metadata.namespace==ns", POD, True, id="namespace"),
    pytest.param(PODS, "metadata.name!=p1", POD, False, id="neq"),
    pytest.param(PODS, "spec.nodeName=n1,status.phase=Running", POD, True, id="and"),
    pytest.param(PODS, "spec.nodeName=n1,status.phase=Pending", POD, False, id="and-miss"),
    pytest.param(PODS, "spec.schedulerName=", POD, True, id="missing-is-empty"),
    pytest.param(PODS, "spec.nodeName!=", POD, True, id="unscheduled-filter"),
    pytest.param(PODS, "spec.hostNetwork=false", POD, True, id="bool-default-false"),
    pytest.param(PODS, "spec.hostNetwork=true", {**POD, "spec": {"hostNetwork": True}}, True, id="bool-true"),
    pytest.param(PODS, "status.podIP=10.0.0.7", POD, True, id="pod-ip"),
    pytest.param(NODES, "spec.unschedulable=false", {"metadata": {"name": "n"}}, True, id="node-unschedulable"),
    pytest.param(REPLICASETS, "status.replicas=0", {"metadata": {"name": "r"}}, True, id="rs-replicas-zero"),
    pytest.param(REPLICASETS, "status.replicas!=0", {"status": {"replicas": 3}}, True, id="rs-replicas"),
    pytest.param(EVENTS, "involvedObject.name=p1,involvedObject.kind=Pod,source=kubelet",
                 {"involvedObject": {"name": "p1", "kind": "Pod"}, "source": {"component": "kubelet"}},
                 True, id="core-event"),
    pytest.param(NEW_EVENTS, "involvedObject.name=p1,reportingComponent=ctl",
                 {"regarding": {"name": "p1"}, "reportingController": "ctl"}, True, id="events-k8s-io"),
    pytest.param(JOBS, "metadata.name=j", {"metadata": {"name": "j"}}, True, id="cr-name"),
    pytest.param(PODS, r"metadata.name=a\,b", {"metadata": {"name": "a,b"}}, True, id="escaped-comma"),
])
def test_field_selectors(rt, text, obj, expected):
    assert parse_field_selector(text, rt).matches(obj) is expected


@pytest.mark.parametrize("rt,text,message", [
    pytest.param(JOBS, "spec.x=1", '"spec.x" is not a known field selector: only "metadata.name", "metadata.namespace"',
                 id="cr-unknown"),
    pytest.param(PODS, "spec.x=1", "field label not supported: spec.x", id="builtin-unknown"),
    pytest.param(DEPLOYMENTS, "status.replicas=1", "field label not supported: status.replicas", id="not-for-deploy"),
    pytest.param(NODES, "metadata.namespace=x", "field label not supported: metadata.namespace", id="cluster-scoped-ns"),
    pytest.param(PODS, "metadata.name", "invalid selector: 'metadata.name'; can't understand 'metadata.name'",
                 id="no-operator"),
    pytest.param(PODS, "metadata.name in (a)", "invalid selector: 'metadata.name in (a)'; can't understand "
                 "'metadata.name in (a)'", id="no-sets"),
])
def test_field_selector_errors(rt, text, message):
    with pytest.raises(ApiError) as err:
        parse_field_selector(text, rt)
    assert (err.value.code, err.value.reason, err.value.message) == (400, "BadRequest", message)
