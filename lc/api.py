"""The worker report API (upstream's `POST /sedna/workers/{name}/info`) and ops endpoints.

For valid input the API is byte-compatible with upstream's LC: the same route, the same
lenient decoding (lc/report.py) and the same pretty-printed `{"Status": 200, "Message":
"OK"}` reply. It differs where upstream was unsafe: a 200 is sent only after the report
is committed to the SQLite outbox; bodies over 1 MiB get 413; every error, routing ones
included, is a JSON `{"Status", "Message"}` body that says what was wrong; and a store
failure is a 503 the worker library retries instead of a silent drop.

What the caller got wrong is a 4xx, never a 5xx: a worker retries a 503 forever, so 503
means only "this LC cannot store right now". A report the GM would refuse (too deep,
names too long, text that is not valid Unicode: proto/limits.py, the GM's own rules) is
refused here with 400, as are bodies that do not decompress; unknown Content-Encodings
get 415, a body that does not arrive in time 408.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage
from aiohttp.web_protocol import RequestPayloadError

from lc.dispatch import Dispatcher
from lc.errors import ReportError, StoreError
from lc.metrics import LCMetrics
from lc.openapi import DOCUMENT, MAX_BODY
from lc.report import decode_report, parse_json
from lc.store import Store
from shared.logs import event
from shared.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from shared.server_limits import ServerLimits

log = logging.getLogger(__name__)

JSON = "application/json"
OK_BODY = b'{\n "Status": 200,\n "Message": "OK"\n}'
READY_TIMEOUT = 2.0

STORE_KEY = web.AppKey("store", Store)
DISPATCHER_KEY = web.AppKey("dispatcher", Dispatcher)
METRICS_KEY = web.AppKey("metrics", LCMetrics)
LINK_STATE_KEY = web.AppKey("link_state", Callable[[], str])
LIMITS_KEY = web.AppKey("limits", ServerLimits)

# What aiohttp decodes for us (it reads any other Content-Encoding as identity).
CONTENT_ENCODINGS = ("identity", "gzip", "deflate")


def status_body(status: int, message: str) -> bytes:
    """Upstream's reply shape: go-restful's one-space MarshalIndent, Go's HTML escaping."""
    text = json.dumps({"Status": status, "Message": message}, indent=1, ensure_ascii=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return text.encode("utf-8", "backslashreplace")  # a message may quote a lone surrogate


def error_response(status: int, message: str, **headers: str) -> web.Response:
    return web.Response(status=status, body=status_body(status, message), content_type=JSON,
                        headers=headers)


def protocol_error_response(status: int, message: str, headers: dict[str, str]) -> web.Response:
    """The JSON error for requests refused before routing (see shared/server_limits.py)."""
    return error_response(status, message, **headers)


# ---- the worker report route ------------------------------------------------------------

async def post_report(request: web.Request) -> web.Response:
    """Validate, route and durably store one worker report."""
    metrics = request.app[METRICS_KEY]
    started = time.perf_counter()
    path_name = request.match_info["name"]
    try:
        _check_media(request)
        body = await _read_body(request, within=request.app[LIMITS_KEY].body_timeout)
        report = decode_report(parse_json(body))
        if report.name != path_name:
            raise ReportError(f"worker name(name={path_name}) in the api is different from "
                              f"that(name={report.name}) in the message body",
                              reason="name_mismatch")
        route = await request.app[DISPATCHER_KEY].handle_report(report)
    except ReportError as exc:
        metrics.reports_rejected.inc(exc.reason)
        event(log, "report refused", level=logging.INFO, worker=path_name, reason=exc.reason,
              error=exc.message)
        response = error_response(exc.status, exc.message)
        if exc.reason in _UNREADABLE_BODY:
            _abandon_body(request, response)
        return response
    except StoreError as exc:
        metrics.reports_rejected.inc("store")
        event(log, "report not stored", level=logging.ERROR, worker=path_name, error=str(exc))
        return error_response(503, f"report of worker(name={path_name}) not stored: {exc}",
                              **{"Retry-After": "3"})
    metrics.reports_accepted.inc(route)
    metrics.report_seconds.observe(time.perf_counter() - started)
    return web.Response(body=OK_BODY, content_type=JSON)


def _check_media(request: web.Request) -> None:
    """JSON in, JSON out; a missing Content-Type is read as JSON (curl, old clients)."""
    raw_type = request.headers.get("Content-Type", "")
    media = raw_type.split(";", 1)[0].strip().lower()
    if media and not (media in (JSON, "text/json") or media.endswith("+json")):
        raise ReportError(f"Content-Type {media} is not supported; send {JSON}",
                          status=415, reason="media_type")
    accept = request.headers.get("Accept", "").lower()
    if accept and not any(t in accept for t in ("*/*", "application/*", "json")):
        raise ReportError(f"Accept {accept} excludes {JSON}, the only representation",
                          status=406, reason="not_acceptable")
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in CONTENT_ENCODINGS:
        raise ReportError(f"Content-Encoding {encoding[:40]!r} is not supported; send one of "
                          f"{', '.join(CONTENT_ENCODINGS)}", status=415, reason="encoding")


async def _read_body(request: web.Request, *, within: float) -> bytes:
    """The (decompressed) body within `within` seconds, refusing more than MAX_BODY bytes
    without buffering it all."""
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise _too_large()
    try:
        async with asyncio.timeout(within):
            return await _read_capped(request)
    except TimeoutError:
        raise ReportError(f"body not received within {within:g}s", status=408,
                          reason="body_timeout") from None
    except (RequestPayloadError, BadHttpMessage) as exc:  # gzip/deflate that does not inflate
        raise ReportError(f"body cannot be decoded: {_one_line(exc)}",
                          reason="bad_encoding") from None


async def _read_capped(request: web.Request) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.readany():
        size += len(chunk)
        if size > MAX_BODY:
            raise _too_large()
        chunks.append(chunk)
    return b"".join(chunks)


_UNREADABLE_BODY = ("bad_encoding", "body_timeout")


def _abandon_body(request: web.Request, response: web.Response) -> None:
    """Close the connection after this reply instead of reading the rest of a body that
    cannot be decoded (aiohttp would drain it and fail again) or that does not arrive."""
    response.force_close()
    if request.content.exception() is not None:
        request.content.feed_eof()


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split("message:", 1)[-1].split())


