"""The GM's API client: raw JSON over one shared aiohttp session.

Objects go in and out as plain dicts (orjson both ways); no model classes, so a list of
thousands of pods costs one parse. Every request passes a client-side QPS/burst bucket (the
default one, or the budget it names: status writes and Events have their own, so neither can
starve the other or the reconcilers' child writes),
has a timeout, is counted in `sedna_gm_api_requests_total{verb,code}` with its latency, and a
failure is raised as one of the typed errors of `errors.py` (mapped in one place there).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import aiohttp
import orjson

from gm.kube.apierrors import (
    ApiError,
    Expired,
    Unavailable,
    error_from_response,
    error_from_status,
    transport_error,
)
from gm.kube.kubeconfig import ClientSettings, Connection, load_connection
from gm.kube.metrics import KubeMetrics
from gm.kube.ratelimit import TokenBucket
from gm.kube.resources import GVR

PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}
PROPAGATION_POLICIES = ("Background", "Foreground", "Orphan")
WATCH_EVENT_TYPES = frozenset(("ADDED", "MODIFIED", "DELETED", "BOOKMARK"))
MAX_WATCH_LINE = 16 * 1024 * 1024  # one event larger than this is a broken stream
_TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)


class KubeClient:
    """Async client for one API server; create with `await KubeClient.connect(settings)`."""

    def __init__(self, connection: Connection, *, settings: ClientSettings | None = None,
                 metrics: KubeMetrics | None = None):
        self.settings = settings or ClientSettings()
        self.connection = connection
        self.metrics = metrics or KubeMetrics()
        self._bucket = TokenBucket(self.settings.qps, self.settings.burst)
        self._budgets = {name: TokenBucket(qps, burst) for name, qps, burst in self.settings.budgets}
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    async def connect(cls, settings: ClientSettings, *,
                      metrics: KubeMetrics | None = None) -> KubeClient:
        """Resolve the cluster configuration and build a client (`ConfigError` if none)."""
        return cls(await load_connection(settings), settings=settings, metrics=metrics)

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- verbs -------------------------------------------------------------------------

    async def get(self, gvr: GVR, name: str, *, namespace: str | None = None,
                  subresource: str | None = None) -> dict[str, Any]:
        path = gvr.path(namespace=namespace, name=name, subresource=subresource)
        return await self.request("GET", path, verb="get")

    async def list(self, gvr: GVR, *, namespace: str | None = None,
                   label_selector: str | None = None, field_selector: str | None = None,
                   limit: int | None = None, continue_token: str | None = None,
                   resource_version: str | None = None) -> dict[str, Any]:
        """One page of a list: the raw `XList` dict (`metadata.continue` when more remain)."""
        params = _selectors(label_selector, field_selector)
        if limit:
            params["limit"] = str(int(limit))
        if continue_token:
            params["continue"] = continue_token
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        return await self.request("GET", gvr.path(namespace=namespace), verb="list",
                                  params=params)

    async def list_all(self, gvr: GVR, *, namespace: str | None = None,
                       label_selector: str | None = None, field_selector: str | None = None,
                       page_size: int = 500) -> tuple[list[dict[str, Any]], str]:
        """Every matching object, following `continue`; returns (items, list RV).

        Items get `apiVersion`/`kind` filled in when the server omits them. If a continue
        token expires mid-way, the list restarts once without paging, like client-go.
        """
        kw = dict(namespace=namespace, label_selector=label_selector,
                  field_selector=field_selector)
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            try:
                page = await self.list(gvr, limit=page_size, continue_token=token, **kw)
            except Expired:
                if token is None:
                    raise
                page, items, token = await self.list(gvr, **kw), [], None
            items.extend(_page_items(page, gvr))
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return items, str((page.get("metadata") or {}).get("resourceVersion", ""))

    def watch(self, gvr: GVR, *, namespace: str | None = None,
              resource_version: str | None = None, label_selector: str | None = None,
              field_selector: str | None = None, allow_bookmarks: bool = True,
              timeout_seconds: int | None = None) -> WatchStream:
        """A watch stream: `async with client.watch(...) as w: async for type, obj in w`."""
        params = _selectors(label_selector, field_selector)
        params["watch"] = "true"
        if allow_bookmarks:
            params["allowWatchBookmarks"] = "true"
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if timeout_seconds is not None:
            params["timeoutSeconds"] = str(int(timeout_seconds))
        return WatchStream(self, gvr.path(namespace=namespace), params,
                           timeout_seconds=timeout_seconds)

    async def create(self, gvr: GVR, body: Mapping[str, Any], *, namespace: str | None = None,
                     name: str | None = None, subresource: str | None = None,
                     budget: str | None = None) -> dict[str, Any]:
        """POST to the collection (or to `name/subresource`, e.g. pods/binding)."""
        path = gvr.path(namespace=namespace, name=name, subresource=subresource)
        return await self.request("POST", path, verb="create", body=body, budget=budget)

    async def replace(self, gvr: GVR, name: str, body: Mapping[str, Any], *,
                      namespace: str | None = None,
                      subresource: str | None = None) -> dict[str, Any]:
        """PUT; `metadata.resourceVersion` in `body` makes it a guarded update (409 if stale)."""
        path = gvr.path(namespace=namespace, name=name, subresource=subresource)
        return await self.request("PUT", path, verb="update", body=body)

    async def patch(self, gvr: GVR, name: str, body: Any, *, namespace: str | None = None,
                    subresource: str | None = None, patch_type: str = "merge",
                    field_manager: str | None = None, force: bool = False,
                    budget: str | None = None) -> dict[str, Any]:
        """PATCH with `patch_type` merge (default), json, strategic or apply."""
        content_type = PATCH_TYPES.get(patch_type)
        if content_type is None:
            raise ValueError(f"unknown patch type {patch_type!r}; use one of {sorted(PATCH_TYPES)}")
        params: dict[str, str] = {}
        if patch_type == "apply":
            if not field_manager:
                raise ValueError("an apply patch needs a field_manager")
            params["force"] = "true" if force else "false"
        if field_manager:
            params["fieldManager"] = field_manager
        path = gvr.path(namespace=namespace, name=name, subresource=subresource)
        return await self.request("PATCH", path, verb="patch", body=body, params=params,
                                  content_type=content_type, budget=budget)

    async def delete(self, gvr: GVR, name: str, *, namespace: str | None = None,
                     propagation_policy: str | None = None,
                     preconditions: Mapping[str, str] | None = None,
                     grace_period_seconds: int | None = None) -> dict[str, Any]:
        """DELETE with DeleteOptions; returns the object (still terminating) or a Status."""
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy is not None:
            if propagation_policy not in PROPAGATION_POLICIES:
                raise ValueError(f"propagation_policy must be one of {PROPAGATION_POLICIES}")
            options["propagationPolicy"] = propagation_policy
        if preconditions:
            options["preconditions"] = dict(preconditions)
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = int(grace_period_seconds)
        path = gvr.path(namespace=namespace, name=name)
        return await self.request("DELETE", path, verb="delete", body=options)

    # -- transport ---------------------------------------------------------------------

    async def request(self, method: str, path: str, *, verb: str,
                      params: Mapping[str, str] | None = None, body: Any = None,
                      content_type: str = "application/json",
                      budget: str | None = None) -> dict[str, Any]:
        """One non-streaming call; returns the decoded JSON body or raises an `ApiError`.

        `budget` names the bucket that throttles it (one of `settings.budgets`; None or an
        unknown name: the default bucket)."""
        data = _encode(body) if body is not None else None
        start = await self._throttle(budget)
        try:
            async with asyncio.timeout(self.settings.timeout):
                resp = await self._send(method, path, params, data, content_type)
                async with resp:
                    raw = await resp.read()
        except _TRANSPORT_ERRORS as exc:
            self._observe(verb, "error", start)
            raise transport_error(exc, what=f"{method} {path}") from exc
        self._observe(verb, str(resp.status), start)
        if resp.status >= 300:
            raise error_from_response(resp.status, raw, retry_after=resp.headers.get("Retry-After"))
        return _decode_body(raw, what=f"{method} {path}")

    async def _send(self, method: str, path: str, params: Mapping[str, str] | None,
                    data: bytes | None, content_type: str,
                    client_timeout: aiohttp.ClientTimeout | None = None,
                    ) -> aiohttp.ClientResponse:
        headers = {"Accept": "application/json", "User-Agent": self.settings.user_agent,
                   **(await self.connection.auth_headers())}
        if data is not None:
            headers["Content-Type"] = content_type
        kw: dict[str, Any] = {"params": params or None, "data": data, "headers": headers,
                              "ssl": self.connection.ssl_context or None}
        if client_timeout is not None:
            kw["timeout"] = client_timeout
        return await self._get_session().request(method, self.connection.base_url + path, **kw)

    async def _throttle(self, budget: str | None = None) -> float:
        bucket = self._budgets.get(budget, self._bucket) if budget else self._bucket
        waited = await bucket.wait()
        if waited:
            self.metrics.api_throttle.observe(waited)
        return time.monotonic()

    def _observe(self, verb: str, code: str, start: float) -> None:
        self.metrics.api_requests.labels(verb, code).inc()
        self.metrics.api_latency.labels(verb).observe(time.monotonic() - start)

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=100, ssl=self.connection.ssl_context or None)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=None),
                json_serialize=lambda o: orjson.dumps(o).decode())
        return self._session


class WatchStream:
    """One watch request, yielding `(type, object)` for ADDED/MODIFIED/DELETED/BOOKMARK.

    An ERROR event raises its typed error (`Expired` for 410); a clean end of the stream
    ends the iteration; a broken connection or a line that is not JSON raises
    `Unavailable`. `resource_version` is the last RV seen (events and bookmarks), from
    which the caller may resume.
    """

    def __init__(self, client: KubeClient, path: str, params: dict[str, str], *,
                 timeout_seconds: int | None):
        self._client = client
        self._path = path
        self._params = params
        self._timeout_seconds = timeout_seconds
        self._resp: aiohttp.ClientResponse | None = None
        self._buf = bytearray()
        self._eof = False
        self.resource_version: str | None = params.get("resourceVersion")

    async def __aenter__(self) -> WatchStream:
        await self.open()
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.close()

    def __aiter__(self) -> WatchStream:
        return self

    async def open(self) -> None:
        """Send the request and check the status; the body is read by iteration."""
        if self._resp is not None:
            return
        client, what = self._client, f"WATCH {self._path}"
        grace = client.settings.timeout
        total = None if self._timeout_seconds is None else self._timeout_seconds + grace
        timeout = aiohttp.ClientTimeout(total=total, connect=grace, sock_connect=grace)
        start = await client._throttle()
        try:
            async with asyncio.timeout(grace):
                resp = await client._send("GET", self._path, self._params, None,
                                          "application/json", client_timeout=timeout)
                if resp.status != 200:
                    raw = await resp.read()
        except _TRANSPORT_ERRORS as exc:
            client._observe("watch", "error", start)
            raise transport_error(exc, what=what) from exc
        client._observe("watch", str(resp.status), start)
        if resp.status != 200:
            resp.close()
            raise error_from_response(resp.status, raw, retry_after=resp.headers.get("Retry-After"))
        self._resp = resp

    def close(self) -> None:
        """Drop the connection (a watch body is never drained)."""
        if self._resp is not None:
            self._resp.close()
        self._eof = True

    async def __anext__(self) -> tuple[str, dict[str, Any]]:
        if self._resp is None:
            await self.open()
        while True:
            line = await self._next_line()
            if line is None:
                self.close()
                raise StopAsyncIteration
            if line.strip():
                return self._decode(line)

    async def _next_line(self) -> bytes | None:
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                return line
            if self._eof or self._resp is None:
                rest, self._buf = bytes(self._buf), bytearray()
                return rest or None
            await self._read_chunk()

    async def _read_chunk(self) -> None:
        assert self._resp is not None
        try:
            chunk = await self._resp.content.readany()
        except _TRANSPORT_ERRORS as exc:
            self.close()
            raise transport_error(exc, what=f"WATCH {self._path}") from exc
        if not chunk:
            self._eof = True
        elif len(self._buf) + len(chunk) > MAX_WATCH_LINE:
            self.close()
            raise Unavailable(0, "BadResponse", f"WATCH {self._path}: event over {MAX_WATCH_LINE} bytes")
        else:
            self._buf += chunk

    def _decode(self, line: bytes) -> tuple[str, dict[str, Any]]:
        event = _decode_body(line, what=f"WATCH {self._path}")
        kind, obj = event.get("type"), event.get("object")
        if kind is None and "code" in event:  # a bare Status instead of an event
            raise error_from_status(_int(event.get("code")), event)
        if kind == "ERROR":
            status = obj if isinstance(obj, dict) else {}
            raise error_from_status(_int(status.get("code")), status)
        if kind not in WATCH_EVENT_TYPES or not isinstance(obj, dict):
            raise Unavailable(0, "BadResponse", f"WATCH {self._path}: malformed event {line[:200]!r}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self.resource_version = str(rv)
        return kind, obj


def _selectors(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    params: dict[str, str] = {}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    return params


def _page_items(page: dict[str, Any], gvr: GVR) -> list[dict[str, Any]]:
    items = page.get("items") or []
    list_kind = str(page.get("kind", ""))
    kind = list_kind[:-4] if list_kind.endswith("List") else ""
    for item in items:
        if "apiVersion" not in item:
            item["apiVersion"] = gvr.api_version
        if "kind" not in item and kind:
            item["kind"] = kind
    return items


def _encode(body: Any) -> bytes:
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError as exc:
        raise ValueError(f"request body is not JSON-serializable: {exc}") from exc


def _decode_body(raw: bytes, *, what: str) -> dict[str, Any]:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Unavailable(0, "BadResponse", f"{what}: answer is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise Unavailable(0, "BadResponse", f"{what}: answer is not a JSON object")
    return doc


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 500


__all__ = ["ApiError", "KubeClient", "WatchStream", "PATCH_TYPES"]
