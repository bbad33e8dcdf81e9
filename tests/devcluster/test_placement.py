"""The scheduler's filters, pure: operators, matchFields, taints against tolerations, the message."""

from __future__ import annotations

from collections import Counter

import pytest

from devcluster.controllers.nodes import build_node
from devcluster.controllers.placement import (
    misfit,
    requirement_matches,
    tolerates,
    unschedulable_message,
)
from devcluster.controllers.scheduler import pick_node


def _node(name="n1", labels=None, taints=None, ready=True, cordoned=False):
    node = build_node(name, 0)
    node["metadata"]["labels"].update(labels or {})
    if taints:
        node["spec"]["taints"] = taints
    if cordoned:
        node["spec"]["unschedulable"] = True
    if not ready:
        node["status"]["conditions"][0]["status"] = "False"
    return node


def _affinity(*terms):
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}}


@pytest.mark.parametrize("expr, labels, want", [
    pytest.param({"key": "zone", "operator": "In", "values": ["a", "b"]}, {"zone": "b"}, True, id="in"),
    pytest.param({"key": "zone", "operator": "In", "values": ["a"]}, {}, False, id="in-absent"),
    pytest.param({"key": "zone", "operator": "NotIn", "values": ["a"]}, {}, True, id="notin-absent"),
    pytest.param({"key": "zone", "operator": "NotIn", "values": ["a"]}, {"zone": "a"}, False, id="notin"),
    pytest.param({"key": "gpu", "operator": "Exists"}, {"gpu": ""}, True, id="exists"),
    pytest.param({"key": "gpu", "operator": "DoesNotExist"}, {"gpu": ""}, False, id="does-not-exist"),
    pytest.param({"key": "cores", "operator": "Gt", "values": ["4"]}, {"cores": "8"}, True, id="gt"),
    pytest.param({"key": "cores", "operator": "Lt", "values": ["4"]}, {"cores": "8"}, False, id="lt"),
    pytest.param({"key": "cores", "operator": "Gt", "values": ["4"]}, {"cores": "many"}, False, id="gt-not-int"),
])
def test_requirement_operators(expr, labels, want):
    assert requirement_matches(expr, labels) is want


def test_terms_are_ored_and_match_fields_use_the_node_name():
    node = _node("edge-a", labels={"zone": "x"})
    no = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["y"]}]}
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["edge-a"]}]}
    assert misfit(_affinity(no, by_name), node) is None
    assert misfit(_affinity(no), node) == "node(s) didn't match Pod's node affinity/selector"
    assert misfit(_affinity({}), node) is not None  # an empty term matches nothing


@pytest.mark.parametrize("toleration, taint, want", [
    pytest.param({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"},
                 {"key": "k", "value": "v", "effect": "NoSchedule"}, True, id="equal"),
    pytest.param({"key": "k", "value": "w"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, False,
                 id="value-differs"),
    pytest.param({"key": "k", "operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoExecute"}, True,
                 id="exists-any-effect"),
    pytest.param({"operator": "Exists"}, {"key": "any", "effect": "NoSchedule"}, True, id="wildcard"),
    pytest.param({"key": "k", "operator": "Exists", "effect": "NoExecute"}, {"key": "k", "effect": "NoSchedule"},
                 False, id="effect-differs"),
])
def test_tolerations(toleration, taint, want):
    assert tolerates(toleration, taint) is want


def test_taints_cordon_and_readiness_give_the_real_reasons():
    tainted = _node("a", taints=[{"key": "dedicated", "value": "gm", "effect": "NoSchedule"},
                                 {"key": "soft", "effect": "PreferNoSchedule"}])
    assert misfit({}, tainted) == "node(s) had untolerated taint {dedicated: gm}"
    assert misfit({"tolerations": [{"key": "dedicated", "operator": "Exists"}]}, tainted) is None
    assert misfit({}, _node("b", cordoned=True)) == "node(s) were unschedulable"
    assert misfit({"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                    "effect": "NoSchedule"}]}, _node("b", cordoned=True)) is None
    assert misfit({}, _node("c", ready=False)) == "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"


def test_message_counts_and_sorts_reasons():
    nodes = [_node("a", taints=[{"key": "t", "effect": "NoExecute"}]), _node("b"), _node("c")]
    pod = {"spec": {"nodeSelector": {"disk": "ssd"}}}
    assert pick_node(pod, nodes, Counter()) == (None, (
        "0/3 nodes are available: 1 node(s) had untolerated taint {t: }, 2 node(s) didn't match Pod's node "
        "affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."))
    assert unschedulable_message(0, Counter()) == "no nodes available to schedule pods"
