"""Pure parts of the Deployment controller: hash format, RS shape, rollout arithmetic."""

import re

import pytest

from devcluster.controllers.deployment import build_rs, rs_annotations, template_matches
from devcluster.controllers.podhash import fnv32a, pod_template_hash, safe_encode
from devcluster.controllers.rollout import (
    IntOrPercentError,
    RSCounts,
    fenceposts,
    new_rs_replicas,
    resolve_int_or_percent,
    scale_down_old,
)

TEMPLATE = {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}


def _deployment(**spec):
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "uid": "u-1",
                     "annotations": {"team": "a", "kubectl.kubernetes.io/last-applied-configuration": "{}",
                                     "deployment.kubernetes.io/revision": "4"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": TEMPLATE, **spec},
    }


def test_fnv32a_known_vectors():
    assert fnv32a(b"") == 0x811C9DC5
    assert fnv32a(b"a") == 0xE40C292C
    assert fnv32a(b"foobar") == 0xBF9CF968


def test_safe_encode_maps_digits_like_kubernetes():
    assert safe_encode("0123456789") == "456789bcdf"


def test_pod_template_hash_format_and_stability():
    h = pod_template_hash(TEMPLATE)
    assert re.fullmatch(r"[4-9bcdf]{1,10}", h)
    assert h == pod_template_hash({"spec": TEMPLATE["spec"], "metadata": TEMPLATE["metadata"]})
    assert h != pod_template_hash(TEMPLATE, 1)
    changed = {**TEMPLATE, "spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}
    assert h != pod_template_hash(changed)


def test_build_rs_names_labels_selector_and_annotations():
    d = _deployment(minReadySeconds=2)
    rs = build_rs(d, pod_hash="5d59d67564", replicas=2, revision=5, surge=1)
    assert rs["metadata"]["name"] == "web-5d59d67564"
    assert rs["metadata"]["labels"] == {"app": "web", "pod-template-hash": "5d59d67564"}
    assert rs["spec"]["selector"] == {"matchLabels": {"app": "web", "pod-template-hash": "5d59d67564"}}
    assert rs["spec"]["template"]["metadata"]["labels"]["pod-template-hash"] == "5d59d67564"
    assert rs["spec"]["minReadySeconds"] == 2
    assert rs["metadata"]["annotations"] == {
        "team": "a",
        "deployment.kubernetes.io/revision": "5",
        "deployment.kubernetes.io/desired-replicas": "3",
        "deployment.kubernetes.io/max-replicas": "4",
    }
    ref = rs["metadata"]["ownerReferences"][0]
    assert ref == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u-1",
                   "controller": True, "blockOwnerDeletion": True}
    assert template_matches(rs, d)
    assert TEMPLATE["metadata"]["labels"] == {"app": "web"}  # the deployment was not touched


def test_rs_annotations_keep_revision_history():
    base = {"deployment.kubernetes.io/revision": "2", "deployment.kubernetes.io/revision-history": "1"}
    out = rs_annotations(_deployment(), base, revision=None, surge=0)
    assert out["deployment.kubernetes.io/revision"] == "2"
    assert out["deployment.kubernetes.io/revision-history"] == "1"
    assert out["deployment.kubernetes.io/max-replicas"] == "3"


@pytest.mark.parametrize(("value", "total", "up", "want"), [
    pytest.param(2, 10, True, 2, id="int"),
    pytest.param("25%", 10, True, 3, id="pct-up"),
    pytest.param("25%", 10, False, 2, id="pct-down"),
    pytest.param("100%", 3, False, 3, id="all"),
    pytest.param("0%", 3, True, 0, id="zero"),
])
def test_resolve_int_or_percent(value, total, up, want):
    assert resolve_int_or_percent(value, total, round_up=up, default="25%") == want


@pytest.mark.parametrize("bad", ["abc", "x%", True, 1.5])
def test_resolve_int_or_percent_rejects_garbage(bad):
    with pytest.raises(IntOrPercentError):
        resolve_int_or_percent(bad, 4, round_up=True, default="25%")


def test_fenceposts_never_both_zero():
    assert fenceposts(0, 0, 3) == (0, 1)
    assert fenceposts(None, None, 4) == (1, 1)
    assert fenceposts("25%", "25%", 1) == (1, 0)


def test_new_rs_scale_up_respects_surge():
    assert new_rs_replicas(replicas=3, surge=1, new_spec=0, total_spec=0) == 3  # first rollout
    assert new_rs_replicas(replicas=3, surge=1, new_spec=0, total_spec=3) == 1
    assert new_rs_replicas(replicas=3, surge=1, new_spec=1, total_spec=4) == 1  # at the cap
    assert new_rs_replicas(replicas=3, surge=1, new_spec=2, total_spec=3) == 3
    assert new_rs_replicas(replicas=2, surge=1, new_spec=5, total_spec=5) == 2  # scaled down


def test_scale_down_old_keeps_min_available():
    # 3 replicas, maxUnavailable 0: one new pod not yet available -> nothing may go
    old = [RSCounts("old", 3, 3)]
    assert scale_down_old(old, replicas=3, unavailable=0, new=RSCounts("new", 1, 0)) == {}
    # the new pod became available: one old pod may go
    assert scale_down_old(old, replicas=3, unavailable=0, new=RSCounts("new", 1, 1)) == {"old": 2}


def test_scale_down_old_removes_unhealthy_first_oldest_first():
    old = [RSCounts("a", 2, 0), RSCounts("b", 2, 2)]
    plan = scale_down_old(old, replicas=4, unavailable=1, new=RSCounts("n", 1, 1))
    assert plan == {"a": 0}  # unhealthy pods cost no availability; b stays for min availability
    assert scale_down_old([RSCounts("a", 0, 0)], replicas=1, unavailable=0, new=RSCounts("n", 1, 1)) == {}
