"""CRD schema validation, defaulting, pruning and the structural check, with exact messages."""

from __future__ import annotations

import copy

import pytest

from devcluster.strategy.schema import apply_defaults, prune, structural_errors, validate

SCHEMA = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 1}}},
        "spec": {
            "type": "object",
            "required": ["replicas"],
            "properties": {
                "replicas": {"type": "integer", "default": 1, "minimum": 0, "format": "int32"},
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": True,
                          "maximum": 1, "exclusiveMaximum": True},
                "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
                "when": {"type": "string", "format": "date-time"},
                "flag": {"type": "boolean"},
                "note": {"type": "string", "nullable": True},
                "port": {"x-kubernetes-int-or-string": True},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                         "properties": {"n": {"type": "integer"}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "template": {"type": "object", "x-kubernetes-embedded-resource": True,
                             "x-kubernetes-preserve-unknown-fields": True},
                "workers": {
                    "type": "array", "minItems": 1, "maxItems": 2,
                    "items": {"type": "object", "required": ["name"],
                              "properties": {"name": {"type": "string"},
                                             "cpu": {"type": "string", "default": "1"}}},
                },
            },
        },
    },
}


def _messages(spec):
    return [e.message() for e in validate(SCHEMA, {"apiVersion": "x/v1", "kind": "K",
                                                   "metadata": {"name": "long-name"},
                                                   "spec": {"replicas": 1, **spec}})]


