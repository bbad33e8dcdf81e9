"""Fault injection for reliability tests: errors, latency, watch drops, forced 410 (off by default).

Settable from code (`Faults(...)`, `faults.configure({...})`) and over HTTP
(`POST /devcluster/faults` with the same JSON). A seeded RNG makes error injection
deterministic for a given request sequence.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from devcluster.machinery.errors import ApiError

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
_CODES = {500: ("InternalError", "Internal error occurred: injected fault"),
          429: ("TooManyRequests", "the server has received too many requests and has asked us to try again later"),
          503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
          504: ("Timeout", "the server was unable to return a response in the time allotted")}


class FaultConfigError(ValueError):
    """A fault setting that makes no sense (unknown key, rate out of range...)."""


@dataclass
class ErrorRule:
    """Fail `rate` of the requests matching verb and resource ("*" = any) with `code`."""

    rate: float
    verb: str = "*"
    resource: str = "*"
    code: int = 500
    retry_after: int = 1  # seconds, sent with 429

    def matches(self, verb: str, resource: str) -> bool:
        return self.verb in ("*", verb) and self.resource in ("*", resource)


@dataclass
class Faults:
    errors: list[ErrorRule] = field(default_factory=list)
    latency: float = 0.0  # seconds added before every resource request
    watch_drop_after: float | None = None  # watch streams are cut abruptly after this many seconds
    force_410: int = 0  # the next N watches get ERROR 410 Expired
    seed: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    @property
    def active(self) -> bool:
        return bool(self.errors or self.latency or self.watch_drop_after or self.force_410)

    def error_for(self, verb: str, resource: str) -> ApiError | None:
        """An injected error for this request, or None; draws from the seeded RNG."""
        for rule in self.errors:
            if rule.matches(verb, resource) and self._rng.random() < rule.rate:
                reason, message = _CODES[rule.code]
                details = {"retryAfterSeconds": rule.retry_after} if rule.code == 429 else None
                return ApiError(rule.code, reason, message, details)
        return None

    def take_forced_410(self) -> bool:
        if self.force_410 > 0:
            self.force_410 -= 1
            return True
        return False

    def reset(self) -> None:
        self.errors, self.latency, self.watch_drop_after, self.force_410 = [], 0.0, None, 0

    def configure(self, settings: dict[str, Any]) -> None:
        """Apply settings given as JSON; `{"reset": true}` first clears everything."""
        if not isinstance(settings, dict):
            raise FaultConfigError("fault settings must be a JSON object")
        unknown = set(settings) - {"reset", "errors", "latency", "watch_drop_after", "force_410", "seed"}
        if unknown:
            raise FaultConfigError(f"unknown fault settings: {sorted(unknown)}")
        if settings.get("reset"):
            self.reset()
        if "errors" in settings:
            self.errors = [_rule(r) for r in settings["errors"] or []]
        if "latency" in settings:
            self.latency = _non_negative("latency", settings["latency"])
        if "watch_drop_after" in settings:
            v = settings["watch_drop_after"]
            self.watch_drop_after = None if v is None else _non_negative("watch_drop_after", v)
        if "force_410" in settings:
            self.force_410 = int(_non_negative("force_410", settings["force_410"]))
        if "seed" in settings:
            self.seed = int(settings["seed"])
            self._rng = random.Random(self.seed)

    def snapshot(self) -> dict[str, Any]:
        return {"errors": [asdict(r) for r in self.errors], "latency": self.latency,
                "watch_drop_after": self.watch_drop_after, "force_410": self.force_410, "seed": self.seed}


def _non_negative(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise FaultConfigError(f"{name} must be a non-negative number, got {value!r}")
    return float(value)


def _rule(raw: Any) -> ErrorRule:
    if not isinstance(raw, dict):
        raise FaultConfigError("each error rule must be an object")
    unknown = set(raw) - {"rate", "verb", "resource", "code", "retry_after"}
    if unknown:
        raise FaultConfigError(f"unknown error rule keys: {sorted(unknown)}")
    rate = raw.get("rate")
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        raise FaultConfigError(f"rate must be a number in [0, 1], got {rate!r}")
    verb = raw.get("verb", "*")
    if verb != "*" and verb not in VERBS:
        raise FaultConfigError(f"verb must be one of {VERBS} or '*', got {verb!r}")
    code = raw.get("code", 500)
    if code not in _CODES:
        raise FaultConfigError(f"code must be one of {sorted(_CODES)}, got {code!r}")
    return ErrorRule(rate=float(rate), verb=verb, resource=str(raw.get("resource", "*")), code=code,
                     retry_after=int(raw.get("retry_after", 1)))
