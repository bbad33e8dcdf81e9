"""The GM's cache shapes (gm/controllers/caches.py) and the index from a Secret back to the objects naming it."""

from __future__ import annotations

import pytest

from gm.kube.client import KubeClient
from gm.kube.informer import InformerFactory
from gm.kube.metrics import KubeMetrics
from gm.kube.resources import DEPLOYMENTS, GVR, NODES, PODS, SECRETS
from gm.reconcile.caches import LAST_APPLIED, slim_secret, transform_for
from gm.reconcile.credentials import credential_refs


def secret(type_: str = "Opaque", **meta) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": type_,
            "metadata": {"name": "s", "namespace": "ns", "resourceVersion": "7", **meta},
            "data": {"ACCESS_KEY_ID": "YQ=="}, "stringData": {"SECRET_ACCESS_KEY": "b"}}


def test_slim_secret_keeps_what_builders_read_and_drops_the_copies():
    full = secret(annotations={"s3-endpoint": "minio:9000", LAST_APPLIED: '{"data": "again"}'},
                  managedFields=[{"manager": "kubectl"}])
    slim = slim_secret(full)
    assert slim == {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": "s", "namespace": "ns", "resourceVersion": "7",
                                 "annotations": {"s3-endpoint": "minio:9000"}},
                    "data": {"ACCESS_KEY_ID": "YQ=="}, "stringData": {"SECRET_ACCESS_KEY": "b"}}
    assert LAST_APPLIED in full["metadata"]["annotations"]  # the informer's input is not changed


@pytest.mark.parametrize("type_", [
    pytest.param("helm.sh/release.v1", id="helm-release"),
    pytest.param("kubernetes.io/service-account-token", id="sa-token"),
])
def test_slim_secret_drops_the_data_of_types_no_credential_has(type_):
    slim = slim_secret(secret(type_))
    assert "data" not in slim and "stringData" not in slim
    assert slim["metadata"]["name"] == "s" and slim["type"] == type_


def test_credential_refs_name_every_secret_in_the_spec_once():
    job = {"metadata": {"name": "j", "namespace": "ns"},
           "spec": {"credentialName": "a", "trainingWorkers": [
               {"dataset": {"name": "d", "credentialName": "b"}}, {"credentialName": "a"}],
               "other": {"credentialName": ""}}}
    assert credential_refs(job) == ["ns/a", "ns/b"]
    assert credential_refs({"metadata": {"name": "m", "namespace": "ns"}, "spec": {"url": "/x"}}) == []


MANAGED = [{"manager": "kubelet", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]


def test_a_cached_pod_keeps_placement_and_phase_and_drops_the_rest():
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"},
                        "annotations": {"sedna.io/spec-hash": "h", LAST_APPLIED: "{}"},
                        "ownerReferences": [{"uid": "o", "controller": True}], "managedFields": MANAGED},
           "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "env": [{"name": "X", "value": "1"}]}]},
           "status": {"phase": "Failed", "message": "oom",
                      "conditions": [{"type": "PodScheduled"}, {"type": "Ready", "status": "False"}],
                      "containerStatuses": [{"name": "c", "imageID": "sha256:..."}]}}
    slim = transform_for(PODS)(pod)
    assert slim["metadata"] == {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"},
                                "annotations": {"sedna.io/spec-hash": "h"},
                                "ownerReferences": [{"uid": "o", "controller": True}]}
    assert slim["spec"] == {"nodeName": "edge-1"}
    assert slim["status"] == {"phase": "Failed", "message": "oom", "conditions": [{"type": "PodScheduled"}]}
    assert "managedFields" in pod["metadata"] and "containers" in pod["spec"]  # the input is not changed


def test_a_cached_deployment_keeps_what_an_update_carries_over():
    dep = {"metadata": {"name": "d", "managedFields": MANAGED},
           "spec": {"replicas": 3, "selector": {"matchLabels": {"a": "b"}}, "template": {"spec": {}}},
           "status": {"availableReplicas": 1, "conditions": [{"type": "Available"}, {"type": "Progressing"}]}}
    slim = transform_for(DEPLOYMENTS)(dep)
    assert slim == {"metadata": {"name": "d"}, "spec": {"replicas": 3, "selector": {"matchLabels": {"a": "b"}}},
                    "status": {"availableReplicas": 1, "conditions": [{"type": "Progressing"}]}}


def test_a_cached_node_keeps_its_name_labels_and_addresses():
    node = {"metadata": {"name": "n", "labels": {"x": "y"}, "annotations": {"big": "..."}},
            "spec": {"podCIDR": "10.0.0.0/24"},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}], "images": [{"names": ["a"]}]}}
    assert transform_for(NODES)(node) == {"metadata": {"name": "n", "labels": {"x": "y"}}, "spec": {},
                                          "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}


def test_a_cr_is_whole_but_for_managed_fields():
    cr = {"metadata": {"name": "ji", "managedFields": MANAGED}, "spec": {"x": 1}, "status": {"y": 2}}
    gvr = GVR("sedna.io", "v1alpha1", "jointinferenceservices")
    assert transform_for(gvr)(cr) == {"metadata": {"name": "ji"}, "spec": {"x": 1}, "status": {"y": 2}}


def test_every_informer_of_a_type_gets_the_types_transform():
    factory = InformerFactory(object.__new__(KubeClient), transforms=transform_for, metrics=KubeMetrics())
    assert factory.informer(PODS, label_selector="a=b").transform is transform_for(PODS)
    assert factory.informer(PODS, label_selector="c").transform is transform_for(PODS)
    assert factory.informer(SECRETS).transform is slim_secret


def test_cached_objects_share_their_repeated_strings():
    uid = "".join(["acfc6972-be5e-43ec-", "8b7a-d687be735890"])  # built, so not a constant
    a = transform_for(DEPLOYMENTS)({"metadata": {"name": "a", "labels": {"x/uid": "".join([uid])}},
                                    "spec": {"selector": {"matchLabels": {"x/uid": "".join([uid])}}}})
    b = transform_for(PODS)({"metadata": {"name": "b", "labels": {"x/uid": "".join([uid])}}})
    first = a["metadata"]["labels"]["x/uid"]
    assert first is a["spec"]["selector"]["matchLabels"]["x/uid"] is b["metadata"]["labels"]["x/uid"]
    long = "v" * 1000
    assert transform_for(PODS)({"metadata": {"name": "c", "annotations": {"k": long}}})["metadata"][
        "annotations"]["k"] == long
