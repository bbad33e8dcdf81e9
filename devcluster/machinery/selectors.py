"""Label and field selectors (spec §5.10): parsing into precompiled matchers.

Selectors are evaluated per object per watch event, so parsing does all the work up
front: each requirement becomes a small closure over frozen values, and `matches` is a
loop over those closures.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devcluster.machinery.errors import ApiError, bad_request
from devcluster.machinery.names import label_value_errors, qualified_name_errors

__all__ = [
    "Requirement",
    "LabelSelector",
    "FieldSelector",
    "parse_label_selector",
    "label_selector_from_object",
    "selector_to_string",
    "parse_field_selector",
]

_INTEGER = re.compile(r"[+-]?[0-9]+")
_IN_OPS = frozenset({"=", "==", "in"})
_NOT_IN_OPS = frozenset({"!=", "notin"})
_SET_OPS = frozenset({"in", "notin"})


@dataclass(frozen=True, slots=True)
class Requirement:
    """One `key op values` term. `op` keeps the spelling it was written with."""

    key: str
    op: str  # "exists" "!" "=" "==" "!=" "in" "notin" ">" "<"
    values: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.op == "exists":
            return self.key
        if self.op == "!":
            return "!" + self.key
        if self.op in _SET_OPS:
            return f"{self.key} {self.op} ({','.join(self.values)})"
        return f"{self.key}{self.op}{self.values[0]}"

    def compile(self) -> Callable[[dict], bool]:
        key = self.key
        op = self.op
        if op == "exists":
            return lambda labels: key in labels
        if op == "!":
            return lambda labels: key not in labels
        if op in _IN_OPS:
            if len(self.values) == 1:
                only = self.values[0]
                return lambda labels: labels.get(key) == only
            allowed = frozenset(self.values)
            return lambda labels: key in labels and labels[key] in allowed
        if op in _NOT_IN_OPS:
            banned = frozenset(self.values)
            return lambda labels: labels.get(key) not in banned
        bound = int(self.values[0])
        if op == ">":
            return lambda labels: (n := _int(labels.get(key))) is not None and n > bound
        return lambda labels: (n := _int(labels.get(key))) is not None and n < bound


def _int(value: str | None) -> int | None:
    """A label value as an integer for `>`/`<`; None (never matching) if it is not one."""
    if value is None or not _INTEGER.fullmatch(value):
        return None
    return int(value)


class LabelSelector:
    """A parsed label selector: an AND of requirements, or `nothing` (a nil selector)."""

    __slots__ = ("requirements", "nothing", "_tests")

    def __init__(self, requirements: tuple[Requirement, ...] = (), *, nothing: bool = False):
        self.requirements = tuple(sorted(requirements, key=lambda r: r.key))
        self.nothing = nothing
        self._tests = tuple(r.compile() for r in self.requirements)

    @property
    def empty(self) -> bool:
        """True when the selector matches every object."""
        return not self.requirements and not self.nothing

    def matches(self, labels: dict | None) -> bool:
        if self.nothing:
            return False
        labels = labels or {}
        for test in self._tests:
            if not test(labels):
                return False
        return True

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)

    def __repr__(self) -> str:
        return f"LabelSelector({str(self)!r})"


# --------------------------------------------------------------------------- query syntax

_SPECIAL = frozenset("=!(),<> \t\n")


def _tokens(text: str) -> list[str]:
    """Split into identifiers and the operator tokens `= == != ! ( ) , < >`."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t\n":
            i += 1
        elif ch in "=!" and text[i + 1:i + 2] == "=":
            out.append(ch + "=")
            i += 2
        elif ch in _SPECIAL:
            out.append(ch)
            i += 1
        else:
            j = i
            while j < n and text[j] not in _SPECIAL:
                j += 1
            out.append(text[i:j])
            i = j
    return out


def _is_ident(token: str | None) -> bool:
    return token is not None and token[0] not in _SPECIAL


