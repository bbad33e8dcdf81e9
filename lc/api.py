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

Bodies at once are bounded too (lc/budget.py): a report takes its declared length from the
LC's body budget before its body is read, and more as a chunked or inflating body arrives;
what does not fit (after a brief wait for a declared length) is answered 503 with
Retry-After and the connection closed, its body unread. A full outbox (lc/store/outbox.py) is a
503 with Retry-After too: the body was fine, the LC cannot keep it now.

A refusal stops the work it refuses: a body refused for its size (declared, read, or once
inflated), one that does not decode, one that does not arrive in time, and any refused
request whose body has not all arrived (wrong media type, no such route...) are answered
and the connection is closed at once, so aiohttp neither reads nor inflates the rest of it
(it would otherwise drain the body for up to 10 s after the reply). A client that goes away
while its body is read is one INFO line and a counter, not an error. Every value a client
sent that an error quotes back is clipped (shared/text.py).

The listings (`GET /sedna/workers`, `GET /sedna/deadletters`) come in pages, like a
Kubernetes list: `limit` items at most (100 by default, 1000 at most), fewer once a page
holds PAGE_BYTES, and `metadata.continue`, an opaque token to pass as `continue` for the
next page. A report longer than LIST_ITEM_BYTES is listed as a marker with its start and
length (lc/store/codec.py `truncated_json`); dead-letter bodies were cut when stored.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage
from aiohttp.web_protocol import RequestPayloadError

from lc.budget import DEFAULT_BUDGET, DEFAULT_WAIT, BodyBudget, BudgetExceeded, Share
from lc.dispatch import UNKNOWN_KIND, Dispatcher
from lc.errors import ReportError, StoreError
from lc.metrics import LCMetrics
from lc.openapi import DOCUMENT, MAX_BODY, MAX_LIST_LIMIT
from lc.report import WorkerReport, decode_report, parse_json
from lc.store.bounds import Page
from lc.store.facade import Store
from lc.store.outbox import OutboxFullError
from shared import apis
from shared.logs import event
from shared.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from shared.metrics import render
from shared.server_limits import ServerLimits
from shared.text import clip

log = logging.getLogger(__name__)

JSON = "application/json"
OK_BODY = b'{\n "Status": 200,\n "Message": "OK"\n}'
READY_TIMEOUT = 2.0

STORE_KEY = web.AppKey("store", Store)
DISPATCHER_KEY = web.AppKey("dispatcher", Dispatcher)
METRICS_KEY = web.AppKey("metrics", LCMetrics)
LINK_STATE_KEY = web.AppKey("link_state", Callable[[], str])
LIMITS_KEY = web.AppKey("limits", ServerLimits)
BUDGET_KEY = web.AppKey("body_budget", BodyBudget)
TAKER_KEY = web.AppKey("report_taker", "ReportTaker")

# What aiohttp decodes for us (it reads any other Content-Encoding as identity).
CONTENT_ENCODINGS = ("identity", "gzip", "deflate")

DEFAULT_LIMIT = 100  # items in one page of a listing, MAX_LIST_LIMIT at most
LIST_ITEM_BYTES = 64 << 10  # a listed report longer than this is shown as a marker
PAGE_BYTES = 4 << 20  # a page ends early once its reports (or bodies) add up to this
BUSY_RETRY_AFTER = "1"  # seconds, when the body budget is used up: requests end quickly
STORE_RETRY_AFTER = "3"  # seconds, when the store cannot take a report now


class ClientGone(Exception):
    """The client closed the connection before its request body was read."""


class QueryError(ValueError):
    """A query parameter the endpoint cannot use (400); the message says which and why."""


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

async def post_report(request: web.Request) -> web.StreamResponse:
    """Validate, route and durably store one worker report."""
    metrics = request.app[METRICS_KEY]
    metrics.reports_in_flight.inc()
    try:
        with request.app[BUDGET_KEY].share() as share:  # given back however the request ends
            return await _report(request, metrics, share)
    finally:
        metrics.reports_in_flight.dec()


def _kind_of(report: WorkerReport | None) -> str:
    """A refused report's kind for the per-kind count: a kind of the registry, else unknown
    (the ownerKind is the worker's word, and the label must stay bounded)."""
    api = apis.by_ws_kind(report.owner_kind) if report is not None and report.owner_kind else None
    return api.kind if api is not None else UNKNOWN_KIND


