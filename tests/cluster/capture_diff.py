"""Two recordings of the same scenario, compared request by request (pure).

`compare(dev, real)` pairs the exchanges of each step by their normalised request (method, path,
query; the n-th of a kind with the n-th) and reports, as `Difference`s: a request only one side
made, a different status, content type, caching header or warning, and for the bodies:

- objects: the same set of field paths, and the same values where values are not inherently
  different (uids, resourceVersions, timestamps, generated names, IPs and ports the cluster picks,
  the namespace name, tokens, and everything under `status`, which is timing);
- lists: the same kind, list metadata and the paths of items of the same name;
- Tables: the same columns, rows with as many cells, and embedded objects as objects;
- discovery: the same groups, versions and resources with the same verbs, names and scope;
- OpenAPI: the same schemas with the same properties and types (descriptions and other
  documentation are not compared), and the same paths and operations;
- watch streams: the same kinds of events carrying objects with the same paths;
- Status answers: reason, code, message and details.

Client commands (kubectl, helm) are compared by exit code, warnings and, when they fail, what they
printed. Names are normalised before anything is compared: the scenario's namespaces become
`{ns}`, a ReplicaSet's hash `{hash}`, a generated suffix `{id}`, uuids `{uid}`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.cluster.capture import Exchange

SAFE = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of generated names and template hashes
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_POD = re.compile(rf"-[{SAFE}]{{8,10}}-[{SAFE}]{{5}}\b")
_HASHED = re.compile(rf"-[{SAFE}]{{8,10}}\b")
_SUFFIX = re.compile(rf"(?<=[a-z0-9])([-.])[{SAFE}]{{5}}\b")
_EVENT = re.compile(r"\.[0-9a-f]{15,17}\b")
_TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
_IP = re.compile(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b")
_HEX_HASH = re.compile(r"\b[0-9A-F]{64,128}\b")
_TERM = re.compile(r"(?:[^,(]|\([^)]*\))+")
_AGE = re.compile(r"\b\d+(\.\d+)?(ms|s|m|h|d)\b")

# keys whose values the cluster picks (compared by presence only)
VOLATILE_KEYS = frozenset((
    "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "time", "lastTransitionTime",
    "lastUpdateTime", "lastProbeTime", "lastHeartbeatTime", "startTime", "startedAt", "finishedAt",
    "firstTimestamp", "lastTimestamp", "eventTime", "expirationTimestamp", "token", "podIP", "podIPs",
    "hostIP", "hostIPs", "clusterIP", "clusterIPs", "nodePort", "nodeName", "continue", "containerID",
    "imageID", "count", "deprecatedCount", "deprecatedFirstTimestamp", "deprecatedLastTimestamp",
    "pod-template-hash", "controller-revision-hash", "release", "healthCheckNodePort", "renewTime",
    "acquireTime", "ca.crt", "kubectl.kubernetes.io/last-applied-configuration", "resourceVersionMatch",
    "deletionGracePeriodSeconds", "remainingItemCount", "series", "reportingInstance", "host",
    "batch.kubernetes.io/controller-uid", "controller-uid",
    "deployment.kubernetes.io/revision", "checksum/config"))
# what controllers write: compared only when the cluster is at rest (Policy.settled)
_CONTROLLED = re.compile(r"(^|\])\.status(\.|\[|$)|/status\]|\.deployment\.kubernetes\.io/revision|^\.spec\.nodeName$")
# the keys that name an element of a list (the first one every element has)
LIST_KEYS = ("name", "type", "manager", "containerPort", "port", "key", "ip")
_WATCH = frozenset(("true", "1", "True"))
_VOLATILE_QUERY = {"resourceVersion": "{rv}", "timeoutSeconds": "{n}", "continue": "{continue}", "hash": "{hash}"}
_DISCOVERY_KINDS = frozenset(("APIGroupDiscoveryList", "APIResourceList", "APIGroupList", "APIVersions",
                              "APIGroup"))


@dataclass(frozen=True)
class Policy:
    """How a step's exchanges are compared."""

    settled: bool = False  # the cluster is at rest: `status` and what controllers write are compared
    waits: bool = False  # a wait loop: how many reads it takes, and what they find, is timing


