"""Server-side apply (PATCH application/apply-patch+yaml) with field ownership (pure functions).

An applier sends its whole intent. The server merges it into the live object, then uses
managedFields (see managedfields.py) for the two things a plain merge cannot do:

- **conflicts**: changing a field another manager owns is refused with 409 Conflict naming
  each field and its manager, unless the applier forces (`force=true`), which takes the
  fields over; setting a field to the value it already has just shares ownership;
- **removal**: a field the applier set last time, no longer sends, and nobody else owns is
  removed from the object.

Lists merge as the type declares them (keyed, set or atomic); the merged list keeps the live
order and places new items where the configuration puts them relative to shared ones.
"""

from __future__ import annotations

from typing import Any

import orjson

from devcluster.machinery.errors import ApiError, bad_request
from devcluster.machinery.objmeta import rfc3339
from devcluster.storage.managedfields import (
    Entry,
    Path,
    Shape,
    _element_rank,
    _items,
    base_entries,
    compare,
    encode_entries,
    field_set,
    path_text,
    shape_of,
    tracked,
)

__all__ = ["server_side_apply", "merge_applied"]


def server_side_apply(rt: Any, live: dict[str, Any] | None, config: dict[str, Any], *, manager: str,
                      force: bool, now: float, subresource: str | None = None) -> dict[str, Any]:
    """The object after `manager` applies `config` to `live` (None: created), managedFields included.

    Raises ApiError 409 on conflicts when not forced, 400 when the configuration carries
    managedFields (even `[]`: only the server writes them on an apply). Neither argument is mutated.
    """
    shape = shape_of(rt)
    meta = config.get("metadata") if isinstance(config.get("metadata"), dict) else {}
    if meta.get("managedFields") is not None:
        raise bad_request("metadata.managedFields must be nil")
    config = {**config, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    entries = base_entries(None, (live or {}).get("metadata", {}).get("managedFields"))
    mine = Entry(manager, "Apply", rt.api_version, None, set(), subresource or "")
    previous = next((e for e in entries if e.ident == mine.ident), None)
    others = [e for e in entries if e.ident != mine.ident]
    applied = field_set(tracked(rt, config, subresource), shape)
    merged = merge_applied(live or {}, config, shape)
    if previous is not None:
        merged = _prune(merged, previous.fields - applied, [applied, *(e.fields for e in others)], shape,
                        crd=rt.crd)
    diff = compare(tracked(rt, live, subresource), tracked(rt, merged, subresource), shape)
    changed = diff.added | diff.modified
    conflicts = [(e, p) for e in others for p in e.fields & changed]
    if conflicts and not force:
        raise conflict_error(conflicts)
    for e in others:
        e.take(changed | diff.removed)
    mine.fields = applied
    mine.time = previous.time if previous is not None and diff.empty() else rfc3339(now)
    merged = {**merged, "metadata": dict(merged.get("metadata") or {})}
    encoded = encode_entries([*others, mine])
    if encoded:
        merged["metadata"]["managedFields"] = encoded
    else:
        merged["metadata"].pop("managedFields", None)
    return merged


# --------------------------------------------------------------------------- merge


def merge_applied(live: Any, config: Any, shape: Shape) -> Any:
    """The configuration merged into the live value: maps recursively, lists by their type."""
    if isinstance(config, dict) and isinstance(live, dict) and not shape.atomic_map():
        out = dict(live)
        for k, v in config.items():
            if v is None:
                out.pop(k, None)
            elif k in live:
                out[k] = merge_applied(live[k], v, shape.child(k))
            else:
                out[k] = _clean(v)
        return out
    if isinstance(config, list) and isinstance(live, list) and shape.list_kind()[0] != "atomic":
        return _merge_list(live, config, shape)
    return _clean(config)


def _clean(value: Any) -> Any:
    """A value new to the object: explicit nulls inside it set nothing."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _merge_list(live: list, config: list, shape: Shape) -> list:
    """Keyed or set list merge: live-only items keep their place; shared and new items follow
    the configuration's order around them."""
    lhs, rhs = list(_items(live, shape)), list(_items(config, shape))
    lmap, rmap = dict(lhs), dict(rhs)
    shared = [el for el, _ in rhs if el in lmap]
    item_shape = shape.item()
    out: list = []
    done: set[str] = set()
    li = ri = ns = 0
    while li < len(lhs) or ri < len(rhs):
        nxt = shared[ns] if ns < len(shared) else None
        if li < len(lhs) and ri < len(rhs):
            lel = lhs[li][0]
            if lel == rhs[ri][0]:
                out.append(merge_applied(lmap[lel], rmap[lel], item_shape))
                done.add(lel)
                li, ri, ns = li + 1, ri + 1, ns + 1
                continue
            if lel in rmap and nxt is not None and nxt != lel:
                li += 1  # a shared item that the configuration places later
                continue
        if li < len(lhs):
            lel = lhs[li][0]
            if lel not in rmap:
                out.append(lhs[li][1])
                li += 1
                continue
            if lel in done:
                li += 1
                continue
        if ri < len(rhs):
            rel, item = rhs[ri]
            done.add(rel)
            out.append(merge_applied(lmap[rel], item, item_shape) if rel in lmap else _clean(item))
            ri += 1
            if nxt == rel:
                ns += 1
    return out


# --------------------------------------------------------------------------- removal


def _prune(merged: dict[str, Any], dropped: set[Path], owned: list[set[Path]], shape: Shape, *,
           crd: bool) -> dict[str, Any]:
    """Remove the fields the applier dropped, unless someone (the applier's new set included)
    still owns them or something under them."""
    held = {p[:i] for fields in owned for p in fields for i in range(1, len(p) + 1)}
    doomed = sorted((p for p in dropped if p not in held), key=len)
    if not doomed:
        return merged
    out = orjson.loads(orjson.dumps(merged))  # merged shares subtrees with the stored object
    for path in doomed:
        _remove(out, path, shape, drop_empty=not crd)
    return out


def _remove(node: Any, path: Path, shape: Shape, *, drop_empty: bool) -> bool:
    """Remove `path` under `node`; True when `node` is a map this emptied (for built-ins:
    the typed object would not keep an empty map either)."""
    el, rest = path[0], path[1:]
    if isinstance(node, dict) and el.startswith("f:"):
        key = el[2:]
        if key not in node:
            return False
        if not rest or _remove(node[key], rest, shape.child(key), drop_empty=drop_empty):
            del node[key]
            return drop_empty and not node
        return False
    if isinstance(node, list):
        for i, (item_el, item) in enumerate(list(_items(node, shape))):
            if item_el == el:
                if not rest:
                    del node[i]
                else:
                    _remove(item, rest, shape.item(), drop_empty=drop_empty)
                break
    return False


# --------------------------------------------------------------------------- conflicts


def conflict_error(conflicts: list[tuple[Entry, Path]]) -> ApiError:
    """409 Conflict with the real server's message and one FieldManagerConflict cause per field."""
    ordered = sorted(conflicts, key=lambda c: (c[0].label(), [_element_rank(el) for el in c[1]]))
    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {e.label()}", "field": path_text(p)}
              for e, p in ordered]
    if len(ordered) == 1:
        e, p = ordered[0]
        message = f"Apply failed with 1 conflict: conflict with {e.label()}: {path_text(p)}"
    else:
        lines: list[str] = []
        last = None
        for e, p in ordered:
            if e.label() != last:
                lines.append(f"conflicts with {e.label()}:")
                last = e.label()
            lines.append(f"- {path_text(p)}")
        message = f"Apply failed with {len(ordered)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, {"causes": causes})
