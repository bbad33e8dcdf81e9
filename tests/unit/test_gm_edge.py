"""The pure rules of gm/edge/objects.py: credential annotation, downstream copies (node assignment is
the registry's placement, tests/unit/test_placement.py)."""

from __future__ import annotations

import base64
import copy

import pytest

from gm.edge.objects import (
    CREDENTIAL_ANNOTATION,
    credential_annotation,
    credential_name,
    downstream_copy,
)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_credential_name_only_for_datasets_and_models():
    obj = {"spec": {"credentialName": "s3"}}
    assert credential_name("Dataset", obj) == "s3"
    assert credential_name("Model", obj) == "s3"
    assert credential_name("FederatedLearningJob", obj) is None
    assert credential_name("Dataset", {"spec": {}}) is None


def test_learning_jobs_carry_their_credential_down_as_upstream():
    obj = {"spec": {"credentialName": "out"}}
    assert credential_name("IncrementalLearningJob", obj) == "out"
    assert credential_name("LifelongLearningJob", obj) == "out"
    assert credential_name("JointInferenceService", obj) is None


def test_credential_annotation_data_overrides_annotations_sorted():
    secret = {"metadata": {"annotations": {"s3-endpoint": "minio:9000", "ACCESS_KEY_ID": "old"}},
              "data": {"SECRET_ACCESS_KEY": b64("s<k>"), "ACCESS_KEY_ID": b64("ak")}}
    assert credential_annotation(secret) == (
        '{"ACCESS_KEY_ID":"ak","SECRET_ACCESS_KEY":"s\\u003ck\\u003e","s3-endpoint":"minio:9000"}')


def test_credential_annotation_without_annotations_does_not_crash():
    # upstream panics on a Secret with data and no annotations (spec §4.6)
    assert credential_annotation({"metadata": {}, "data": {"K": b64("v")}}) == '{"K":"v"}'


def test_credential_annotation_bad_data():
    with pytest.raises(ValueError, match="data key 'K' is not base64 of UTF-8 text"):
        credential_annotation({"metadata": {}, "data": {"K": "%%%"}})


def test_downstream_copy_leaves_the_cached_object_alone_and_shares_its_spec():
    cached = {"metadata": {"name": "d", "annotations": {"a": "1"}}, "spec": {"nodeName": "e1"}}
    before = copy.deepcopy(cached)
    sent = downstream_copy("Dataset", cached, credential='{"K":"v"}')
    assert sent == {"kind": "Dataset", "apiVersion": "sedna.io/v1alpha1",
                    "metadata": {"name": "d", "annotations": {"a": "1", CREDENTIAL_ANNOTATION: '{"K":"v"}'}},
                    "spec": {"nodeName": "e1"}}
    assert cached == before  # the annotations went into new dicts
    assert sent["spec"] is cached["spec"]  # the rest is shared, not copied
