"""A recording reverse proxy in front of an API server: what a client sent, what the server answered.

`CaptureProxy(kubeconfig)` serves plain HTTP on 127.0.0.1 and forwards every request to the
server of `kubeconfig` over HTTPS, with that kubeconfig's CA and credentials (a bearer token or a
client certificate), so the clients in front of it need none: `proxy.write_kubeconfig(path)`
writes one for kubectl, Helm or kubernetes_asyncio. Responses are streamed back as they come
(watches, `rollout status`, `wait`), and every exchange is recorded as an `Exchange`, tagged
with the proxy's current `step` (set by whoever drives the clients).

Bounded: a recorded body keeps its first MAX_RECORDED bytes (the rest still reaches the client),
a request body is read whole up to MAX_REQUEST, and every upstream call has a connect timeout
and an overall one. Upgrade requests (exec, attach, port-forward) are refused with 501: the
scenarios do not need them.
"""

from __future__ import annotations

import base64
import ssl
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

MAX_RECORDED = 8 * 1024 * 1024
MAX_REQUEST = 16 * 1024 * 1024
UPSTREAM_TIMEOUT = aiohttp.ClientTimeout(total=300, sock_connect=10)
# hop-by-hop, or rewritten by the proxy
_REQUEST_DROP = frozenset(("host", "connection", "keep-alive", "transfer-encoding", "content-length",
                           "authorization", "accept-encoding", "te", "trailer", "upgrade",
                           "proxy-authorization"))
_RESPONSE_DROP = frozenset(("connection", "keep-alive", "transfer-encoding", "content-length",
                            "content-encoding", "trailer", "upgrade"))
# the response headers an exchange keeps (Warning separately, as a list)
HEADERS_OF_INTEREST = ("Content-Type", "Cache-Control", "ETag", "Last-Modified", "Vary", "Retry-After",
                       "Location", "Expires")


