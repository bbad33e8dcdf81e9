"""Rolling-update arithmetic of the Deployment controller (spec §7.4 step 5). Pure.

Inputs are plain numbers so each rule is unit-testable on its own; `deployment.py`
applies the results to ReplicaSets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


class IntOrPercentError(ValueError):
    """A maxSurge/maxUnavailable value that is neither an int nor `N%`."""


def resolve_int_or_percent(value: int | str | None, total: int, *, round_up: bool, default: str) -> int:
    """An int, or a percentage of `total` rounded up or down."""
    if value is None:
        value = default
    if isinstance(value, bool):
        raise IntOrPercentError(f"invalid value {value!r}: must be an integer or percentage")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.endswith("%"):
        try:
            pct = int(value[:-1])
        except ValueError as err:
            raise IntOrPercentError(f"invalid value for IntOrString: invalid value {value!r}") from err
        raw = pct * total / 100
        return math.ceil(raw) if round_up else math.floor(raw)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise IntOrPercentError(f"invalid value for IntOrString: invalid value {value!r}")


def fenceposts(max_surge: int | str | None, max_unavailable: int | str | None, replicas: int) -> tuple[int, int]:
    """(surge, unavailable) for a rollout; never both 0."""
    surge = resolve_int_or_percent(max_surge, replicas, round_up=True, default="25%")
    unavailable = resolve_int_or_percent(max_unavailable, replicas, round_up=False, default="25%")
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def new_rs_replicas(*, replicas: int, surge: int, new_spec: int, total_spec: int) -> int:
    """Target `spec.replicas` of the new RS: grow within `replicas + surge` pods in total."""
    if new_spec > replicas:
        return replicas
    max_total = replicas + surge
    if total_spec >= max_total:
        return new_spec
    return new_spec + max(0, min(max_total - total_spec, replicas - new_spec))


@dataclass(slots=True)
class RSCounts:
    """What the scale-down rule needs to know about one ReplicaSet."""

    name: str
    spec: int
    available: int


def scale_down_old(
    old: list[RSCounts], *, replicas: int, unavailable: int, new: RSCounts
) -> dict[str, int]:
    """New `spec.replicas` for old RSs (oldest first in `old`); only changed ones returned."""
    if sum(rs.spec for rs in old) == 0:
        return {}
    min_available = replicas - unavailable
    total = sum(rs.spec for rs in old) + new.spec
    max_scaled_down = total - min_available - (new.spec - new.available)
    if max_scaled_down <= 0:
        return {}
    target = {rs.name: rs.spec for rs in old}
    # 1. pods that are not available anyway go first
    cleaned = 0
    for rs in old:
        if cleaned >= max_scaled_down:
            break
        unhealthy = max(0, rs.spec - rs.available)
        if rs.spec == 0 or unhealthy == 0:
            continue
        step = min(max_scaled_down - cleaned, unhealthy)
        target[rs.name] -= step
        cleaned += step
    # 2. then available pods, as long as `min_available` still holds
    available = sum(rs.available for rs in old) + new.available
    allowed = available - min_available
    done = 0
    for rs in old:
        if done >= allowed:
            break
        cur = target[rs.name]
        if cur == 0:
            continue
        step = min(cur, allowed - done, rs.available)
        if step <= 0:
            continue
        target[rs.name] = cur - step
        done += step
    return {rs.name: target[rs.name] for rs in old if target[rs.name] != rs.spec}
