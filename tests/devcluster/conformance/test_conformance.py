"""The dev cluster's conformance suite: request -> answer cases, as data, against a served cluster.

Each file in cases/ is a YAML list of cases; each case runs on a fresh in-process DevCluster,
so cases never depend on each other. A case:

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
                                                  # a value is a regex matched from the start)
        absent: [metadata.managedFields]          # optional: dotted paths that must not exist
        lines: [{type: ADDED}, ...]               # optional, for watch streams: the first JSON
                                                  # lines of the body, each a subset as above

Subset matching: a mapping matches when each of its keys matches; a list matches a list of
the same length element by element; `{$len: N}` matches a list or string of length N;
`{$any: true}` matches anything that is present; other values must be equal.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

CASES = Path(__file__).parent / "cases"


def _load() -> list[Any]:
    params = []
    for file in sorted(CASES.glob("*.yaml")):
        cases = yaml.safe_load(file.read_text(encoding="utf-8")) or []
        ids = [c["id"] for c in cases]
        assert len(ids) == len(set(ids)), f"{file.name}: duplicate case ids"
        params += [pytest.param(c, id=f"{file.stem}/{c['id']}") for c in cases]
    return params


def match(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Differences between an expected subset and the actual value (empty when it matches)."""
    if isinstance(expected, dict) and "$len" in expected:
        ok = isinstance(actual, (list, str)) and len(actual) == expected["$len"]
        return [] if ok else [f"{where or '.'}: want length {expected['$len']}, got {actual!r:.200}"]
    if isinstance(expected, dict) and "$any" in expected:
        return []
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


async def _send(http: aiohttp.ClientSession, base: str, req: dict) -> tuple[int, dict, bytes]:
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
        return resp.status, dict(resp.headers), await resp.read()


@pytest.mark.parametrize("case", _load())
async def test_case(case: dict, cluster) -> None:
    async with aiohttp.ClientSession() as http:
        for i, step in enumerate(case.get("setup") or ()):
            status, _, raw = await _send(http, cluster.url, step)
            assert 200 <= status < 300, f"setup[{i}] {step['method']} {step['path']}: {status} {raw[:300]!r}"
        status, headers, raw = await _send(http, cluster.url, case["request"])
    expect = case["expect"]
    problems = [] if status == expect["status"] else [f"status: want {expect['status']}, got {status}"]
    folded = {k.lower(): v for k, v in headers.items()}
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
