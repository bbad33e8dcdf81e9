"""Every reconciled kind, end to end on the dev cluster, through one test body per guarantee.

The cases are data (tests/e2e/kindcases/): each kind states its manifest, the children it
must get, a worker to delete, an edit and how the workers show it, and a bad spec. The
bodies below hold every kind to the same promises: children owned by the CR (so deleting
it cascades), an edit that reaches the running workers, a deleted worker that comes back
while the CR lives and never after, status with observedGeneration shown by `kubectl get`,
and a bad spec as a condition and a Warning event.
"""

from __future__ import annotations

import copy
import importlib
import pkgutil

import pytest

from gm.kinds import DECLARATIONS
from gm.kube.apierrors import Conflict, NotFound
from gm.kube.resources import DEPLOYMENTS, GVR, PODS, SERVICES, sedna_gvr
from shared import apis
from tests.conftest import eventually
from tests.e2e import kindcases
from tests.e2e.kindcases import KindCase

NS = "default"
CHILD_GVRS = {"deployments": DEPLOYMENTS, "pods": PODS, "services": SERVICES}
WAIT = 15.0


def _cases() -> list[KindCase]:
    found: list[KindCase] = []
    for info in pkgutil.iter_modules(kindcases.__path__):
        module = importlib.import_module(f"{kindcases.__name__}.{info.name}")
        found.extend(getattr(module, "CASES", ()))
    return sorted(found, key=lambda c: c.kind)


CASES = [pytest.param(case, id=case.kind) for case in _cases()]


def cr_gvr(case: KindCase) -> GVR:
    return sedna_gvr(apis.require(case.kind))


def cr_name(case: KindCase) -> str:
    return case.manifest["metadata"]["name"]


async def read(api, gvr: GVR, name: str) -> dict | None:
    try:
        return await api.get(gvr, name, namespace=NS)
    except NotFound:
        return None


async def create(api, case: KindCase, *, spec_change=None) -> dict:
    for obj in case.prerequisites:
        await api.create(sedna_gvr(apis.require(obj["kind"])), copy.deepcopy(obj), namespace=NS)
    manifest = copy.deepcopy(case.manifest)
    if spec_change is not None:
        spec_change(manifest["spec"])
    created = await api.create(cr_gvr(case), manifest, namespace=NS)
    if case.started is not None and spec_change is None:
        await case.started(api, created)
    return created


async def edit(api, case: KindCase, change) -> None:
    """Read, change the spec, write back: again on a conflict (the GM writes status meanwhile)."""
    for _ in range(10):
        cr = await read(api, cr_gvr(case), cr_name(case))
        assert cr is not None
        change(cr["spec"])
        try:
            await api.replace(cr_gvr(case), cr_name(case), cr, namespace=NS)
            return
        except Conflict:
            continue
    raise AssertionError(f"could not edit {case.kind}: conflicts")


async def children_exist(api, case: KindCase) -> dict[tuple[str, str], dict]:
    found = {}
    for plural, names in case.children.items():
        for name in names:
            obj = await read(api, CHILD_GVRS[plural], name)
            if obj is None:
                return {}
            found[(plural, name)] = obj
    return found


async def status_of(api, case: KindCase) -> dict:
    obj = await read(api, cr_gvr(case), cr_name(case))
    return (obj or {}).get("status") or {}


def test_every_reconciled_kind_has_a_case_and_every_case_a_declaration():
    declared = {d.kind for d in DECLARATIONS}
    assert {c.kind for c in _cases()} == declared


@pytest.mark.parametrize("case", CASES)
async def test_children_are_owned_shown_and_cascade_deleted(case: KindCase, gm, api, kubectl):
    cr = await create(api, case)
    uid = cr["metadata"]["uid"]
    children = await eventually(lambda: children_exist(api, case), within=WAIT,
                                message=f"the children of {case.kind}")
    for (plural, name), child in children.items():
        refs = [r for r in child["metadata"].get("ownerReferences") or () if r.get("controller")]
        assert refs == [{"apiVersion": apis.API_VERSION, "kind": case.kind, "name": cr_name(case),
                         "uid": uid, "controller": True, "blockOwnerDeletion": True}], (plural, name)
    status = await eventually(
        lambda: _healthy(api, case), within=WAIT,
        message=f"{case.kind} healthy with observedGeneration 1")
    assert status["observedGeneration"] == 1
    assert_every_condition_says_why(status)
    rc, out, err = await kubectl("get", apis.require(case.kind).plural)
    assert rc == 0, err
    header = out.splitlines()[0].split()
    assert header == list(case.columns), header
    await api.delete(cr_gvr(case), cr_name(case), namespace=NS)

    async def all_gone() -> bool:
        for plural, names in case.children.items():
            for name in names:
                if await read(api, CHILD_GVRS[plural], name) is not None:
                    return False
        return True

    await eventually(all_gone, within=WAIT, message=f"the children of the deleted {case.kind} gone")


async def _healthy(api, case: KindCase) -> dict | None:
    status = await status_of(api, case)
    if status.get("observedGeneration") == 1 and case.healthy(status):
        return status
    return None


