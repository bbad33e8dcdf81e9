"""devcluster.managedfields: managers, FieldsV1, and the ownership rules of an Update (pure)."""

from __future__ import annotations

import pytest

from devcluster.storage.managedfields import (
    Shape,
    base_entries,
    compare,
    decode_fields,
    encode_fields,
    field_set,
    manager_name,
    path_text,
    record_update,
)
from devcluster.storage.registry import Registry


@pytest.mark.parametrize(("field_manager", "agent", "expected"), [
    pytest.param("helm", "kubectl/v1.32.0", "helm", id="explicit-wins"),
    pytest.param(None, "kubectl/v1.32.0 (linux/amd64) kubernetes/70d3cc9", "kubectl", id="first-segment"),
    pytest.param(None, "OpenAPI-Generator/31.1.0/python", "OpenAPI-Generator", id="client-library"),
    pytest.param(None, "", "", id="none"),
    pytest.param(None, "a\tb/1", "ab", id="unprintable-dropped"),
    pytest.param(None, "x" * 200, "x" * 128, id="cut-to-128-bytes"),
])
def test_manager_name(field_manager, agent, expected):
    assert manager_name(field_manager, agent) == expected


def test_fields_v1_round_trip_and_format():
    paths = {("f:spec", "f:replicas"), ("f:spec", "f:containers", 'k:{"name":"web"}'),
             ("f:spec", "f:containers", 'k:{"name":"web"}', "f:image"), ("f:metadata", "f:finalizers", 'v:"a/x"')}
    tree = encode_fields(paths)
    assert tree == {"f:metadata": {"f:finalizers": {'v:"a/x"': {}}},
                    "f:spec": {"f:containers": {'k:{"name":"web"}': {".": {}, "f:image": {}}}, "f:replicas": {}}}
    assert list(tree["f:spec"]["f:containers"]['k:{"name":"web"}']) == [".", "f:image"]
    assert decode_fields(tree) == paths
    with pytest.raises(ValueError):
        decode_fields({"x:bad": {}})


def test_paths_print_as_in_conflict_messages():
    assert path_text(("f:spec", "f:containers", 'k:{"name":"web"}', "f:image")) == \
        '.spec.containers[name="web"].image'
    assert path_text(("f:spec", "f:ports", 'k:{"port":80,"protocol":"TCP"}')) == '.spec.ports[port=80,protocol="TCP"]'
    assert path_text(("f:metadata", "f:finalizers", 'v:"a/x"')) == '.metadata.finalizers[="a/x"]'


def test_applied_set_owns_leaves_and_items_not_maps():
    config = {"metadata": {"labels": {"app": "web"}},
              "spec": {"template": {"spec": {"containers": [{"name": "web", "ports": [{"containerPort": 80}]}]}},
                       "selector": {"matchLabels": {"app": "web"}}}}
    c = ("f:spec", "f:template", "f:spec", "f:containers", 'k:{"name":"web"}')
    assert field_set(config, Shape()) == {
        ("f:metadata", "f:labels", "f:app"), ("f:spec", "f:selector"), c, (*c, "f:name"),
        (*c, "f:ports", 'k:{"containerPort":80,"protocol":"TCP"}'),
        (*c, "f:ports", 'k:{"containerPort":80,"protocol":"TCP"}', "f:containerPort")}


def test_compare_adds_new_maps_as_nodes_but_not_zero_structs():
    diff = compare({}, {"metadata": {"labels": {"a": "1"}}, "spec": {"x": 1}}, Shape())
    assert diff.added == {("f:metadata", "f:labels"), ("f:metadata", "f:labels", "f:a"), ("f:spec", "f:x")}
    diff = compare({"data": {"a": "1", "b": "2"}}, {"data": {"a": "9", "c": "3"}}, Shape())
    assert (diff.added, diff.removed, diff.modified) == (
        {("f:data", "f:c")}, {("f:data", "f:b")}, {("f:data", "f:a")})


def _entry(manager: str, fields: dict, **extra) -> dict:
    return {"manager": manager, "operation": "Update", "apiVersion": "v1", "time": "2026-01-01T00:00:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": fields, **extra}


STORED = [_entry("stored", {"f:data": {"f:a": {}}})]


# The real field manager's decodeManagedFields: reset on `[]`/`[{}]`, the body's entries when
# they decode, else the stored ones; a subresource write never takes them from its body.
@pytest.mark.parametrize(("requested", "subresource", "expected"), [
    pytest.param(None, None, ["stored"], id="absent-keeps"),
    pytest.param([], None, [], id="empty-list-resets"),
    pytest.param([{}], None, [], id="single-empty-entry-resets"),
    pytest.param([{}, {}], None, ["stored"], id="two-empty-entries-are-malformed"),
    pytest.param([_entry("new", {})], None, ["new"], id="replaces"),
    pytest.param([_entry("new", {"f:data": {}})], "status", ["stored"], id="subresource-ignores-the-body"),
    pytest.param([{}], "status", ["stored"], id="subresource-never-resets"),
    pytest.param([_entry("bad", {}, operation="Nope")], None, ["stored"], id="bad-operation-keeps"),
    pytest.param([_entry("bad", {}, apiVersion="")], None, ["stored"], id="no-api-version-keeps"),
    pytest.param([_entry("bad", {}, fieldsType="")], None, ["stored"], id="no-fields-type-keeps"),
    pytest.param([_entry("bad", {"x:bad": {}})], None, ["stored"], id="bad-fields-v1-keeps"),
    pytest.param([_entry("new", {}), _entry("bad", {}, operation="")], None, ["stored"],
                 id="one-bad-entry-spoils-the-list"),
])
def test_base_entries(requested, subresource, expected):
    assert [e.manager for e in base_entries(requested, STORED, subresource=subresource)] == expected


