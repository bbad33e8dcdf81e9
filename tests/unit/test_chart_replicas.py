"""The chart runs the GM as replicas behind its Service: two by default, preferring different
nodes, kept available through node drains by a PodDisruptionBudget, with leader election on so
only one of them reconciles; one replica renders no budget (it would block every drain)."""

from __future__ import annotations

import pytest

from gm.config import parse_config
from tests.helm.chart import _one, render_chart
from tests.unit.test_chart_auth import gm_yaml, rendered


def _quantity_mib(value: str) -> float:
    units = {"Mi": 1, "Gi": 1024, "M": 1e6 / 2**20, "G": 1e9 / 2**20}
    for suffix, factor in units.items():
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    return float(value) / 2**20


def test_two_replicas_spread_across_nodes_with_a_disruption_budget() -> None:
    docs = render_chart()
    deploy = _one(docs, "Deployment")
    assert deploy["spec"]["replicas"] == 2
    affinity = deploy["spec"]["template"]["spec"]["affinity"]
    [term] = affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term == {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                       "labelSelector": {"matchLabels": {"sedna": "gm"}}}}
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in affinity["podAntiAffinity"]
    assert affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]  # still off the edge
    [pdb] = docs["gm-pdb.yaml"]
    assert (pdb["apiVersion"], pdb["kind"], pdb["metadata"]["name"], pdb["metadata"]["namespace"]) == (
        "policy/v1", "PodDisruptionBudget", "gm", "sedna")
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": {"sedna": "gm"}}}
    # the budget and the Service select exactly the Deployment's pods
    assert pdb["spec"]["selector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"] == \
        _one(docs, "Service")["spec"]["selector"]
    # only one of the replicas reconciles
    election = parse_config(gm_yaml(docs)).leaderElection
    assert election.enabled and election.leaseName == "sedna-gm"


@pytest.mark.parametrize("gm", [
    pytest.param({"replicas": 1}, id="one-replica"),
    pytest.param({"podDisruptionBudget": {"enabled": False}}, id="budget-off"),
])
def test_no_disruption_budget_for_one_replica_or_when_off(gm: dict) -> None:
    docs = rendered(gm=gm)
    assert docs["gm-pdb.yaml"] == []
    assert _one(docs, "Deployment")["spec"]["replicas"] == gm.get("replicas", 2)


def test_spread_can_be_turned_off() -> None:
    affinity = _one(rendered(gm={"spreadAcrossNodes": False}), "Deployment")["spec"]["template"]["spec"]["affinity"]
    assert set(affinity) == {"nodeAffinity"}


def test_memory_request_covers_the_gm_at_5000_crs() -> None:
    """~250 MiB at 5,000 CRs (bench/gm_fleet.py): requested, so the scheduler reserves it and
    the kubelet does not evict the GM first under memory pressure; the limit has room above it."""
    resources = _one(render_chart(), "Deployment")["spec"]["template"]["spec"]["containers"][0]["resources"]
    request, limit = (_quantity_mib(resources[k]["memory"]) for k in ("requests", "limits"))
    assert request >= 250
    assert limit >= 1.5 * request
