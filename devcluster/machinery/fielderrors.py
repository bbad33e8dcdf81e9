"""Field errors as the real server words them, and values printed the way Go's `%#v` prints them.

The small constructors every validator uses (`invalid`, `required`, `unsupported`), the
shape checks they start from (`as_map`, `as_list`, `non_negative`...) and the Go-printed
maps and selectors that the messages quote. A leaf over `errors.FieldError`.
"""

from __future__ import annotations

from typing import Any

from devcluster.machinery.errors import FieldError

# --------------------------------------------------------------------------- constructors


def invalid_value(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, "Invalid value", detail, value, True)


def go_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(type(value), "number")


def required_value(path: str, detail: str = "") -> FieldError:
    return FieldError(path, "Required value", detail)


def unique_name(name: Any, path: str, seen: set[str]) -> list[FieldError]:
    """A list item's `name` at `path`: required, and not one of `seen` (which a new name joins)."""
    if not name:
        return [required_value(path)]
    if name in seen:
        return [FieldError(path, "Duplicate value", "", name, True)]
    seen.add(name)
    return []


def unsupported_value(path: str, value: Any, supported: tuple[str, ...]) -> FieldError:
    listed = ", ".join(f'"{s}"' for s in supported)
    return FieldError(path, "Unsupported value", f"supported values: {listed}", value, True)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def non_negative(value: Any, path: str) -> list[FieldError]:
    if value is None:
        return []
    if not is_int(value):
        return [invalid_value(path, value, "must be an integer")]
    return [invalid_value(path, value, "must be greater than or equal to 0")] if value < 0 else []


def port_number(value: Any, path: str) -> list[FieldError]:
    if not is_int(value) or not 1 <= value <= 65535:
        return [invalid_value(path, value, "must be between 1 and 65535, inclusive")]
    return []


def as_map(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list:
    return value if isinstance(value, list) else []


# --------------------------------------------------------------------------- Go-style values


class GoRepr:
    """A value already rendered as Go's `%#v` would print it (maps, structs in messages)."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GoRepr) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def _q(value: Any) -> str:
    """Go `%q` of a string (ASCII-safe approximation)."""
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{text}"'


def go_string_map(labels: dict | None) -> GoRepr:
    """`map[string]string{"a":"b"}`, keys sorted as fmt prints them; nil when absent."""
    if labels is None:
        return GoRepr("map[string]string(nil)")
    inner = ", ".join(f"{_q(k)}:{_q(v)}" for k, v in sorted(labels.items()))
    return GoRepr(f"map[string]string{{{inner}}}")


def go_label_selector(sel: dict | None) -> GoRepr:
    """A metav1.LabelSelector as `%#v` prints it, for selector error messages."""
    sel = sel or {}
    exprs = sel.get("matchExpressions")
    if exprs:
        items = []
        for e in exprs:
            e = e if isinstance(e, dict) else {}
            values = e.get("values")
            vals = ("[]string{" + ", ".join(_q(v) for v in values) + "}") if values else "[]string(nil)"
            items.append(f"v1.LabelSelectorRequirement{{Key:{_q(e.get('key', ''))}, "
                         f"Operator:{_q(e.get('operator', ''))}, Values:{vals}}}")
        expr_text = "[]v1.LabelSelectorRequirement{" + ", ".join(items) + "}"
    else:
        expr_text = "[]v1.LabelSelectorRequirement(nil)"
    labels = sel.get("matchLabels")
    return GoRepr(f"v1.LabelSelector{{MatchLabels:{go_string_map(labels or None)}, MatchExpressions:{expr_text}}}")