async def _report(request: web.Request, metrics: LCMetrics, share: Share) -> web.StreamResponse:
    started = time.perf_counter()
    path_name = request.match_info["name"]
    taker = request.app[TAKER_KEY]
    try:
        check_media(request.headers)
        # parsed at once, so the body's bytes go before the report is checked and stored
        body = await _read_body(request, share, within=request.app[LIMITS_KEY].body_timeout)
    except ReportError as exc:
        response = _response(taker.refused(path_name, None, exc))
        if exc.reason in _UNREADABLE_BODY or _body_left(request):
            return await _reply_and_close(request, response)
        return response
    except BudgetExceeded as exc:  # the body is fine: the worker retries the 503 shortly
        metrics.reports_rejected.labels("body_budget").inc()
        event(log, "report refused", level=logging.INFO, worker=clip(path_name),
              reason="body_budget", error=str(exc))
        return await _reply_and_close(request, error_response(
            503, f"report of worker(name={clip(path_name)}) not read: {exc}; retry",
            **{"Retry-After": BUSY_RETRY_AFTER}))
    except ClientGone:
        taker.client_gone(path_name, request.remote)
        return error_response(400, "the client closed the connection before its body arrived")
    return _response(await taker.take(path_name, body, started))


class Answer(NamedTuple):
    """A report's answer, whichever server path carried it: status, body, extra headers."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


ACCEPTED = Answer(200, OK_BODY)


def _response(answer: Answer) -> web.Response:
    return web.Response(status=answer.status, body=answer.body, content_type=JSON, headers=dict(answer.headers))


class ReportTaker:
    """What the LC does with a report's body once it has all of it: decode, check, route and
    durably store it, and the answer (every outcome counted and logged as before). The
    aiohttp route and the report lane (lc/lane.py) both end here."""

    def __init__(self, dispatcher: Dispatcher, metrics: LCMetrics) -> None:
        self.dispatcher = dispatcher
        self.metrics = metrics

    async def take(self, path_name: str, body: bytes | bytearray, started: float) -> Answer:
        metrics = self.metrics
        report = None
        try:
            report = decode_report(parse_json(body))
            if report.name != path_name:
                raise ReportError(f"worker name(name={clip(path_name)}) in the api is different "
                                  f"from that(name={clip(report.name)}) in the message body",
                                  reason="name_mismatch")
            routed = await self.dispatcher.handle_report(report)
        except ReportError as exc:
            return self.refused(path_name, report, exc)
        except OutboxFullError as exc:  # nothing was stored: the worker retries the 503
            metrics.reports_rejected.labels("outbox_full").inc()
            event(log, "report refused", level=logging.INFO, worker=clip(path_name),
                  reason="outbox_full", error=str(exc))
            return Answer(503, status_body(503, f"report of worker(name={clip(path_name)}) not stored: {exc}"),
                          (("Retry-After", STORE_RETRY_AFTER),))
        except StoreError as exc:
            metrics.reports_rejected.labels("store").inc()
            event(log, "report not stored", level=logging.ERROR, worker=clip(path_name), error=str(exc))
            return Answer(503, status_body(503, f"report of worker(name={clip(path_name)}) not stored: {exc}"),
                          (("Retry-After", STORE_RETRY_AFTER),))
        metrics.reports_accepted.labels(routed.route).inc()
        metrics.kind_reports.labels(routed.kind, "accepted").inc()
        metrics.report_seconds.observe(time.perf_counter() - started)
        return ACCEPTED

    def refused(self, path_name: str, report: WorkerReport | None, exc: ReportError) -> Answer:
        self.metrics.reports_rejected.labels(exc.reason).inc()
        self.metrics.kind_reports.labels(_kind_of(report), "refused").inc()
        event(log, "report refused", level=logging.INFO, worker=clip(path_name),
              reason=exc.reason, error=exc.message)
        return Answer(exc.status, status_body(exc.status, exc.message))

    def client_gone(self, path_name: str, peer: str | None) -> None:
        self.metrics.clients_gone.inc()
        event(log, "client went away", level=logging.INFO, worker=clip(path_name), peer=peer or "")


def check_media(headers: Mapping[str, str]) -> None:
    """JSON in, JSON out; a missing Content-Type is read as JSON (curl, old clients)."""
    raw_type = headers.get("Content-Type", "")
    media = raw_type.split(";", 1)[0].strip().lower()
    if media and not (media in (JSON, "text/json") or media.endswith("+json")):
        raise ReportError(f"Content-Type {clip(media)} is not supported; send {JSON}",
                          status=415, reason="media_type")
    accept = headers.get("Accept", "").lower()
    if accept and not any(t in accept for t in ("*/*", "application/*", "json")):
        raise ReportError(f"Accept {clip(accept)} excludes {JSON}, the only representation",
                          status=406, reason="not_acceptable")
    encoding = headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in CONTENT_ENCODINGS:
        raise ReportError(f"Content-Encoding {clip(encoding, 40)!r} is not supported; send "
                          f"one of {', '.join(CONTENT_ENCODINGS)}", status=415, reason="encoding")


async def _read_body(request: web.Request, share: Share, *, within: float) -> bytearray:
    """The (decompressed) body within `within` seconds, refusing more than MAX_BODY bytes
    without buffering it all, and taking its bytes from the body budget (BudgetExceeded)
    before and as they arrive; ClientGone if the client closes the connection meanwhile."""
    declared = request.content_length
    if declared is not None and declared > MAX_BODY:
        raise _too_large()
    await share.take(declared or 0)
    arrived = request.content.is_eof()  # all of it came with the headers: nothing to wait for
    try:
        async with contextlib.nullcontext() if arrived else asyncio.timeout(within):
            return await _read_capped(request, share)
    except TimeoutError:
        raise ReportError(f"body not received within {within:g}s", status=408,
                          reason="body_timeout") from None
    except ConnectionResetError:  # aiohttp's "Connection lost" (ClientConnectionResetError too)
        raise ClientGone from None
    except (RequestPayloadError, BadHttpMessage) as exc:  # gzip/deflate that does not inflate
        if request.transport is None or request.transport.is_closing():
            raise ClientGone from None  # a body cut short by the client's leaving
        raise ReportError(f"body cannot be decoded: {clip(_one_line(exc))}",
                          reason="bad_encoding") from None


async def _read_capped(request: web.Request, share: Share) -> bytearray:
    body = bytearray()  # not chunks joined at the end: that would hold the body twice
    while chunk := await request.content.readany():
        if len(body) + len(chunk) > MAX_BODY:
            raise _too_large()
        share.grow_to(len(body) + len(chunk))  # chunked, or inflating past its declared length
        body += chunk
    return body


_UNREADABLE_BODY = ("too_large", "bad_encoding", "body_timeout")


def _body_left(request: web.Request) -> bool:
    """Whether some of the request's body has not arrived (or not been inflated) yet."""
    return not request.content.is_eof()


