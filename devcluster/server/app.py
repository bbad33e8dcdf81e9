"""The aiohttp application: URL routing, discovery, OpenAPI, content negotiation and watch streams.

A thin layer over the Store: it parses the URL and query, calls one store verb, and
encodes the answer (stored objects through the store's encoding cache). Every failure
is an ApiError rendered as a Status; nothing a client sends can crash the process.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from devcluster.auth import access, tokenreview
from devcluster.auth.access import Access
from devcluster.auth.tokenreview import TokenAuthority
from devcluster.machinery.errors import (
    ApiError,
    bad_request,
    internal,
    method_not_allowed,
    not_found,
    path_not_found,
    too_large,
)
from devcluster.machinery.resource import ResourceType
from devcluster.server import decode, discovery, fieldvalidation, openapi
from devcluster.server.faults import FaultConfigError, Faults
from devcluster.server.httputil import (
    NO_CACHE,
    cacheable_response,
    check_acceptable,
    content_type,
    error_response,
    etag_of,
    json_response,
    parse_accept,
    parse_bool,
    parse_int,
    wants_aggregated,
    wants_table,
)
from devcluster.server.watchstream import WatchStreams
from devcluster.storage import views
from devcluster.storage.store import Store
from devcluster.tables.render import to_table

log = logging.getLogger("devcluster.server")

LogSource = Callable[[str, str, str | None, int | None], "str | None | Awaitable[str | None]"]
Health = Callable[[], "dict[str, str | None]"]  # check name -> None (ok) or why it fails
STORE_KEY: web.AppKey[Store] = web.AppKey("store", Store)
FAULTS_KEY: web.AppKey[Faults] = web.AppKey("faults", Faults)
MAX_BODY = 3 * 1024 * 1024
_SUBRESOURCES_BY_NAMESPACE = ("status", "finalize")


@dataclass(slots=True)
class Target:
    """What an API URL addresses."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


def make_app(store: Store, *, faults: Faults | None = None, log_source: LogSource | None = None,
             health: Health | None = None,
             tokens: TokenAuthority | None = None, access: Access | None = None) -> web.Application:
    """The API server application for `store`; `faults` defaults to a disabled Faults().
    `health` adds checks to `/healthz` and `/readyz` (the dev cluster's supervised tasks)."""
    app = web.Application(client_max_size=MAX_BODY)
    tokens = tokens or TokenAuthority(store)
    api = _Api(store, faults or Faults(), log_source, health, tokens, access or Access(store, tokens))
    app[STORE_KEY] = store
    app[FAULTS_KEY] = api.faults
    app.router.add_route("*", "/{tail:.*}", api.handle)
    app.on_shutdown.append(api.streams.close_all)
    app.on_response_prepare.append(_no_cache)
    return app


async def _no_cache(_request: web.Request, response: web.StreamResponse) -> None:
    """Every answer says it is not to be cached, as the real server's handlers do, unless it says
    otherwise (discovery and OpenAPI)."""
    response.headers.setdefault("Cache-Control", NO_CACHE)


