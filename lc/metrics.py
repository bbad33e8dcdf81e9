"""The LC's Prometheus metrics, registered up front so they show before the first event.

What the request path counts (reports accepted, refused, their latency, commits) is updated
where it happens. What the store, the body budget and the dataset monitors already count
(outbox, dead letters, dropped records, bytes held, index scans) is read from them at scrape
time by `StateCollector`, so there is one count of each thing, not a copy that has to be kept
in step. The few the store answers from its database (outbox bytes and oldest entry, dead
letters by kind) are read by `refresh` before each page.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lc.budget import BodyBudget
from lc.managers.dataset import DatasetManager
from lc.store.bounds import DROPPED
from lc.store.deadletters import DEAD_LETTER_REASONS
from lc.store.facade import Store
from shared import apis
from shared.metrics import SECONDS_BUCKETS, service_registry

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
ROUTES = ("forwarded", "ignored", "unrouted")
SCAN_RESULTS = ("counted", "failed")
BUSY_REASONS = ("body_budget", "outbox_full")
"""Refusals of a report that was fine (503 + Retry-After): shown from the start, at 0."""


class LCMetrics:
    """Every metric the LC exports, on one registry (one per LocalController)."""

    def __init__(self) -> None:
        self.registry = r = service_registry("lc")
        self.reports_accepted = Counter(
            "sedna_lc_reports_accepted", "Worker reports answered 200, by route.", ["route"],
            registry=r)
        self.kind_reports = Counter(
            "sedna_lc_kind_reports", "Worker reports answered 200 (accepted) or refused at the door, by "
            "the kind of their job (unknown: not held by this node yet, or not decoded).",
            ["kind", "outcome"], registry=r)
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

    def watch_datasets(self, datasets: DatasetManager) -> None:
        """Read the dataset monitors' scans from this manager."""
        self.state.datasets = datasets

    async def refresh(self, store: Store) -> None:
        """Read what the store answers from its database, for the page about to be rendered."""
        self.outbox_bytes.set(await store.outbox_bytes())
        self.state.oldest = await store.outbox_oldest()
        self.state.dead_kinds = await store.dead_letter_kinds()

    def observe_batch(self, size: int, seconds: float) -> None:
        """Group-commit observer: one call per committed transaction."""
        self.batch_size.observe(size)
        self.commit_seconds.observe(seconds)


def _by_label(family: GaugeMetricFamily | CounterMetricFamily, known: Iterable[str],
              counts: Mapping[str, int]) -> None:
    """A sample per label: each known one (0 until counted) first, then any other counted."""
    for label in dict.fromkeys((*known, *counts)):
        family.add_metric([label], counts.get(label, 0))


class StateCollector(Collector):
    """The store's and the body budget's own counts, as they are at scrape time (zeros
    before the LC serves)."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.store: Store | None = None
        self.budget: BodyBudget | None = None
        self.datasets: DatasetManager | None = None
        self.oldest: float | None = None  # the outbox's oldest entry's commit time, at refresh
        self.dead_kinds: dict[str, int] = {}  # dead letters by kind, at refresh
        self.clock = clock

    def collect(self) -> Iterable[Metric]:
        store, budget = self.store, self.budget
        outbox = GaugeMetricFamily(
            "sedna_lc_outbox_size", "Reports committed and not yet acked by the GM.",
            value=store.outbox_size if store is not None else 0)
        dead = GaugeMetricFamily(
            "sedna_lc_dead_letters", "Reports the GM can never apply, held in the dead-letter "
            "table, by reason (refused, unsendable, protocol).", labels=["reason"])
        _by_label(dead, DEAD_LETTER_REASONS, store.dead_letter_counts if store is not None else {})
        dropped = CounterMetricFamily(
            "sedna_lc_store_dropped", "Stored records dropped, oldest first, to keep a table "
            "within its cap: unknown_owner (reports of owners this node does not hold), worker "
            "(all worker records), dead_letter (bytes or count), outbox_covered (reports for "
            "the GM superseded by a newer one of the same object and worker).", labels=["record"])
        _by_label(dropped, DROPPED, store.dropped if store is not None else {})
        held = GaugeMetricFamily(
            "sedna_lc_body_budget_bytes", "Bytes of request bodies held by requests being read "
            "or processed (held), and asked for by requests waiting for room (waiting); "
            "LC_BODY_BUDGET_BYTES bounds each.", labels=["state"])
        held.add_metric(["held"], budget.used if budget is not None else 0)
        held.add_metric(["waiting"], budget.waiting if budget is not None else 0)
        yield from (outbox, dead, dropped, held)
        yield from self._outbox_and_datasets()

    def _outbox_and_datasets(self) -> Iterable[Metric]:
        age = 0.0 if self.oldest is None else max(0.0, self.clock() - self.oldest)
        yield GaugeMetricFamily("sedna_lc_outbox_oldest_age_seconds", "Seconds the oldest report "
                                "in the outbox has waited for the GM's ack (0 when it is empty).",
                                value=age)
        kinds = GaugeMetricFamily("sedna_lc_dead_letters_by_kind", "Dead letters held, by the kind "
                                  "of their object.", labels=["kind"])
        held: dict[str, int] = {}  # the table's kinds are the LC's own, "other" guards the page
        for kind, count in self.dead_kinds.items():
            label = kind if apis.by_kind(kind) is not None else "other"
            held[label] = held.get(label, 0) + count
        for kind, count in sorted(held.items()):
            kinds.add_metric([kind], count)
        yield kinds
        datasets = self.datasets
        stats = datasets.stats if datasets is not None else None
        scans = CounterMetricFamily("sedna_lc_dataset_scans", "Dataset index scans by result: "
                                    "counted, failed (missing, unreadable, refused).", labels=["result"])
        for result in SCAN_RESULTS:
            scans.add_metric([result], getattr(stats, result) if stats is not None else 0)
        yield scans
        yield GaugeMetricFamily("sedna_lc_datasets_monitored", "Datasets whose index this LC counts.",
                                value=datasets.monitored if datasets is not None else 0)
