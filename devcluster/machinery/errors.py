"""API errors as exceptions; each maps to one `Status` object and HTTP code (spec §5.9)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class ApiError(Exception):
    """An API failure that the HTTP layer turns into a `Status` response."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        st: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            st["details"] = self.details
        return st

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


@dataclass(frozen=True, slots=True)
class FieldError:
    """One validation failure, rendered as `field: Type: detail` in a 422 message."""

    field: str
    type: str = "Invalid value"  # "Required value", "Unsupported value", "Forbidden", ...
    detail: str = ""
    value: Any = field(default=None, compare=False)
    has_value: bool = False

    @property
    def reason(self) -> str:
        return _REASONS.get(self.type, "FieldValueInvalid")

    def message(self) -> str:
        text = f"{self.field}: {self.type}"
        if self.has_value:
            text += f": {_go_value(self.value)}"
        if self.detail:
            text += f": {self.detail}"
        return text


_REASONS = {
    "Invalid value": "FieldValueInvalid",
    "Required value": "FieldValueRequired",
    "Unsupported value": "FieldValueNotSupported",
    "Forbidden": "FieldValueForbidden",
    "Duplicate value": "FieldValueDuplicate",
    "Too long": "FieldValueTooLong",
    "Not found": "FieldValueNotFound",
}


def _go_value(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def _details(name: str, group: str, kind: str) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "kind": kind} if name else {"kind": kind}  # omitempty
    if group:
        d["group"] = group
    return d


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{_qualified(resource, group)} "{name}" not found',
        _details(name, group, resource),
    )


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{_qualified(resource, group)} "{name}" already exists',
        _details(name, group, resource),
    )


def conflict(resource: str, group: str, name: str, detail: str | None = None) -> ApiError:
    detail = detail or (
        "the object has been modified; please apply your changes to the latest version and try again"
    )
    return ApiError(
        409, "Conflict",
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {detail}',
        _details(name, group, resource),
    )


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    joined = ", ".join(e.message() for e in errors)
    if len(errors) > 1:
        joined = "[" + joined + "]"
    details = _details(name, group, kind)
    details["causes"] = [
        {"reason": e.reason, "message": e.message().split(": ", 1)[1], "field": e.field}
        for e in errors
    ]
    return ApiError(422, "Invalid", f'{_qualified(kind, group)} "{name}" is invalid: {joined}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def too_large(limit: int) -> ApiError:
    """413, as kube-apiserver answers a request body over its limit (3 MiB)."""
    return ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}")


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def too_old(requested: int | str, oldest: int | str) -> ApiError:
    return expired(f"too old resource version: {requested} ({oldest})")


def forbidden(message: str) -> ApiError:
    return ApiError(403, "Forbidden", message)


def forbidden_object(resource: str, group: str, name: str, detail: str,
                     causes: list[dict[str, str]] | None = None) -> ApiError:
    """An admission refusal: `<resource>[.<group>] "<name>" is forbidden: <detail>`."""
    details = _details(name, group, resource)
    if causes:
        details["causes"] = causes
    return ApiError(403, "Forbidden", f'{_qualified(resource, group)} "{name}" is forbidden: {detail}', details)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media(message: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", message)


def not_acceptable(message: str) -> ApiError:
    return ApiError(406, "NotAcceptable", message)


def timeout(message: str) -> ApiError:
    return ApiError(504, "Timeout", message)


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", message)
