"""`metadata.ownerReferences` validation, as the real server's object-meta validation answers it.

The garbage collector trusts these references, so a broken one must be refused at the door:
an empty apiVersion, kind, name or uid, a reference to a kind that may not own anything, or
two controller references (an object has at most one managing controller). Every field path
is `metadata.ownerReferences.<field>` without an index: the real validation does not number
the references.
"""

from __future__ import annotations

from typing import Any

import orjson

from devcluster.machinery.errors import FieldError

_PATH = "metadata.ownerReferences"
# group/version/kind triples that may never be owners (core Events).
_BANNED_OWNERS = frozenset({("", "v1", "Event")})


def _group_version(api_version: Any) -> tuple[str, str]:
    """(group, version) of an apiVersion; ("", "") when it does not parse, like the real parser."""
    text = api_version if isinstance(api_version, str) else ""
    if text.count("/") > 1:
        return "", ""
    group, _, version = text.rpartition("/")
    return group, version


class _Rendered:
    """A structured value printed as JSON in a field error, as the real server prints it."""

    __slots__ = ("text",)

    def __init__(self, value: Any):
        self.text = orjson.dumps(value).decode()

    def __str__(self) -> str:
        return self.text


def _json(value: Any) -> _Rendered:
    return _Rendered(value)


def _one(ref: dict[str, Any]) -> list[FieldError]:
    errors = []
    group, version = _group_version(ref.get("apiVersion"))
    checks = (("apiVersion", not version, "version must not be empty"),
              ("kind", not ref.get("kind"), "kind must not be empty"),
              ("name", not ref.get("name"), "name must not be empty"),
              ("uid", not ref.get("uid"), "uid must not be empty"))
    for field, failed, detail in checks:
        if failed:
            errors.append(FieldError(f"{_PATH}.{field}", "Invalid value", detail, ref.get(field, ""), True))
    if (group, version, ref.get("kind")) in _BANNED_OWNERS:
        errors.append(FieldError(_PATH, "Invalid value", f"{group}/{version}, Kind={ref.get('kind')} is "
                                 "disallowed from being an owner", _json(ref), True))
    return errors


def validate_owner_references(refs: Any) -> list[FieldError]:
    """Everything wrong with an object's owner references (empty list when they are fine)."""
    if not isinstance(refs, list):
        return []
    errors: list[FieldError] = []
    first_controller = ""
    for ref in refs:
        if not isinstance(ref, dict):
            errors.append(FieldError(_PATH, "Invalid value", "must be an object", _json(ref), True))
            continue
        errors += _one(ref)
        if ref.get("controller") is True:
            name = f"{ref.get('kind', '')}/{ref.get('name', '')}"
            if not first_controller:
                first_controller = name
            else:
                errors.append(FieldError(
                    _PATH, "Invalid value", 'Only one reference can have Controller set to true. Found "true" '
                    f"in references for {first_controller} and {name}", _json(refs), True))
    return errors
