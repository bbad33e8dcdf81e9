"""Reading a /metrics page in tests with prometheus_client's parser: a page that does not
parse fails the test that reads it."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def families(text: str) -> dict[str, str]:
    """Every family on the page: name (as in `# TYPE`) -> type."""
    out = {}
    for family in text_string_to_metric_families(text):
        name = family.name + ("_total" if family.type == "counter" else "")
        out[name] = family.type
    return out


def samples(text: str) -> list[Sample]:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def value(text: str, name: str, /, **labels: str) -> float | None:
    """The value of the sample `name` with exactly these labels; None when there is none."""
    found = [s.value for s in samples(text) if s.name == name and s.labels == labels]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def labelled(text: str, name: str, label: str) -> dict[str, float]:
    """`name`'s samples by the value of `label`."""
    return {s.labels[label]: s.value for s in samples(text) if s.name == name and label in s.labels}
