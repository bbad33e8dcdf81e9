"""The chart grants the GM exactly the API calls its code makes, and the LC none.

The needed (apiGroup, resource, verb) set is derived from gm/ itself: every call of a KubeClient
method (`client.get(GVR, ...)`, `client.patch(..., subresource="status")`, ...) and every informer
the GM creates (each one lists and watches its resource) is found in the source, searched
recursively so modules may move. A call naming a resource constant (`LEASES`, `EVENTS`) says its
resource itself; a generic one (`client.create(gvr, ...)` in the reconcile engine) takes its
resources from the kinds' declarations (gm.kinds.DECLARATIONS): what they own, watch and expire.
`GENERIC` below says which declared set each generic call site serves; a generic call the table
does not know fails the test, so a new kind of API call cannot go unreviewed.

The chart is rendered by the real helm with every optional feature that adds a rule turned on
(auth.tokenReview, auth.nodeTokens); the needed set and the granted set must be equal, the
namespaced Role holding what belongs to the release namespace only.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from gm.kinds import DECLARATIONS
from gm.kube.resources import DATASETS, GVR, MODELS, SECRETS, sedna_gvr
from gm.reconcile.declaration import KindDeclaration
from tests.helm.helmbin import ROOT, helm_template

CHART = ROOT / "charts" / "sedna"
GM, LC = ROOT / "gm", ROOT / "lc"
Rule = tuple[str, str, str]  # (apiGroup, resource, verb)

# The calls that target one object in the GM's own namespace (the config names it), granted by
# the Role there: leader election's Lease, and the Secret of auth.nodeTokens.
NAMESPACED: set[tuple[str, str]] = {("coordination.k8s.io", "leases"), ("", "secrets")}
NAMESPACED_VERBS = {("", "secrets"): {"get"}}  # list and watch of Secrets are cluster-wide


def _declared() -> dict[str, set[GVR]]:
    never = next(f.default for f in dataclasses.fields(KindDeclaration) if f.name == "expired")
    crs = {sedna_gvr(d.api) for d in DECLARATIONS}
    return {
        # every kind the GM follows: the reconciled ones, and the Datasets and Models the edge gets
        "crs": crs | {DATASETS, MODELS},
        # the kinds that own children: re-read before a batch of child writes
        "owners": {sedna_gvr(d.api) for d in DECLARATIONS if d.owns},
        "children": {o.gvr for d in DECLARATIONS for o in d.owns},
        # children updated in place; `recreate` ones (worker pods) are deleted and created again
        "updated": {o.gvr for d in DECLARATIONS for o in d.owns if o.on_edit == "update"},
        "crs_and_watched": crs | {w.gvr for d in DECLARATIONS for w in d.watches},
        "expiring": {sedna_gvr(d.api) for d in DECLARATIONS if d.expired is not never},
        "informed": set(),  # filled in from the informer sites (`needed_rules`)
    }


# (module file stem, enclosing function) of a generic call -> the declared set it serves
GENERIC: dict[tuple[str, str], str] = {
    ("reflector", "_list"): "informed",
    ("reflector", "_watch_once"): "informed",
    ("statuswriter", "update"): "crs",
    ("statuswriter", "_patch"): "crs",
    ("executor", "ensure_owner"): "owners",
    ("executor", "_create"): "children",
    ("executor", "_adopt_unlabelled"): "children",
    ("executor", "_update"): "updated",
    ("executor", "_delete"): "children",
    ("reconciler", "_delete_expired"): "expiring",
    # informer sites
    ("context", "informer"): "crs_and_watched",
    ("context", "children"): "children",
    ("objects", "__init__"): "crs",
    ("jobmetrics", "watch_informers"): "crs",
    ("app", "start"): "crs",  # the status page's caches of the reconciled kinds
}


@dataclasses.dataclass(frozen=True)
class Site:
    path: Path
    function: str
    method: str
    target: GVR | str  # a resolved GVR, or the GENERIC key's set name
    subresource: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.function}"


def _client_verbs() -> dict[str, str]:
    """KubeClient method -> the RBAC verb it sends, read from the client's source."""
    [path] = [p for p in GM.rglob("*.py") if re.search(r"^class KubeClient\b", p.read_text(), re.M)]
    tree = ast.parse(path.read_text())
    [cls] = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "KubeClient"]
    verbs: dict[str, str] = {}
    calls: dict[str, set[str]] = {}
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or fn.name.startswith("_"):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.keyword) and node.arg == "verb" and isinstance(node.value, ast.Constant):
                verbs[fn.name] = node.value.value
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    ast.unparse(node.func.value) == "self":
                calls.setdefault(fn.name, set()).add(node.func.attr)
    for name, callees in calls.items():  # list_all pages through list
        if name not in verbs and len({verbs[c] for c in callees if c in verbs}) == 1:
            verbs[name] = next(verbs[c] for c in callees if c in verbs)
    verbs["watch"] = "watch"  # a GET with watch=true: the stream class sends it
    verbs.pop("request", None)  # a raw path: no caller may use it (checked below)
    return verbs


def _module(path: Path):
    return importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))