@dataclass(frozen=True, order=True)
class Difference:
    """One way the two clusters answered differently."""

    step: str
    request: str  # "GET /apis/apps/v1/namespaces/{ns}/deployments/web", or "$ kubectl ..." for a command
    what: str

    def __str__(self) -> str:
        return f"{self.request}: {self.what}"


@dataclass
class Recording:
    """One side of the capture: its exchanges, its commands' outcomes and its namespace token."""

    token: str
    exchanges: list[Exchange]
    outcomes: list[Any] = field(default_factory=list)  # capture_scenario.Outcome


# -- normalising ------------------------------------------------------------------------------------


class Normaliser:
    """Rewrites the names and values one cluster picks into placeholders both share."""

    def __init__(self, token: str) -> None:
        self.token = token

    def text(self, value: str) -> str:
        out = value.replace(f"cap-{self.token}", "{ns}")
        out = _UUID.sub("{uid}", out)
        out = _TIME.sub("{time}", out)
        out = _EVENT.sub(".{event}", out)
        out = _POD.sub("-{hash}-{id}", out)
        out = _HASHED.sub("-{hash}", out)
        out = _SUFFIX.sub(r"\1{id}", out)
        out = _IP.sub("{ip}", out)
        return _HEX_HASH.sub("{hash}", out)

    def query(self, query: Iterable[tuple[str, str]]) -> str:
        parts = []
        for key, value in sorted(query):
            if key in _VOLATILE_QUERY and value not in ("0", ""):
                value = _VOLATILE_QUERY[key] if key != "timeoutSeconds" or int(value) >= 60 else value
            if key in ("labelSelector", "fieldSelector"):  # kubectl builds some from Go maps: any order
                value = ",".join(sorted(_TERM.findall(value)))
            parts.append(f"{key}={self.text(value)}")
        return "&".join(parts)

    def request(self, ex: Exchange) -> str:
        query = self.query(ex.query)
        return f"{ex.method} {self.text(ex.path)}" + (f"?{query}" if query else "")


# -- the shape of a document --------------------------------------------------------------------------


Path = tuple[str, ...]  # segments: ".key" or "[element]"


def leaves(doc: Any, norm: Normaliser, path: Path = (), *, volatile: bool = False) -> Iterator[tuple[Path, Any]]:
    """(path, value) for every leaf of `doc`; an empty container is a leaf, a list of scalars is one
    leaf, a volatile value is "<set>". Keyed list elements are named by their key, FieldsV1 keys
    (`f:`, `k:`, `v:`, `.`) as elements."""
    if isinstance(doc, dict):
        if not doc:
            yield path, "{}"
        for key, value in doc.items():
            name = norm.text(key)
            segment = f"[{name}]" if name.startswith(("f:", "k:", "v:", "i:")) or name == "." else f".{name}"
            hidden = volatile or key in VOLATILE_KEYS or (path == () and key == "status")
            yield from leaves(value, norm, (*path, segment), volatile=hidden)
    elif isinstance(doc, list):
        if not doc:
            yield path, "[]"
        elif all(not isinstance(v, (dict, list)) for v in doc):
            yield path, "<set>" if volatile else [norm.text(v) if isinstance(v, str) else v for v in doc]
        else:
            for i, value in enumerate(doc):
                yield from leaves(value, norm, (*path, f"[{_element_key(value, norm, i)}]"), volatile=volatile)
    else:
        yield path, "<set>" if volatile else (norm.text(doc) if isinstance(doc, str) else doc)


def _element_key(value: Any, norm: Normaliser, index: int) -> str:
    if isinstance(value, dict):
        meta = value.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("name"), str):
            return norm.text(meta["name"])
        if value.get("manager"):
            return "/".join(str(value.get(k) or "") for k in ("manager", "operation", "subresource")).rstrip("/")
        for key in LIST_KEYS:
            if isinstance(value.get(key), (str, int)):
                return f"{key}={norm.text(str(value[key]))}"
    return str(index)


