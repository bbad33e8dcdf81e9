"""Objects checked against the Sedna CRDs' schemas twice: by the dev cluster's schema code
(defaulting, pruning and validation as the API server does them) and by a strict local validator
that also calls unknown fields errors, so a field upstream users write that our schema lacks is
caught instead of silently pruned."""

from __future__ import annotations

from datetime import datetime

import yaml

from devcluster.cluster import KubeYamlLoader
from devcluster.strategy import schema as server_schema
from shared import apis


# YAML as Kubernetes reads it (KubeYamlLoader: the dev cluster reads manifests the same way)
def load_docs(text: str) -> list[dict]:
    return [d for d in yaml.load_all(text, Loader=KubeYamlLoader) if d is not None]


_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def _is_datetime(value: str) -> bool:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return "T" in value


def validate(schema: dict, value, path: str = "") -> list[str]:
    """Errors of `value` against `schema`, as "path: problem"; unknown fields are errors
    (what kubectl's strict field validation reports) unless the schema preserves them."""
    if value is None:
        return [] if schema.get("nullable") else [f"{path}: must not be null"]
    typ = schema["type"]
    if not _TYPES[typ](value):
        return [f"{path}: expected {typ}, got {type(value).__name__}"]
    errors = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{path}: {value} is less than {schema['minimum']}")
    if schema.get("format") == "date-time" and not _is_datetime(value):
        errors.append(f"{path}: {value!r} is not a date-time")
    if typ == "array":
        for i, item in enumerate(value):
            errors += validate(schema["items"], item, f"{path}[{i}]")
    if typ == "object":
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{path}.{name}: required")
        for name, item in value.items():
            if name in props:
                errors += validate(props[name], item, f"{path}.{name}")
            elif not schema.get("x-kubernetes-preserve-unknown-fields") and path != ".metadata":
                errors.append(f"{path}.{name}: unknown field")
    return errors


CRDS = apis.crd_manifests()
CRD_IDS = [c["spec"]["names"]["kind"] for c in CRDS]
_SCHEMAS = {c["spec"]["names"]["kind"]: c["spec"]["versions"][0]["schema"]["openAPIV3Schema"] for c in CRDS}


def crd_schema(kind: str) -> dict:
    return _SCHEMAS[kind]


def server_check(kind: str, obj: dict) -> tuple[dict, list[str]]:
    """What the API server stores for `obj` (defaulted, pruned) and its validation errors."""
    schema = crd_schema(kind)
    stored = server_schema.prune(schema, server_schema.apply_defaults(schema, obj))
    return stored, [e.message() for e in server_schema.validate(schema, stored)]
