"""Spelling of Sedna kinds on the wire.

Inside the project a kind is always its CamelCase Kubernetes name (`Dataset`,
`IncrementalLearningJob`). Upstream's envelope lower-cases kinds going down to the LC and
accepts any case coming up (its LC sends both `Dataset` and `jointinferenceservice`).

Going down is a rule (lower case) and lives here. Coming up needs the list of kinds, and
that list has one home: the registry in shared/apis.py. proto and shared both sit below
the services and import nothing from each other, so the codec holds no copy; whoever
decodes upstream frames passes `canonical_kind=shared.apis.canonical_kind` (the GM hub and
the LC link do). Without it a kind stays as sent, and names outside the registry always do:
refusing them is the receiver's decision, not the codec's.
"""

from __future__ import annotations

from collections.abc import Callable

Canonicalize = Callable[[str], str]
"""Maps a kind in its wire spelling to its CamelCase name (unknown names unchanged)."""


def as_sent(kind: str) -> str:
    """The identity spelling: the kind exactly as the frame carried it."""
    return kind


def upstream_kind(kind: str) -> str:
    """The spelling upstream LCs route on: the kind in lower case."""
    return kind.lower()