@dataclass
class Exchange:
    """One request and its answer, as the client saw them."""

    seq: int
    step: str
    method: str
    path: str  # undecoded, without the query
    query: list[tuple[str, str]]  # decoded, in the order sent
    request_type: str  # Content-Type of the request body, "" without one
    request_body: bytes
    user_agent: str
    status: int = 0
    response_type: str = ""
    warnings: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)  # HEADERS_OF_INTEREST that were sent
    response_body: bytes = b""
    truncated: bool = False
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form (bodies as text when they decode, else base64)."""
        def text(raw: bytes) -> str:
            try:
                return raw.decode()
            except UnicodeDecodeError:
                return "base64:" + base64.b64encode(raw).decode()
        return {"seq": self.seq, "step": self.step, "method": self.method, "path": self.path,
                "query": self.query, "request_type": self.request_type, "request_body": text(self.request_body),
                "user_agent": self.user_agent, "status": self.status, "response_type": self.response_type,
                "warnings": self.warnings, "headers": self.headers, "response_body": text(self.response_body),
                "truncated": self.truncated, "seconds": round(self.seconds, 3)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Exchange:
        """The exchange `to_json` wrote."""
        def raw(text: str) -> bytes:
            return base64.b64decode(text[7:]) if text.startswith("base64:") else text.encode()
        fields = {**doc, "query": [tuple(p) for p in doc["query"]], "request_body": raw(doc["request_body"]),
                  "response_body": raw(doc["response_body"])}
        return cls(**fields)


@dataclass(frozen=True)
class Upstream:
    """Where the proxy forwards to and how it authenticates there."""

    server: str
    ssl: ssl.SSLContext | bool
    headers: dict[str, str]

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Upstream:
        """The current context's server, CA and credentials (token, token file or client certificate)."""
        conf = yaml.safe_load(path.read_text())
        ctx_name = conf.get("current-context") or conf["contexts"][0]["name"]
        ctx = next(c["context"] for c in conf["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in conf["clusters"] if c["name"] == ctx["cluster"])
        user = next((u.get("user") or {} for u in conf.get("users") or () if u["name"] == ctx.get("user")), {})
        server = cluster["server"].rstrip("/")
        if not server.startswith("https://"):
            return cls(server, False, {})
        if cluster.get("certificate-authority-data"):
            tls = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        elif cluster.get("certificate-authority"):
            tls = ssl.create_default_context(cafile=cluster["certificate-authority"])
        else:
            tls = ssl.create_default_context()
        if cluster.get("insecure-skip-tls-verify"):
            tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
        headers = {}
        token = user.get("token") or (Path(user["tokenFile"]).read_text().strip() if user.get("tokenFile") else "")
        if token:
            headers["Authorization"] = f"Bearer {token}"
        _load_client_certificate(tls, user)
        return cls(server, tls, headers)


def _load_client_certificate(tls: ssl.SSLContext, user: dict) -> None:
    cert, key = user.get("client-certificate-data"), user.get("client-key-data")
    if cert and key:
        with tempfile.TemporaryDirectory() as tmp:
            cert_file, key_file = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
            cert_file.write_bytes(base64.b64decode(cert))
            key_file.touch(mode=0o600)
            key_file.write_bytes(base64.b64decode(key))
            tls.load_cert_chain(cert_file, key_file)
    elif user.get("client-certificate") and user.get("client-key"):
        tls.load_cert_chain(user["client-certificate"], user["client-key"])


class CaptureProxy:
    """A recording proxy for one API server; `async with CaptureProxy(kubeconfig) as proxy:`."""

    def __init__(self, kubeconfig: Path) -> None:
        self.upstream = Upstream.from_kubeconfig(kubeconfig)
        self.exchanges: list[Exchange] = []
        self.step = ""  # the tag of every exchange recorded from now on
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> CaptureProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.upstream.ssl, limit=64), timeout=UPSTREAM_TIMEOUT,
            auto_decompress=True, skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"))
        app = web.Application(client_max_size=MAX_REQUEST)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def write_kubeconfig(self, path: Path, *, namespace: str = "default") -> Path:
        """A kubeconfig for clients of the proxy: plain HTTP, no credentials (the proxy adds them)."""
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "capture", "cluster": {"server": self.url}}],
            "users": [{"name": "capture", "user": {}}],
            "contexts": [{"name": "capture", "context": {"cluster": "capture", "user": "capture",
                                                          "namespace": namespace}}],
            "current-context": "capture"}))
        return path

    def take(self, step: str | None = None) -> list[Exchange]:
        """The exchanges recorded so far (of one step when given), in arrival order."""
        return [e for e in self.exchanges if step is None or e.step == step]

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Upgrade"):
            return web.Response(status=501, text="the capture proxy does not forward upgrades")
        body = await request.read()
        ex = Exchange(seq=len(self.exchanges), step=self.step, method=request.method, path=request.raw_path.split("?")[0],
                      query=list(request.rel_url.query.items()),
                      request_type=request.headers.get("Content-Type", "") if body else "",
                      request_body=body[:MAX_RECORDED], user_agent=request.headers.get("User-Agent", ""))
        self.exchanges.append(ex)
        started = time.monotonic()
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in _REQUEST_DROP)
        headers.update(self.upstream.headers)
        assert self._session is not None
        try:
            async with self._session.request(request.method, URL(self.upstream.server + request.raw_path, encoded=True),
                                             headers=headers, data=body or None, allow_redirects=False) as up:
                return await self._relay(request, up, ex)
        finally:
            ex.seconds = time.monotonic() - started

    async def _relay(self, request: web.Request, up: aiohttp.ClientResponse, ex: Exchange) -> web.StreamResponse:
        ex.status = up.status
        ex.response_type = up.headers.get("Content-Type", "")
        ex.warnings = up.headers.getall("Warning", [])
        ex.headers = {name: up.headers[name] for name in HEADERS_OF_INTEREST if name in up.headers}
        resp = web.StreamResponse(status=up.status, reason=up.reason)
        for name, value in up.headers.items():
            if name.lower() not in _RESPONSE_DROP:
                resp.headers.add(name, value)
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        recorded = bytearray()
        try:
            async for chunk in up.content.iter_any():
                if len(recorded) < MAX_RECORDED:
                    recorded += chunk[:MAX_RECORDED - len(recorded)]
                else:
                    ex.truncated = True
                await resp.write(chunk)
        except (aiohttp.ClientError, ConnectionResetError):
            pass  # the upstream or the client went away mid-stream: what was relayed is the record
        finally:
            ex.response_body = bytes(recorded)
        await resp.write_eof()
        return resp
