"""The PATCH flavours of devcluster.patch: results, errors, and that inputs stay untouched."""

from __future__ import annotations

import copy

import pytest

from devcluster.machinery.errors import ApiError
from devcluster.storage.apply import merge_applied
from devcluster.storage.managedfields import Shape
from devcluster.storage.patch import json_patch, merge_patch, strategic_merge_patch

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "labels": {"app": "web"}, "finalizers": ["a/x"]},
    "spec": {
        "containers": [
            {"name": "main", "image": "img:1", "env": [{"name": "A", "value": "1"}],
             "ports": [{"containerPort": 80, "name": "http"}]},
            {"name": "side", "image": "side:1"},
        ],
        "volumes": [{"name": "v1", "emptyDir": {}}],
        "tolerations": [{"key": "k1"}],
    },
}


# --------------------------------------------------------------------------- merge patch

@pytest.mark.parametrize("target,patch,expected", [
    pytest.param({"a": "b"}, {"a": "c"}, {"a": "c"}, id="replace-scalar"),
    pytest.param({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}, id="add-key"),
    pytest.param({"a": "b"}, {"a": None}, {}, id="null-deletes"),
    pytest.param({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}, id="null-deletes-one"),
    pytest.param({"a": ["b"]}, {"a": "c"}, {"a": "c"}, id="list-replaced-by-scalar"),
    pytest.param({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}, id="scalar-replaced-by-list"),
    pytest.param({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}, id="nested"),
    pytest.param({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}, id="lists-replace-wholesale"),
    pytest.param({"e": None}, {"a": 1}, {"e": None, "a": 1}, id="existing-null-kept"),
    pytest.param({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}, id="nulls-in-new-subtree-dropped"),
    pytest.param({"a": "b"}, ["c"], ["c"], id="non-object-patch-replaces"),
])
def test_merge_patch_rfc7386_examples(target, patch, expected):
    before = copy.deepcopy(target)
    assert merge_patch(target, patch) == expected
    assert target == before


def test_merge_patch_shares_untouched_subtrees_and_copies_the_changed_path():
    result = merge_patch(POD, {"metadata": {"labels": {"tier": "fe"}}})
    assert result["metadata"]["labels"] == {"app": "web", "tier": "fe"}
    assert result["spec"] is POD["spec"]
    assert result["metadata"] is not POD["metadata"]
    assert POD["metadata"]["labels"] == {"app": "web"}


# --------------------------------------------------------------------------- JSON patch

@pytest.mark.parametrize("ops,expected", [
    pytest.param([{"op": "add", "path": "/b", "value": 2}], {"a": {"x": [1, 2]}, "b": 2}, id="add-key"),
    pytest.param([{"op": "add", "path": "/a/x/-", "value": 3}], {"a": {"x": [1, 2, 3]}}, id="dash-appends"),
    pytest.param([{"op": "add", "path": "/a/x/0", "value": 0}], {"a": {"x": [0, 1, 2]}}, id="insert-at-index"),
    pytest.param([{"op": "remove", "path": "/a/x/0"}], {"a": {"x": [2]}}, id="remove-index"),
    pytest.param([{"op": "replace", "path": "/a/x", "value": "s"}], {"a": {"x": "s"}}, id="replace"),
    pytest.param([{"op": "move", "from": "/a/x", "path": "/y"}], {"a": {}, "y": [1, 2]}, id="move"),
    pytest.param([{"op": "copy", "from": "/a/x", "path": "/a/z"}], {"a": {"x": [1, 2], "z": [1, 2]}}, id="copy"),
    pytest.param([{"op": "test", "path": "/a/x/1", "value": 2.0}], {"a": {"x": [1, 2]}}, id="test-numeric-equal"),
    pytest.param([{"op": "add", "path": "/a~1b", "value": 1}, {"op": "add", "path": "/c~0d", "value": 2}],
                 {"a": {"x": [1, 2]}, "a/b": 1, "c~d": 2}, id="pointer-escapes"),
    pytest.param([{"op": "replace", "path": "", "value": {"n": 1}}], {"n": 1}, id="replace-root"),
    pytest.param([], {"a": {"x": [1, 2]}}, id="empty-list-no-change"),
])
def test_json_patch_operations(ops, expected):
    target = {"a": {"x": [1, 2]}}
    assert json_patch(target, ops) == expected
    assert target == {"a": {"x": [1, 2]}}