async def _reply_and_close(request: web.Request, response: web.Response) -> web.Response:
    """Send `response`, then close the connection instead of reading the rest of a body
    that is refused (for its size, its media type, its route...), cannot be decoded or
    does not arrive.

    A `Connection: close` reply alone is not enough: aiohttp then still reads (and
    inflates) what is left of the body for up to its lingering time. Its protocol's
    force_close stops that: the parser is fed nothing more, and the transport closes once
    the reply it holds is written."""
    response.force_close()
    with contextlib.suppress(ConnectionError):  # the client left first: nothing to send
        await response.prepare(request)
        await response.write_eof()
    request.protocol.force_close()
    # What aiohttp read ahead of the body goes now, not once the garbage collector finds
    # the closed connection's cycles: under a flood that is up to 256 KiB per connection.
    if request.content.exception() is None:  # else the reader holds nothing but the error
        request.content.read_nowait()
    return response


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split("message:", 1)[-1].split())


def _too_large() -> ReportError:
    return ReportError(f"body larger than {MAX_BODY} bytes", status=413, reason="too_large")


# ---- operational endpoints --------------------------------------------------------------

async def get_workers(request: web.Request) -> web.Response:
    """One page of the last report of every worker on this node, by namespace and name."""
    limit, after = _list_query(request, _worker_key)
    page = await request.app[STORE_KEY].worker_page(
        limit=limit, after=after, item_bytes=LIST_ITEM_BYTES, page_bytes=PAGE_BYTES)
    workers = [{
        "namespace": w.namespace, "name": w.name, "ownerKind": w.owner_kind,
        "ownerName": w.owner_name, "routedKind": w.routed_kind, "ownerKnown": w.owner_known,
        "receivedAt": datetime.fromtimestamp(w.received_at, UTC).isoformat().replace("+00:00", "Z"),
        "report": orjson.Fragment(w.report_json),
    } for w in page.items]
    return _page_response({"workers": workers}, page)