@pytest.mark.parametrize("case", CASES)
async def test_an_edit_reaches_the_workers(case: KindCase, gm, api):
    await create(api, case)
    await eventually(lambda: children_exist(api, case), within=WAIT, message="children")
    await edit(api, case, case.edit)
    plural, name = case.edited_child

    async def shows_edit() -> bool:
        child = await read(api, CHILD_GVRS[plural], name)
        return child is not None and not child["metadata"].get("deletionTimestamp") and case.edited(child)

    await eventually(shows_edit, within=WAIT, message=f"{plural}/{name} with the edit")
    await eventually(lambda: _generation(api, case, 2), within=WAIT, message="observedGeneration 2")


async def _generation(api, case: KindCase, generation: int) -> bool:
    return (await status_of(api, case)).get("observedGeneration") == generation


@pytest.mark.parametrize("case", CASES)
async def test_a_deleted_worker_comes_back_while_the_cr_lives_and_never_after(case: KindCase, gm, api):
    await create(api, case)
    await eventually(lambda: children_exist(api, case), within=WAIT, message="children")
    plural, name = case.worker
    gvr = CHILD_GVRS[plural]
    before = await read(api, gvr, name)
    assert before is not None
    await api.delete(gvr, name, namespace=NS)

    async def replaced() -> bool:
        now = await read(api, gvr, name)
        return now is not None and now["metadata"]["uid"] != before["metadata"]["uid"]

    await eventually(replaced, within=WAIT, message=f"{plural}/{name} recreated")
    await api.delete(cr_gvr(case), cr_name(case), namespace=NS)
    await eventually(lambda: _absent(api, gvr, name), within=WAIT, message=f"{plural}/{name} gone with its CR")
    # a reconcile of the deleted CR's key (a late event) creates nothing
    ctrl = next(c for c in gm.controllers.values() if c.kind == case.kind)
    await ctrl.reconcile(f"{NS}/{cr_name(case)}")
    assert await read(api, gvr, name) is None


async def _absent(api, gvr: GVR, name: str) -> bool:
    return await read(api, gvr, name) is None


@pytest.mark.parametrize("case", CASES)
async def test_a_bad_spec_is_a_condition_and_a_warning_event(case: KindCase, gm, api, sedna_cluster):
    await create(api, case, spec_change=case.bad_spec)

    async def failed() -> dict | None:
        conditions = (await status_of(api, case)).get("conditions") or []
        return next((c for c in conditions if c.get("type") == case.failed_type and c.get("status") == "True"),
                    None)

    cond = await eventually(failed, within=WAIT, message=f"{case.failed_type} condition")
    assert cond["reason"] == case.bad_reason, cond
    assert cond.get("message")
    assert_every_condition_says_why(await status_of(api, case))
    events_rt = sedna_cluster.store.registry.lookup(group="", version="v1", resource="events")
    await eventually(lambda: any(e["reason"] == case.bad_reason and e["type"] == "Warning"
                                 and e["involvedObject"]["name"] == cr_name(case)
                                 for e in sedna_cluster.store.list(events_rt, NS)[0]),
                     within=WAIT, message="Warning event")


def assert_every_condition_says_why(status: dict) -> None:
    """Each condition, True or False, with a reason and a message an operator can read."""
    conditions = status.get("conditions") or []
    assert conditions, status
    for cond in conditions:
        assert (cond.get("reason") or "").strip() and (cond.get("message") or "").strip(), cond


WITH_PREREQUISITES = [pytest.param(case, id=case.kind) for case in _cases() if case.prerequisites]


@pytest.mark.parametrize("case", WITH_PREREQUISITES)
async def test_a_missing_model_or_dataset_is_a_wait_that_ends_when_it_appears(case: KindCase, gm, api):
    """Created before the objects it names, the CR waits (Pending / Waiting, with the reason
    and the name), never Failed; once they exist it proceeds to healthy on its own."""
    created = await api.create(cr_gvr(case), copy.deepcopy(case.manifest), namespace=NS)

    async def waiting() -> dict | None:
        status = await status_of(api, case)
        return next((c for c in status.get("conditions") or () if c.get("status") == "True"
                     and c.get("type") in ("Pending", "Waiting") and c.get("reason", "").endswith("NotFound")),
                    None)

    cond = await eventually(waiting, within=WAIT, message=f"{case.kind} waiting for what it names")
    status = await status_of(api, case)
    kind = cond["reason"].removesuffix("NotFound")
    named = [f"{kind} {NS}/{o['metadata']['name']} does not exist" for o in case.prerequisites
             if o["kind"] == kind]
    assert any(text in cond["message"] for text in named), cond
    assert status.get("phase") in (None, "Pending"), status
    assert not any(c.get("type") == "Failed" and c.get("status") == "True" for c in status["conditions"]), status
    assert_every_condition_says_why(status)
    for obj in case.prerequisites:
        await api.create(sedna_gvr(apis.require(obj["kind"])), copy.deepcopy(obj), namespace=NS)
    if case.started is not None:
        await case.started(api, created)
    healthy = await eventually(lambda: _healthy(api, case), within=WAIT,
                               message=f"{case.kind} healthy once what it names exists")
    assert not any(c.get("reason", "").endswith("NotFound") and c.get("status") == "True"
                   for c in healthy["conditions"]), healthy
    assert_every_condition_says_why(healthy)