class _Api:
    def __init__(self, store: Store, faults: Faults, log_source: LogSource | None,
                 health: Health | None, tokens: TokenAuthority, access: Access) -> None:
        self.store = store
        self.tokens = tokens
        self.access = access
        self.faults = faults
        self.log_source = log_source
        self.health = health
        self._cache: dict[str, _Cached] = {}  # discovery/OpenAPI bodies per registry generation
        self.defs = openapi.builtin_definitions()  # the built-in kinds' schemas, for OpenAPI and field validation
        self.streams = WatchStreams(faults)  # shared with the view types' handlers
        self._views: dict[tuple[str, str, str], _Api] = {}  # one per view type (storage/views.py), sharing streams

    def _view_api(self, rt: ResourceType) -> _Api:
        """The same handlers over `views.ViewStore`: the request's view of another storage."""
        key = (rt.group, rt.version, rt.resource)
        api = self._views.get(key)
        if api is None:
            api = _Api(views.ViewStore(self.store, rt), self.faults, self.log_source,  # type: ignore[arg-type]
                       self.health, self.tokens, self.access)
            api.streams = self.streams
            self._views[key] = api
        return api

    # -- entry ---------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._route(request)
        except ApiError as err:
            return error_response(err)
        except web.HTTPRequestEntityTooLarge:
            return error_response(too_large(MAX_BODY))
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as err:  # a bug must answer 500, never take the server down
            log.exception("request failed method=%s path=%s", request.method, request.path)
            return error_response(internal(f"{type(err).__name__}: {err}"))

    async def _route(self, request: web.Request) -> web.StreamResponse:
        request[access.USER_KEY] = self.access.admit(request)  # 401 / 403 before anything is served
        path = request.path.rstrip("/") or "/"
        if path == "/version":
            return json_response(discovery.VERSION_INFO)
        if path in ("/healthz", "/readyz", "/livez"):
            return self._health(path, request)
        if path.startswith("/devcluster/"):
            return await self._admin(request, path)
        if path == tokenreview.PATH:  # create-only and never stored: not a registry resource
            return await self._token_review(request)
        if path in access.REVIEW_PATHS:
            if request.method != "POST":
                raise method_not_allowed()
            body = await decode.json_body(request)
            return json_response(self.access.review(path, request[access.USER_KEY], body), status=201)
        if path == "/openapi/v3" or path.startswith("/openapi/v3/"):
            return self._openapi(request, path)
        if path == "/openapi/v2":
            return self._openapi_v2(request)
        segs = path.strip("/").split("/")
        if segs[0] == "api":
            return await self._core(request, segs[1:])
        if segs[0] == "apis":
            return await self._groups(request, segs[1:])
        raise path_not_found()

    def _health(self, path: str, request: web.Request) -> web.Response:
        """Like the real server: "ok", or 500 listing each check as `[+]name ok` / `[-]name failed:
        reason` (also on success with `?verbose`). /livez only says the process serves."""
        checks: dict[str, str | None] = {"ping": None}
        if self.health is not None and path != "/livez":
            checks.update(self.health())
        failed = any(why is not None for why in checks.values())
        if not failed and "verbose" not in request.query:
            return web.Response(text="ok", content_type="text/plain")
        lines = [f"[+]{name} ok" if why is None else f"[-]{name} failed: {why}" for name, why in checks.items()]
        lines.append(f"{path.strip('/')} check {'failed' if failed else 'passed'}")
        return web.Response(text="\n".join(lines) + "\n", status=500 if failed else 200, content_type="text/plain")

    # -- discovery -----------------------------------------------------------------------------

    def _cached(self, key: str, build: Callable[[], Any]) -> bytes:
        return self._cached_entry(key, build).body

    def _cached_entry(self, key: str, build: Callable[[], Any]) -> _Cached:
        gen = self.store.registry.generation
        hit = self._cache.get(key)
        if hit is None or hit.generation != gen:
            body = orjson.dumps(build())
            if hit is not None and hit.body == body:
                hit = _Cached(gen, body, hit.etag, hit.built)
            else:  # Last-Modified has whole seconds: a new body is always a later one
                hit = _Cached(gen, body, etag_of(body), max(float(int(time.time())), hit.built + 1 if hit else 0.0))
            self._cache[key] = hit
        return hit

    def _discovery(self, request: web.Request, core: bool) -> web.Response:
        reg = self.store.registry
        if wants_aggregated(parse_accept(request.headers.get("Accept"))):
            hit = self._cached_entry(f"agg:{core}", lambda: discovery.aggregated(reg, core=core))
            return cacheable_response(request, hit.body, content_type=discovery.AGGREGATED_CONTENT_TYPE,
                                      cache_control="public", etag=hit.etag)
        if core:
            return json_response(discovery.legacy_versions(request.host or "127.0.0.1"))
        return json_response(self._cached("groups", lambda: discovery.legacy_groups(reg)))

    async def _core(self, request: web.Request, segs: list[str]) -> web.StreamResponse:
        if not segs:
            return self._discovery(request, core=True)
        if segs[0] not in self.store.registry.versions(""):
            raise path_not_found()
        return await self._resource(request, "", segs[0], segs[1:])

    async def _groups(self, request: web.Request, segs: list[str]) -> web.StreamResponse:
        reg = self.store.registry
        if not segs:
            return self._discovery(request, core=False)
        group = segs[0]
        if not group or group not in reg.groups():
            raise path_not_found()
        if len(segs) == 1:
            return json_response(discovery.api_group(reg, group))
        if segs[1] not in reg.versions(group):
            raise path_not_found()
        return await self._resource(request, group, segs[1], segs[2:])

    def _openapi(self, request: web.Request, path: str) -> web.Response:
        reg = self.store.registry
        if path == "/openapi/v3":
            hit = self._cached_entry("openapi", lambda: discovery.openapi_index(reg))
            return cacheable_response(request, hit.body, cache_control=NO_CACHE, last_modified=hit.built,
                                      vary=False)
        rest = path[len("/openapi/v3/"):].split("/")
        if rest[0] == "api" and len(rest) == 2:
            group, version = "", rest[1]
        elif rest[0] == "apis" and len(rest) == 3:
            group, version = rest[1], rest[2]
        else:
            raise path_not_found()
        hit = self._cached_entry(f"openapi:{group}/{version}",
                                 lambda: openapi.v3_document(reg, self.defs, group, version))
        if hit.body == b"null":
            raise path_not_found()
        # the index links each document with its hash: a client may keep what it fetched that way, and a
        # stale hash is sent on to the current one
        pinned = "hash" in request.query
        current = reg.gv_hash(group, version)
        if pinned and request.query["hash"] != current:
            return web.Response(status=301, headers={"Location": f"{path}?hash={current}", "ETag": hit.etag,
                                                     "Vary": "Accept", "Content-Type": "application/json"})
        return cacheable_response(request, hit.body, cache_control="public, immutable" if pinned else NO_CACHE,
                                  etag=hit.etag, last_modified=hit.built, immutable=pinned)

    def _openapi_v2(self, request: web.Request) -> web.Response:
        """JSON only: a client asking for the protobuf form alone gets 406 and falls back."""
        check_acceptable(parse_accept(request.headers.get("Accept")))
        return json_response(self._cached("openapi:v2", lambda: openapi.v2_document(self.store.registry, self.defs)))

    # -- field validation ------------------------------------------------------------------------

    async def _decoded(self, request: web.Request, rt: ResourceType, options_kind: str,
                       subresource: str | None = None) -> tuple[Any, list[str]]:
        """The create/update body after field validation, and the warnings it earned."""
        mode = fieldvalidation.directive(request.query.get("fieldValidation"), options_kind=options_kind)
        body = await decode.json_body(request)
        dups = await self._duplicates(request, mode)
        view = None if subresource == "scale" else openapi.schema_view(self.defs, rt)
        return fieldvalidation.check_object(view, body, kind=rt.kind, version=rt.version, mode=mode, duplicates=dups)

    async def _duplicates(self, request: web.Request, mode: str) -> list[str]:
        if mode == "Ignore" or content_type(request) not in ("", "application/json", "application/merge-patch+json",
                                                               "application/strategic-merge-patch+json",
                                                               "application/json-patch+json"):
            return []
        return fieldvalidation.duplicate_fields(await request.read())

    # -- admin ---------------------------------------------------------------------------------

    async def _admin(self, request: web.Request, path: str) -> web.Response:
        if path == "/devcluster/faults":
            if request.method == "GET":
                return json_response(self.faults.snapshot())
            if request.method != "POST":
                raise method_not_allowed()
            try:
                self.faults.configure(await decode.json_body(request))
            except FaultConfigError as err:
                raise bad_request(str(err)) from None
            return json_response(self.faults.snapshot())
        if path == "/devcluster/compact":
            if request.method != "POST":
                raise method_not_allowed()
            body = await decode.json_body(request, allow_empty=True) or {}
            rv = body.get("resourceVersion") if isinstance(body, dict) else None
            self.store.compact(None if rv is None else parse_int("resourceVersion", str(rv)))
            return json_response({"compacted": self.store.compacted, "resourceVersion": str(self.store.rv)})
        if path == "/devcluster/tokens":
            return await self._issue_token(request)
        raise path_not_found()

    async def _token_review(self, request: web.Request) -> web.Response:
        if request.method != "POST":
            raise method_not_allowed()
        await self._inject("create", "tokenreviews")
        return json_response(self.tokens.review(await decode.json_body(request)), status=201)

    async def _issue_token(self, request: web.Request) -> web.Response:
        """Play the kubelet's TokenRequest: {namespace, pod, audiences?, expirationSeconds?}."""
        if request.method != "POST":
            raise method_not_allowed()
        body = await decode.json_body(request)
        audiences = body.get("audiences") if isinstance(body, dict) else None
        if (not isinstance(body, dict) or not isinstance(body.get("pod"), str)
                or not isinstance(audiences or [], list) or not all(isinstance(a, str) for a in audiences or [])):
            raise bad_request("need {namespace, pod, audiences?: [string], expirationSeconds?}")
        token = self.tokens.issue(
            str(body.get("namespace") or "default"), body["pod"],
            audiences=audiences or tokenreview.DEFAULT_AUDIENCES,
            expiration_seconds=decode.int_field("expirationSeconds", body.get("expirationSeconds", 3600)))
        return json_response({"token": token}, status=201)

    # -- resources -----------------------------------------------------------------------------

    def _target(self, group: str, version: str, segs: list[str]) -> Target:
        ns = None
        if len(segs) >= 3 and segs[0] == "namespaces" and segs[2] not in _SUBRESOURCES_BY_NAMESPACE:
            ns, segs = segs[1], segs[2:]
        if not segs or len(segs) > 3 or not all(segs):
            raise path_not_found()
        rt = self.store.registry.lookup(group=group, version=version, resource=segs[0])
        if ns is not None and not rt.namespaced:
            raise path_not_found()
        name = segs[1] if len(segs) > 1 else None
        if name is not None and rt.namespaced and ns is None:
            raise path_not_found()
        return Target(rt, ns, name, segs[2] if len(segs) > 2 else None)

    async def _resource(self, request: web.Request, group: str, version: str, segs: list[str]) -> web.StreamResponse:
        if not segs:
            return json_response(self._cached(f"res:{group}/{version}",
                                              lambda: discovery.resource_list(self.store.registry, group, version)))
        t = self._target(group, version, segs)
        accept = parse_accept(request.headers.get("Accept"))
        if t.subresource != "log":
            check_acceptable(accept)
        q = request.query
        verb = _verb(request.method, t, q)
        await self._inject(verb, t.rt.resource)
        api = self._view_api(t.rt) if views.is_view(t.rt) else self
        if t.name is None:
            return await api._collection(request, verb, t, accept)
        return await api._object(request, verb, t, accept)

    async def _inject(self, verb: str, resource: str) -> None:
        if not self.faults.active:
            return
        if self.faults.latency:
            await asyncio.sleep(self.faults.latency)
        err = self.faults.error_for(verb, resource)
        if err is not None:
            raise err

    async def _collection(self, request: web.Request, verb: str, t: Target, accept: list) -> web.StreamResponse:
        q = request.query
        if verb == "watch":
            return await self.streams.serve(request, self.store, t.rt, t.namespace, accept)
        if verb == "list":
            return self._list(t, q, accept)
        if verb == "create":
            body, warnings = await self._decoded(request, t.rt, "CreateOptions")
            obj = self.store.create(t.rt, t.namespace, body, dry_run=decode.dry_run(q),
                                    field_manager=decode.field_manager(request), warnings=warnings)
            return _warned(json_response(self.store.encode(obj, t.rt), status=201), warnings)
        if verb == "deletecollection":
            if t.rt.key == ("", "namespaces"):
                raise method_not_allowed()  # the real server serves no collection delete of namespaces
            opts = await decode.delete_options(request)
            items = self.store.delete_collection(
                t.rt, t.namespace, label_selector=q.get("labelSelector"), field_selector=q.get("fieldSelector"),
                propagation=opts.propagation, grace_period=opts.grace, dry_run=opts.dry_run)
            return json_response({"kind": t.rt.list_kind, "apiVersion": t.rt.api_version,
                                  "metadata": {"resourceVersion": str(self.store.rv)}, "items": items})
        raise method_not_allowed()

    def _list(self, t: Target, q: Any, accept: list) -> web.Response:
        page = self.store.list_page(
            t.rt, t.namespace, label_selector=q.get("labelSelector"), field_selector=q.get("fieldSelector"),
            limit=parse_int("limit", q.get("limit")), continue_token=q.get("continue"),
            resource_version=q.get("resourceVersion"), resource_version_match=q.get("resourceVersionMatch"))
        meta: dict[str, Any] = {"resourceVersion": str(page.rv)}
        if page.continue_token:
            meta["continue"] = page.continue_token
            if not (q.get("labelSelector") or q.get("fieldSelector")):
                meta["remainingItemCount"] = page.remaining  # unknown (unset) once a selector filters
        elif t.rt.crd:
            meta["continue"] = ""  # a custom resource list is unstructured: nothing omits the empty string
        if wants_table(accept):
            table = to_table(t.rt, page.items, resource_version=str(page.rv), now=time.time(),
                                    include_object=q.get("includeObject"))
            table["metadata"] = {**table.get("metadata", {}), **meta}
            return json_response(table)
        encode = self.store.encode if t.rt.crd else self._list_item
        items = b",".join(encode(o, t.rt) for o in page.items)
        head = orjson.dumps({"kind": t.rt.list_kind, "apiVersion": t.rt.api_version, "metadata": meta})
        return json_response(head[:-1] + b',"items":[' + items + b"]}")

    def _list_item(self, obj: dict[str, Any], rt: ResourceType) -> bytes:
        """An item of a built-in list: without apiVersion and kind, as a typed list's items are written
        (custom resource lists keep them). Cut from the object's cached JSON when it starts with them."""
        data = self.store.encode(obj, rt)
        for head in _type_meta_heads(rt):
            if data.startswith(head):
                return b"{" + data[len(head):]
        return orjson.dumps({k: v for k, v in obj.items() if k not in ("apiVersion", "kind")})

    async def _object(self, request: web.Request, verb: str, t: Target, accept: list) -> web.StreamResponse:
        q, rt, name = request.query, t.rt, t.name
        assert name is not None
        sub = t.subresource
        if sub is not None and not _serves(rt, sub, request.method):
            raise path_not_found() if not _known_sub(rt, sub) else method_not_allowed()
        if sub == "log":
            return await self._log(t, q)
        if sub == "binding":
            return await self._bind(request, t)
        if sub == "token":
            answer = self.tokens.request_token(t.namespace or "", name, await decode.json_body(request))
            return json_response(answer, status=201)
        if verb == "get":
            return self._get(t, q, accept)
        if verb == "update":
            existed = _exists(self.store, t)
            body, warnings = await self._decoded(request, rt, "UpdateOptions", sub)
            obj = self.store.update(rt, t.namespace, name, body, sub, dry_run=decode.dry_run(q),
                                    field_manager=decode.field_manager(request), warnings=warnings)
            return _warned(json_response(self._encode(rt, obj), status=200 if existed or sub else 201), warnings)
        if verb == "patch":
            return await self._patch(request, t)
        if verb == "delete":
            if sub is not None:
                raise method_not_allowed()
            opts = await decode.delete_options(request)
            res = self.store.delete(rt, t.namespace, name, opts.propagation, opts.grace, opts.preconditions,
                                    orphan_dependents=opts.orphan, dry_run=opts.dry_run)
            return json_response(self._encode(rt, res))
        raise method_not_allowed()

    def _get(self, t: Target, q: Any, accept: list) -> web.Response:
        assert t.name is not None
        rv = q.get("resourceVersion")
        if rv and rv.isdigit() and int(rv) > self.store.rv:
            raise ApiError(504, "Timeout", f"Too large resource version: {rv}, current: {self.store.rv}")
        if t.subresource == "scale":
            return json_response(self.store.get_scale(t.rt, t.namespace, t.name))
        obj = self.store.get(t.rt, t.namespace, t.name)
        if wants_table(accept) and t.subresource is None:
            return json_response(to_table(t.rt, [obj], resource_version=obj["metadata"]["resourceVersion"],
                                                 now=time.time(), include_object=q.get("includeObject")))
        return json_response(self.store.encode(obj, t.rt))

    def _encode(self, rt: ResourceType, obj: dict[str, Any]) -> bytes:
        return self.store.encode(obj, rt)

    async def _patch(self, request: web.Request, t: Target) -> web.Response:
        assert t.name is not None
        ctype = content_type(request)
        patch_type = decode.PATCH_TYPES.get(ctype)
        if patch_type is None:
            raise ApiError(415, "UnsupportedMediaType", decode.UNSUPPORTED_PATCH)
        q = request.query
        mode = fieldvalidation.directive(q.get("fieldValidation"), options_kind="PatchOptions")
        body = await decode.patch_body(request, patch_type)
        view = None if t.subresource == "scale" else openapi.schema_view(self.defs, t.rt)
        body, warnings = fieldvalidation.check_patch(
            view, patch_type, body, mode=mode, duplicates=await self._duplicates(request, mode),
            target=(t.namespace or "", t.name, t.rt.api_version, t.rt.kind))
        force = parse_bool("force", q.get("force")) or False
        manager = q.get("fieldManager") if patch_type == "apply" else decode.field_manager(request)
        obj, created = self.store.patch(t.rt, t.namespace, t.name, patch_type, body, t.subresource,
                                        manager, force, dry_run=decode.dry_run(q), warnings=warnings)
        return _warned(json_response(self._encode(t.rt, obj), status=201 if created else 200), warnings)

    async def _log(self, t: Target, q: Any) -> web.Response:
        assert t.name is not None
        self.store.get(t.rt, t.namespace, t.name)
        if self.log_source is None:
            raise not_found("pods/log", "", t.name)
        text = self.log_source(t.namespace or "", t.name, q.get("container"), parse_int("tailLines", q.get("tailLines")))
        if inspect.isawaitable(text):
            text = await text
        if text is None:
            raise not_found("pods/log", "", t.name)
        return web.Response(text=text, content_type="text/plain")

    async def _bind(self, request: web.Request, t: Target) -> web.Response:
        assert t.name is not None and t.namespace is not None
        body = await decode.json_body(request)
        target = body.get("target") if isinstance(body, dict) else None
        node = target.get("name") if isinstance(target, dict) else None
        if not node:
            raise bad_request("binding target name is required")
        uid = ((body.get("metadata") or {}).get("uid")) if isinstance(body.get("metadata"), dict) else None
        self.store.bind(t.namespace, t.name, node, uid=uid)
        return json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
                             status=201)


