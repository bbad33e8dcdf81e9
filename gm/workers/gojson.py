"""Values written as upstream's Go code writes them, so a worker reading them parses the same
text: compact JSON with Go's HTML-safe escapes, and the hard-example-mining parameters list
(`HEM_PARAMETERS`) that JI and IL workers receive."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gm.workers.specerrors import InvalidSpec


def hem_parameters(parameters: Any) -> str:
    """The parameters list as upstream's Go encoder writes it (`null` when absent)."""
    if parameters is None:
        return "null"
    where = "spec.edgeWorker.hardExampleMining.parameters"
    if not isinstance(parameters, list):
        raise InvalidSpec("InvalidSpec", f"{where} must be a list")
    items = []
    for i, item in enumerate(parameters):
        if not (isinstance(item, Mapping) and isinstance(item.get("key"), str)
                and isinstance(item.get("value"), str)):
            raise InvalidSpec("InvalidSpec", f"{where}[{i}] needs string key and value")
        items.append({"key": item["key"], "value": item["value"]})
    return go_json(items)


def go_json(value: Any) -> str:
    """Compact JSON with Go's HTML-safe escapes (`<`, `>`, `&`, U+2028, U+2029)."""
    text = orjson.dumps(value).decode()
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text
