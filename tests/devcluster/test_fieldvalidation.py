"""Field validation, pure: unknown and duplicate fields, quantities, per directive and patch type."""

from __future__ import annotations

import orjson
import pytest

from devcluster.machinery.errors import ApiError
from devcluster.server.fieldvalidation import (
    SchemaView,
    check_object,
    check_patch,
    directive,
    duplicate_fields,
    warning_header,
)

Q = {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.api.resource.Quantity"}
SCHEMAS = {
    "Thing": {"type": "object", "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
        "metadata": {"allOf": [{"$ref": "#/components/schemas/Meta"}]},
        "spec": {"allOf": [{"$ref": "#/components/schemas/Spec"}]}}},
    "Meta": {"type": "object", "properties": {"name": {"type": "string"},
                                               "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
    "Spec": {"type": "object", "properties": {
        "paused": {"type": "boolean"},
        "items": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/Item"}]}},
        "raw": {"type": "object"}}},
    "Item": {"type": "object", "properties": {"name": {"type": "string"},
                                               "limits": {"type": "object", "additionalProperties": Q}}},
}


def _resolve(schema: dict) -> dict:
    ref = schema.get("$ref") or (schema.get("allOf") or [{}])[0].get("$ref")
    return SCHEMAS[ref.rsplit("/", 1)[1]] if ref else schema


VIEW = SchemaView(root=SCHEMAS["Thing"], resolve=_resolve)
TARGET = ("default", "t1", "example/v1", "Thing")


def _body(**spec) -> dict:
    return {"apiVersion": "example/v1", "kind": "Thing", "metadata": {"name": "t1"}, "spec": spec}


def test_strict_create_names_every_unknown_field_in_document_order() -> None:
    body = _body(foo=1, items=[{"name": "a", "bar": 2}], raw={"free": "form"})
    with pytest.raises(ApiError) as info:
        check_object(VIEW, body, kind="Thing", version="v1", mode="Strict", duplicates=[])
    assert info.value.code == 400
    assert info.value.message == ('Thing in version "v1" cannot be handled as a Thing: strict decoding error: '
                                  'unknown field "spec.foo", unknown field "spec.items[0].bar"')


def test_warn_drops_and_reports_ignore_drops_silently() -> None:
    body = _body(paused=True, foo=1)
    stored, warnings = check_object(VIEW, body, kind="Thing", version="v1", mode="Warn", duplicates=[])
    assert stored["spec"] == {"paused": True} and warnings == ['unknown field "spec.foo"']
    assert body["spec"] == {"paused": True, "foo": 1}  # the input is never modified
    stored, warnings = check_object(VIEW, body, kind="Thing", version="v1", mode="Ignore", duplicates=[])
    assert stored["spec"] == {"paused": True} and warnings == []


def test_duplicates_found_with_paths_and_unknown_wins_over_duplicate() -> None:
    raw = b'{"metadata":{"name":"a","name":"b"},"spec":{"foo":1,"foo":2,"paused":true,"paused":false}}'
    dups = duplicate_fields(raw)
    assert dups == ["metadata.name", "spec.foo", "spec.paused"]
    _, warnings = check_object(VIEW, orjson.loads(raw), kind="Thing", version="v1", mode="Warn", duplicates=dups)
    assert warnings == ['duplicate field "metadata.name"', 'unknown field "spec.foo"', 'duplicate field "spec.paused"']


def test_quantities_canonical_or_400_whatever_the_directive() -> None:
    stored, _ = check_object(VIEW, _body(items=[{"name": "a", "limits": {"cpu": "1000m", "memory": "1024Mi"}}]),
                             kind="Thing", version="v1", mode="Ignore", duplicates=[])
    assert stored["spec"]["items"][0]["limits"] == {"cpu": "1", "memory": "1Gi"}
    with pytest.raises(ApiError) as info:
        check_object(VIEW, _body(items=[{"limits": {"memory": "lots"}}]), kind="Thing", version="v1",
                     mode="Ignore", duplicates=[])
    assert info.value.code == 400
    assert info.value.message.startswith('Thing in version "v1" cannot be handled as a Thing: quantities must match')


def test_merge_patch_strict_is_422_on_field_patch() -> None:
    with pytest.raises(ApiError) as info:
        check_patch(VIEW, "merge", {"spec": {"zz": 1, "aa": 2}}, mode="Strict", duplicates=[], target=TARGET)
    err = info.value
    assert err.code == 422 and err.details["causes"][0]["field"] == "patch"
    assert err.message.endswith('strict decoding error: unknown field "spec.aa", unknown field "spec.zz"')


def test_strategic_directives_are_not_fields_and_null_deletes_pass() -> None:
    patch = {"spec": {"$setElementOrder/items": [{"name": "a"}], "items": [{"name": "a", "$patch": "delete"}],
                      "foo": None}}
    cleaned, warnings = check_patch(VIEW, "strategic", patch, mode="Strict", duplicates=[], target=TARGET)
    assert cleaned == patch and warnings == []


def test_json_patch_checks_op_keys_and_value_at_its_path() -> None:
    ops = [{"op": "add", "path": "/spec/foo", "value": 1, "x": 1},
           {"op": "add", "path": "/spec/items/0", "value": {"name": "b", "bar": 1}},
           {"op": "replace", "path": "/spec/paused", "value": True}]
    cleaned, warnings = check_patch(VIEW, "json", ops, mode="Warn", duplicates=["[2].path"], target=TARGET)
    assert warnings == ['json patch unknown field "[0].x"', 'json patch duplicate field "[2].path"',
                        'unknown field "spec.foo"', 'unknown field "spec.items[0].bar"']
    assert cleaned == [{"op": "add", "path": "/spec/items/0", "value": {"name": "b"}}, ops[2]]


def test_apply_with_an_undeclared_field_fails_like_the_typed_converter() -> None:
    with pytest.raises(ApiError) as info:
        check_patch(VIEW, "apply", _body(foo=1), mode="Ignore", duplicates=[], target=TARGET)
    assert info.value.code == 500
    assert info.value.message == ("failed to create typed patch object (default/t1; example/v1, Kind=Thing): "
                                  ".spec.foo: field not declared in schema")


def test_structural_schema_prunes_objects_without_properties() -> None:
    crd = SchemaView(root={"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "closed": {"type": "object"}}}}}, resolve=_resolve, structural=True,
        meta={"$ref": "#/components/schemas/Meta"})
    body = {"apiVersion": "x/v1", "kind": "C", "metadata": {"name": "c", "bogus": 1},
            "spec": {"open": {"a": 1}, "closed": {"b": 2}}}
    stored, warnings = check_object(crd, body, kind="C", version="v1", mode="Warn", duplicates=[])
    assert stored["spec"] == {"open": {"a": 1}, "closed": {}}
    assert warnings == ['unknown field "metadata.bogus"', 'unknown field "spec.closed.b"']


def test_directive_default_and_unsupported() -> None:
    assert directive(None, options_kind="CreateOptions") == "Warn"
    with pytest.raises(ApiError) as info:
        directive("strict", options_kind="PatchOptions")
    assert info.value.code == 422
    assert info.value.message.startswith('PatchOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value')


def test_warning_header_quotes_the_text() -> None:
    assert warning_header('unknown field "spec.foo"') == '299 - "unknown field \\"spec.foo\\""'