def _render(path: Path) -> str:
    return "".join(path) or "."


def _missing(paths: Iterable[Path], other: dict[Path, Any]) -> list[str]:
    """The shortest prefixes of `paths` that the other side does not have at all."""
    present = {p[:i] for p in other for i in range(len(p) + 1)}
    out = set()
    for p in paths:
        i = next((i for i in range(1, len(p) + 1) if p[:i] not in present), len(p))
        out.add(_render(p[:i]))
    return sorted(out)


def _compare_leaves(dev: dict[Path, Any], real: dict[Path, Any], prefix: str = "", *, settled: bool = True
                    ) -> list[str]:
    if not settled:
        dev = {p: v for p, v in dev.items() if not _CONTROLLED.search(_render(p))}
        real = {p: v for p, v in real.items() if not _CONTROLLED.search(_render(p))}
    out = [f"field only on dev: {prefix}{p}" for p in _missing(dev.keys() - real.keys(), real)]
    out += [f"field only on real: {prefix}{p}" for p in _missing(real.keys() - dev.keys(), dev)]
    for p in sorted(dev.keys() & real.keys()):
        if dev[p] != real[p] and "<set>" not in (dev[p], real[p]):
            out.append(f"value differs: {prefix}{_render(p)}: dev={_short(dev[p])} real={_short(real[p])}")
    return out


def _short(value: Any) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= 160 else text[:157] + "..."


# -- bodies by kind -----------------------------------------------------------------------------------


def compare_bodies(ex_dev: Exchange, ex_real: Exchange, dev_norm: Normaliser, real_norm: Normaliser,
                   policy: Policy = Policy(settled=True)) -> list[str]:
    """How the two answers to one request differ (bodies already known to be of the same status)."""
    if dict(ex_dev.query).get("watch") in _WATCH:
        return _compare_watch(ex_dev.response_body, ex_real.response_body, dev_norm, real_norm, policy)
    dev, real = _json(ex_dev.response_body), _json(ex_real.response_body)
    if dev is None or real is None:
        if (dev is None) != (real is None):
            return [f"body is JSON only on {'real' if dev is None else 'dev'}"]
        return []
    if ex_dev.path.startswith("/openapi/"):
        return _compare_openapi(dev, real)
    # a create's answer is the object before any controller saw it
    at_rest = policy.settled or ex_dev.method == "POST"
    return compare_documents(dev, real, dev_norm, real_norm, Policy(settled=at_rest, waits=policy.waits))


def compare_documents(dev: Any, real: Any, dev_norm: Normaliser, real_norm: Normaliser,
                      policy: Policy = Policy(settled=True)) -> list[str]:
    if not isinstance(dev, dict) or not isinstance(real, dict):
        return [] if type(dev) is type(real) else [f"body type differs: dev={type(dev).__name__} real={type(real).__name__}"]
    kind_dev, kind_real = dev.get("kind"), real.get("kind")
    if kind_dev != kind_real:
        return [f"kind differs: dev={kind_dev} real={kind_real}"]
    if kind_dev == "Status":
        return _compare_leaves(dict(leaves(dev, dev_norm)), dict(leaves(real, real_norm)))
    if kind_dev == "Table":
        return _compare_table(dev, real, dev_norm, real_norm, policy)
    if kind_dev in _DISCOVERY_KINDS:
        return _compare_discovery(dev, real)
    if isinstance(dev.get("items"), list) and isinstance(real.get("items"), list):
        return _compare_list(dev, real, dev_norm, real_norm, policy)
    return _compare_leaves(dict(leaves(dev, dev_norm)), dict(leaves(real, real_norm)), settled=policy.settled)


