"""The LC's Prometheus metrics, registered up front so they show before the first event."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from lc.budget import BodyBudget
from lc.store.bounds import DROPPED
from lc.store.deadletters import DEAD_LETTER_REASONS
from shared.metrics import Counter, Gauge, Histogram, Registry

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
ROUTES = ("forwarded", "ignored", "unrouted")
BUSY_REASONS = ("body_budget", "outbox_full")
"""Refusals of a report that was fine (503 + Retry-After): shown from the start, at 0."""


class LCMetrics:
    """Every metric the LC exports, on one registry (one per LocalController)."""

    def __init__(self, *, outbox_size: Callable[[], float]) -> None:
        self.registry = Registry()
        r = self.registry
        self.reports_accepted: Counter = r.counter(
            "sedna_lc_reports_accepted_total", "Worker reports answered 200, by route.", ["route"])
        self.reports_rejected: Counter = r.counter(
            "sedna_lc_reports_rejected_total", "Worker reports refused, by reason.", ["reason"])
        self.report_seconds: Histogram = r.histogram(
            "sedna_lc_report_seconds", "Time from request to reply for accepted reports.")
        self.reports_in_flight: Gauge = r.gauge(
            "sedna_lc_reports_in_flight", "Worker reports being read, checked or stored.")
        self.body_budget: Gauge = r.gauge(
            "sedna_lc_body_budget_bytes", "Bytes of request bodies held by requests being read "
            "or processed (held), and asked for by requests waiting for room (waiting); "
            "LC_BODY_BUDGET_BYTES bounds each.", ["state"])
        self.clients_gone: Counter = r.counter(
            "sedna_lc_clients_gone_total", "Requests whose client closed the connection before "
            "its body was read.")
        self.store_dropped: Counter = r.counter(
            "sedna_lc_store_dropped_total", "Stored records dropped, oldest first, to keep a "
            "table within its cap: unknown_owner (reports of owners this node does not hold), "
            "worker (all worker records), dead_letter (bytes or count), outbox_covered "
            "(reports for the GM superseded by a newer one of the same object and worker).",
            ["record"])
        self.commit_seconds: Histogram = r.histogram(
            "sedna_lc_store_commit_seconds", "Duration of one group-commit transaction.")
        self.batch_size: Histogram = r.histogram(
            "sedna_lc_store_commit_batch_size", "Writes per group-commit transaction.",
            buckets=BATCH_BUCKETS)
        self.outbox_size: Gauge = r.gauge(
            "sedna_lc_outbox_size", "Reports committed and not yet acked by the GM.",
            fn=outbox_size)
        self.outbox_bytes: Gauge = r.gauge(
            "sedna_lc_outbox_bytes", "Bytes of the reports in the outbox (LC_OUTBOX_BYTES "
            "bounds them).")
        self.dead_letters: Gauge = r.gauge(
            "sedna_lc_dead_letters", "Reports the GM can never apply, held in the dead-letter "
            "table, by reason (refused, unsendable, protocol).", ["reason"])
        for route in ROUTES:
            self.reports_accepted.inc(route, amount=0)
        for reason in BUSY_REASONS:
            self.reports_rejected.inc(reason, amount=0)
        for record in DROPPED:
            self.store_dropped.inc(record, amount=0)
        self.set_dead_letters({})
        self.set_body_budget(None)

    def set_dead_letters(self, counts: Mapping[str, int]) -> None:
        """Refresh the dead-letter gauge from the store's counts (at scrape time)."""
        for reason in (*DEAD_LETTER_REASONS, *counts):
            self.dead_letters.set(counts.get(reason, 0), reason)

    def set_dropped(self, dropped: Mapping[str, int]) -> None:
        """Bring the dropped-records counter up to the store's counts (at scrape time; the
        store counts since it opened, as this registry does)."""
        for record, count in dropped.items():
            behind = count - self.store_dropped.value(record)
            if behind > 0:
                self.store_dropped.inc(record, amount=behind)

    def set_body_budget(self, budget: BodyBudget | None) -> None:
        """Refresh the body budget gauge (at scrape time)."""
        self.body_budget.set(budget.used if budget else 0, "held")
        self.body_budget.set(budget.waiting if budget else 0, "waiting")

    def observe_batch(self, size: int, seconds: float) -> None:
        """Group-commit observer: one call per committed transaction."""
        self.batch_size.observe(size)
        self.commit_seconds.observe(seconds)
