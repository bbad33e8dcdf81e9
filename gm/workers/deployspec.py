"""A DeploymentSpec a CR embeds (FeatureExtractionService's `spec`, ObjectSearchService's
and ObjectTrackingService's `spec.reidWorkers`) checked once, the same way for every kind:
the replicas, the rollout knobs and the user's selector.

Upstream copies only `replicas` and `template` and dereferences a nil `replicas` (a GM
crash); here `replicas` defaults to 1 (explicitly, so omitting it and writing 1 build the
same child) and the rest of the DeploymentSpec the user wrote is honoured. The user's
selector is kept, with the generated worker labels added to it; it must select the worker
template, since the API server refuses a Deployment whose selector does not match its
template and the user should learn that from the CR's condition, not from a create that
fails on every reconcile. For the same reason an edit of the selector once the Deployment
exists is refused (`SelectorImmutable`, `check_selector_kept`): a Deployment's selector
cannot change, so the edit is a condition for the user to undo, and the running Deployment
is left as it is. Every check names the field, so the condition says what to fix.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gm.workers.specerrors import InvalidSpec

REASON = "InvalidDeploymentSpec"
SELECTOR_REASON = "InvalidSelector"
IMMUTABLE_REASON = "SelectorImmutable"
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_STRATEGIES = ("Recreate", "RollingUpdate")
# DeploymentSpec integers and the least value each may take
_COUNTS = (("minReadySeconds", 0), ("revisionHistoryLimit", 0), ("progressDeadlineSeconds", 1))


@dataclass(frozen=True, slots=True)
class InlineDeployment:
    """The checked parts of an embedded DeploymentSpec (`where` is its path in the CR)."""

    where: str
    replicas: int = 1
    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[Mapping[str, Any], ...] = ()
    knobs: Mapping[str, Any] = field(default_factory=dict)

    def applied(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """A Deployment `spec` (generated selector + template) with these fields honoured.

        Raises InvalidSpec when the user's selector does not select the template labels."""
        labels = spec["template"]["metadata"].get("labels") or {}
        why = self.mismatch(labels)
        if why is not None:
            raise InvalidSpec(SELECTOR_REASON, f"{self.where}.selector does not select the "
                              f"labels of {self.where}.template: {why}")
        selector: dict[str, Any] = {"matchLabels": {**self.match_labels,
                                                    **spec["selector"]["matchLabels"]}}
        if self.match_expressions:
            selector["matchExpressions"] = copy.deepcopy(list(self.match_expressions))
        return {**copy.deepcopy(dict(self.knobs)), **spec, "replicas": self.replicas,
                "selector": selector}

    def mismatch(self, labels: Mapping[str, str]) -> str | None:
        """Why the user's selector does not select `labels` (None when it does)."""
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return f"matchLabels {key}={value}, template has {_shown(labels, key)}"
        for expr in self.match_expressions:
            if not _holds(expr, labels):
                return f"matchExpressions {_expression(expr)}, template has {_shown(labels, expr['key'])}"
        return None


def inline_deployment(spec: Mapping[str, Any], *, where: str = "spec") -> InlineDeployment:
    """Check the DeploymentSpec fields of `spec` (the CR's spec or a part of it)."""
    labels, expressions = _selector(spec.get("selector"), where=f"{where}.selector")
    return InlineDeployment(where=where, replicas=_replicas(spec.get("replicas"), where=where),
                            match_labels=labels, match_expressions=expressions,
                            knobs=_knobs(spec, where=where))


def check_selector_kept(desired: Mapping[str, Any], observed: Iterable[Mapping[str, Any]], *,
                        where: str) -> None:
    """Refuse (`SelectorImmutable`) a `desired` Deployment whose selector differs from the
    one of the live Deployment of that name in `observed` (the CR's Deployments now; one
    being deleted is no obstacle, its successor is created afresh). `where` is the path of
    the embedded DeploymentSpec in the CR, for the message."""
    name = desired["metadata"]["name"]
    for current in observed:
        meta = current.get("metadata") or {}
        if meta.get("name") != name or meta.get("deletionTimestamp"):
            continue
        if (current.get("spec") or {}).get("selector") != desired["spec"]["selector"]:
            raise InvalidSpec(IMMUTABLE_REASON, f"{where}.selector changed, but the selector of "
                              f"Deployment {name} cannot change; restore it, or delete and "
                              f"recreate the {_owner_kind(desired)}")


