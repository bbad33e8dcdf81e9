"""Adoption and release of dependents by a controller (what client-go's ControllerRefManager does).

A ReplicaSet claims pods and a Deployment claims ReplicaSets the same way: it keeps the
objects it controls that still match its selector, adopts matching objects that have no
controller, and releases (drops its reference from) owned objects that stopped matching.
Only the owner's own dependents and orphans are looked at (`Store.controlled_by`), never
the whole namespace.
"""

from __future__ import annotations

from typing import Any

from devcluster.controllers.meta import controller_ref, get_controller_of, is_deleting, labels_of
from devcluster.machinery.errors import ApiError
from devcluster.machinery.resource import ResourceType
from devcluster.machinery.selectors import label_selector_from_object


def claim(store: Any, rt: ResourceType, owner: dict[str, Any]) -> list[dict[str, Any]]:
    """The objects of `rt` that `owner` controls after adopting and releasing."""
    selector = label_selector_from_object(owner["spec"].get("selector") or {})
    uid, ns = owner["metadata"]["uid"], owner["metadata"]["namespace"]
    owned = []
    for obj in store.controlled_by(rt, uid, ns) + store.controlled_by(rt, None, ns):
        matches = selector.matches(labels_of(obj))
        if get_controller_of(obj) is not None:  # ours: controlled_by only returns ours or orphans
            if matches:
                owned.append(obj)
            elif not is_deleting(obj):
                set_controller_ref(store, rt, obj, owner, adopt=False)
        elif matches and not is_deleting(obj):
            adopted = set_controller_ref(store, rt, obj, owner, adopt=True)
            if adopted is not None:
                owned.append(adopted)
    return owned


def set_controller_ref(store: Any, rt: ResourceType, obj: dict[str, Any], owner: dict[str, Any], *,
                       adopt: bool) -> dict[str, Any] | None:
    """Add (adopt) or remove (release) `owner`'s reference on `obj`; None if `obj` is gone.
    Adoption never takes an object another controller got to first."""
    uid = owner["metadata"]["uid"]

    def edit(current: dict[str, Any]) -> None:
        refs = [r for r in current["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
        if adopt:
            if get_controller_of(current) is not None:
                return
            refs.append(controller_ref(owner))
        if refs:
            current["metadata"]["ownerReferences"] = refs
        else:
            current["metadata"].pop("ownerReferences", None)

    try:
        return store.mutate(rt, obj["metadata"]["namespace"], obj["metadata"]["name"], edit)
    except ApiError as err:
        if err.code == 404:
            return None
        raise
