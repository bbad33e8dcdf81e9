"""Custom resources' printer columns (`additionalPrinterColumns`): their JSONPath subset, compiled
once per path, and the cells a column type allows. Pure."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from devcluster.tables.columns import AGE, NAME, Cells, RowFn, age_of, column, epoch, name_of, since

# --------------------------------------------------------------------------- CR printer columns


@lru_cache(maxsize=512)
def _compile_path(path: str) -> tuple[tuple[str, Any], ...]:
    """A simple JSONPath as steps: ("key", k), ("index", i), ("slice", (a, b)) or
    ("filter", (keys, value))."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    steps: list[tuple[str, Any]] = []
    for match in _STEP.finditer(text):
        key, quoted, index, s_from, s_to, f_path, f_value = match.groups()
        if key is not None or quoted is not None:
            steps.append(("key", key if key is not None else quoted))
        elif index is not None:
            steps.append(("index", int(index)))
        elif s_from is not None:
            steps.append(("slice", (int(s_from) if s_from else None, int(s_to) if s_to else None)))
        else:
            steps.append(("filter", (tuple(f_path.split(".")), _literal(f_value))))
    return tuple(steps)


_STEP = re.compile(
    r"\.([^.\[\]]+)"
    r"|\[['\"]([^'\"]+)['\"]\]"
    r"|\[(-?\d+)\]"
    r"|\[(-?\d*):(-?\d*)\]"
    r"|\[\?\(@\.([\w.\-/]+)\s*==\s*([^)]*?)\s*\)\]"
)


def _literal(text: str) -> Any:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    try:
        return json.loads(text)
    except ValueError:
        return text


def _evaluate(obj: Any, steps: tuple[tuple[str, Any], ...]) -> Any:
    """The first value the path reaches, or None."""
    found = [obj]
    for kind, arg in steps:
        nxt: list[Any] = []
        for node in found:
            if kind == "key" and isinstance(node, dict) and arg in node:
                nxt.append(node[arg])
            elif kind == "index" and isinstance(node, list) and -len(node) <= arg < len(node):
                nxt.append(node[arg])
            elif kind == "slice" and isinstance(node, list):
                nxt.extend(node[arg[0]:arg[1]])
            elif kind == "filter" and isinstance(node, list):
                nxt.extend(item for item in node if _filter_hit(item, arg))
        found = nxt
        if not found:
            return None
    return found[0]


def _filter_hit(item: Any, arg: tuple[tuple[str, ...], Any]) -> bool:
    keys, value = arg
    for key in keys:
        if not isinstance(item, dict) or key not in item:
            return False
        item = item[key]
    return item == value


def cr_columns(rt: Any) -> list[dict]:
    cols = [NAME]
    for pc in rt.printer_columns:
        cols.append(column(pc.get("name", ""), pc.get("type", "string"), pc.get("description", ""),
                         priority=int(pc.get("priority", 0)), fmt=pc.get("format", "")))
    if not any(pc.get("type") == "date" for pc in rt.printer_columns):
        cols.append(AGE)
    return cols


def cr_row_fn(rt: Any) -> RowFn:
    specs = [(_compile_path(pc.get("jsonPath", "")), pc.get("type", "string")) for pc in rt.printer_columns]
    add_age = not any(t == "date" for _, t in specs)

    def row(obj: dict, now: float) -> Cells:
        cells: Cells = [name_of(obj)]
        cells.extend(_cell(_evaluate(obj, steps), kind, now) for steps, kind in specs)
        if add_age:
            cells.append(age_of(obj, now))
        return cells

    return row


def _cell(value: Any, kind: str, now: float) -> Any:
    if value is None:
        return None
    if kind == "date":
        return since(value, now) if isinstance(value, str) and epoch(value) is not None else value
    if kind == "integer":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if kind == "number":
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)
