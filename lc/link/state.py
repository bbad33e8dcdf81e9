"""What the GM link exposes about itself: a state /readyz can show and metrics /metrics renders.

The link updates one `LinkInfo` as it dials, runs and loses sessions; everything an
operator needs to tell "GM unreachable" from "GM refuses us" from "connected, but reports
are refused" is here, and the same numbers are exported as Prometheus metrics.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

IDLE = "idle"
CONNECTING = "connecting"
CONNECTED = "connected"
BACKOFF = "backoff"
STOPPED = "stopped"
STATES = (IDLE, CONNECTING, CONNECTED, BACKOFF, STOPPED)
MODES = ("native", "upstream")
OUTCOMES = ("sent", "resent", "acked", "refused", "dropped", "covered")  # LinkInfo's counts
KIND_OUTCOMES = ("acked", "refused", "unsendable")  # per kind: applied, refused, not encodable


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
    # (kind, KIND_OUTCOMES entry) -> reports; kinds are the outbox's (the LC's managers')
    by_kind: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)

    @property
    def connected(self) -> bool:
        return self.state == CONNECTED

    def failed(self, error: str) -> None:
        self.last_error, self.last_error_at = error, time.time()

    def settled(self, kind: str, outcome: str) -> None:
        """One report of `kind` acked, refused or found unsendable (KIND_OUTCOMES)."""
        self.by_kind[(kind, outcome)] += 1

    def as_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.pop("by_kind")
        doc["connected"] = self.connected
        return doc


class LinkMetrics(Collector):
    """The link's metrics on the LC's registry (or a private one): the counts `LinkInfo` keeps,
    read at scrape time, and the downstream frames by op, counted as they arrive."""

    def __init__(self, info: LinkInfo, registry: CollectorRegistry | None = None, *,
                 inflight: Callable[[], int] = lambda: 0) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._info = info
        self._inflight = inflight
        self.downstream = Counter(
            "sedna_lc_link_downstream_frames", "Object frames received from the GM, by op.",
            ["op"], registry=self.registry)
        for op in ("upsert", "delete"):
            self.downstream.labels(op)
        self.registry.register(self)

    def collect(self) -> Iterable[Metric]:
        info = self._info
        yield GaugeMetricFamily("sedna_lc_link_connected", "1 while a session with the GM is up.",
                                value=1 if info.connected else 0)
        mode = GaugeMetricFamily("sedna_lc_link_mode",
                                 "1 for the protocol mode of the current session.", labels=["mode"])
        for m in MODES:
            mode.add_metric([m], 1 if info.mode == m else 0)
        yield mode
        yield CounterMetricFamily("sedna_lc_link_reconnects", "Dial attempts after the first one.",
                                  value=info.reconnects)
        yield CounterMetricFamily("sedna_lc_link_sessions", "Sessions established with the GM.",
                                  value=info.sessions)
        reports = CounterMetricFamily(
            "sedna_lc_link_reports", "Reports by outcome: sent, resent, acked, refused, dropped, "
            "covered (not sent: a newer report of the same object replaces it).", labels=["outcome"])
        for outcome in OUTCOMES:
            reports.add_metric([outcome], getattr(info, outcome))
        yield reports
        yield GaugeMetricFamily("sedna_lc_link_inflight", "Reports sent and not yet acked.",
                                value=self._inflight())
        state = GaugeMetricFamily("sedna_lc_link_state", "1 for the link's state now.", labels=["state"])
        for name in STATES:
            state.add_metric([name], 1 if info.state == name else 0)
        yield state
        kinds = CounterMetricFamily(
            "sedna_lc_link_kind_reports", "Reports the GM settled, by kind and outcome: acked "
            "(applied), refused (moved to the dead letters), unsendable (not encodable within the "
            "protocol's limits, moved to the dead letters).", labels=["kind", "outcome"])
        for (kind, outcome), count in sorted(info.by_kind.items()):
            kinds.add_metric([kind, outcome], count)
        yield kinds