@pytest.mark.parametrize("spec,expected", [
    pytest.param({}, [], id="valid-minimal"),
    pytest.param({"size": 3, "ratio": 0.5, "mode": "b", "name": "abc", "when": "2024-05-01T10:00:00Z",
                  "flag": False, "note": None, "port": "http", "workers": [{"name": "w"}],
                  "labels": {"a": "b"}, "free": {"anything": [1]},
                  "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}}},
                 [], id="valid-everything"),
    pytest.param({"size": "string"},
                 ['spec.size: Invalid value: "string": spec.size in body must be of type integer: "string"'],
                 id="type-integer"),
    pytest.param({"size": 2.5}, ['spec.size: Invalid value: "number": spec.size in body must be of type integer: "number"'],
                 id="float-is-not-integer"),
    pytest.param({"ratio": 1}, ["spec.ratio: Invalid value: 1: spec.ratio in body should be less than 1"],
                 id="integer-accepted-for-number-exclusive-max"),
    pytest.param({"ratio": 0.0}, ["spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0"],
                 id="exclusive-min"),
    pytest.param({"size": 0}, ["spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"],
                 id="minimum"),
    pytest.param({"size": 11}, ["spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"],
                 id="maximum"),
    pytest.param({"replicas": 2**31}, ['spec.replicas: Invalid value: 2147483648: spec.replicas in body must be of '
                                       'type int32: "2147483648"'], id="int32-range"),
    pytest.param({"mode": "c"}, ['spec.mode: Unsupported value: "c": supported values: "a", "b"'], id="enum"),
    pytest.param({"name": "a"}, ['spec.name: Invalid value: "a": spec.name in body should be at least 2 chars long'],
                 id="min-length"),
    pytest.param({"name": "abcdef"}, ["spec.name: Too long: may not be longer than 5"], id="max-length"),
    pytest.param({"name": "AB"}, ["spec.name: Invalid value: \"AB\": spec.name in body should match '^[a-z]+$'"],
                 id="pattern"),
    pytest.param({"when": "yesterday"},
                 ['spec.when: Invalid value: "yesterday": spec.when in body must be of type date-time: "yesterday"'],
                 id="date-time"),
    pytest.param({"flag": "yes"}, ['spec.flag: Invalid value: "string": spec.flag in body must be of type boolean: "string"'],
                 id="boolean"),
    pytest.param({"size": None}, ['spec.size: Invalid value: "null": spec.size in body must be of type integer: "null"'],
                 id="null-not-nullable"),
    pytest.param({"port": 1.5}, ['spec.port: Invalid value: "number": spec.port in body must be of type '
                                 'integer,string: "number"'], id="int-or-string"),
    pytest.param({"workers": []}, ["spec.workers: Invalid value: 0: spec.workers in body should have at least 1 items"],
                 id="min-items"),
    pytest.param({"workers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]},
                 ["spec.workers: Too many: 3: must have at most 2 items"], id="max-items"),
    pytest.param({"workers": [{"name": "a"}, {"cpu": "2"}]}, ["spec.workers[1].name: Required value"],
                 id="nested-required"),
    pytest.param({"workers": [{"name": 7}]},
                 ['spec.workers[0].name: Invalid value: "integer": spec.workers[0].name in body must be of type string: '
                  '"integer"'], id="nested-type"),
    pytest.param({"labels": {"a": 1}},
                 ['spec.labels.a: Invalid value: "integer": spec.labels.a in body must be of type string: "integer"'],
                 id="additional-properties-schema"),
    pytest.param({"free": {"n": "x"}},
                 ['spec.free.n: Invalid value: "string": spec.free.n in body must be of type integer: "string"'],
                 id="preserve-still-validates-known"),
    pytest.param({"template": {"metadata": {}}},
                 ["spec.template.apiVersion: Required value: must not be empty",
                  "spec.template.kind: Required value: must not be empty"], id="embedded-resource"),
])
def test_validate_messages(spec, expected):
    assert _messages(spec) == expected


def test_validate_required_and_root_metadata():
    assert [e.message() for e in validate(SCHEMA, {"apiVersion": "x/v1", "kind": "K"})] == ["spec: Required value"]
    errors = validate(SCHEMA, {"metadata": "x", "spec": {"replicas": 1}})
    assert [e.message() for e in errors] == [
        'metadata: Invalid value: "string": metadata in body must be of type object: "string"']
    assert errors[0].reason == "FieldValueInvalid"


def test_validate_reasons():
    errors = validate(SCHEMA, {"spec": {"mode": "z"}})
    assert [(e.field, e.reason) for e in errors] == [("spec.replicas", "FieldValueRequired"),
                                                     ("spec.mode", "FieldValueNotSupported")]


def test_validate_additional_properties_false():
    schema = {"type": "object", "properties": {"spec": {"type": "object", "additionalProperties": False,
                                                        "properties": {"a": {"type": "string"}}}}}
    assert [e.message() for e in validate(schema, {"spec": {"a": "x", "b": 1}})] == [
        "spec.b: Forbidden: spec.b in body is a forbidden property"]


def test_validate_without_schema_accepts_anything():
    assert validate(None, {"spec": 1}) == []


def test_apply_defaults_fills_absent_fields_without_mutating():
    obj = {"metadata": {"name": "a"}, "spec": {"workers": [{"name": "w"}, {"name": "v", "cpu": "3"}]}}
    before = copy.deepcopy(obj)
    result = apply_defaults(SCHEMA, obj)
    assert obj == before
    assert result["spec"] == {"workers": [{"name": "w", "cpu": "1"}, {"name": "v", "cpu": "3"}],
                              "replicas": 1, "mode": "a"}
    assert result["metadata"] is obj["metadata"]
    assert result["spec"]["workers"][1] is obj["spec"]["workers"][1]


def test_apply_defaults_returns_the_same_object_when_nothing_to_do():
    obj = {"spec": {"replicas": 2, "mode": "b"}}
    assert apply_defaults(SCHEMA, obj) is obj


def test_apply_defaults_replaces_null_of_non_nullable_field():
    assert apply_defaults(SCHEMA, {"spec": {"replicas": None, "mode": "b"}})["spec"]["replicas"] == 1


def test_prune_drops_unknown_fields_but_keeps_root_meta_and_preserved_subtrees():
    obj = {"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a", "whatever": 1}, "junk": 1,
           "spec": {"replicas": 1, "extra": 2, "free": {"n": 1, "kept": True},
                    "workers": [{"name": "w", "gone": 1}], "labels": {"k": "v"},
                    "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "anything": 1}}}
    before = copy.deepcopy(obj)
    result = prune(SCHEMA, obj)
    assert obj == before
    assert result == {"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a", "whatever": 1},
                      "spec": {"replicas": 1, "free": {"n": 1, "kept": True}, "workers": [{"name": "w"}],
                               "labels": {"k": "v"},
                               "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "anything": 1}}}


def test_prune_returns_the_same_object_when_nothing_to_drop():
    obj = {"apiVersion": "x/v1", "spec": {"replicas": 1}}
    assert prune(SCHEMA, obj) is obj


@pytest.mark.parametrize("schema,expected", [
    pytest.param(SCHEMA, [], id="fine"),
    pytest.param({"properties": {}}, ["type: Required value: must not be empty at the root"], id="root-untyped"),
    pytest.param({"type": "string"}, ['type: Invalid value: "string": must be object at the root'], id="root-not-object"),
    pytest.param({"type": "object", "properties": {"spec": {"properties": {"a": {"type": "array"}}}}},
                 ["properties[spec].type: Required value: must not be empty for specified object fields",
                  "properties[spec].properties[a].items: Required value: must be specified"], id="nested"),
    pytest.param({"type": "object", "properties": {"a": {"type": "strin"}}},
                 ['properties[a].type: Unsupported value: "strin": supported values: "array", "boolean", "integer", '
                  '"number", "object", "string"'], id="bad-type"),
    pytest.param({"type": "object", "properties": {"a": {"x-kubernetes-int-or-string": True},
                                                   "b": {"x-kubernetes-preserve-unknown-fields": True}}},
                 [], id="untyped-allowed"),
    pytest.param({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}},
                 ['properties[a].pattern: Invalid value: "(": must be a valid regular expression'], id="bad-pattern"),
])
def test_structural_errors(schema, expected):
    assert structural_errors(schema) == expected