def _compare_list(dev: dict, real: dict, dev_norm: Normaliser, real_norm: Normaliser, policy: Policy) -> list[str]:
    head_dev = {k: v for k, v in dev.items() if k != "items"}
    head_real = {k: v for k, v in real.items() if k != "items"}
    out = _compare_leaves(dict(leaves(head_dev, dev_norm)), dict(leaves(head_real, real_norm)))
    items_dev, items_real = _keyed(dev["items"], dev_norm), _keyed(real["items"], real_norm)
    if dev.get("kind") in ("EventList",):  # which events exist by now is timing
        return out
    if not policy.waits:
        out += [f"item only on dev: {k}" for k in sorted(items_dev.keys() - items_real.keys())]
        out += [f"item only on real: {k}" for k in sorted(items_real.keys() - items_dev.keys())]
    for key in sorted(items_dev.keys() & items_real.keys()):
        out += _compare_leaves(dict(leaves(items_dev[key], dev_norm)), dict(leaves(items_real[key], real_norm)),
                               prefix="items[*]", settled=policy.settled)
    return out


def _keyed(items: list[Any], norm: Normaliser) -> dict[str, Any]:
    """Items by normalised name; names that normalise alike (a Deployment's ReplicaSets) are told
    apart by revision, then age: `web-{hash}#1`, `web-{hash}#2`."""
    groups: dict[str, list[tuple[int, Any]]] = defaultdict(list)
    for i, item in enumerate(items):
        groups[_element_key(item, norm, i)].append((i, item))
    out = {}
    for key, members in groups.items():
        if len(members) == 1:
            out[key] = members[0][1]
            continue
        members.sort(key=lambda m: (_revision(m[1]), str((_meta(m[1])).get("creationTimestamp", "")), m[0]))
        out.update({f"{key}#{n}": item for n, (_, item) in enumerate(members, 1)})
    return out


def _meta(item: Any) -> dict[str, Any]:
    meta = item.get("metadata") if isinstance(item, dict) else None
    return meta if isinstance(meta, dict) else {}


def _revision(item: Any) -> int:
    value = (_meta(item).get("annotations") or {}).get("deployment.kubernetes.io/revision", "0")
    return int(value) if str(value).isdigit() else 0


def _compare_table(dev: dict, real: dict, dev_norm: Normaliser, real_norm: Normaliser, policy: Policy) -> list[str]:
    def columns(t: dict) -> list[str]:
        return [f"{c.get('name')}:{c.get('type')}:{c.get('format', '')}:{c.get('priority', 0)}"
                for c in t.get("columnDefinitions") or ()]
    out = []
    if columns(dev) != columns(real):
        out.append(f"columns differ: dev={columns(dev)} real={columns(real)}")
    rows_dev, rows_real = dev.get("rows") or [], real.get("rows") or []
    if len(rows_dev) != len(rows_real):
        out.append(f"rows differ: dev={len(rows_dev)} real={len(rows_real)}")
        return out
    for a, b in zip(rows_dev, rows_real, strict=True):
        if len(a.get("cells") or ()) != len(b.get("cells") or ()):
            out.append(f"cells differ: dev={len(a.get('cells') or ())} real={len(b.get('cells') or ())}")
        out += _compare_leaves(dict(leaves(a.get("object"), dev_norm)), dict(leaves(b.get("object"), real_norm)),
                               prefix="rows[*].object", settled=policy.settled)
    return out


def _resources(doc: dict) -> dict[str, dict[str, Any]]:
    """Discovery documents as "group/version/resource" -> what a client reads of it."""
    out: dict[str, dict[str, Any]] = {}
    kind = doc.get("kind")
    if kind == "APIGroupDiscoveryList":
        for group in doc.get("items") or ():
            name = (group.get("metadata") or {}).get("name", "")
            for version in group.get("versions") or ():
                for r in version.get("resources") or ():
                    key = f"{name}/{version['version']}/{r['resource']}".lstrip("/")
                    out[key] = {"scope": r.get("scope"), "verbs": sorted(r.get("verbs") or ()),
                                "shortNames": sorted(r.get("shortNames") or ()),
                                "categories": sorted(r.get("categories") or ()),
                                "singularResource": r.get("singularResource"),
                                "responseKind": (r.get("responseKind") or {}).get("kind"),
                                "subresources": {s["subresource"]: sorted(s.get("verbs") or ())
                                                 for s in r.get("subresources") or ()}}
    elif kind == "APIResourceList":
        for r in doc.get("resources") or ():
            out[f"{doc.get('groupVersion')}/{r['name']}"] = {
                "namespaced": r.get("namespaced"), "kind": r.get("kind"), "verbs": sorted(r.get("verbs") or ()),
                "shortNames": sorted(r.get("shortNames") or ()), "categories": sorted(r.get("categories") or ()),
                "singularName": r.get("singularName")}
    elif kind in ("APIGroupList", "APIGroup"):
        for g in doc.get("groups") or [doc]:
            out[g.get("name", "")] = {"versions": sorted(v["version"] for v in g.get("versions") or ()),
                                      "preferred": (g.get("preferredVersion") or {}).get("version")}
    elif kind == "APIVersions":
        out["versions"] = {"versions": sorted(doc.get("versions") or ())}
    return out


