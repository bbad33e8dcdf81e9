"""Name and label syntax of the API (apimachinery's validation of names), worded as the real server words it.

Each check returns the messages of what is wrong with a value, not field errors: object
validation puts them at a field path, the selector parser into a 400. A leaf.
"""

from __future__ import annotations

import re

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = "(" + _QNAME_FMT + ")?"

_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1035_LABEL_RE = re.compile(_DNS1035_LABEL_FMT)
_QNAME_RE = re.compile(_QNAME_FMT)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)

_QNAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character"
)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """The apimachinery wording: examples are each followed by `, ` and joined by ` or `."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def _syntax_errors(value: str, limit: int, pattern: re.Pattern[str], msg: str, *examples: str) -> list[str]:
    """`value` longer than `limit`, or not all of `pattern`: the server's message for each."""
    errs = [_max_len(limit)] if len(value) > limit else []
    if not pattern.fullmatch(value):
        errs.append(_regex_error(msg, pattern.pattern, *examples))
    return errs


def dns1123_label_errors(value: str) -> list[str]:
    return _syntax_errors(
        value, 63, _DNS1123_LABEL_RE,
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
        "and must start and end with an alphanumeric character",
        "my-name", "123-abc")


def dns1123_subdomain_errors(value: str) -> list[str]:
    return _syntax_errors(
        value, 253, _DNS1123_SUBDOMAIN_RE,
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
        "or '.', and must start and end with an alphanumeric character",
        "example.com")


def dns1035_label_errors(value: str) -> list[str]:
    return _syntax_errors(
        value, 63, _DNS1035_LABEL_RE,
        "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
        "an alphabetic character, and end with an alphanumeric character",
        "my-name", "abc-123")


def qualified_name_errors(value: str) -> list[str]:
    """Label keys, annotation keys: `[prefix/]name` (apimachinery IsQualifiedName)."""
    parts = value.split("/")
    errs: list[str] = []
    if len(parts) > 2:
        return ["a qualified name " + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in dns1123_subdomain_errors(prefix))
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + _max_len(63))
    if not _QNAME_RE.fullmatch(name):
        errs.append("name part " + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def label_value_errors(value: str) -> list[str]:
    return _syntax_errors(
        value, 63, _LABEL_VALUE_RE,
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
        "or '.', and must start and end with an alphanumeric character",
        "MyValue", "my_value", "12345")
