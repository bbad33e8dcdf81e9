"""Pure parts of the garbage collector: owner verdicts and the action on a dependent."""

import pytest

from devcluster.controllers.gc import Delete, Keep, Verdict, classify_owner, plan_dependent

REF = {"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u1"}


def _owner(uid="u1", deleting=False, fins=()):
    meta = {"name": "o", "uid": uid, "finalizers": list(fins)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


@pytest.mark.parametrize(("owner", "want"), [
    pytest.param(None, Verdict.DANGLING, id="absent"),
    pytest.param(_owner(uid="other"), Verdict.DANGLING, id="uid-mismatch"),
    pytest.param(_owner(deleting=True, fins=["foregroundDeletion"]), Verdict.WAITING, id="foreground"),
    pytest.param(_owner(deleting=True, fins=["orphan"]), Verdict.SOLID, id="orphaning"),
    pytest.param(_owner(), Verdict.SOLID, id="alive"),
])
def test_classify_owner(owner, want):
    assert classify_owner(owner, REF) is want


@pytest.mark.parametrize(("verdicts", "has_deps", "fins", "want"), [
    pytest.param([("a", Verdict.SOLID)], False, [], Keep(()), id="solid"),
    pytest.param([("a", Verdict.SOLID), ("b", Verdict.DANGLING), ("c", Verdict.WAITING)], False, [],
                 Keep(("b", "c")), id="solid-prunes-others"),
    pytest.param([("a", Verdict.DANGLING)], False, [], Delete("Background"), id="dangling"),
    pytest.param([("a", Verdict.WAITING)], True, [], Delete("Foreground"), id="waiting-with-children"),
    pytest.param([("a", Verdict.WAITING)], False, [], Delete("Background"), id="waiting-leaf"),
    pytest.param([("a", Verdict.DANGLING)], False, ["orphan"], Delete("Orphan"), id="own-orphan"),
    pytest.param([("a", Verdict.DANGLING)], False, ["foregroundDeletion"], Delete("Foreground"),
                 id="own-foreground"),
    pytest.param([("a", Verdict.UNRESOLVED), ("b", Verdict.DANGLING)], False, [], Keep(()), id="unresolved"),
])
def test_plan_dependent(verdicts, has_deps, fins, want):
    assert plan_dependent(verdicts, has_dependents=has_deps, own_finalizers=fins) == want