def test_json_patch_edits_inside_an_added_value_do_not_touch_the_patch_body():
    ops = [{"op": "add", "path": "/spec", "value": {"n": 1}},
           {"op": "replace", "path": "/spec/n", "value": 2}]
    assert json_patch({}, ops) == {"spec": {"n": 2}}
    assert ops[0]["value"] == {"n": 1}


def test_json_patch_on_a_stored_object_leaves_it_intact():
    before = copy.deepcopy(POD)
    result = json_patch(POD, [{"op": "replace", "path": "/spec/containers/0/image", "value": "img:2"},
                              {"op": "remove", "path": "/metadata/finalizers/0"}])
    assert result["spec"]["containers"][0]["image"] == "img:2"
    assert result["metadata"]["finalizers"] == []
    assert POD == before
    assert result["spec"]["volumes"] is POD["spec"]["volumes"]


@pytest.mark.parametrize("body,message", [
    pytest.param({"op": "add"}, "json: cannot unmarshal object into Go value of type jsonpatch.Patch", id="object"),
    pytest.param("x", "json: cannot unmarshal string into Go value of type jsonpatch.Patch", id="string"),
    pytest.param([1], "json: cannot unmarshal number into Go value of type jsonpatch.Operation", id="number-op"),
])
def test_json_patch_body_not_an_op_list_is_400(body, message):
    with pytest.raises(ApiError) as err:
        json_patch({}, body)
    assert (err.value.code, err.value.reason, err.value.message) == (400, "BadRequest", message)


@pytest.mark.parametrize("ops,message", [
    pytest.param([{"op": "remove", "path": "/nope"}],
                 "json patch operation 0 (remove /nope): doc is missing path: /nope: missing value", id="remove-missing"),
    pytest.param([{"op": "replace", "path": "/nope", "value": 1}],
                 "json patch operation 0 (replace /nope): doc is missing key: /nope: missing value", id="replace-missing"),
    pytest.param([{"op": "add", "path": "/a/b/c", "value": 1}],
                 "json patch operation 0 (add /a/b/c): doc is missing path: /a/b/c: missing value", id="add-no-parent"),
    pytest.param([{"op": "add", "path": "/a", "value": 1}, {"op": "test", "path": "/a", "value": 2}],
                 "json patch operation 1 (test /a): testing value /a failed: test failed", id="test-fails"),
    pytest.param([{"op": "test", "path": "/l/0", "value": 1}],
                 "json patch operation 0 (test /l/0): testing value /l/0 failed: test failed", id="true-is-not-1"),
    pytest.param([{"op": "add", "path": "/l/5", "value": 1}],
                 "json patch operation 0 (add /l/5): index 5 out of bounds (length 1) in /l/5", id="index-out-of-range"),
    pytest.param([{"op": "add", "path": "/l/01", "value": 1}],
                 "json patch operation 0 (add /l/01): invalid array index '01' in /l/01", id="leading-zero"),
    pytest.param([{"op": "frob", "path": "/a"}], "json patch operation 0 (frob /a): Unexpected kind: frob", id="unknown-op"),
    pytest.param([{"op": "add", "value": 1}], "json patch operation 0 (add None): operation missing 'path' field", id="no-path"),
    pytest.param([{"op": "add", "path": "/x"}], "json patch operation 0 (add /x): operation missing 'value' field", id="no-value"),
    pytest.param([{"op": "add", "path": "x", "value": 1}],
                 "json patch operation 0 (add x): JSON pointer must be empty or start with '/': 'x'", id="bad-pointer"),
    pytest.param([{"op": "move", "from": "/m", "path": "/m/n"}],
                 "json patch operation 0 (move /m/n): cannot move /m into its own child /m/n", id="move-into-child"),
])
def test_json_patch_op_failures_are_422(ops, message):
    target = {"l": [True], "m": {}}
    with pytest.raises(ApiError) as err:
        json_patch(target, ops)
    assert (err.value.code, err.value.reason, err.value.message) == (422, "Invalid", message)
    assert target == {"l": [True], "m": {}}


# --------------------------------------------------------------------------- strategic merge

def _smp(patch):
    before = copy.deepcopy(POD)
    result = strategic_merge_patch(POD, patch)
    assert POD == before, "the target must not be mutated"
    return result


