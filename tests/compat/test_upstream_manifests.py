"""Upstream Sedna manifests apply unchanged with the real kubectl, and re-apply as unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from shared import apis

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples" / "upstream").glob("*.yaml"))


@pytest.fixture
async def with_crds(kubectl):
    rc, out, err = await kubectl("apply", "-f", str(REPO / "charts" / "sedna" / "crds"))
    assert rc == 0, err
    assert out.count("created") == 11
    return kubectl


async def test_every_upstream_example_applies_then_is_unchanged(with_crds):
    kubectl = with_crds
    for path in EXAMPLES:
        rc, out, err = await kubectl("apply", "-f", str(path))
        assert rc == 0, f"{path.name}: {err}"
        assert out and all(line.endswith(" created") for line in out.splitlines()), out
    for path in EXAMPLES:
        rc, out, err = await kubectl("apply", "-f", str(path))
        assert rc == 0, f"{path.name}: {err}"
        # A Secret written with stringData re-applies as "configured", as on a real server: the
        # server folds stringData into data, so kubectl's three-way diff always finds it missing
        # (kubernetes/kubernetes#87736); the write itself is a no-op.
        assert all(line.endswith(" unchanged") or (line.startswith("secret/") and line.endswith(" configured"))
                   for line in out.splitlines()), f"{path.name}: {out}"
    rc, out, err = await kubectl("get", ",".join(k.plural for k in apis.ALL_KINDS), "-o", "name")
    assert rc == 0, err
    assert set(out.splitlines()) == _sedna_objects()
    assert "jointinferenceservice.sedna.io/helmet-detection-inference-example" in out.splitlines()


def _sedna_objects() -> set[str]:
    """`kubectl get -o name` of every sedna.io object the examples hold."""
    docs = [doc for path in EXAMPLES for doc in yaml.safe_load_all(path.read_text()) if doc]
    return {f"{doc['kind'].lower()}.{apis.GROUP}/{doc['metadata']['name']}" for doc in docs
            if doc["apiVersion"] == apis.API_VERSION}


def test_examples_hold_every_kind():
    docs = [doc for path in EXAMPLES for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert {d["kind"] for d in docs if d["apiVersion"] == apis.API_VERSION} == {
        k.kind for k in apis.ALL_KINDS}


async def test_invalid_upstream_style_manifest_is_rejected_naming_the_field(with_crds):
    kubectl = with_crds
    bad = """apiVersion: sedna.io/v1alpha1
kind: Dataset
metadata: {name: broken}
spec: {url: /data/x.txt, format: txt}
"""
    rc, out, err = await kubectl("apply", "-f", "-", stdin=bad)
    assert rc != 0
    assert "spec.nodeName: Required value" in err