def test_entries_from_a_request_are_re_encoded():
    sent = [_entry("me", {"f:data": {"f:b": {}, "f:a": {}}}, extra="dropped"), _entry("me", {"f:data": {"f:a": {}}})]
    (entry,) = base_entries(sent, STORED)  # one manager: the last entry wins
    assert entry.to_json() == _entry("me", {"f:data": {"f:a": {}}})


CM = Registry.with_builtins().for_kind("v1", "ConfigMap")


def _cm(data: dict, managed: list | None = None) -> dict:
    meta = {"name": "c", "managedFields": managed} if managed is not None else {"name": "c"}
    return {"metadata": meta, "data": data}


def test_an_update_sending_back_what_it_read_keeps_every_owner():
    owned = [_entry("applier", {"f:data": {"f:a": {}}}, operation="Apply"), _entry("editor", {"f:data": {"f:b": {}}})]
    old = _cm({"a": "1", "b": "2"}, owned)
    new = _cm({"a": "1", "b": "2", "c": "3"}, owned)
    record_update(CM, old, new, manager="kubectl-replace", subresource=None, requested=owned, now=0)
    assert {e["manager"]: e["fieldsV1"] for e in new["metadata"]["managedFields"]} == {
        "applier": {"f:data": {"f:a": {}}}, "editor": {"f:data": {"f:b": {}}},
        "kubectl-replace": {"f:data": {"f:c": {}}}}


@pytest.mark.parametrize("requested", [pytest.param([], id="empty-list"), pytest.param([{}], id="single-empty-entry")])
def test_an_update_that_resets_clears_ownership_and_stops_tracking(requested):
    old = _cm({"a": "1"}, STORED)
    new = _cm({"a": "2", "b": "2"}, requested)
    record_update(CM, old, new, manager="kubectl-edit", subresource=None, requested=requested, now=0)
    assert "managedFields" not in new["metadata"]
    # ...and an object nobody owns anything of stays untracked under updates (until an apply).
    newer = _cm({"a": "3"})
    record_update(CM, new, newer, manager="kubectl-edit", subresource=None, requested=None, now=0)
    assert "managedFields" not in newer["metadata"]


def test_a_create_that_resets_is_still_tracked():
    new = _cm({"a": "1"}, [{}])
    record_update(CM, None, new, manager="kubectl-create", subresource=None, requested=[{}], now=0)
    assert [e["manager"] for e in new["metadata"]["managedFields"]] == ["kubectl-create"]


def test_a_create_with_managed_fields_gives_the_creator_what_it_wrote():
    sent = [_entry("someone", {"f:data": {"f:a": {}}})]
    new = _cm({"a": "1"}, sent)
    record_update(CM, None, new, manager="kubectl-create", subresource=None, requested=sent, now=0)
    assert [(e["manager"], e["fieldsV1"]) for e in new["metadata"]["managedFields"]] == [
        ("kubectl-create", {"f:data": {".": {}, "f:a": {}}})]


def test_an_update_takes_the_fields_it_changes_from_other_managers():
    rt = Registry.with_builtins().for_kind("v1", "ConfigMap")
    old = {"metadata": {"name": "c", "managedFields": [
        {"manager": "applier", "operation": "Apply", "apiVersion": "v1", "time": "2026-01-01T00:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}}}}]},
        "data": {"a": "1", "b": "2"}}
    new = {"metadata": {"name": "c", "managedFields": old["metadata"]["managedFields"]}, "data": {"a": "9"}}
    record_update(rt, old, new, manager="editor", subresource=None, requested=None, now=0)
    entries = {e["manager"]: e for e in new["metadata"]["managedFields"]}
    assert entries["editor"]["fieldsV1"] == {"f:data": {"f:a": {}}}
    assert entries["editor"]["time"] == "1970-01-01T00:00:00Z"
    assert "applier" not in entries  # `a` was taken, `b` removed: nothing left to own


def test_apply_keeps_a_map_node_it_no_longer_names_while_it_owns_what_is_inside():
    from devcluster.storage.apply import server_side_apply

    rt = Registry.with_builtins().for_kind("v1", "ConfigMap")
    live = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1", "b": "2"}, "metadata": {
        "name": "c", "labels": {"app": "web"}, "managedFields": [
            {"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": "2026-01-01T00:00:00Z",
             "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {".": {}, "f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}]}}
    out = server_side_apply(rt, live, {"apiVersion": "v1", "kind": "ConfigMap",
                                       "metadata": {"name": "c", "labels": {"app": "web"}}, "data": {"a": "1"}},
                            manager="kubectl", force=False, now=0)
    assert out["metadata"]["labels"] == {"app": "web"}
    assert out["data"] == {"a": "1"}
    assert out["metadata"]["managedFields"][0]["fieldsV1"] == {"f:data": {"f:a": {}},
                                                               "f:metadata": {"f:labels": {"f:app": {}}}}
