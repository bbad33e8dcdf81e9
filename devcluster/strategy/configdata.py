"""ConfigMap and Secret rules of the real server: `stringData` folded into `data`, immutability.

`stringData` is a write-only convenience: its entries are base64-encoded into `data` (winning
over a `data` entry of the same key) and it is never stored, on create and on every update.
A Secret's `type` never changes; an object marked `immutable: true` keeps its data and its
mark for good (the only way out is delete and recreate). A Secret of a well-known type must
carry that type's keys in `data` (a TLS Secret its certificate and key, and so on), on
create and on every update; an update is checked for what it changes first, as the real
server orders its causes.
"""

from __future__ import annotations

import base64
from typing import Any

from devcluster.machinery.errors import FieldError

SECRET_KEY = ("", "secrets")
CONFIGMAP_KEY = ("", "configmaps")
_IMMUTABLE = "field is immutable when `immutable` is set"
# the keys `data` must hold for each well-known Secret type
_TYPE_KEYS = {
    "kubernetes.io/tls": ("tls.crt", "tls.key"),
    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
    "kubernetes.io/dockercfg": (".dockercfg",),
    "kubernetes.io/ssh-auth": ("ssh-privatekey",),
}


def fold_string_data(obj: dict[str, Any]) -> None:
    """Move a Secret's `stringData` into `data` (base64), in place."""
    string_data = obj.pop("stringData", None)
    if not isinstance(string_data, dict) or not string_data:
        return
    data = dict(obj.get("data") or {})
    for key, value in string_data.items():
        data[key] = base64.b64encode(str(value).encode()).decode()
    obj["data"] = data


def validate_update(key: tuple[str, str], new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    """What an update of a Secret or ConfigMap may not change (empty list for other kinds)."""
    if key not in (SECRET_KEY, CONFIGMAP_KEY):
        return []
    errors = []
    if key == SECRET_KEY and new.get("type") != old.get("type"):
        errors.append(FieldError("type", "Invalid value", "field is immutable", new.get("type"), True))
    if old.get("immutable") is True:
        if new.get("immutable") is not True:
            errors.append(FieldError("immutable", "Forbidden", _IMMUTABLE))
        fields = ("data",) if key == SECRET_KEY else ("data", "binaryData")
        errors += [FieldError(f, "Forbidden", _IMMUTABLE) for f in fields if (new.get(f) or {}) != (old.get(f) or {})]
    return errors


def validate_secret(obj: dict[str, Any]) -> list[FieldError]:
    """The keys a Secret of a well-known type must have in `data`."""
    data = obj.get("data") if isinstance(obj.get("data"), dict) else {}
    return [FieldError(f"data[{key}]", "Required value")
            for key in _TYPE_KEYS.get(obj.get("type"), ()) if key not in data]
