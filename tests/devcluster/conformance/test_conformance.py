"""The dev cluster's conformance suite: request -> answer cases, as data, against a served cluster.

Each file in cases/ is a YAML list of cases. Every case runs twice: on "dev", a fresh in-process
DevCluster, and on "real", the real control plane of the cluster tier (tests/cluster/plugin.py),
so that a case holds the dev cluster to what kube-apiserver answers. On the real server, which
all cases share, a case gets a namespace of its own in place of `default` (every `default` token in
the case, protobuf bodies included: the namespace name has its seven letters) and the cluster-scoped
objects it creates are deleted after it. A case the dev cluster answers differently on purpose is
in KEPT_DIFFERENCES (its reason in devcluster/README.md): it must fail on the real server (a
strict xfail), so the list cannot go stale. A case:

    - id: get-missing-pod-is-404            # unique in its file; the test id
      note: observed on kube-apiserver 1.32  # only where the expectation is not documented
      setup:                                # requests run first; each must answer 2xx
        - {method: POST, path: /api/v1/namespaces/default/configmaps, body: {...}}
      request:
        method: GET
        path: /api/v1/namespaces/default/pods/nope
        headers: {Accept: application/json}  # optional
        body: {...}                          # optional: sent as JSON (or YAML text as given)
        body_hex: "6b387300..."              # optional instead of body: raw bytes
        content_type: application/json      # optional; default application/json with a body
      expect:
        status: 404
        body: {kind: Status, reason: NotFound}   # optional: a subset of the answer's JSON
        headers: {Content-Type: application/json} # optional: a subset (names case-insensitive;
                                                  # a value is a regex matched from the start; a
                                                  # header sent several times is its values joined
                                                  # by ", ")
        absent: [metadata.managedFields]          # optional: dotted paths that must not exist
        lines: [{type: ADDED}, ...]               # optional, for watch streams: the first JSON
                                                  # lines of the body, each a subset as above

Subset matching: a mapping matches when each of its keys matches; a list matches a list of
the same length element by element; `{$len: N}` matches a list or string of length N;
`{$any: true}` matches anything that is present; `{$literal: v}` matches `v` exactly and is never
renamed on the real server (a ServiceAccount named `default`); other values must be equal.
"""

from __future__ import annotations

import asyncio
import base64
import re
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

from tests.cluster.plugin import REAL_MARK, Cluster
from tests.conftest import served_cluster

CASES = Path(__file__).parent / "cases"
# "<file>/<id>" -> why the dev cluster answers otherwise on purpose (listed in devcluster/README.md)
KEPT_DIFFERENCES: dict[str, str] = {
    "openapi/v2-protobuf-only-accept-is-406": "/openapi/v2 is served as JSON only",
    "openapi/v3-patch-operation-declares-field-validation":
        "PATCH operations declare only fieldValidation (the real server lists every query parameter)",
    "protobuf/kubectl-create-namespace-protobuf-is-201": "answers are JSON even when Accept offers protobuf first",
    "protobuf/kubectl-create-secret-generic-protobuf-keeps-the-bytes":
        "answers are JSON even when Accept offers protobuf first",
    "protobuf/kubectl-create-deployment-protobuf-keeps-replicas-and-template":
        "answers are JSON even when Accept offers protobuf first",
    "protobuf/protobuf-first-accept-gets-json": "answers are JSON even when Accept offers protobuf first",
    "meta/two-controller-references-are-422":
        "the references in the message are JSON, not Go values printed with their pointer addresses",
}
# "<file>/<id>" -> what kube-apiserver v1.33 answers instead: the case (and the dev cluster) are to be
# brought to it; strict, so a corrected case fails here until it leaves this list
NOT_YET_AS_REAL: dict[str, str] = {
}
# differences that depend on timing on the real server (not strict)
RACY_ON_REAL: dict[str, str] = {
}


def _load() -> list[Any]:
    params = []
    for file in sorted(CASES.glob("*.yaml")):
        cases = yaml.safe_load(file.read_text(encoding="utf-8")) or []
        ids = [c["id"] for c in cases]
        assert len(ids) == len(set(ids)), f"{file.name}: duplicate case ids"
        params += [pytest.param(c, id=f"{file.stem}/{c['id']}") for c in cases]
    return params