def _compare_discovery(dev: dict, real: dict) -> list[str]:
    a, b = _resources(dev), _resources(real)
    out = [f"resource only on dev: {k}" for k in sorted(a.keys() - b.keys())]
    out += [f"resource only on real: {k}" for k in sorted(b.keys() - a.keys())]
    for key in sorted(a.keys() & b.keys()):
        for attr in sorted(a[key].keys() | b[key].keys()):
            if a[key].get(attr) != b[key].get(attr):
                out.append(f"{key} {attr}: dev={_short(a[key].get(attr))} real={_short(b[key].get(attr))}")
    return out


def _schema_shape(schema: dict) -> dict[str, str]:
    """A schema's properties as name -> type (a $ref by its target)."""
    out = {}
    for name, prop in (schema.get("properties") or {}).items():
        refs = [s.get("$ref") for s in prop.get("allOf") or () if "$ref" in s] or [prop.get("$ref")]
        items = prop.get("items") or {}
        kind = prop.get("type") or ("ref" if refs[0] else "any")
        if kind == "array":
            kind += f" of {items.get('type') or (items.get('allOf') or [items])[0].get('$ref', '?')}"
        elif refs[0]:
            kind = refs[0].rsplit("/", 1)[-1]
        out[name] = kind + (f"/{prop['format']}" if prop.get("format") else "")
    return out


def _compare_openapi(dev: dict, real: dict) -> list[str]:
    out = []
    paths_dev, paths_real = dev.get("paths") or {}, real.get("paths") or {}
    if "components" not in dev and "components" not in real and "definitions" not in dev:
        # the /openapi/v3 index: group-versions
        return ([f"path only on dev: {p}" for p in sorted(paths_dev.keys() - paths_real.keys())]
                + [f"path only on real: {p}" for p in sorted(paths_real.keys() - paths_dev.keys())])
    ops = {"get", "put", "post", "patch", "delete"}
    for p in sorted(paths_dev.keys() & paths_real.keys()):
        a, b = set(paths_dev[p]) & ops, set(paths_real[p]) & ops
        if a != b:
            out.append(f"path {p}: operations dev={sorted(a)} real={sorted(b)}")
    out += [f"path only on dev: {p}" for p in sorted(paths_dev.keys() - paths_real.keys())]
    out += [f"path only on real: {p}" for p in sorted(paths_real.keys() - paths_dev.keys())]
    schemas_dev = (dev.get("components") or {}).get("schemas") or dev.get("definitions") or {}
    schemas_real = (real.get("components") or {}).get("schemas") or real.get("definitions") or {}
    out += [f"schema only on dev: {s}" for s in sorted(schemas_dev.keys() - schemas_real.keys())]
    out += [f"schema only on real: {s}" for s in sorted(schemas_real.keys() - schemas_dev.keys())]
    for name in sorted(schemas_dev.keys() & schemas_real.keys()):
        a, b = _schema_shape(schemas_dev[name]), _schema_shape(schemas_real[name])
        out += [f"schema {name}: property only on dev: {p}" for p in sorted(a.keys() - b.keys())]
        out += [f"schema {name}: property only on real: {p}" for p in sorted(b.keys() - a.keys())]
        out += [f"schema {name}: {p}: dev={a[p]} real={b[p]}" for p in sorted(a.keys() & b.keys()) if a[p] != b[p]]
    return out