# -- request parsing helpers ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Cached:
    """A discovery or OpenAPI body built for one registry generation, with its validators."""

    generation: int
    body: bytes
    etag: str
    built: float  # when it was built: its Last-Modified


@functools.lru_cache(maxsize=256)
def _type_meta_heads(rt: ResourceType) -> tuple[bytes, bytes]:
    """How an object's JSON starts when apiVersion and kind come first, in either order."""
    api, kind = orjson.dumps(rt.api_version), orjson.dumps(rt.kind)
    return (b'{"apiVersion":' + api + b',"kind":' + kind + b",", b'{"kind":' + kind + b',"apiVersion":' + api + b",")


def _verb(method: str, t: Target, q: Any) -> str:
    if method == "GET":
        if t.name is None:
            return "watch" if parse_bool("watch", q.get("watch")) else "list"
        return "get"
    if t.name is None:
        verbs = {"POST": "create", "DELETE": "deletecollection"}
    else:
        verbs = {"PUT": "update", "PATCH": "patch", "DELETE": "delete", "POST": "create"}
    verb = verbs.get(method)
    if verb is None:
        raise method_not_allowed()
    return verb


def _serves(rt: ResourceType, sub: str, method: str) -> bool:
    if sub == "status":
        return rt.status and method in ("GET", "PUT", "PATCH")
    if sub == "scale":
        return rt.scale and method in ("GET", "PUT", "PATCH")
    extra = dict(rt.extra_subresources)
    if sub in extra:
        return {"get": "GET", "create": "POST"}.get(extra[sub][0]) == method
    return False


def _known_sub(rt: ResourceType, sub: str) -> bool:
    return (sub == "status" and rt.status) or (sub == "scale" and rt.scale) or sub in dict(rt.extra_subresources)


def _exists(store: Store, t: Target) -> bool:
    try:
        store.get(t.rt, t.namespace, t.name or "")
        return True
    except ApiError:
        return False


def _warned(resp: web.Response, warnings: list[str]) -> web.Response:
    """One `Warning: 299 - "..."` header per warning, as a real server sends them."""
    for text in warnings:
        resp.headers.add("Warning", fieldvalidation.warning_header(text))
    return resp