def _kept(case_id: str) -> list:
    if case_id in KEPT_DIFFERENCES:
        return [pytest.mark.xfail(reason=f"kept difference: {KEPT_DIFFERENCES[case_id]}", strict=True)]
    if case_id in NOT_YET_AS_REAL:
        return [pytest.mark.xfail(reason=f"the real server differs: {NOT_YET_AS_REAL[case_id]}", strict=True)]
    if case_id in RACY_ON_REAL:
        return [pytest.mark.xfail(reason=f"racy on the real server: {RACY_ON_REAL[case_id]}", strict=False)]
    return []


def match(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Differences between an expected subset and the actual value (empty when it matches)."""
    if isinstance(expected, dict) and "$len" in expected:
        ok = isinstance(actual, (list, str)) and len(actual) == expected["$len"]
        return [] if ok else [f"{where or '.'}: want length {expected['$len']}, got {actual!r:.200}"]
    if isinstance(expected, dict) and "$any" in expected:
        return []
    if isinstance(expected, dict) and "$literal" in expected:
        return match(expected["$literal"], actual, where)
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where or '.'}: want a mapping, got {actual!r:.200}"]
        out = []
        for key, value in expected.items():
            if key not in actual:
                out.append(f"{where}.{key}: missing")
            else:
                out += match(value, actual[key], f"{where}.{key}")
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{where or '.'}: want {len(expected)} items, got {actual!r:.200}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual, strict=True))
                for d in match(e, a, f"{where}[{i}]")]
    return [] if expected == actual else [f"{where or '.'}: want {expected!r}, got {actual!r:.200}"]


def _lookup(doc: Any, dotted: str) -> bool:
    for part in dotted.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return False
        doc = doc[part]
    return True


async def _send(http: aiohttp.ClientSession, base: str, req: dict) -> tuple[int, Any, bytes]:
    headers = dict(req.get("headers") or {})
    data: bytes | None = None
    if "body_hex" in req:
        data = bytes.fromhex(req["body_hex"])
    elif "body_b64" in req:
        data = base64.b64decode(req["body_b64"])
    elif "body" in req:
        body = req["body"]
        data = body.encode() if isinstance(body, str) else orjson.dumps(body)
    if data is not None:
        headers.setdefault("Content-Type", req.get("content_type", "application/json"))
    async with http.request(req["method"], base + req["path"], data=data, headers=headers) as resp:
        return resp.status, resp.headers, await resp.read()


@pytest.fixture(params=["dev", pytest.param("real", marks=getattr(pytest.mark, REAL_MARK))])
def server(request) -> Cluster | None:
    """Where the case runs: None for a fresh in-process DevCluster, else the real cluster."""
    return request.getfixturevalue("real_cluster") if request.param == "real" else None


@pytest.fixture
def case(request) -> dict:
    """The case; on the real server a known difference is a strict xfail."""
    case, case_id = request.param
    if request.node.callspec.params.get("server") == "real":
        for mark in _kept(case_id):
            request.node.add_marker(mark)
    return case


@pytest.fixture(scope="session")
def namespaces_going(real_cluster: Cluster) -> Iterator[dict[str, float]]:
    """The namespaces a case created and deleted on the real server, not yet gone (path -> the
    monotonic deadline of their going): a namespace goes only once the namespace controller has
    emptied it, seconds later, so a case does not wait for its own; the next case that names one
    waits first, and the session's end waits for the rest."""
    going: dict[str, float] = {}
    yield going
    if going:
        asyncio.run(_wait_gone_on(real_cluster, going))


@pytest.mark.parametrize("case", [pytest.param((p.values[0], p.id), id=p.id) for p in _load()], indirect=True)
async def test_case(case: dict, server: Cluster | None, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if server is None:
        async with served_cluster(tmp_path, image_map={}, restart_backoff=0.05) as dc, \
                aiohttp.ClientSession() as http:
            await _run(http, dc.url, case)
        return
    going = request.getfixturevalue("namespaces_going")
    ns = f"c{uuid.uuid4().hex[:6]}"  # seven letters, as `default`
    base, headers, ctx, admin = _real_endpoint(server)
    case = _in_namespace(case, ns, admin)
    async with aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(ssl=ctx)) as http:
        await _wait_gone(http, base, going, named_in=str(case))
        await _namespace(http, base, ns)
        created: list[str] = []
        try:
            await _run(http, base, case, created, settle=_settle(case))
        finally:
            await _clean_up(http, base, ns, created, going)


def _real_endpoint(c: Cluster) -> tuple[str, dict[str, str], ssl.SSLContext, str]:
    conf = yaml.safe_load(c.kubeconfig.read_text())
    cluster = conf["clusters"][0]["cluster"]
    ctx = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    token = conf["users"][0]["user"]["token"]
    return cluster["server"], {"Authorization": f"Bearer {token}"}, ctx, conf["users"][0]["name"]


DEV_ADMIN = "devcluster-admin"
_DEFAULT = re.compile(r"(?<![\w.-])default(?![\w.-])")
_DEFAULT_HEX = b"default".hex()


def _in_namespace(case: dict, ns: str, admin: str) -> dict:
    """The case with every `default` token (a path's namespace, a body's, a message's) naming `ns`,
    and the dev cluster's admin user named as the real cluster's kubeconfig user."""
    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, dict) and "$literal" in value:
            return value
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        if isinstance(value, str):
            if key == "body_hex":
                return value.replace(_DEFAULT_HEX, ns.encode().hex())
            return _DEFAULT.sub(ns, value).replace(DEV_ADMIN, admin)
        return value
    return walk(case)


