"""The GM's HTTP error replies: a Kubernetes `Status` object as JSON, on every error the port
answers (routing's 404 and 405, requests refused before routing, the hub's handshake refusals).

Why this shape rather than the LC's `{"Status", "Message"}`: that one is upstream's worker
API, kept byte-compatible for the workers that parse it; nothing parses the GM's errors but
people and cluster tooling, and the GM is a cluster component, so its errors read like the
API server's next to it: `code` and a machine-readable `reason` (Kubernetes' StatusReason
where it names one, the HTTP status phrase in CamelCase otherwise) apart from the human
`message`, in a document any Kubernetes client decodes as `metav1.Status`.

Who is not affected: upstream's Go LC dials the hub with gorilla/websocket, whose failed
handshake is `ErrBadHandshake` plus the HTTP status, the body unread; kubelet probes and
Prometheus look at the status only. Values a client sent are clipped (shared/text.py) before
they are echoed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from http import HTTPStatus

import orjson
from aiohttp import hdrs, web

from shared.text import clip

JSON = "application/json"
# Kubernetes' StatusReason where it differs from the CamelCase HTTP phrase (or Python renamed it)
_REASONS = {413: "RequestEntityTooLarge", 500: "InternalError", 505: "HTTPVersionNotSupported"}


def reason(status: int) -> str:
    if status in _REASONS:
        return _REASONS[status]
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"
    return "".join(word[:1].upper() + word[1:] for word in phrase.replace("-", " ").split())


def status_body(status: int, message: str) -> str:
    return orjson.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                         "message": message, "reason": reason(status), "code": status}).decode()


def error_response(status: int, message: str, headers: dict[str, str]) -> web.Response:
    """The GM's error reply; also its `error_response` for requests refused before routing."""
    return web.Response(status=status, text=status_body(status, message), content_type=JSON,
                        headers=headers)


def refusal(cls: type[web.HTTPException], message: str, **headers: str) -> web.HTTPException:
    """An HTTP error to raise from a handler, with the GM's body; the connection closes after it."""
    exc = cls(text=status_body(cls.status_code, message), content_type=JSON, headers=headers)
    exc.force_close()
    return exc


@web.middleware
async def json_errors(request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """Give aiohttp's own HTTP errors (routing's 404 and 405 above all) the GM's body."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == JSON:
            raise
        headers = {k: v for k, v in exc.headers.items() if k.lower() not in _BODY_HEADERS}
        return error_response(exc.status, _message(request, exc), headers)


_BODY_HEADERS = {hdrs.CONTENT_TYPE.lower(), hdrs.CONTENT_LENGTH.lower()}


def _message(request: web.Request, exc: web.HTTPException) -> str:
    path = clip(request.path)
    if exc.status == 404:
        return f"no route for {path}"
    if exc.status == 405:
        allowed = ", ".join(m.strip() for m in exc.headers.get(hdrs.ALLOW, "").split(","))
        return f"method {clip(request.method)} not allowed on {path}; use {allowed}"
    return clip(exc.text.strip() if exc.text else exc.reason)
