"""Fixtures: a real devcluster API server on a random port, and HTTP helpers against it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from devcluster.server.app import make_app
from devcluster.server.faults import Faults
from devcluster.storage.store import Store


@dataclass
class ApiServer:
    url: str
    store: Store
    faults: Faults
    kubeconfig: Path
    logs: dict[tuple[str, str, str | None], str]


def write_kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: dev\n  cluster:\n    server: {url}\n"
        "contexts:\n- name: dev\n  context:\n    cluster: dev\n    user: dev\n    namespace: default\n"
        "current-context: dev\nusers:\n- name: dev\n  user: {}\n"
    )
    return path


@pytest.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[ApiServer]:
    store = Store(bookmark_interval=0.2, seed=7)
    faults = Faults(seed=1)
    logs: dict[tuple[str, str, str | None], str] = {}

    def log_source(ns: str, pod: str, container: str | None, tail: int | None) -> str | None:
        text = logs.get((ns, pod, container))
        if text is None or tail is None:
            return text
        return "".join(text.splitlines(keepends=True)[-tail:])

    runner = web.AppRunner(make_app(store, faults=faults, log_source=log_source))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    url = f"http://127.0.0.1:{port}"
    try:
        yield ApiServer(url, store, faults, write_kubeconfig(tmp_path / "kubeconfig", url), logs)
    finally:
        await runner.cleanup()


@pytest.fixture
async def http(apiserver: ApiServer) -> AsyncIterator[Http]:
    async with aiohttp.ClientSession(apiserver.url, timeout=aiohttp.ClientTimeout(total=20)) as session:
        yield Http(session)


class Http:
    """Small JSON helpers over one aiohttp session; every call returns (status, body)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def call(self, method: str, path: str, body: Any = None, *, ctype: str = "application/json",
                   headers: dict[str, str] | None = None, raw: bytes | None = None) -> tuple[int, Any]:
        h = {"Content-Type": ctype, **(headers or {})}
        data = raw if raw is not None else (None if body is None else orjson.dumps(body))
        async with self.session.request(method, path, data=data, headers=h) as resp:
            text = await resp.read()
            try:
                return resp.status, orjson.loads(text)
            except orjson.JSONDecodeError:
                return resp.status, text.decode()

    async def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return await self.call("GET", path, **kw)

    async def post(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return await self.call("POST", path, body, **kw)

    async def put(self, path: str, body: Any, **kw: Any) -> tuple[int, Any]:
        return await self.call("PUT", path, body, **kw)

    async def patch(self, path: str, body: Any, ctype: str = "application/merge-patch+json",
                    **kw: Any) -> tuple[int, Any]:
        return await self.call("PATCH", path, body, ctype=ctype, **kw)

    async def delete(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return await self.call("DELETE", path, body, **kw)

    async def watch_lines(self, path: str, *, until: int, limit: float = 5.0,
                          headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Read up to `until` newline-framed events (fewer if the stream ends first)."""
        events: list[dict[str, Any]] = []
        async with asyncio.timeout(limit):
            async with self.session.get(path, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                assert resp.headers["Content-Type"].startswith("application/json")
                while len(events) < until:
                    line = await resp.content.readline()
                    if not line:
                        break
                    assert line.endswith(b"\n")
                    events.append(orjson.loads(line))
        return events


def pod(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}], **spec}}


def deployment(name: str, replicas: int = 1, labels: dict[str, str] | None = None) -> dict[str, Any]:
    labels = labels or {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}}


def crd(group: str = "sedna.io", kind: str = "Widget", plural: str = "widgets", *, status: bool = True,
        scale: bool = False, short: tuple[str, ...] = ("wd",)) -> dict[str, Any]:
    subs: dict[str, Any] = {}
    if status:
        subs["status"] = {}
    if scale:
        subs["scale"] = {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}
    schema = {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "size": {"type": "integer", "minimum": 0},
            "mode": {"type": "string", "default": "fast"},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            "required": ["size"]},
        "status": {"type": "object", "properties": {"size": {"type": "integer"}, "phase": {"type": "string"}}}}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "shortNames": list(short),
                               "categories": ["all"]},
                     "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": schema}, "subresources": subs,
                                   "additionalPrinterColumns": [
                                       {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]}]}}
