"""The GM's typed API errors, mapped from HTTP answers in one place (`error_from_response`).

Callers branch on the class, never on numbers: `NotFound` means "gone, stop", `Conflict`
means "re-read and retry", `Unavailable` means "the cluster or the network is in trouble,
back off". Every error keeps the server's `Status` object when there was one.
"""

from __future__ import annotations

from typing import Any

import orjson

from gm.errors import GMError


class ApiError(GMError):
    """A failed API call: HTTP `code` (0 for transport failures) and the Status `reason`."""

    def __init__(self, code: int, reason: str, message: str, *,
                 status: dict[str, Any] | None = None):
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.status = status

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}, {self.reason!r}, {self.message!r})"


class BadRequest(ApiError):
    """400: the request itself is malformed (bad selector, bad patch body)."""


class Unauthorized(ApiError):
    """401: missing or rejected credentials."""


class Forbidden(ApiError):
    """403: RBAC denies the verb, or the namespace is terminating."""


class NotFound(ApiError):
    """404: the object (or the resource type) does not exist."""


class Conflict(ApiError):
    """409 Conflict: a resourceVersion or UID precondition failed; re-read and retry."""


class AlreadyExists(ApiError):
    """409 AlreadyExists: a create found an object with that name."""


class Expired(ApiError):
    """410: the resourceVersion or continue token is older than the server keeps."""


class Invalid(ApiError):
    """422: the object failed validation; retrying the same body cannot succeed."""


class UnsupportedMediaType(ApiError):
    """415: the patch type is not accepted for this resource (strategic merge on a CR)."""


class Unavailable(ApiError):
    """5xx, 429 or a transport failure: transient, retry with backoff.

    `retry_after` carries the server's Retry-After hint in seconds when it sent one.
    """

    def __init__(self, code: int, reason: str, message: str, *,
                 status: dict[str, Any] | None = None, retry_after: float | None = None):
        super().__init__(code, reason, message, status=status)
        self.retry_after = retry_after


_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 410: Expired,
    415: UnsupportedMediaType, 422: Invalid,
}


def error_from_status(code: int, status: dict[str, Any] | None, *,
                      retry_after: float | None = None) -> ApiError:
    """Build the typed error for an HTTP `code` and its decoded Status body (may be None)."""
    status = status if isinstance(status, dict) else None
    reason = str((status or {}).get("reason") or _default_reason(code))
    message = str((status or {}).get("message") or reason)
    if code == 409:
        cls: type[ApiError] = AlreadyExists if reason == "AlreadyExists" else Conflict
    elif code == 429 or code >= 500:
        return Unavailable(code, reason, message, status=status, retry_after=retry_after)
    else:
        cls = _BY_CODE.get(code, ApiError)
    return cls(code, reason, message, status=status)


def error_from_response(code: int, body: bytes, *, retry_after: str | None = None) -> ApiError:
    """Decode a non-2xx answer; a body that is not a Status still yields a typed error."""
    try:
        status = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        status = {"message": body[:512].decode("utf-8", "replace")}
    return error_from_status(code, status, retry_after=_parse_retry_after(retry_after))


def transport_error(exc: BaseException, *, what: str) -> Unavailable:
    """Wrap a connection, TLS or timeout failure of `what` (e.g. "GET /api/v1/pods")."""
    reason = "Timeout" if isinstance(exc, TimeoutError) else "TransportError"
    return Unavailable(0, reason, f"{what}: {type(exc).__name__}: {exc}")


def _default_reason(code: int) -> str:
    return {
        400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
        405: "MethodNotAllowed", 409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType",
        422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
        504: "Timeout",
    }.get(code, "Unknown")


def _parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