def _too_large() -> ReportError:
    return ReportError(f"body larger than {MAX_BODY} bytes", status=413, reason="too_large")


# ---- operational endpoints --------------------------------------------------------------

async def get_workers(request: web.Request) -> web.Response:
    """The last report of every worker on this node."""
    records = await request.app[STORE_KEY].workers()
    workers = [{
        "namespace": r.namespace, "name": r.name, "ownerKind": r.owner_kind,
        "ownerName": r.owner_name, "routedKind": r.routed_kind,
        "receivedAt": datetime.fromtimestamp(r.received_at, UTC).isoformat().replace("+00:00", "Z"),
        "report": r.report,
    } for r in records]
    return web.json_response({"workers": workers})


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Ready when the store answers; the link state is reported, not required."""
    link = request.app[LINK_STATE_KEY]()
    try:
        await asyncio.wait_for(request.app[STORE_KEY].ping(), READY_TIMEOUT)
    except (StoreError, TimeoutError) as exc:
        return web.json_response({"status": "not ready", "db": str(exc) or "timeout",
                                  "link": link}, status=503)
    return web.json_response({"status": "ready", "db": "ok", "link": link})


async def get_dead_letters(request: web.Request) -> web.Response:
    """Reports the GM can never apply, newest first, with why (`?limit=N`, default 100)."""
    store = request.app[STORE_KEY]
    limit = _limit(request.query.get("limit", "100"))
    letters = await store.dead_letters(limit)
    return web.json_response({"counts": store.dead_letter_counts,
                              "deadLetters": [d.to_dict() for d in letters]})


def _limit(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= 10_000:
        raise web.HTTPBadRequest(reason=f"limit must be a whole number from 1 to 10000, got {raw[:20]!r}")
    return value


async def metrics(request: web.Request) -> web.Response:
    lc_metrics = request.app[METRICS_KEY]
    lc_metrics.set_dead_letters(request.app[STORE_KEY].dead_letter_counts)
    text = lc_metrics.registry.render()
    return web.Response(text=text, headers={"Content-Type": METRICS_CONTENT_TYPE})


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(DOCUMENT)


# ---- errors as JSON ---------------------------------------------------------------------

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn aiohttp's routing errors (404, 405, ...) and store failures into JSON bodies."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
        return error_response(exc.status, _http_message(request, exc), **headers)
    except StoreError as exc:
        event(log, "store unavailable", level=logging.ERROR, path=request.path, error=str(exc))
        return error_response(503, f"store unavailable: {exc}")


def _http_message(request: web.Request, exc: web.HTTPException) -> str:
    if exc.status == 404:
        return f"no route for {request.path}"
    if exc.status == 405:
        return f"method {request.method} not allowed on {request.path}; use {exc.headers.get('Allow', '')}"
    return exc.reason


def build_app(*, store: Store, dispatcher: Dispatcher, metrics_: LCMetrics,
              link_state: Callable[[], str],
              limits: ServerLimits | None = None) -> web.Application:
    """The aiohttp application serving the worker API and ops endpoints."""
    app = web.Application(middlewares=[json_errors], client_max_size=MAX_BODY)
    app[LIMITS_KEY] = limits or ServerLimits()
    app[STORE_KEY] = store
    app[DISPATCHER_KEY] = dispatcher
    app[METRICS_KEY] = metrics_
    app[LINK_STATE_KEY] = link_state
    app.router.add_post("/sedna/workers/{name}/info", post_report)
    app.router.add_post("/sedna/workers/{name}/info/", post_report)
    app.router.add_get("/sedna/workers", get_workers)
    app.router.add_get("/sedna/deadletters", get_dead_letters)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.json", openapi)
    return app