def _owner_kind(desired: Mapping[str, Any]) -> str:
    refs = desired["metadata"].get("ownerReferences") or [{}]
    return refs[0].get("kind") or "service"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _replicas(value: Any, *, where: str) -> int:
    if value is None:
        return 1
    if not _is_int(value) or value < 0:
        raise InvalidSpec(REASON, f"{where}.replicas must be an integer >= 0, not {value!r}")
    return value


def _knobs(spec: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    knobs: dict[str, Any] = {}
    for name, least in _COUNTS:
        value = spec.get(name)
        if value is None:
            continue
        if not _is_int(value) or value < least:
            raise InvalidSpec(REASON, f"{where}.{name} must be an integer >= {least}, not {value!r}")
        knobs[name] = value
    if "progressDeadlineSeconds" in knobs and knobs["progressDeadlineSeconds"] <= knobs.get("minReadySeconds", 0):
        raise InvalidSpec(REASON, f"{where}.progressDeadlineSeconds must be greater than "
                          f"{where}.minReadySeconds")
    paused = spec.get("paused")
    if paused is not None:
        if not isinstance(paused, bool):
            raise InvalidSpec(REASON, f"{where}.paused must be true or false, not {paused!r}")
        knobs["paused"] = paused
    if spec.get("strategy") is not None:
        knobs["strategy"] = _strategy(spec["strategy"], where=f"{where}.strategy")
    return knobs


def _strategy(strategy: Any, *, where: str) -> dict[str, Any]:
    if not isinstance(strategy, Mapping):
        raise InvalidSpec(REASON, f"{where} must be an object")
    kind = strategy.get("type")
    if kind is not None and kind not in _STRATEGIES:
        raise InvalidSpec(REASON, f"{where}.type must be Recreate or RollingUpdate, not {kind!r}")
    rolling = strategy.get("rollingUpdate")
    if rolling is not None and (kind == "Recreate" or not isinstance(rolling, Mapping)):
        raise InvalidSpec(REASON, f"{where}.rollingUpdate must be an object, and only with "
                          "type RollingUpdate")
    return copy.deepcopy(dict(strategy))


def _selector(selector: Any, *, where: str) -> tuple[dict[str, str], tuple[dict[str, Any], ...]]:
    if selector is None:
        return {}, ()
    if not isinstance(selector, Mapping):
        raise InvalidSpec(SELECTOR_REASON, f"{where} must be an object")
    labels = selector.get("matchLabels") or {}
    if not isinstance(labels, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise InvalidSpec(SELECTOR_REASON, f"{where}.matchLabels must map names to string values")
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise InvalidSpec(SELECTOR_REASON, f"{where}.matchExpressions must be a list")
    checked = tuple(_requirement(e, where=f"{where}.matchExpressions[{i}]")
                    for i, e in enumerate(expressions))
    return dict(labels), checked


def _requirement(expr: Any, *, where: str) -> dict[str, Any]:
    if not isinstance(expr, Mapping) or not isinstance(expr.get("key"), str) or not expr["key"]:
        raise InvalidSpec(SELECTOR_REASON, f"{where} needs a key")
    op, values = expr.get("operator"), expr.get("values")
    if op not in _OPERATORS:
        raise InvalidSpec(SELECTOR_REASON, f"{where}.operator must be one of "
                          f"{', '.join(_OPERATORS)}, not {op!r}")
    if values is not None and not (isinstance(values, list) and all(isinstance(v, str) for v in values)):
        raise InvalidSpec(SELECTOR_REASON, f"{where}.values must be a list of strings")
    if op in ("In", "NotIn") and not values:
        raise InvalidSpec(SELECTOR_REASON, f"{where}.values must not be empty with operator {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise InvalidSpec(SELECTOR_REASON, f"{where}.values must be empty with operator {op}")
    out: dict[str, Any] = {"key": expr["key"], "operator": op}
    if values:
        out["values"] = list(values)
    return out


def _holds(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op = expr["key"], expr["operator"]
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    inside = key in labels and labels[key] in expr["values"]
    return inside if op == "In" else not inside


def _expression(expr: Mapping[str, Any]) -> str:
    values = f" ({', '.join(expr['values'])})" if expr.get("values") else ""
    return f"{expr['key']} {expr['operator']}{values}"


def _shown(labels: Mapping[str, str], key: str) -> str:
    return f"{key}={labels[key]}" if key in labels else f"no label {key}"
