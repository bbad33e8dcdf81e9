"""The OpenAPI 3 description of the LC's HTTP API, served at GET /openapi.json.

Hand-written to match lc/api.py; tests/unit/test_lc_api.py checks that every route the
app serves is described and that documented status codes are the ones handlers return.
"""

from __future__ import annotations

from typing import Any

MAX_BODY = 1 << 20
MAX_LIST_LIMIT = 1000

_STATUS_MESSAGE = {
    "type": "object",
    "required": ["Status", "Message"],
    "properties": {"Status": {"type": "integer"}, "Message": {"type": "string"}},
}

_REPORT = {
    "type": "object",
    "description": "Keys match case-insensitively; unknown keys are ignored; bytes after "
                   "the first JSON value are ignored (upstream-compatible).",
    "required": ["name", "namespace", "ownerName"],
    "properties": {
        "name": {"type": "string", "description": "Must equal the {name} path segment."},
        "namespace": {"type": "string", "minLength": 1},
        "ownerName": {"type": "string", "minLength": 1},
        "ownerKind": {"type": "string", "description": "Lower-case job kind, e.g. "
                      "jointinferenceservice; missing or unknown kinds are matched by "
                      "namespace/ownerName against jobs on this node."},
        "kind": {"type": "string", "description": "Worker phase: train, eval, deploy, inference."},
        "status": {"type": "string"},
        "ownerInfo": {"type": ["object", "null"]},
        "results": {"type": ["array", "null"], "items": {"type": ["object", "null"]}},
    },
}


def _error(description: str, *, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/StatusMessage"}}},
            **({"headers": headers} if headers else {})}


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_REPORT_OP = {
    "summary": "Report a worker's status (upstream Sedna worker API).",
    "operationId": "reportWorker",
    "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
    "requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/WorkerReport"}}}},
    "responses": {
        "200": _error("Committed durably to the outbox."),
        "400": _error("Malformed JSON, wrong field type, name mismatch, missing owner, a "
                      "body that does not decompress (the connection is then closed), or a "
                      "report the GM would refuse (nesting, name lengths, invalid Unicode: "
                      "proto/limits.py). Values quoted from the request are clipped to 200 "
                      "characters with their length stated."),
        "406": _error("Accept header excludes JSON."),
        "408": _error("The body did not arrive within the body timeout; the connection is "
                      "closed."),
        "413": _error(f"Body larger than {MAX_BODY} bytes, as declared, as read or once "
                      "inflated (the connection is then closed: the rest is neither read nor "
                      "inflated), or a report whose content would put more than 1 MiB of JSON "
                      "into the CR status."),
        "415": _error("Content-Type is not JSON, or Content-Encoding is not identity, gzip "
                      "or deflate."),
        "503": _error("Retry after the `Retry-After` seconds; the body was fine: it does not "
                      "fit in the bytes of request bodies this LC reads at once "
                      "(LC_BODY_BUDGET_BYTES; Retry-After 1, the connection is closed and the "
                      "body not read), or the report could not be committed (the outbox is "
                      "full, LC_OUTBOX_BYTES, or a store failure or commit backlog; Retry-After "
                      "3).",
                      headers={"Retry-After": {"schema": {"type": "integer"},
                                               "description": "Seconds to wait before retrying."}}),
    },
}

_TRUNCATED = {
    "type": "object",
    "description": "Stands for JSON text too long to show (a listed report over 64 KiB, a "
                   "dead letter's body over 64 KiB when it was stored): its start and length.",
    "required": ["truncated", "bytes", "head"],
    "properties": {"truncated": {"const": True},
                   "bytes": {"type": "integer", "description": "Length of the whole JSON text."},
                   "head": {"type": "string", "description": "The JSON text's start."}},
}

_LIST_METADATA = {"type": "object", "properties": {"continue": {
    "type": "string", "description": "Present when more items follow: pass it as `continue` "
                                     "for the next page."}}}

