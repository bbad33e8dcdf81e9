"""HTTP conventions of the API server: Go booleans, Accept negotiation, Status responses (spec §2)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson
from aiohttp import web

from devcluster.errors import ApiError, bad_request, not_acceptable

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