def test_smp_merges_containers_by_name_and_env_by_name():
    result = _smp({"spec": {"containers": [{"name": "main", "image": "img:2",
                                            "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "9"}]}]}})
    # Items the patch names keep the patch's order (B was not in the original: it goes first).
    assert result["spec"]["containers"] == [
        {"name": "main", "image": "img:2", "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "9"}],
         "ports": [{"containerPort": 80, "name": "http"}]},
        {"name": "side", "image": "side:1"},
    ]


def test_smp_container_ports_merge_by_container_port():
    result = _smp({"spec": {"containers": [{"name": "main", "ports": [{"containerPort": 80, "protocol": "TCP"},
                                                                      {"containerPort": 81}]}]}})
    assert result["spec"]["containers"][0]["ports"] == [
        {"containerPort": 80, "name": "http", "protocol": "TCP"}, {"containerPort": 81}]


def test_smp_service_ports_merge_by_port():
    svc = {"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}}
    result = strategic_merge_patch(svc, {"spec": {"ports": [{"port": 443, "targetPort": 8443}]}})
    assert result["spec"]["ports"] == [{"port": 80, "name": "http"},
                                       {"port": 443, "name": "https", "targetPort": 8443}]


def test_smp_unkeyed_lists_are_replaced():
    result = _smp({"spec": {"tolerations": [{"key": "k2"}]}})
    assert result["spec"]["tolerations"] == [{"key": "k2"}]


def test_smp_finalizers_set_merge():
    result = _smp({"metadata": {"finalizers": ["b/y", "a/x"]}})
    assert result["metadata"]["finalizers"] == ["b/y", "a/x"]


def test_smp_patch_delete_removes_keyed_item():
    result = _smp({"spec": {"containers": [{"$patch": "delete", "name": "side"}]}})
    assert [c["name"] for c in result["spec"]["containers"]] == ["main"]


def test_smp_patch_replace_on_a_map():
    result = _smp({"metadata": {"labels": {"$patch": "replace", "only": "this"}}})
    assert result["metadata"]["labels"] == {"only": "this"}


def test_smp_patch_replace_on_a_list():
    result = _smp({"spec": {"volumes": [{"$patch": "replace"}, {"name": "v9", "secret": {"secretName": "s"}}]}})
    assert result["spec"]["volumes"] == [{"name": "v9", "secret": {"secretName": "s"}}]


def test_smp_patch_delete_on_a_map_removes_the_field():
    result = _smp({"metadata": {"labels": {"$patch": "delete"}}})
    assert "labels" not in result["metadata"]


def test_smp_set_element_order_is_honoured_and_removed():
    result = _smp({"spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "main"}],
                            "containers": [{"name": "side", "image": "side:2"}]}})
    assert [(c["name"], c["image"]) for c in result["spec"]["containers"]] == [("side", "side:2"), ("main", "img:1")]
    assert not any(k.startswith("$") for k in result["spec"])


def test_smp_set_element_order_with_new_item():
    result = _smp({"spec": {"$setElementOrder/containers": [{"name": "new"}, {"name": "main"}, {"name": "side"}],
                            "containers": [{"name": "new", "image": "n:1"}]}})
    assert [c["name"] for c in result["spec"]["containers"]] == ["new", "main", "side"]


def test_smp_delete_from_primitive_list():
    result = _smp({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/x"]}})
    assert result["metadata"]["finalizers"] == []
    assert "$deleteFromPrimitiveList/finalizers" not in result["metadata"]


def test_smp_retain_keys():
    target = {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}
    result = strategic_merge_patch(target, {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}})
    assert result == {"spec": {"strategy": {"type": "Recreate"}}}


def test_smp_null_deletes_and_directives_vanish_from_new_items():
    result = _smp({"metadata": {"labels": {"app": None}},
                   "spec": {"containers": [{"name": "extra", "image": "e", "env": None,
                                            "$setElementOrder/env": []}]}})
    assert result["metadata"]["labels"] == {}
    assert result["spec"]["containers"][0] == {"name": "extra", "image": "e"}


def test_smp_conditions_by_type_and_owner_references_by_uid():
    target = {"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "X", "status": "True"}]},
              "metadata": {"ownerReferences": [{"uid": "u1", "name": "a"}]}}
    result = strategic_merge_patch(target, {
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        "metadata": {"ownerReferences": [{"uid": "u2", "name": "b"}]}})
    assert result["status"]["conditions"] == [{"type": "Ready", "status": "True"}, {"type": "X", "status": "True"}]
    assert result["metadata"]["ownerReferences"] == [{"uid": "u2", "name": "b"}, {"uid": "u1", "name": "a"}]


@pytest.mark.parametrize("patch,code,message", [
    pytest.param(["x"], 400, "strategic merge patch body must be a JSON object", id="list-body"),
    pytest.param({"spec": {"containers": [{"image": "x"}]}}, 422,
                 "strategic merge patch: containers: every item must be an object with the merge key 'name'",
                 id="missing-merge-key"),
    pytest.param({"metadata": {"$patch": "frob"}}, 422, "strategic merge patch: unknown patch type: 'frob' in map",
                 id="bad-directive"),
    pytest.param({"spec": {"$setElementOrder/containers": "x"}}, 422,
                 "strategic merge patch: $setElementOrder/containers must be a list, got string", id="bad-order"),
])
def test_smp_bad_bodies(patch, code, message):
    with pytest.raises(ApiError) as err:
        strategic_merge_patch(POD, patch)
    assert (err.value.code, err.value.message) == (code, message)


# --------------------------------------------------------------------------- apply merge

def test_apply_merges_maps_keeps_absent_keys_and_merges_keyed_lists():
    before = copy.deepcopy(POD)
    result = merge_applied(POD, {"metadata": {"labels": {"tier": "fe"}},
                                 "spec": {"containers": [{"name": "main", "image": "img:3"}],
                                          "tolerations": [{"key": "k9"}]}}, Shape())
    assert POD == before
    assert result["metadata"]["labels"] == {"app": "web", "tier": "fe"}
    assert result["metadata"]["finalizers"] == ["a/x"]
    assert [(c["name"], c["image"]) for c in result["spec"]["containers"]] == [("main", "img:3"), ("side", "side:1")]
    assert result["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]
    assert result["spec"]["tolerations"] == [{"key": "k9"}]
    assert result["spec"]["volumes"] is POD["spec"]["volumes"]


def test_apply_merge_creates_from_nothing_and_null_removes():
    assert merge_applied({}, {"a": {"b": 1, "n": None}}, Shape()) == {"a": {"b": 1}}
    assert merge_applied({"a": {"b": 1, "c": 2}}, {"a": {"b": None}}, Shape()) == {"a": {"c": 2}}


@pytest.mark.parametrize(("live", "config", "expected"), [
    pytest.param(["a", "b"], ["c"], ["a", "b", "c"], id="new-item-after-live-only-items"),
    pytest.param(["a", "b"], ["c", "b"], ["a", "c", "b"], id="new-item-before-the-shared-one-it-precedes"),
    pytest.param(["a", "b", "c"], ["c", "a"], ["b", "c", "a"], id="shared-items-in-config-order-live-only-kept-in-place"),
])
def test_apply_merge_list_order(live, config, expected):
    target = {"spec": {"containers": [{"name": n} for n in live]}}
    result = merge_applied(target, {"spec": {"containers": [{"name": n} for n in config]}}, Shape())
    assert [c["name"] for c in result["spec"]["containers"]] == expected


@pytest.mark.parametrize(("original", "patch", "expected"), [
    pytest.param(["a", "b"], ["c"], ["c", "a", "b"], id="added-item-goes-first"),
    pytest.param(["a", "b"], ["a", "c"], ["a", "c", "b"], id="added-after-a-named-item"),
    pytest.param(["a", "b"], ["b", "c"], ["a", "b", "c"], id="original-only-item-before-a-named-one-stays-first"),
    pytest.param(["a", "b", "c"], ["c", "a"], ["b", "c", "a"], id="named-items-in-patch-order-interleaved-by-original"),
    pytest.param(["a", "b"], [], ["a", "b"], id="empty-patch-keeps-order"),
])
def test_smp_keyed_list_order_follows_the_real_merge(original, patch, expected):
    target = {"spec": {"containers": [{"name": n, "image": "old"} for n in original]}}
    result = strategic_merge_patch(target, {"spec": {"containers": [{"name": n, "image": "new"} for n in patch]}})
    assert [c["name"] for c in result["spec"]["containers"]] == expected


def test_smp_set_element_order_wins_over_the_patch_order():
    target = {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}
    result = strategic_merge_patch(target, {"spec": {
        "$setElementOrder/containers": [{"name": "b"}, {"name": "c"}, {"name": "a"}],
        "containers": [{"name": "c"}]}})
    assert [c["name"] for c in result["spec"]["containers"]] == ["b", "c", "a"]
