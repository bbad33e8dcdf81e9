"""What the GM link exposes about itself: a state /readyz can show and metrics /metrics renders.

The link updates one `LinkInfo` as it dials, runs and loses sessions; everything an
operator needs to tell "GM unreachable" from "GM refuses us" from "connected, but reports
are refused" is here, and the same numbers are exported as Prometheus metrics.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from shared.metrics import Counter, Gauge, Registry

IDLE = "idle"
CONNECTING = "connecting"
CONNECTED = "connected"
BACKOFF = "backoff"
STOPPED = "stopped"
STATES = (IDLE, CONNECTING, CONNECTED, BACKOFF, STOPPED)
MODES = ("native", "upstream")


@dataclass(slots=True)
class LinkInfo:
    """The link's current condition and its counters since start."""

    state: str = IDLE
    mode: str = ""  # "native" or "upstream" while connected, "" otherwise
    sessions: int = 0  # sessions established (hello answered, or upstream connected)
    reconnects: int = 0  # dial attempts after the first one
    failures: int = 0  # consecutive failed dials or short sessions (drives the backoff)
    last_error: str = ""
    last_error_at: float = 0.0
    sent: int = 0  # status frames written (resends included)
    resent: int = 0  # of which resends after an ack timeout
    acked: int = 0  # reports the GM applied
    refused: int = 0  # reports the GM refused for good (dropped)
    dropped: int = 0  # reports this side could not encode (dropped)
    covered: int = 0  # reports not sent: a newer one of the same object covers them (lc/fold.py)
    downstream: int = 0  # object frames received
    highest_acked: int = 0  # highest seq the GM acked (sent in the next hello)

    @property
    def connected(self) -> bool:
        return self.state == CONNECTED

    def failed(self, error: str) -> None:
        self.last_error, self.last_error_at = error, time.time()

    def as_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["connected"] = self.connected
        return doc


class LinkMetrics:
    """The link's metrics, registered up front on the LC's registry (or a private one)."""

    def __init__(self, info: LinkInfo, registry: Registry | None = None) -> None:
        self.registry = registry if registry is not None else Registry()
        r = self.registry
        self.connected: Gauge = r.gauge(
            "sedna_lc_link_connected", "1 while a session with the GM is up.",
            fn=lambda: 1.0 if info.connected else 0.0)
        self.mode: Gauge = r.gauge(
            "sedna_lc_link_mode", "1 for the protocol mode of the current session.", ["mode"])
        self.reconnects: Counter = r.counter(
            "sedna_lc_link_reconnects_total", "Dial attempts after the first one.")
        self.sessions: Counter = r.counter(
            "sedna_lc_link_sessions_total", "Sessions established with the GM.")
        self.reports: Counter = r.counter(
            "sedna_lc_link_reports_total",
            "Reports by outcome: sent, resent, acked, refused, dropped, covered (not sent: "
            "a newer report of the same object replaces it).", ["outcome"])
        self.downstream: Counter = r.counter(
            "sedna_lc_link_downstream_frames_total", "Object frames received from the GM, by op.",
            ["op"])
        self.inflight: Gauge = r.gauge(
            "sedna_lc_link_inflight", "Reports sent and not yet acked.")
        for mode in MODES:
            self.mode.set(0, mode)
        for outcome in ("sent", "resent", "acked", "refused", "dropped", "covered"):
            self.reports.inc(outcome, amount=0)
        for op in ("upsert", "delete"):
            self.downstream.inc(op, amount=0)

    def set_mode(self, mode: str) -> None:
        for m in MODES:
            self.mode.set(1 if m == mode else 0, m)
