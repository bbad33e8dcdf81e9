"""The chart's Grafana dashboards as tests read them: the files, their queries, and the metric
names those queries select (a small PromQL tokenizer, enough for the queries we write)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

DASHBOARDS = Path(__file__).resolve().parents[1] / "charts" / "sedna" / "dashboards"

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![A-Za-z0-9_:.])[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
                       "and", "or", "unless", "inf", "nan"})
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$")


def dashboards() -> dict[str, dict]:
    """File name -> parsed dashboard."""
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(DASHBOARDS.glob("*.json"))}


def queries(board: dict) -> Iterator[str]:
    """Every PromQL expression: the panels' targets and the query variables' selectors."""
    for panel in board.get("panels", ()):
        for inner in (panel, *panel.get("panels", ())):
            for target in inner.get("targets", ()):
                yield target["expr"]
    for var in board["templating"]["list"]:
        if var.get("type") == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            match = _LABEL_VALUES.match(query)
            assert match, f"variable {var['name']}: not label_values(<selector>, <label>): {query}"
            yield match.group(1)


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` selects: identifiers left once strings, label matchers, ranges
    and grouping clauses are taken out, that neither call a function nor are keywords."""
    text = _STRING.sub('""', expr)
    text = _GROUPING.sub(" ", _RANGE.sub(" ", _MATCHERS.sub(" ", text)))
    names = set()
    for match in _IDENT.finditer(text):
        rest = text[match.end():].lstrip()
        if rest.startswith("(") or match.group() in _KEYWORDS:
            continue
        names.add(match.group())
    return names


def family(name: str) -> str:
    """The family a sample name belongs to (a histogram's `_bucket`, `_sum`, `_count`)."""
    return re.sub(r"_(bucket|sum|count)$", "", name)