def _compare_watch(dev_raw: bytes, real_raw: bytes, dev_norm: Normaliser, real_norm: Normaliser,
                   policy: Policy) -> list[str]:
    def events(raw: bytes, norm: Normaliser) -> dict[str, dict[str, Any]]:
        by_type: dict[str, dict[Path, Any]] = defaultdict(dict)
        for line in raw.splitlines():
            doc = _json(line)
            if isinstance(doc, dict) and "type" in doc:
                by_type[doc["type"]].update(leaves(doc.get("object"), norm, volatile=True))
        return by_type
    a, b = events(dev_raw, dev_norm), events(real_raw, real_norm)
    out = []
    if not policy.waits:
        out += [f"watch event only on dev: {t}" for t in sorted(a.keys() - b.keys())]
        out += [f"watch event only on real: {t}" for t in sorted(b.keys() - a.keys())]
    for t in sorted(a.keys() & b.keys()):
        out += _compare_leaves(a[t], b[t], prefix=f"{t} ", settled=policy.settled)
    return out


def _json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


# -- pairing and comparing ----------------------------------------------------------------------------


def _media(value: str) -> str:
    return value.split(";")[0].strip() if "apidiscovery" not in value else value.replace(" ", "")


def compare_exchange(dev: Exchange, real: Exchange, dev_norm: Normaliser, real_norm: Normaliser,
                     policy: Policy = Policy(settled=True)) -> list[str]:
    """How the answers to one request differ."""
    if {dev.status, real.status} == {200, 304}:
        return []  # a cached copy still current on one side: when a cache validates is timing
    if {dev.status, real.status} == {200, 404} and policy.waits and dev.method == "GET":
        return []  # a wait loop's read: found on one side, gone on the other
    if dev.status != real.status:
        return [f"status: dev={dev.status} real={real.status}"
                + _status_hint(dev, dev_norm, "dev") + _status_hint(real, real_norm, "real")]
    out = []
    if _media(dev.response_type) != _media(real.response_type):
        out.append(f"content type: dev={dev.response_type or '-'} real={real.response_type or '-'}")
    for name in ("Cache-Control", "ETag", "Last-Modified", "Vary", "Expires"):
        a, b = dev.headers.get(name), real.headers.get(name)
        if name in ("ETag", "Last-Modified", "Expires"):
            a, b = a and "<set>", b and "<set>"
        if a != b:
            out.append(f"header {name}: dev={a or '-'} real={b or '-'}")
    warnings_dev = sorted(dev_norm.text(w) for w in dev.warnings)
    warnings_real = sorted(real_norm.text(w) for w in real.warnings)
    if warnings_dev != warnings_real:
        out.append(f"warnings: dev={warnings_dev} real={warnings_real}")
    json_both = all(t.startswith("application/json") for t in (dev.response_type, real.response_type))
    if json_both or dict(dev.query).get("watch") in _WATCH:
        found = compare_bodies(dev, real, dev_norm, real_norm, policy)
        if dev.method == "DELETE":  # a pod removed at once is answered with or without its RV: a race there
            found = [w for w in found if not _RV_PRESENCE.match(w)]
        out += found
    return out


_RV_PRESENCE = re.compile(r"field only on (dev|real): \.metadata\.resourceVersion$")


def _status_hint(ex: Exchange, norm: Normaliser, side: str) -> str:
    doc = _json(ex.response_body)
    if isinstance(doc, dict) and doc.get("kind") == "Status":
        return f" ({side}: {doc.get('reason')}: {norm.text(str(doc.get('message', '')))[:200]})"
    return ""