_LIST_PARAMETERS = [
    {"name": "limit", "in": "query", "required": False,
     "description": "Items in this page at most; a page also ends once it holds 4 MiB.",
     "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIST_LIMIT, "default": 100}},
    {"name": "continue", "in": "query", "required": False,
     "description": "The previous page's metadata.continue (opaque).",
     "schema": {"type": "string"}},
]

_WORKERS = {"type": "object", "properties": {"metadata": _LIST_METADATA, "workers": {
    "type": "array", "items": {
        "type": "object",
        "properties": {"namespace": {"type": "string"}, "name": {"type": "string"},
                       "ownerKind": {"type": "string"}, "ownerName": {"type": "string"},
                       "receivedAt": {"type": "string", "format": "date-time"},
                       "routedKind": {"type": ["string", "null"]},
                       "ownerKnown": {"type": "boolean", "description": "Its owner is a job "
                                      "this node holds; if not, the record is kept briefly "
                                      "(LC_UNKNOWN_OWNER_TTL)."},
                       "report": {"oneOf": [{"$ref": "#/components/schemas/WorkerReport"},
                                            {"$ref": "#/components/schemas/Truncated"}]}}}}}}

_DEAD = {"type": "object", "properties": {
    "metadata": _LIST_METADATA,
    "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
    "deadLetters": {"type": "array", "items": {"type": "object", "properties": {
        "seq": {"type": "integer"}, "kind": {"type": "string"},
        "namespace": {"type": "string"}, "name": {"type": "string"},
        "body": {"description": "The report's body, or a Truncated marker."},
        "createdAt": {"type": "number"}, "deadAt": {"type": "number"},
        "reason": {"type": "string", "enum": ["refused", "unsendable", "protocol"]},
        "error": {"type": "string"}}}}}}

_HEALTH = {"type": "object", "properties": {"status": {"type": "string"},
                                            "db": {"type": "string"}, "link": {"type": "string"}}}

DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "sedna-py LocalController", "version": "1",
             "description": "Worker report API and operational endpoints of the LC."},
    "paths": {
        "/sedna/workers/{name}/info": {"post": _REPORT_OP},
        "/sedna/workers": {"get": {
            "summary": "Last report of every worker, by namespace and name, a page at a time.",
            "operationId": "listWorkers",
            "parameters": _LIST_PARAMETERS,
            "responses": {"200": _json("A page of workers.", _WORKERS),
                          "400": _error("Bad limit or continue token."),
                          "503": _error("Store unavailable.")}}},
        "/sedna/deadletters": {"get": {
            "summary": "Reports the GM can never apply (refused, unsendable, or whose frame "
                       "the GM refused), newest first, a page at a time; they no longer "
                       "block the outbox.",
            "operationId": "listDeadLetters",
            "parameters": _LIST_PARAMETERS,
            "responses": {"200": _json("A page of dead letters and their counts by reason.",
                                       _DEAD),
                          "400": _error("Bad limit or continue token."),
                          "503": _error("Store unavailable.")}}},
        "/healthz": {"get": {"summary": "The process is serving.", "operationId": "healthz",
                             "responses": {"200": _json("Alive.", _HEALTH)}}},
        "/readyz": {"get": {"summary": "The store answers; link state is informative.",
                            "operationId": "readyz",
                            "responses": {"200": _json("Ready.", _HEALTH),
                                          "503": _json("Not ready.", _HEALTH)}}},
        "/metrics": {"get": {"summary": "Prometheus metrics.", "operationId": "metrics",
                             "responses": {"200": {"description": "Text exposition format.",
                                                   "content": {"text/plain": {}}}}}},
        "/openapi.json": {"get": {"summary": "This document.", "operationId": "openapi",
                                  "responses": {"200": _json("OpenAPI 3 document.",
                                                             {"type": "object"})}}},
    },
    "components": {"schemas": {"StatusMessage": _STATUS_MESSAGE, "WorkerReport": _REPORT,
                               "Truncated": _TRUNCATED}},
}
