"""No worker runs as the GM's own ServiceAccount, for every kind with workers.

A CR in the GM's namespace whose worker templates name the GM's ServiceAccount gets a Failed
condition (reason ServiceAccountForbidden) and a Warning event, and the GM creates none of its
children; the same CR with the field removed gets its workers. The kind cases are the e2e
suite's own (tests/e2e/kindcases), so every kind with workers runs the same body.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from gm.kube.resources import EVENTS, sedna_gvr
from shared import apis
from tests.conftest import eventually
from tests.e2e.kindcases import KindCase
from tests.e2e.test_kinds import CASES, CHILD_GVRS, NS, WAIT, cr_gvr, edit, read, status_of

GM_ACCOUNT = "sedna"
IDENTITY = f"{{namespace: {NS}, serviceAccount: {GM_ACCOUNT}}}"


def pod_specs(node: Any) -> list[dict]:
    """Every pod spec in a CR spec: the `spec` of each embedded PodTemplateSpec."""
    found: list[dict] = []
    if isinstance(node, dict):
        inner = node.get("spec")
        if isinstance(inner, dict) and isinstance(inner.get("containers"), list):
            found.append(inner)
        for value in node.values():
            found += pod_specs(value)
    elif isinstance(node, list):
        for item in node:
            found += pod_specs(item)
    return found


def run_as(account: str | None) -> Callable[[dict], None]:
    def change(spec: dict) -> None:
        specs = pod_specs(spec)
        assert specs, "the case has no worker template"
        for pod_spec in specs:
            pod_spec.pop("serviceAccountName", None)
            if account is not None:
                pod_spec["serviceAccountName"] = account
    return change


async def children(api, case: KindCase) -> list[str]:
    return [f"{plural}/{name}" for plural, names in case.children.items() for name in names
            if await read(api, CHILD_GVRS[plural], name) is not None]


def refused(status: dict, *, current: bool = True) -> dict | None:
    """The kind's Failed condition with the refusal; with `current`, only while it is True (a
    learning job's stage machine moves on from a failed stage, leaving it False)."""
    return next((c for c in status.get("conditions") or ()
                 if c.get("type") == "Failed" and c.get("reason") == "ServiceAccountForbidden"
                 and (c.get("status") == "True" or not current)), None)


@pytest.mark.parametrize("case", CASES)
async def test_a_template_naming_the_gms_account_is_refused_until_fixed(case: KindCase, start_gm, api):
    await start_gm(identity=IDENTITY)
    for obj in case.prerequisites:
        await api.create(sedna_gvr(apis.require(obj["kind"])), copy.deepcopy(obj), namespace=NS)
    manifest = copy.deepcopy(case.manifest)
    run_as(GM_ACCOUNT)(manifest["spec"])
    cr = await api.create(cr_gvr(case), manifest, namespace=NS)
    if case.started is not None:  # a learning job's worker waits for the edge's stage report
        await case.started(api, cr)

    async def condition() -> dict | None:
        return refused(await status_of(api, case), current=False)
    cond = await eventually(condition, within=WAIT, message=f"{case.kind}: the ServiceAccountForbidden condition")
    assert f"ServiceAccount {NS}/{GM_ACCOUNT}, the GlobalManager's own" in cond["message"], cond

    async def warned() -> bool:
        events = (await api.list(EVENTS, namespace=NS,
                                 field_selector=f"involvedObject.uid={cr['metadata']['uid']}"))["items"]
        return any(e["reason"] == "ServiceAccountForbidden" and e["type"] == "Warning" for e in events)
    await eventually(warned, within=WAIT, message="the Warning event")
    assert await children(api, case) == []

    await edit(api, case, run_as(None))
    if case.started is not None:  # the learning job's state machine moved on: report again
        await case.started(api, cr)
    everything = [f"{plural}/{name}" for plural, names in case.children.items() for name in names]

    async def recovered() -> bool:
        return await children(api, case) == everything and refused(await status_of(api, case)) is None
    await eventually(recovered, within=WAIT, message=f"{case.kind}: its workers once the template is fixed")
