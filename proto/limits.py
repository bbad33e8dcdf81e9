"""What the protocol accepts: the one definition of every limit a frame or a report must meet.

The GM's decoders refuse a frame that breaks one of these rules, and a refusal there is
final: the session that carried it is closed. The LC therefore checks the same rules,
with these same functions, before it answers a worker 200 for a report, so a report it
accepts is one the GM can decode; a limit changed here changes both sides at once.

Rules: frame sizes (objects going down, reports coming up), kind, namespace and name
lengths (Kubernetes' own: a namespace is a DNS label, a name a DNS subdomain), nesting
depth of a body, entries per map or list and maps and lists per body, JSON-like values
only (maps with string keys, lists, scalars) and text that is valid Unicode (no lone
surrogates, which no UTF-8 encoder can write). Pure functions, no I/O; violations raise
InvalidFrame (FrameTooLarge for sizes, which the codecs check).

Every check is linear in what it checks, so a frame's cost is bounded by its size limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NoReturn

from proto.errors import InvalidFrame

MAX_FRAME_BYTES = 8 * 1024 * 1024
"""Frame limit of GM -> LC frames (objects). Kubernetes objects stop at ~1.5 MiB in etcd."""

MAX_REPORT_BYTES = 2 * 1024 * 1024
"""Limit of what an LC sends the GM: a native frame (a status report or the hello), or the JSON
document in an upstream status's `content`.

A report ends up in a status the GM writes to Kubernetes, and etcd refuses an object over
~1.5 MiB, so a larger report could never be applied; 2 MiB leaves room for the report's
fields that are not written. The bound is what makes a hostile frame cheap: everything the
GM materializes from one frame (at worst ~25 bytes of Python objects per byte of frame,
for lists of two-character strings) is proportional to it."""

ENVELOPE_OVERHEAD = 4096
"""Room for an upstream envelope around its base64 content: the header's four strings
(at most 63 + 63 + 253 characters plus the operation, up to 6 bytes each when escaped)."""


def envelope_bytes(content_bytes: int) -> int:
    """The upstream frame limit for `content_bytes` of JSON: base64 (4 per 3, padded) plus the header."""
    return 4 * -(-content_bytes // 3) + ENVELOPE_OVERHEAD


MAX_REPORT_ENVELOPE_BYTES = envelope_bytes(MAX_REPORT_BYTES)
"""MAX_REPORT_BYTES for an upstream text frame: the envelope around a MAX_REPORT_BYTES document."""

MAX_ITEMS = 100_000
"""Most entries one map or list of a body may hold. msgpack sizes a list from its header
before reading its items, so without it a frame of 1,000 nested list headers that each
claim millions of items reserves gigabytes of address space (130 MB resident from one 8 MiB
frame); with it a longer list is refused at its header, before any item is built."""

MAX_CONTAINERS = 100_000
"""Most maps and lists in one body (the body included). An empty map is one byte of msgpack
and ~70 bytes of Python; counted as they are built, a frame of tiny maps is refused after
100,000 of them (~7 MB) instead of costing ~150 MB at 2 MiB. A real 1.5 MiB object with
this many maps would average 15 bytes per map."""

MAX_SEQ = 2**63 - 1
MAX_EPOCH = 64
"""Longest outbox epoch an LC may name in its hello."""
MAX_KIND = 63
MAX_NAMESPACE = 63
MAX_NAME = 253
MAX_DEPTH = 100
"""Deepest nesting of maps and lists in a body; the body itself is level 0."""


def check_text(value: str, path: str) -> None:
    """Raise InvalidFrame unless `value` can be written as UTF-8 (no lone surrogates)."""
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidFrame(f"{path} holds {value[exc.start]!a}, a lone surrogate that is not "
                           "valid Unicode text") from None


def check_name(field: str, value: object, limit: int) -> None:
    """Raise InvalidFrame unless `value` is valid text of at most `limit` characters."""
    if not isinstance(value, str):
        raise InvalidFrame(f"{field} must be a string, got {type(value).__name__}")
    if len(value) > limit:
        raise InvalidFrame(f"{field} is {len(value)} characters long, the limit is {limit}")
    check_text(value, field)


def check_object_names(kind: object, namespace: object, name: object) -> None:
    """The identity of an object on the wire: kind, namespace and name within their limits."""
    check_name("kind", kind, MAX_KIND)
    check_name("namespace", namespace, MAX_NAMESPACE)
    check_name("name", name, MAX_NAME)


def check_json_like(value: Any, path: str) -> None:
    """Raise InvalidFrame unless `value` is made of maps with string keys, lists and scalars,
    nested at most MAX_DEPTH levels, with valid text in every string, at most MAX_ITEMS
    entries in each map or list and MAX_CONTAINERS maps and lists in all.

    Linear in the size of `value`, with extra memory bounded by its depth: the walk keeps an
    explicit stack (one iterator per open map or list), checks the scalars of a map or list
    in bulk (their types with one set, their text with one join) and spells a path only for
    the error it raises. `path` names `value` in error messages ("body", "report")."""
    if type(value) is dict or type(value) is list or isinstance(value, dict | list):
        _Walk(path).run(value)
    elif type(value) is str:
        check_text(value, path)
    elif type(value) not in _SCALARS:
        _check_odd(value, path)


_SCALARS = frozenset({int, float, bool, type(None)})
_LEAVES = _SCALARS | {str}
_Where = tuple[Any, str | int] | None
"""Where a value sits: (where its parent sits, its key or index), None for the root. A path
is spelled from this chain only when an error names it."""


_NO_CHILDREN: Iterator[tuple[_Where, Any]] = iter(())
"""What _enter returns for a map or list of scalars: nothing to push on the walk's stack."""
_BULK = 4
"""Maps and lists with this many entries or more get their scalars checked in bulk (one set of
types, one join of strings); smaller ones are cheaper to check entry by entry."""


