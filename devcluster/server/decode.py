"""What a request carries, decoded: bodies in JSON, YAML or Kubernetes protobuf, patch bodies and
their media types, DeleteOptions, dryRun, and the field manager a write is recorded under.
Every malformed input is an ApiError (400 or 415), never an exception of the parser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import yaml
from aiohttp import web

from devcluster.machinery.errors import ApiError, bad_request
from devcluster.server import protobody
from devcluster.server.httputil import content_type, parse_bool, parse_int
from devcluster.storage.managedfields import manager_name

PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+json": "apply",
}


UNSUPPORTED_PATCH = ("the body of the request was in an unknown format - accepted media types include: "
                      "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, "
                      "application/strategic-merge-patch+json")


def field_manager(request: web.Request) -> str:
    """Who makes this write, for managedFields: `fieldManager`, else the User-Agent's product."""
    return manager_name(request.query.get("fieldManager"), request.headers.get("User-Agent"))


def dry_run(q: Any) -> bool:
    values = q.getall("dryRun", [])
    for v in values:
        if v != "All":
            raise bad_request(f'dryRun: Unsupported value: "{v}": supported values: "All"')
    return bool(values)


_BODY_TYPES = ("", "application/json", "application/yaml", "*/*", protobody.CONTENT_TYPE)


async def json_body(request: web.Request, *, allow_empty: bool = False) -> Any:
    """The request body as JSON data, from JSON, YAML or Kubernetes protobuf; 415 for anything else."""
    ctype = content_type(request)
    if ctype not in _BODY_TYPES:
        raise ApiError(415, "UnsupportedMediaType",
                       f"the body of the request was in an unknown format ({ctype}) - accepted media types "
                       f"include: application/json, application/yaml, {protobody.CONTENT_TYPE}")
    raw = await request.read()
    if not raw.strip():
        if allow_empty:
            return None
        raise bad_request("the request body is empty")
    if ctype == protobody.CONTENT_TYPE:
        try:
            return protobody.decode_body(raw)
        except protobody.ProtobufBodyError as err:
            raise bad_request(f"the request body is not a valid protobuf object: {err}") from None
    if ctype == "application/yaml":
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError as err:
            raise bad_request(f"the request body is not valid YAML: {err}") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise bad_request(f"the request body is not valid JSON: {err}") from None


async def patch_body(request: web.Request, patch_type: str) -> Any:
    raw = await request.read()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        if patch_type != "apply":
            raise bad_request(f"error decoding patch: {err}") from None
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise bad_request(f"error decoding YAML: {err}") from None


@dataclass(slots=True)
class DeleteOptions:
    propagation: str | None = None
    grace: int | None = None
    preconditions: dict[str, Any] | None = None
    orphan: bool | None = None
    dry_run: bool = False


async def delete_options(request: web.Request) -> DeleteOptions:
    """DeleteOptions from the query, overridden field by field by a JSON body (spec §5.6)."""
    q = request.query
    opts = DeleteOptions(q.get("propagationPolicy"), parse_int("gracePeriodSeconds", q.get("gracePeriodSeconds")),
                          None, parse_bool("orphanDependents", q.get("orphanDependents")), dry_run(q))
    body = await json_body(request, allow_empty=True)
    if body is None:
        return opts
    if not isinstance(body, dict):
        raise bad_request("DeleteOptions must be a JSON object")
    if body.get("propagationPolicy") is not None:
        opts.propagation = body["propagationPolicy"]
    if body.get("gracePeriodSeconds") is not None:
        opts.grace = int_field("gracePeriodSeconds", body["gracePeriodSeconds"])
    if isinstance(body.get("preconditions"), dict):
        opts.preconditions = body["preconditions"]
    if body.get("orphanDependents") is not None:
        opts.orphan = bool(body["orphanDependents"])
    if body.get("dryRun"):
        if body["dryRun"] != ["All"]:
            raise bad_request(f'dryRun: Unsupported value: {body["dryRun"]!r}: supported values: "All"')
        opts.dry_run = True
    return opts


def int_field(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"{name} must be an integer")
    return value