class _Parser:
    __slots__ = ("text", "toks", "pos")

    def __init__(self, text: str):
        self.text = text
        self.toks = _tokens(text)
        self.pos = 0

    def peek(self) -> str | None:
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def take(self) -> str | None:
        tok = self.peek()
        self.pos += 1
        return tok

    def fail(self, detail: str) -> ApiError:
        return bad_request(f'unable to parse label selector "{self.text}": {detail}')

    def expected(self, found: str | None, what: str) -> ApiError:
        return self.fail(f"found '{found or ''}', expected: {what}")

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        while self.peek() is not None:
            reqs.append(self.requirement())
            sep = self.take()
            if sep is None:
                break
            if sep != ",":
                raise self.expected(sep, "',' or end of string")
            if self.peek() is None:
                raise self.expected(None, "identifier after ','")
        return reqs

    def requirement(self) -> Requirement:
        tok = self.take()
        if tok == "!":
            key = self.key()
            return Requirement(key, "!")
        self.pos -= 1
        key = self.key()
        op = self.peek()
        if op is None or op == ",":
            return Requirement(key, "exists")
        self.pos += 1
        if op in ("=", "==", "!="):
            return Requirement(key, op, (self.value(),))
        if op in ("in", "notin"):
            return Requirement(key, op, self.value_set(key, op))
        if op in (">", "<"):
            return Requirement(key, op, (self.integer(key),))
        raise self.expected(op, "in, notin, =, ==, !=, >, <")

    def key(self) -> str:
        tok = self.take()
        if not _is_ident(tok):
            raise self.expected(tok, "identifier")
        errs = qualified_name_errors(tok)
        if errs:
            raise self.fail(f'invalid label key "{tok}": {"; ".join(errs)}')
        return tok

    def value(self) -> str:
        tok = self.peek()
        if tok is None or tok == ",":
            return ""
        self.pos += 1
        if not _is_ident(tok):
            raise self.expected(tok, "identifier")
        return self.checked_value(tok)

    def checked_value(self, tok: str) -> str:
        errs = label_value_errors(tok)
        if errs:
            raise self.fail(f'invalid label value "{tok}": {"; ".join(errs)}')
        return tok

    def value_set(self, key: str, op: str) -> tuple[str, ...]:
        tok = self.take()
        if tok != "(":
            raise self.expected(tok, "'('")
        values: list[str] = []
        while True:
            tok = self.take()
            if tok in (",", ")"):
                values.append("")  # an empty value between separators
            elif _is_ident(tok):
                values.append(self.checked_value(tok))
                tok = self.take()
            else:
                raise self.expected(tok, "identifier, ',' or ')'")
            if tok == ")":
                break
            if tok != ",":
                raise self.expected(tok, "',' or ')'")
        if values == [""]:
            raise self.fail(f"values for '{key} {op}' can't be empty")
        return tuple(sorted(set(values)))

    def integer(self, key: str) -> str:
        tok = self.take()
        if not _is_ident(tok) or _int(tok) is None:
            raise self.fail(f"for '>' and '<' the value of '{key}' must be an integer, found '{tok or ''}'")
        return tok


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse the `labelSelector` query syntax; an empty string selects everything."""
    if not text or not text.strip():
        return LabelSelector()
    return LabelSelector(tuple(_Parser(text).parse()))


# --------------------------------------------------------------------------- selector objects

_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def label_selector_from_object(sel: dict | None) -> LabelSelector:
    """A `metav1.LabelSelector` dict; `{}` selects everything, None selects nothing."""
    if sel is None:
        return LabelSelector(nothing=True)
    if not isinstance(sel, dict):
        raise bad_request("label selector must be an object")
    reqs = [_match_label(k, v) for k, v in (sel.get("matchLabels") or {}).items()]
    exprs = sel.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise bad_request("matchExpressions must be a list")
    reqs.extend(_match_expression(e) for e in exprs)
    return LabelSelector(tuple(reqs))


def _match_label(key: Any, value: Any) -> Requirement:
    _check_key(key)
    if not isinstance(value, str) or label_value_errors(value):
        raise bad_request(f'invalid label value for key "{key}": {value!r}')
    return Requirement(key, "=", (value,))


def _match_expression(expr: Any) -> Requirement:
    if not isinstance(expr, dict):
        raise bad_request("each matchExpressions entry must be an object")
    key, op_name, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    _check_key(key)
    op = _OPERATORS.get(op_name) if isinstance(op_name, str) else None
    if op is None:
        raise bad_request(f'"{op_name}" is not a valid label selector operator')
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise bad_request(f'values of the requirement on "{key}" must be a list of strings')
    if op in _SET_OPS and not values:
        raise bad_request(f"values: for 'in', 'notin' operators, values set can't be empty (key \"{key}\")")
    if op not in _SET_OPS and values:
        raise bad_request(f"values: values set must be empty for exists and does not exist (key \"{key}\")")
    return Requirement(key, op, tuple(sorted(set(values))))


def _check_key(key: Any) -> None:
    if not isinstance(key, str):
        raise bad_request(f"label selector key must be a string, got {key!r}")
    errs = qualified_name_errors(key)
    if errs:
        raise bad_request(f'invalid label key "{key}": {"; ".join(errs)}')


def selector_to_string(sel: dict | None) -> str:
    """The canonical text of a selector object, as `Scale.status.selector` shows it."""
    return str(label_selector_from_object(sel or {}))


# --------------------------------------------------------------------------- field selectors

Getter = Callable[[dict], str]


def _path_getter(path: str, zero: str = "") -> Getter:
    """Read a dotted path; absent values compare as the Go zero value of the field's type."""
    parts = tuple(path.split("."))

    def get(obj: dict) -> str:
        node: Any = obj
        for p in parts:
            if not isinstance(node, dict):
                return zero
            node = node.get(p)
        if node is None:
            return zero
        if isinstance(node, bool):
            return "true" if node else "false"
        return str(node)

    return get


def _pod_ip(obj: dict) -> str:
    status = obj.get("status") or {}
    ips = status.get("podIPs") or []
    if ips and isinstance(ips[0], dict) and ips[0].get("ip"):
        return str(ips[0]["ip"])
    return str(status.get("podIP") or "")