async def _namespace(http: aiohttp.ClientSession, base: str, ns: str) -> None:
    """A namespace as a fresh cluster's `default`: its ServiceAccount and kube-root-ca.crt made."""
    async with http.post(f"{base}/api/v1/namespaces",
                         json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}) as resp:
        assert resp.status == 201, await resp.text()
    deadline = asyncio.get_running_loop().time() + 60
    for path in (f"/api/v1/namespaces/{ns}/serviceaccounts/default", f"/api/v1/namespaces/{ns}/configmaps/kube-root-ca.crt"):
        while True:
            async with http.get(base + path) as resp:
                if resp.status == 200:
                    break
            assert asyncio.get_running_loop().time() < deadline, f"{path} not made by the cluster in 60s"
            await asyncio.sleep(0.02)


_NAMESPACE = re.compile(r"^/api/v1/namespaces/[^/]+$")
_CLUSTER_SCOPED = re.compile(r"^(/api/v1/(namespaces|nodes|persistentvolumes)|/apis/[^/]+/[^/]+/"
                             r"(clusterroles|clusterrolebindings|customresourcedefinitions|priorityclasses|"
                             r"storageclasses|ingressclasses|validatingwebhookconfigurations|"
                             r"mutatingwebhookconfigurations))(\?.*)?$")


async def _clean_up(http: aiohttp.ClientSession, base: str, ns: str, created: list[str],
                    going: dict[str, float]) -> None:
    """Delete the case's namespace and the cluster-scoped objects it made; wait until those are gone
    (a CRD or a cluster role of the same name may be the next case's), but for namespaces, which
    go to `going` (see namespaces_going)."""
    async with http.delete(f"{base}/api/v1/namespaces/{ns}"):
        pass
    for path in created:
        async with http.delete(base + path):
            pass
    deadline = time.monotonic() + 90
    going.update((path, deadline) for path in created if _NAMESPACE.match(path))
    await _wait_gone(http, base, {path: deadline for path in created if not _NAMESPACE.match(path)})


async def _wait_gone(http: aiohttp.ClientSession, base: str, paths: dict[str, float], *,
                     named_in: str | None = None) -> None:
    """Until each of `paths` (path -> deadline) answers 404, each removed once it does; with
    `named_in`, only those whose name is in that text."""
    for path, deadline in list(paths.items()):
        if named_in is not None and path.rsplit("/", 1)[1] not in named_in:
            continue
        while True:
            async with http.get(base + path) as resp:
                if resp.status == 404:
                    break
            assert time.monotonic() < deadline, f"{path} still there 90s after its delete"
            await asyncio.sleep(0.05)
        del paths[path]


async def _wait_gone_on(c: Cluster, paths: dict[str, float]) -> None:
    base, headers, ctx, _ = _real_endpoint(c)
    async with aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(ssl=ctx)) as http:
        await _wait_gone(http, base, paths)