def _functions(tree: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, node


def _resolve(arg: ast.expr, module, key: tuple[str, str]) -> GVR | str:
    if isinstance(arg, ast.Name) and isinstance(getattr(module, arg.id, None), GVR):
        return getattr(module, arg.id)
    if key not in GENERIC:
        raise AssertionError(f"a generic Kubernetes API call at {key}: {ast.unparse(arg)}; "
                             "add it to GENERIC with the declared set it serves")
    return GENERIC[key]


def api_sites(verbs: dict[str, str]) -> tuple[list[Site], list[Site]]:
    """(client calls, informer creations) everywhere in gm/."""
    calls: list[Site] = []
    informers: list[Site] = []
    for path in sorted(GM.rglob("*.py")):
        tree = ast.parse(path.read_text())
        module = None
        for function, fn in _functions(tree):
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
                    continue
                receiver, method = ast.unparse(node.func.value), node.func.attr
                is_client = receiver.split(".")[-1].lstrip("_") == "client" and method in {*verbs, "request"}
                is_informer = receiver.split(".")[-1] == "informers" and method == "informer"
                if not (is_client or is_informer):
                    continue
                assert method != "request", f"{path}:{function} calls the API by raw path"
                module = module or _module(path)
                target = _resolve(node.args[0], module, (path.stem, function))
                sub = next((k.value.value for k in node.keywords
                            if k.arg == "subresource" and isinstance(k.value, ast.Constant)), None)
                (calls if is_client else informers).append(Site(path, function, method, target, sub))
    return calls, informers


def needed_rules() -> tuple[set[Rule], list[Site]]:
    verbs = _client_verbs()
    calls, informer_sites = api_sites(verbs)
    declared = _declared()
    for site in informer_sites:
        declared["informed"] |= {site.target} if isinstance(site.target, GVR) else declared[site.target]
    rules: set[Rule] = set()
    for site in calls:
        targets = {site.target} if isinstance(site.target, GVR) else declared[site.target]
        assert targets, f"{site.where}: its declared set {site.target!r} is empty"
        for gvr in targets:
            resource = f"{gvr.plural}/{site.subresource}" if site.subresource else gvr.plural
            rules.add((gvr.group, resource, verbs[site.method]))
    # not a call the GM makes, but what creating a child with blockOwnerDeletion needs where the
    # OwnerReferencesPermissionEnforcement admission plugin runs: update on its owner's finalizers
    rules |= {(g.group, f"{g.plural}/finalizers", "update") for g in declared["owners"]}
    return rules, calls + informer_sites


def granted(docs: list[dict], kind: str) -> set[Rule]:
    return {(group, resource, verb) for doc in docs if doc["kind"] == kind for rule in doc["rules"]
            for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}


def _render(**values) -> list[dict]:
    import yaml
    docs = yaml.safe_load_all(helm_template(CHART, values)["rbac.yaml"])
    return [d for d in docs if d]


def _scoped(rules: set[Rule]) -> tuple[set[Rule], set[Rule]]:
    """(cluster-wide, release-namespace) split of `rules`."""
    local = {r for r in rules if (r[0], r[1]) in NAMESPACED
             and r[2] in NAMESPACED_VERBS.get((r[0], r[1]), {r[2]})}
    return rules - local, local


def test_the_derivation_finds_the_gms_calls():
    rules, sites = needed_rules()
    where = {s.where.split(":")[0].split("/")[-1] for s in sites}
    # the client layer's users, wherever they live: leases, events, status, children, informers
    assert {"leader.py", "events.py", "statuswriter.py", "reflector.py", "executor.py", "tokenreview.py"} <= where
    assert ("coordination.k8s.io", "leases", "update") in rules
    assert ("sedna.io", "jointinferenceservices/status", "patch") in rules
    assert ("", "pods", "create") in rules and ("", "pods", "update") not in rules  # recreated, never updated
    assert ("", "secrets", "list") in rules and ("", "secrets", "create") not in rules


def test_the_chart_grants_exactly_what_the_gm_calls():
    rules, _ = needed_rules()
    cluster_wide, local = _scoped(rules)
    docs = _render(auth={"tokenReview": {"enabled": True}, "nodeTokens": {"enabled": True}})
    assert granted(docs, "ClusterRole") == cluster_wide
    assert granted(docs, "Role") == local
    [role] = [d for d in docs if d["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "sedna"
    [secret_rule] = [r for r in role["rules"] if r["resources"] == ["secrets"]]
    assert secret_rule["resourceNames"] == ["sedna-node-tokens"]  # only the node-token Secret
    for binding, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        [b] = [d for d in docs if d["kind"] == binding]
        assert b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": "sedna"}
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": "sedna", "namespace": "sedna"}]


@pytest.mark.parametrize(("values", "absent"), [
    pytest.param({"auth": {"tokenReview": {"enabled": False}}},
                 ("authentication.k8s.io", "tokenreviews", "create"), id="no-token-review"),
    pytest.param({}, ("", "secrets", "get"), id="no-node-tokens"),
])
def test_a_feature_that_is_off_grants_nothing(values, absent):
    docs = _render(**values)
    assert absent not in granted(docs, "ClusterRole") | granted(docs, "Role")


def test_the_lc_calls_no_kubernetes_api_and_the_chart_binds_it_nothing():
    for path in LC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not [n for n in names if n.startswith(("kubernetes", "gm."))], f"{path}: {names}"
    docs = _render()
    subjects = [s["name"] for d in docs if d["kind"].endswith("Binding") for s in d["subjects"]]
    assert subjects == ["sedna", "sedna"]  # the GM's ServiceAccount only, never sedna-lc


def test_secrets_are_read_only():
    rules, _ = needed_rules()
    assert {verb for group, resource, verb in rules if resource == "secrets"} == {"get", "list", "watch"}
    assert SECRETS.plural == "secrets"