def compare(dev: Recording, real: Recording, policies: dict[str, Policy] | None = None) -> list[Difference]:
    """Every difference between the two recordings, each reported once (its first occurrence);
    `policies` says how each step is compared (default: not settled, no wait loop)."""
    policies = policies or {}
    dev_norm, real_norm = Normaliser(dev.token), Normaliser(real.token)
    found: dict[tuple[str, str], Difference] = {}

    def add(step: str, request: str, what: str) -> None:
        found.setdefault((request, what), Difference(step, request, what))

    steps = list(dict.fromkeys([e.step for e in dev.exchanges] + [e.step for e in real.exchanges]))
    for step in steps:
        pairs, only_dev, only_real = _pair([e for e in dev.exchanges if e.step == step],
                                           [e for e in real.exchanges if e.step == step], dev_norm, real_norm)
        policy = policies.get(step, Policy())
        for key in only_dev:
            if not (policy.waits and key.startswith("GET ")):
                add(step, key, "request only on dev")
        for key in only_real:
            if not (policy.waits and key.startswith("GET ")):
                add(step, key, "request only on real")
        for key, a, b in pairs:
            for what in compare_exchange(a, b, dev_norm, real_norm, policy):
                add(step, key, what)
    for a, b in zip(dev.outcomes, real.outcomes, strict=False):
        for what in _compare_outcome(a, b, dev_norm, real_norm):
            add(a.step, f"$ {dev_norm.text(a.command)}", what)
    return sorted(found.values(), key=lambda d: (_step_order(steps, d.step), d.request, d.what))


def _step_order(steps: list[str], step: str) -> int:
    return steps.index(step) if step in steps else len(steps)


def _pair(dev: list[Exchange], real: list[Exchange], dev_norm: Normaliser, real_norm: Normaliser
          ) -> tuple[list[tuple[str, Exchange, Exchange]], list[str], list[str]]:
    """The n-th request of a kind on one side with the n-th of that kind on the other."""
    by_key_dev: dict[str, list[Exchange]] = defaultdict(list)
    by_key_real: dict[str, list[Exchange]] = defaultdict(list)
    for e in dev:
        by_key_dev[dev_norm.request(e)].append(e)
    for e in real:
        by_key_real[real_norm.request(e)].append(e)
    pairs, only_dev, only_real = [], [], []
    for key in by_key_dev.keys() | by_key_real.keys():
        a, b = by_key_dev.get(key, []), by_key_real.get(key, [])
        pairs += [(key, x, y) for x, y in zip(a, b, strict=False)]
        if not b:
            only_dev.append(key)
        if not a:
            only_real.append(key)
    return pairs, only_dev, only_real


def _compare_outcome(dev: Any, real: Any, dev_norm: Normaliser, real_norm: Normaliser) -> list[str]:
    out = []
    if dev.rc != real.rc:
        out.append(f"exit code: dev={dev.rc} real={real.rc}")
    a = [dev_norm.text(w) for w in dev.warnings]
    b = [real_norm.text(w) for w in real.warnings]
    if a != b:
        out.append(f"warnings: dev={a} real={b}")
    if dev.rc and real.rc:
        said_dev, said_real = _AGE.sub("{age}", dev_norm.text(dev.stderr.strip())), \
            _AGE.sub("{age}", real_norm.text(real.stderr.strip()))
        if said_dev != said_real:
            out.append(f"error output: dev={said_dev[:300]!r} real={said_real[:300]!r}")
    return out


# -- kept differences ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kept:
    """A difference kept on purpose: a regex searched in `str(difference)`, and why."""

    pattern: str
    reason: str

    def matches(self, diff: Difference) -> bool:
        return re.search(self.pattern, str(diff)) is not None


def split_kept(diffs: list[Difference], kept: Iterable[Kept]) -> tuple[list[Difference], list[Difference]]:
    """(new differences, kept ones)."""
    kept = list(kept)
    new = [d for d in diffs if not any(k.matches(d) for k in kept)]
    return new, [d for d in diffs if d not in new]


def report(diffs: list[Difference]) -> str:
    """A readable list: the differences grouped by step and request."""
    lines, last = [], None
    for d in diffs:
        if (d.step, d.request) != last:
            lines.append(f"[{d.step}] {d.request}")
            last = (d.step, d.request)
        lines.append(f"    {d.what}")
    return "\n".join(lines)