async def get_dead_letters(request: web.Request) -> web.Response:
    """One page of the reports the GM can never apply, newest first, with why."""
    store = request.app[STORE_KEY]
    limit, after = _list_query(request, _seq_key)
    page = await store.dead_letter_page(limit=limit, after=after, page_bytes=PAGE_BYTES)
    letters = [{"seq": d.seq, "kind": d.kind, "namespace": d.namespace, "name": d.name,
                "body": orjson.Fragment(d.body_json), "createdAt": d.created_at,
                "reason": d.reason, "error": d.error, "deadAt": d.dead_at} for d in page.items]
    return _page_response({"counts": store.dead_letter_counts, "deadLetters": letters}, page)


def _page_response(doc: dict[str, Any], page: Page[Any]) -> web.Response:
    metadata = {} if page.next_key is None else {"continue": _token(page.next_key)}
    return web.Response(body=orjson.dumps({**doc, "metadata": metadata}), content_type=JSON)


def _list_query(request: web.Request,
                key_of: Callable[[Any], tuple[Any, ...] | None]) -> tuple[int, tuple[Any, ...] | None]:
    """`limit` and the key to continue after, from a listing's query (400 when bad)."""
    raw = request.query.get("limit", str(DEFAULT_LIMIT))
    limit = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 6 else 0
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise QueryError(f"limit must be a whole number from 1 to {MAX_LIST_LIMIT}, "
                         f"got {clip(raw, 20)!r}")
    token = request.query.get("continue", "")
    if not token:
        return limit, None
    after = key_of(_untoken(token))
    if after is None:
        raise QueryError("continue token is not valid; pass the metadata.continue of the "
                         "previous page")
    return limit, after


def _token(key: tuple[Any, ...]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(key))).rstrip(b"=").decode()


def _untoken(token: str) -> Any:
    try:
        return orjson.loads(base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_",
                                             validate=True))
    except (binascii.Error, ValueError):  # orjson.JSONDecodeError is a ValueError
        return None


def _worker_key(value: Any) -> tuple[str, str] | None:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value):
        return value[0], value[1]
    return None


def _seq_key(value: Any) -> tuple[int] | None:
    if isinstance(value, list) and len(value) == 1 and type(value[0]) is int:
        return (value[0],)
    return None


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


async def metrics(request: web.Request) -> web.Response:
    """The LC's metrics (docs/metrics.md); what the store answers from its database is read
    here first (`LCMetrics.refresh`), the rest by collectors."""
    lc_metrics = request.app[METRICS_KEY]
    await lc_metrics.refresh(request.app[STORE_KEY])
    return web.Response(body=render(lc_metrics.registry),
                        headers={"Content-Type": METRICS_CONTENT_TYPE})


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(DOCUMENT)


# ---- errors as JSON ---------------------------------------------------------------------

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn aiohttp's routing errors (404, 405, ...), bad queries and store failures into
    JSON bodies."""
    try:
        return await handler(request)
    except QueryError as exc:
        return error_response(400, str(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
        response = error_response(exc.status, _http_message(request, exc), **headers)
        if _body_left(request):  # a POST to no route: its body is neither read nor inflated
            return await _reply_and_close(request, response)
        return response
    except StoreError as exc:
        event(log, "store unavailable", level=logging.ERROR, path=request.path, error=str(exc))
        return error_response(503, f"store unavailable: {exc}")


def _http_message(request: web.Request, exc: web.HTTPException) -> str:
    if exc.status == 404:
        return f"no route for {clip(request.path)}"
    if exc.status == 405:
        return (f"method {clip(request.method, 20)} not allowed on {clip(request.path)}; use "
                f"{exc.headers.get('Allow', '')}")
    return exc.reason


def build_app(*, store: Store, dispatcher: Dispatcher, metrics_: LCMetrics,
              link_state: Callable[[], str], limits: ServerLimits | None = None,
              body_budget: BodyBudget | None = None) -> web.Application:
    """The aiohttp application serving the worker API and ops endpoints."""
    app = web.Application(middlewares=[json_errors], client_max_size=MAX_BODY)
    app[LIMITS_KEY] = limits or ServerLimits()
    app[BUDGET_KEY] = body_budget or BodyBudget(DEFAULT_BUDGET, wait=DEFAULT_WAIT)
    app[STORE_KEY] = store
    app[DISPATCHER_KEY] = dispatcher
    app[METRICS_KEY] = metrics_
    app[TAKER_KEY] = ReportTaker(dispatcher, metrics_)
    metrics_.watch(store=store, budget=app[BUDGET_KEY])
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
