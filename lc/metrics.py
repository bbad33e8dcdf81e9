"""The LC's Prometheus metrics, registered up front so they show before the first event.

What the request path counts (reports accepted, refused, their latency, commits) is updated
where it happens. What the store and the body budget already count (outbox, dead letters,
dropped records, bytes held) is read from them at scrape time by `StateCollector`, so
there is one count of each thing, not a copy that has to be kept in step.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lc.budget import BodyBudget
from lc.store.bounds import DROPPED
from lc.store.deadletters import DEAD_LETTER_REASONS
from lc.store.facade import Store
from shared.metrics import SECONDS_BUCKETS, service_registry

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
ROUTES = ("forwarded", "ignored", "unrouted")
BUSY_REASONS = ("body_budget", "outbox_full")
"""Refusals of a report that was fine (503 + Retry-After): shown from the start, at 0."""


class LCMetrics:
    """Every metric the LC exports, on one registry (one per LocalController)."""

    def __init__(self) -> None:
        self.registry = r = service_registry("lc")
        self.reports_accepted = Counter(
            "sedna_lc_reports_accepted", "Worker reports answered 200, by route.", ["route"],
            registry=r)
        self.reports_rejected = Counter(
            "sedna_lc_reports_rejected", "Worker reports refused, by reason.", ["reason"],
            registry=r)
        self.report_seconds = Histogram(
            "sedna_lc_report_seconds", "Time from request to reply for accepted reports.",
            buckets=SECONDS_BUCKETS, registry=r)
        self.reports_in_flight = Gauge(
            "sedna_lc_reports_in_flight", "Worker reports being read, checked or stored.",
            registry=r)
        self.clients_gone = Counter(
            "sedna_lc_clients_gone", "Requests whose client closed the connection before its "
            "body was read.", registry=r)
        self.commit_seconds = Histogram(
            "sedna_lc_store_commit_seconds", "Duration of one group-commit transaction.",
            buckets=SECONDS_BUCKETS, registry=r)
        self.batch_size = Histogram(
            "sedna_lc_store_commit_batch_size", "Writes per group-commit transaction.",
            buckets=BATCH_BUCKETS, registry=r)
        self.outbox_bytes = Gauge(
            "sedna_lc_outbox_bytes", "Bytes of the reports in the outbox (LC_OUTBOX_BYTES "
            "bounds them); read from the store at scrape time.", registry=r)
        self.state = StateCollector()
        r.register(self.state)
        for route in ROUTES:
            self.reports_accepted.labels(route)
        for reason in BUSY_REASONS:
            self.reports_rejected.labels(reason)

    def watch(self, *, store: Store, budget: BodyBudget) -> None:
        """Read the outbox, dead letters, dropped records and body budget from these."""
        self.state.store, self.state.budget = store, budget

    def observe_batch(self, size: int, seconds: float) -> None:
        """Group-commit observer: one call per committed transaction."""
        self.batch_size.observe(size)
        self.commit_seconds.observe(seconds)


class StateCollector(Collector):
    """The store's and the body budget's own counts, as they are at scrape time (zeros
    before the LC serves)."""

    def __init__(self) -> None:
        self.store: Store | None = None
        self.budget: BodyBudget | None = None

    def collect(self) -> Iterable[Metric]:
        store, budget = self.store, self.budget
        outbox = GaugeMetricFamily(
            "sedna_lc_outbox_size", "Reports committed and not yet acked by the GM.",
            value=store.outbox_size if store is not None else 0)
        dead = GaugeMetricFamily(
            "sedna_lc_dead_letters", "Reports the GM can never apply, held in the dead-letter "
            "table, by reason (refused, unsendable, protocol).", labels=["reason"])
        counts = store.dead_letter_counts if store is not None else {}
        for reason in dict.fromkeys((*DEAD_LETTER_REASONS, *counts)):
            dead.add_metric([reason], counts.get(reason, 0))
        dropped = CounterMetricFamily(
            "sedna_lc_store_dropped", "Stored records dropped, oldest first, to keep a table "
            "within its cap: unknown_owner (reports of owners this node does not hold), worker "
            "(all worker records), dead_letter (bytes or count), outbox_covered (reports for "
            "the GM superseded by a newer one of the same object and worker).", labels=["record"])
        done = store.dropped if store is not None else {}
        for record in dict.fromkeys((*DROPPED, *done)):
            dropped.add_metric([record], done.get(record, 0))
        held = GaugeMetricFamily(
            "sedna_lc_body_budget_bytes", "Bytes of request bodies held by requests being read "
            "or processed (held), and asked for by requests waiting for room (waiting); "
            "LC_BODY_BUDGET_BYTES bounds each.", labels=["state"])
        held.add_metric(["held"], budget.used if budget is not None else 0)
        held.add_metric(["waiting"], budget.waiting if budget is not None else 0)
        yield from (outbox, dead, dropped, held)