_POD_FIELDS: dict[str, Getter] = {
    "spec.nodeName": _path_getter("spec.nodeName"),
    "spec.restartPolicy": _path_getter("spec.restartPolicy"),
    "spec.schedulerName": _path_getter("spec.schedulerName"),
    "spec.serviceAccountName": _path_getter("spec.serviceAccountName"),
    "spec.hostNetwork": _path_getter("spec.hostNetwork", "false"),
    "status.phase": _path_getter("status.phase"),
    "status.podIP": _pod_ip,
    "status.nominatedNodeName": _path_getter("status.nominatedNodeName"),
}

_INVOLVED = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
_CORE_EVENT_FIELDS: dict[str, Getter] = {
    **{f"involvedObject.{f}": _path_getter(f"involvedObject.{f}") for f in _INVOLVED},
    "reason": _path_getter("reason"),
    "reportingComponent": _path_getter("reportingComponent"),
    "source": _path_getter("source.component"),
    "type": _path_getter("type"),
}
# events.k8s.io/v1 objects carry the same facts under other names.
_NEW_EVENT_FIELDS: dict[str, Getter] = {
    **{f"involvedObject.{f}": _path_getter(f"regarding.{f}") for f in _INVOLVED},
    "reason": _path_getter("reason"),
    "reportingComponent": _path_getter("reportingController"),
    "source": _path_getter("deprecatedSource.component"),
    "type": _path_getter("type"),
}
_CORE_FIELDS: dict[str, dict[str, Getter]] = {
    "pods": _POD_FIELDS,
    "events": _CORE_EVENT_FIELDS,
    "nodes": {"spec.unschedulable": _path_getter("spec.unschedulable", "false")},
    "namespaces": {"status.phase": _path_getter("status.phase")},
    "secrets": {"type": _path_getter("type")},
}
_GROUP_FIELDS: dict[tuple[str, str], dict[str, Getter]] = {
    ("apps", "replicasets"): {"status.replicas": _path_getter("status.replicas", "0")},
    ("events.k8s.io", "events"): _NEW_EVENT_FIELDS,
}


def _supported_fields(rt: Any) -> dict[str, Getter]:
    fields: dict[str, Getter] = {"metadata.name": _path_getter("metadata.name")}
    if rt.namespaced or rt.crd:
        fields["metadata.namespace"] = _path_getter("metadata.namespace")
    if rt.crd:
        return fields
    if rt.group == "":
        fields.update(_CORE_FIELDS.get(rt.resource, {}))
    fields.update(_GROUP_FIELDS.get((rt.group, rt.resource), {}))
    return fields


@dataclass(frozen=True, slots=True)
class FieldTerm:
    field: str
    op: str  # "=" "==" "!="
    value: str
    get: Getter

    def matches(self, obj: dict) -> bool:
        return (self.get(obj) == self.value) != (self.op == "!=")


class FieldSelector:
    """A parsed field selector: an AND of equality terms on supported fields."""

    __slots__ = ("terms",)

    def __init__(self, terms: tuple[FieldTerm, ...] = ()):
        self.terms = terms

    @property
    def empty(self) -> bool:
        return not self.terms

    def matches(self, obj: dict) -> bool:
        for term in self.terms:
            if not term.matches(obj):
                return False
        return True

    def __str__(self) -> str:
        return ",".join(f"{t.field}{t.op}{t.value}" for t in self.terms)


def parse_field_selector(text: str | None, rt: Any) -> FieldSelector:
    """Parse `fieldSelector` for resource type `rt`; unknown fields are a 400 as on a real server."""
    if not text or not text.strip():
        return FieldSelector()
    supported = _supported_fields(rt)
    terms = []
    for part in _split_unescaped(text, ","):
        if not part.strip():
            continue
        field, op, value = _split_term(part)
        get = supported.get(field)
        if get is None:
            raise _unknown_field(field, rt)
        terms.append(FieldTerm(field, op, value, get))
    return FieldSelector(tuple(terms))


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, escaped = [], [], False
    for ch in text:
        if escaped:
            current.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if escaped:
        current.append("\\")
    parts.append("".join(current))
    return parts


def _split_term(part: str) -> tuple[str, str, str]:
    i = 0
    while i < len(part):
        if part[i] == "\\":
            i += 2
            continue
        for op in ("!=", "==", "="):
            if part.startswith(op, i):
                return part[:i].strip(), op, _unescape(part[i + len(op):].strip(), part)
        i += 1
    raise bad_request(f"invalid selector: '{part}'; can't understand '{part}'")


def _unescape(value: str, part: str) -> str:
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=!":
                raise bad_request(f"invalid field selector: invalid escape sequence in '{part}'")
            out.append(value[i + 1])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _unknown_field(field: str, rt: Any) -> ApiError:
    if rt.crd:
        return bad_request(
            f'"{field}" is not a known field selector: only "metadata.name", "metadata.namespace"'
        )
    return bad_request(f"field label not supported: {field}")