class _Walk:
    """One check_json_like walk: the root's name and the count of maps and lists entered."""

    __slots__ = ("root", "containers")

    def __init__(self, root: str) -> None:
        self.root = root
        self.containers = 0

    def run(self, value: dict[str, Any] | list[Any]) -> None:
        # Invariant: stack[i] iterates the child maps and lists of the container at depth i.
        stack = [self._enter(value, None, 0)]
        while stack:
            for where, child in stack[-1]:
                children = self._enter(child, where, len(stack))
                if children is not _NO_CHILDREN:
                    stack.append(children)
                    break
            else:
                stack.pop()

    def _enter(self, container: dict[str, Any] | list[Any], where: _Where,
               depth: int) -> Iterator[tuple[_Where, Any]]:
        """Check one map or list and its scalars; an iterator over its child maps and lists."""
        self.containers += 1
        if self.containers > MAX_CONTAINERS:
            raise InvalidFrame(f"{self.root} holds more than {MAX_CONTAINERS} maps and lists")
        size = len(container)
        if size > MAX_ITEMS:
            raise InvalidFrame(f"{self.path(where)} holds {size} items, the limit is {MAX_ITEMS}")
        items: Iterable[tuple[Any, Any]]
        if isinstance(container, dict):
            try:
                keys = "".join(container)
            except TypeError:
                keys = self._non_string_key(container, where)
            if not keys.isascii() and not _valid_text(keys):
                self._invalid_key(container, where)
            items, values = container.items(), container.values()
        else:
            items, values = enumerate(container), container
        if size and depth >= MAX_DEPTH:
            first = next(iter(container)) if isinstance(container, dict) else 0
            raise InvalidFrame(f"{self.path((where, first))} is nested deeper than {MAX_DEPTH} levels")
        if size < _BULK:
            return self._children(items, where, texts_checked=False)
        types = set(map(type, values))
        if str in types:
            self._check_texts(container, where, only_text=len(types) == 1)
        if types <= _LEAVES:
            return _NO_CHILDREN
        return self._children(items, where, texts_checked=True)

    def _children(self, items: Iterable[tuple[Any, Any]], where: _Where, *,
                  texts_checked: bool) -> Iterator[tuple[_Where, Any]]:
        """The child maps and lists, with where they sit; strings (unless `texts_checked`)
        and values that are not plain scalars (subclasses, or what JSON cannot carry) are
        checked on the way."""
        for key, item in items:
            kind = type(item)
            if kind is str:
                if not texts_checked and not item.isascii():
                    check_text(item, self.path((where, key)))
            elif kind in _SCALARS:
                continue
            elif kind is dict or kind is list or isinstance(item, dict | list):
                yield (where, key), item
            else:
                _check_odd(item, self.path((where, key)))

    def _non_string_key(self, container: dict[Any, Any], where: _Where) -> NoReturn:
        bad = next(k for k in container if not isinstance(k, str))
        raise InvalidFrame(f"{self.path(where)} has a non-string key {bad!r:.80}")

    def _invalid_key(self, container: dict[str, Any], where: _Where) -> None:
        for key in container:
            check_text(key, f"a key of {self.path(where)}")

    def _check_texts(self, container: dict[str, Any] | list[Any], where: _Where, *, only_text: bool) -> None:
        """Check every str value at once; find the culprit only when one is invalid."""
        values = container.values() if isinstance(container, dict) else container
        joined = "".join(values if only_text else [v for v in values if type(v) is str])
        if _valid_text(joined):
            return
        for key, item in container.items() if isinstance(container, dict) else enumerate(container):
            if type(item) is str:
                check_text(item, self.path((where, key)))

    def path(self, where: _Where) -> str:
        """The path of the value at `where`, shortened for an error message."""
        keys: list[str | int] = []
        while where is not None:
            where, key = where
            keys.append(key)
        steps = (f"[{k}]" if type(k) is int else f".{k}" for k in reversed(keys))
        return _short(self.root + "".join(steps))


def _valid_text(text: str) -> bool:
    """Whether `text` can be written as UTF-8; joined strings never pair up surrogates, so
    checking their join checks each of them."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_odd(value: Any, path: str) -> None:
    """A value whose type is not exactly one of the scalars: subclasses pass as their base."""
    if isinstance(value, str):
        check_text(value, path)
    elif not isinstance(value, bool | int | float):
        raise InvalidFrame(f"{path} holds a {type(value).__name__}, which JSON cannot carry")


def _short(path: str, limit: int = 120) -> str:
    """A path fit for an error message: deep paths keep their start and their end."""
    return path if len(path) <= limit else f"{path[:60]}...{path[-50:]}"
