"""Whether a pod may run on a node: the scheduler's filters, as pure functions.

The scheduler and the DaemonSet controller ask the same question ("does this pod fit this
node?"), so the answer lives here once. Filters run in the real scheduler's order and a
node fails on the first one that rejects it; that one reason is what the
`0/N nodes are available: ...` message counts:

1. NodeUnschedulable: a cordoned node, unless the pod tolerates
   `node.kubernetes.io/unschedulable:NoSchedule`;
2. TaintToleration: every `NoSchedule` / `NoExecute` taint must be tolerated (a node that is
   not Ready carries `node.kubernetes.io/not-ready`, as the node lifecycle controller adds);
3. NodeAffinity: `nodeSelector` labels and the required node affinity terms (ORed terms,
   ANDed expressions; operators In, NotIn, Exists, DoesNotExist, Gt, Lt; `matchFields` on
   `metadata.name`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
FILTERED_EFFECTS = ("NoSchedule", "NoExecute")

AFFINITY_REASON = "node(s) didn't match Pod's node affinity/selector"
UNSCHEDULABLE_REASON = "node(s) were unschedulable"


def _d(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list:
    return value if isinstance(value, list) else []


def node_ready(node: dict[str, Any]) -> bool:
    for c in _l(_d(node.get("status")).get("conditions")):
        if isinstance(c, dict) and c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def node_taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The node's taints, plus the not-ready taint a node that is not Ready carries."""
    taints = [t for t in _l(_d(node.get("spec")).get("taints")) if isinstance(t, dict)]
    if not node_ready(node) and not any(t.get("key") == NOT_READY_TAINT for t in taints):
        taints.append({"key": NOT_READY_TAINT, "effect": "NoSchedule"})
    return taints


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """One toleration against one taint (empty key with Exists tolerates everything)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    op = toleration.get("operator") or "Equal"
    if not key:
        return op == "Exists"
    if key != taint.get("key"):
        return False
    if op == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(pod_spec: dict[str, Any], node: dict[str, Any]) -> dict[str, Any] | None:
    """The first NoSchedule/NoExecute taint of `node` that no toleration of the pod covers."""
    tols = [t for t in _l(pod_spec.get("tolerations")) if isinstance(t, dict)]
    for taint in node_taints(node):
        if taint.get("effect") not in FILTERED_EFFECTS:
            continue
        if not any(tolerates(t, taint) for t in tols):
            return taint
    return None


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def requirement_matches(expr: dict[str, Any], values_of: dict[str, str]) -> bool:
    """A node selector requirement against a label (or field) map."""
    key, op = expr.get("key"), expr.get("operator")
    values = [str(v) for v in _l(expr.get("values"))]
    present = key in values_of
    actual = values_of.get(key)
    if op == "In":
        return present and actual in values
    if op == "NotIn":
        return not present or actual not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        have, want = _int_or_none(actual), _int_or_none(values[0] if len(values) == 1 else None)
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def term_matches(term: dict[str, Any], node: dict[str, Any]) -> bool:
    """A node selector term: all its expressions and fields match (an empty term matches nothing)."""
    exprs = [e for e in _l(term.get("matchExpressions")) if isinstance(e, dict)]
    fields = [e for e in _l(term.get("matchFields")) if isinstance(e, dict)]
    if not exprs and not fields:
        return False
    labels = _d(_d(node.get("metadata")).get("labels"))
    node_fields = {"metadata.name": _d(node.get("metadata")).get("name", "")}
    return (all(requirement_matches(e, labels) for e in exprs)
            and all(requirement_matches(e, node_fields) for e in fields))


def affinity_matches(pod_spec: dict[str, Any], node: dict[str, Any]) -> bool:
    """nodeSelector and requiredDuringSchedulingIgnoredDuringExecution of the pod."""
    labels = _d(_d(node.get("metadata")).get("labels"))
    selector = _d(pod_spec.get("nodeSelector"))
    if not all(labels.get(k) == v for k, v in selector.items()):
        return False
    required = _d(_d(_d(pod_spec.get("affinity")).get("nodeAffinity")).get(
        "requiredDuringSchedulingIgnoredDuringExecution"))
    if not required:
        return True
    terms = [t for t in _l(required.get("nodeSelectorTerms")) if isinstance(t, dict)]
    return any(term_matches(t, node) for t in terms)


def misfit(pod_spec: dict[str, Any], node: dict[str, Any]) -> str | None:
    """Why `node` cannot take the pod (the first failing filter's reason), or None if it fits."""
    cordon = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    tols = [t for t in _l(pod_spec.get("tolerations")) if isinstance(t, dict)]
    if _d(node.get("spec")).get("unschedulable") and not any(tolerates(t, cordon) for t in tols):
        return UNSCHEDULABLE_REASON
    taint = untolerated_taint(pod_spec, node)
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value') or ''}}}"
    if not affinity_matches(pod_spec, node):
        return AFFINITY_REASON
    return None


def unschedulable_message(total: int, reasons: Counter) -> str:
    """The real scheduler's FailedScheduling message, reasons counted and sorted."""
    if not total:
        return "no nodes available to schedule pods"
    parts = sorted(f"{n} {reason}" for reason, n in reasons.items())
    return (f"0/{total} nodes are available: {', '.join(parts)}. "
            f"preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling.")
