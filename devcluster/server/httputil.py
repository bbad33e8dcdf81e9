"""HTTP conventions of the API server: Go booleans, Accept negotiation, Status responses (spec §2)."""

from __future__ import annotations

import email.utils
import hashlib
import time
from dataclasses import dataclass

import orjson
from aiohttp import web

from devcluster.machinery.errors import ApiError, bad_request, not_acceptable

JSON = "application/json"
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def parse_bool(name: str, value: str | None) -> bool | None:
    """Go strconv.ParseBool; None when absent; 400 otherwise."""
    if value is None:
        return None
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise bad_request(f'invalid value for {name}: strconv.ParseBool: parsing "{value}": invalid syntax')


def parse_int(name: str, value: str | None) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise bad_request(f'invalid value for {name}: strconv.ParseInt: parsing "{value}": invalid syntax') from None


@dataclass(frozen=True, slots=True)
class MediaRange:
    type: str
    params: dict[str, str]


def parse_accept(header: str | None) -> list[MediaRange]:
    if not header:
        return [MediaRange("*/*", {})]
    out = []
    for part in header.split(","):
        fields = [f.strip() for f in part.split(";")]
        if not fields[0]:
            continue
        params = {}
        for f in fields[1:]:
            k, _, v = f.partition("=")
            params[k.strip()] = v.strip()
        out.append(MediaRange(fields[0].lower(), params))
    return out or [MediaRange("*/*", {})]


def _json_like(m: MediaRange) -> bool:
    return m.type in (JSON, "*/*", "application/*")


def wants_table(accept: list[MediaRange]) -> bool:
    """True when the first JSON media range the client accepts asks for a meta.k8s.io Table."""
    for m in accept:
        if m.type == JSON and m.params.get("as") == "Table":
            return True
        if _json_like(m) and m.params.get("as") is None:
            return False
    return False


def wants_aggregated(accept: list[MediaRange]) -> bool:
    return any(m.type == JSON and m.params.get("as") == "APIGroupDiscoveryList"
               and m.params.get("v") == "v2" and m.params.get("g") == "apidiscovery.k8s.io" for m in accept)


def check_acceptable(accept: list[MediaRange]) -> None:
    """406 when the client accepts neither JSON nor */* (spec §2)."""
    if not any(_json_like(m) for m in accept):
        raise not_acceptable("only the following media types are accepted: application/json, application/yaml, "
                             "application/vnd.kubernetes.protobuf")


def json_response(body: object, status: int = 200, content_type: str = JSON) -> web.Response:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    return web.Response(body=data, status=status, headers={"Content-Type": content_type})


def error_response(err: ApiError) -> web.Response:
    headers = {"Content-Type": JSON}
    if err.code == 429 and err.details and "retryAfterSeconds" in err.details:
        headers["Retry-After"] = str(err.details["retryAfterSeconds"])
    return web.Response(body=orjson.dumps(err.status()), status=err.code, headers=headers)


def content_type(request: web.Request) -> str:
    """The request Content-Type without parameters such as charset."""
    return request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()


# what the real server sends with every answer of its own handlers (discovery and OpenAPI say otherwise)
NO_CACHE = "no-cache, private"
_YEAR = 365 * 24 * 3600.0


def etag_of(body: bytes) -> str:
    """A strong ETag as the real server makes it for discovery and OpenAPI: the body's SHA-512, quoted."""
    return '"' + hashlib.sha512(body).hexdigest().upper() + '"'


def cacheable_response(request: web.Request, body: bytes, *, content_type: str = JSON, cache_control: str,
                       etag: str | None = None, last_modified: float | None = None, immutable: bool = False,
                       vary: bool = True) -> web.Response:
    """A discovery or OpenAPI answer with the validators the real server sends, or 304 Not Modified
    when the request's If-None-Match / If-Modified-Since shows the client's copy is current."""
    headers = {"Cache-Control": cache_control}
    if vary:
        headers["Vary"] = "Accept"
    if etag is not None:
        headers["ETag"] = etag
    if last_modified is not None:
        headers["Last-Modified"] = email.utils.formatdate(last_modified, usegmt=True)
    if immutable:
        headers["Expires"] = email.utils.formatdate(time.time() + _YEAR, usegmt=True)
    if _not_modified(request, etag, last_modified):
        return web.Response(status=304, headers=headers)
    return web.Response(body=body, headers={**headers, "Content-Type": content_type})


def _not_modified(request: web.Request, etag: str | None, last_modified: float | None) -> bool:
    if etag is not None and "If-None-Match" in request.headers:
        return etag in [t.strip() for t in request.headers["If-None-Match"].split(",")]
    since = request.headers.get("If-Modified-Since")
    if last_modified is None or not since:
        return False
    try:
        when = email.utils.parsedate_to_datetime(since).timestamp()
    except (TypeError, ValueError):
        return False
    return int(last_modified) <= when