async def _served(http: aiohttp.ClientSession, base: str, crd: dict) -> None:
    """Until a new CRD is Established and its versions are in discovery and in /openapi/v3: a real
    server publishes them a moment after the create (the dev cluster at once)."""
    group = crd["spec"]["group"]
    versions = [v["name"] for v in crd["spec"]["versions"] if v.get("served", True)]
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        async with http.get(f"{base}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}") as r:
            conds = (orjson.loads(await r.read()).get("status") or {}).get("conditions") or [] if r.status == 200 else []
        ready = any(c["type"] == "Established" and c["status"] == "True" for c in conds)
        if ready:
            async with http.get(f"{base}/openapi/v3") as r:
                published = (orjson.loads(await r.read()).get("paths") or {}) if r.status == 200 else {}
            ready = all(f"apis/{group}/{v}" in published for v in versions)
        for v in versions if ready else ():
            async with http.get(f"{base}/apis/{group}/{v}") as r:
                ready = ready and r.status == 200
        if ready:
            return
        assert asyncio.get_running_loop().time() < deadline, f"CRD {crd['metadata']['name']} not served after 60s"
        await asyncio.sleep(0.05)


ADMISSION_CACHE_LAG = 0.2


def _settle(case: dict) -> float:
    """Seconds the real server is given after a case's setup before its request: its PodSecurity
    admission reads namespace labels and existing pods from informer caches that trail the
    writes, so a request right after a label PATCH may be admitted under the old level (seen in
    CI: a pod let through to 409 AlreadyExists instead of 403, one of two pods listed)."""
    setup = str(case.get("setup") or "")
    return ADMISSION_CACHE_LAG if "pod-security.kubernetes.io" in setup + str(case["request"]) and setup != "" else 0.0


async def _run(http: aiohttp.ClientSession, base: str, case: dict, created: list[str] | None = None, *,
               settle: float = 0.0) -> None:
    async def send(req: dict) -> tuple[int, Any, bytes]:
        status, headers, raw = await _send(http, base, req)
        path = req["path"].split("?")[0]
        if created is not None and req["method"] == "POST" and 200 <= status < 300 and _CLUSTER_SCOPED.match(path):
            try:
                name = orjson.loads(raw)["metadata"]["name"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                name = None
            if name:
                created.append(f"{path}/{name}")
                if path.endswith("/customresourcedefinitions"):
                    await _served(http, base, orjson.loads(raw))
        return status, headers, raw

    for i, step in enumerate(case.get("setup") or ()):
        status, _, raw = await send(step)
        assert 200 <= status < 300, f"setup[{i}] {step['method']} {step['path']}: {status} {raw[:300]!r}"
    if settle:
        await asyncio.sleep(settle)
    status, headers, raw = await send(case["request"])
    expect = case["expect"]
    problems = [] if status == expect["status"] else [f"status: want {expect['status']}, got {status}"]
    folded: dict[str, str] = {}
    for k, v in headers.items():  # a header sent several times: its values joined by ", " (RFC 9110)
        folded[k.lower()] = f"{folded[k.lower()]}, {v}" if k.lower() in folded else v
    for name, pattern in (expect.get("headers") or {}).items():
        value = folded.get(name.lower())
        if value is None or not re.match(pattern, value):
            problems.append(f"header {name}: want /{pattern}/, got {value!r}")
    if "lines" in expect:
        docs = [orjson.loads(line) for line in raw.splitlines() if line.strip()]
        if len(docs) < len(expect["lines"]):
            problems.append(f"want at least {len(expect['lines'])} lines, got {len(docs)}")
        else:
            problems += [d for i, (e, a) in enumerate(zip(expect["lines"], docs, strict=False))
                         for d in match(e, a, f"line[{i}]")]
    if "body" in expect or "absent" in expect:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            doc = None
            problems.append(f"body is not JSON: {raw[:200]!r}")
        if doc is not None:
            problems += match(expect.get("body", {}), doc)
            problems += [f"{p}: present, want absent" for p in expect.get("absent") or () if _lookup(doc, p)]
    assert not problems, f"{case['id']}:\n  " + "\n  ".join(problems) + f"\nbody: {raw[:600]!r}"
