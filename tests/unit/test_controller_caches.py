"""The GM's Secret cache shape and the index from a Secret back to the objects naming it."""

from __future__ import annotations

import pytest

from gm.controllers.common import LAST_APPLIED, credential_refs, slim_secret


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
