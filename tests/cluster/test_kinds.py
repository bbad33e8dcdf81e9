"""Every kind with workers, on both clusters of the tier, through one test body.

The cases are tests/e2e/kindcases (the dev-cluster e2e suite's own), moved into the test's
namespace. One body per kind holds the promises a user sees on any cluster: children owned by
the CR (controller ownerReference) and shown by `kubectl get`, `WORKER_NAME` naming the pod,
status with observedGeneration, a deleted worker that comes back, an edit that reaches the
workers, cascade delete by the cluster's garbage collector, nothing recreated once the CR is
gone, and a bad spec shown as a condition and a Warning event.
"""

from __future__ import annotations

import copy

import pytest

from gm.kube.apierrors import Conflict, NotFound
from gm.kube.resources import DEPLOYMENTS, EVENTS, GVR, PODS, SERVICES, sedna_gvr
from shared import apis
from tests.cluster.conftest import WITHIN, in_namespace
from tests.cluster.plugin import Cluster
from tests.conftest import eventually
from tests.e2e.kindcases import KindCase
from tests.e2e.test_kinds import _cases

CHILD_GVRS = {"deployments": DEPLOYMENTS, "pods": PODS, "services": SERVICES}
# the kinds whose workers get WORKER_NAME (the others' workers, as upstream's, do not)
NAMED_WORKERS = {"FeatureExtractionService", "ObjectSearchService", "ObjectTrackingService", "ReidJob",
                 "VideoAnalyticsJob"}

CASES = [pytest.param(case, id=case.kind) for case in _cases()]
POLL = 0.05  # seconds between a wait's reads: a few GETs each, cheap on either cluster


def cr_gvr(case: KindCase) -> GVR:
    return sedna_gvr(apis.require(case.kind))


def cr_name(case: KindCase) -> str:
    return case.manifest["metadata"]["name"]


async def read(api, gvr: GVR, name: str, ns: str) -> dict | None:
    try:
        return await api.get(gvr, name, namespace=ns)
    except NotFound:
        return None


async def children(api, case: KindCase, ns: str) -> dict[tuple[str, str], dict]:
    """Every child the case names, or {} while one is missing or going."""
    found = {}
    for plural, names in case.children.items():
        for name in names:
            obj = await read(api, CHILD_GVRS[plural], name, ns)
            if obj is None or obj["metadata"].get("deletionTimestamp"):
                return {}
            found[(plural, name)] = obj
    return found


async def status_of(api, case: KindCase, ns: str) -> dict:
    return ((await read(api, cr_gvr(case), cr_name(case), ns)) or {}).get("status") or {}


