"""DevCluster.apply_manifests: what `sedna-devcluster --apply` and `make run` use."""

from __future__ import annotations

import pytest

CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.io}
spec:
  group: example.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
"""

OBJECTS = """apiVersion: example.io/v1
kind: Widget
metadata: {name: w1}
spec: {size: 3}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c1, namespace: kube-system}
data: {k: v}
"""


async def test_apply_creates_crds_then_their_objects_in_order(live, tmp_path):
    (tmp_path / "a-crd.yaml").write_text(CRD)
    (tmp_path / "b-objects.yml").write_text(OBJECTS)
    created = live.apply_manifests(tmp_path)
    assert created == ["CustomResourceDefinition/widgets.example.io", "Widget/w1", "ConfigMap/c1"]
    widget_rt = live.store.registry.lookup(group="example.io", version="v1", resource="widgets")
    assert live.store.get(widget_rt, "default", "w1")["spec"] == {"size": 3}
    cm_rt = live.store.registry.lookup(group="", version="v1", resource="configmaps")
    assert live.store.get(cm_rt, "kube-system", "c1")["data"] == {"k": "v"}


async def test_apply_refuses_unknown_kinds_and_invalid_objects(live, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: example.io/v1\nkind: Gadget\nmetadata: {name: g}\n")
    with pytest.raises(ValueError, match="no resource serves example.io/v1 Gadget"):
        live.apply_manifests(bad)
    (tmp_path / "crd.yaml").write_text(CRD)
    live.apply_manifests(tmp_path / "crd.yaml")
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text("apiVersion: example.io/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: big}\n")
    from devcluster.machinery.errors import ApiError
    with pytest.raises(ApiError) as exc:
        live.apply_manifests(invalid)
    assert exc.value.code == 422 and "spec.size" in exc.value.message


async def test_apply_reads_unquoted_clock_times_as_strings_like_kubectl(live, tmp_path):
    """YAML 1.1 makes `20:00` the base-60 integer 1200; kubectl keeps it a string."""
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: times}\n"
                                      "data: {start: 02:00, end: 20:00, last: 24:00}\n")
    live.apply_manifests(tmp_path / "cm.yaml")
    cm_rt = live.store.registry.lookup(group="", version="v1", resource="configmaps")
    assert live.store.get(cm_rt, "default", "times")["data"] == {"start": "02:00", "end": "20:00", "last": "24:00"}