def worker_name(pod: dict) -> str | None:
    """What WORKER_NAME resolves to in the pod: its value, or the pod's name through the Downward API."""
    for container in pod["spec"]["containers"][:1]:
        for env in container.get("env") or ():
            if env["name"] == "WORKER_NAME":
                if (env.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
                    return pod["metadata"]["name"]
                return env.get("value")
    return None


async def worker_pods(api, found: dict[tuple[str, str], dict], ns: str) -> list[dict] | None:
    """The pods of the children: pod children, and the pods of Deployment children (None while a
    Deployment has none yet)."""
    pods = [obj for (plural, _), obj in found.items() if plural == "pods"]
    for (plural, _), dep in found.items():
        if plural != "deployments":
            continue
        labels = ",".join(f"{k}={v}" for k, v in dep["spec"]["selector"]["matchLabels"].items())
        items = (await api.list(PODS, namespace=ns, label_selector=labels))["items"]
        if not items:
            return None
        pods += items
    return pods


async def create(api, case: KindCase, ns: str, *, spec_change=None) -> dict:
    manifest = in_namespace(case.manifest, ns)
    if spec_change is not None:
        spec_change(manifest["spec"])
    return await api.create(cr_gvr(case), manifest, namespace=ns)


async def edit(api, case: KindCase, ns: str, change) -> None:
    """Read, change the spec, write back: again on a conflict (the GM writes status meanwhile)."""
    for _ in range(20):
        cr = await read(api, cr_gvr(case), cr_name(case), ns)
        assert cr is not None
        change(cr["spec"])
        try:
            await api.replace(cr_gvr(case), cr_name(case), cr, namespace=ns)
            return
        except Conflict:
            continue
    raise AssertionError(f"could not edit {case.kind}: conflicts")


@pytest.mark.parametrize("case", CASES)
async def test_kind(case: KindCase, target: Cluster, ns: str, gm, api):
    for obj in case.prerequisites:
        await api.create(sedna_gvr(apis.require(obj["kind"])), in_namespace(obj, ns), namespace=ns)
    cr = await create(api, case, ns)
    if case.started is not None:
        await case.started(api, cr)
    uid = cr["metadata"]["uid"]

    # children, owned by the CR
    found = await eventually(lambda: children(api, case, ns), f"the children of {case.kind}", within=WITHIN,
                             interval=POLL)
    for (plural, name), child in found.items():
        refs = [r for r in child["metadata"].get("ownerReferences") or () if r.get("controller")]
        assert refs == [{"apiVersion": apis.API_VERSION, "kind": case.kind, "name": cr_name(case),
                         "uid": uid, "controller": True, "blockOwnerDeletion": True}], (plural, name)

    # WORKER_NAME names the pod it is in
    pods = await eventually(lambda: worker_pods(api, found, ns), "the worker pods", within=WITHIN, interval=POLL)
    names = {p["metadata"]["name"]: worker_name(p) for p in pods}
    if case.kind in NAMED_WORKERS:
        assert names and all(pod == name for pod, name in names.items()), names
    else:
        assert all(name in (None, pod) for pod, name in names.items()), names

    # status, and `kubectl get` shows the CR with the kind's printer columns
    async def healthy() -> dict | None:
        status = await status_of(api, case, ns)
        return status if status.get("observedGeneration") == 1 and case.healthy(status) else None
    await eventually(healthy, f"{case.kind} healthy with observedGeneration 1", within=WITHIN, interval=POLL)
    out = await target.kubectl("get", apis.require(case.kind).plural, "-n", ns)
    lines = out.splitlines()
    assert lines[0].split() == list(case.columns), lines[0]
    assert [line.split()[0] for line in lines[1:]] == [cr_name(case)], out
    shown = await target.kubectl("get", *(f"{plural}/{name}" for plural, name in found), "-n", ns, "-o", "name")
    assert len(shown.split()) == len(found), shown

    # a deleted worker comes back while the CR lives
    plural, name = case.worker
    before = found[(plural, name)]
    await api.delete(CHILD_GVRS[plural], name, namespace=ns)

    async def replaced() -> bool:
        now = await read(api, CHILD_GVRS[plural], name, ns)
        return (now is not None and now["metadata"]["uid"] != before["metadata"]["uid"]
                and not now["metadata"].get("deletionTimestamp"))
    await eventually(replaced, f"{plural}/{name} recreated", within=WITHIN, interval=POLL)

    # an edit reaches the workers
    await edit(api, case, ns, case.edit)
    eplural, ename = case.edited_child

    async def shows_edit() -> bool:
        child = await read(api, CHILD_GVRS[eplural], ename, ns)
        return child is not None and not child["metadata"].get("deletionTimestamp") and case.edited(child)
    await eventually(shows_edit, f"{eplural}/{ename} with the edit", within=WITHIN, interval=POLL)

    async def generation_2() -> bool:
        return (await status_of(api, case, ns)).get("observedGeneration") == 2
    await eventually(generation_2, "observedGeneration 2", within=WITHIN, interval=POLL)

    # cascade: the cluster's garbage collector deletes the children of the deleted CR
    await api.delete(cr_gvr(case), cr_name(case), namespace=ns)

    async def all_gone() -> bool:
        for cplural, cnames in case.children.items():
            for cname in cnames:
                if await read(api, CHILD_GVRS[cplural], cname, ns) is not None:
                    return False
        return await read(api, cr_gvr(case), cr_name(case), ns) is None
    await eventually(all_gone, f"the children of the deleted {case.kind} gone", within=WITHIN, interval=POLL)
    # ... and a late reconcile of the deleted CR's key creates nothing
    ctrl = next(c for c in gm.controllers.values() if c.kind == case.kind)
    await ctrl.reconcile(f"{ns}/{cr_name(case)}")
    assert await read(api, CHILD_GVRS[plural], name, ns) is None

    # a bad spec: a condition with the reason, and a Warning event on the CR
    bad = await create(api, case, ns, spec_change=case.bad_spec)

    async def failed() -> dict | None:
        conditions = (await status_of(api, case, ns)).get("conditions") or []
        return next((c for c in conditions if c.get("type") == case.failed_type and c.get("status") == "True"),
                    None)
    cond = await eventually(failed, f"{case.failed_type} condition", within=WITHIN, interval=POLL)
    assert cond["reason"] == case.bad_reason and cond.get("message"), cond

    async def warned() -> bool:
        events = (await api.list(EVENTS, namespace=ns,
                                 field_selector=f"involvedObject.uid={bad['metadata']['uid']}"))["items"]
        return any(e["reason"] == case.bad_reason and e["type"] == "Warning" for e in events)
    await eventually(warned, "the Warning event", within=WITHIN, interval=POLL)


def test_every_kind_with_workers_has_a_case():
    assert len(CASES) == 9
    assert {copy.copy(p.values[0]).kind for p in CASES} >= NAMED_WORKERS
