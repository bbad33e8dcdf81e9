"""Metrics of the cluster-access layer, registered up front so they show before first use.

One `KubeMetrics` per GM is created on the GM's registry (shared/metrics.py); the client, the
informers, the work queues and the event recorder take it as an optional argument and fall
back to a private registry (tests, tools) when none is given.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

EVENT_OUTCOMES = ("created", "patched", "throttled", "dropped", "failed")  # gm/kube/events.py
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class KubeMetrics:
    """API calls, rate-limit waits, informer relists, queue depth and event drops."""

    def __init__(self, registry: CollectorRegistry | None = None):
        r = registry if registry is not None else CollectorRegistry()
        self.registry = r
        self.api_requests = Counter(
            "sedna_gm_api_requests", "API requests by verb and HTTP code", ("verb", "code"),
            registry=r)
        self.api_latency = Histogram(
            "sedna_gm_api_request_duration_seconds", "API request latency by verb", ("verb",),
            buckets=LATENCY_BUCKETS, registry=r)
        self.api_throttle = Histogram(
            "sedna_gm_api_rate_limiter_wait_seconds",
            "time spent waiting for the client QPS limiter", buckets=LATENCY_BUCKETS, registry=r)
        self.informer_lists = Counter(
            "sedna_gm_informer_lists", "full lists by resource", ("resource",), registry=r)
        self.informer_watches = Counter(
            "sedna_gm_informer_watches", "watch requests by resource", ("resource",), registry=r)
        self.informer_objects = Gauge(
            "sedna_gm_informer_objects", "objects in an informer cache", ("resource",), registry=r)
        self.queue_depth = Gauge(
            "sedna_gm_workqueue_depth", "keys waiting in a work queue", ("name",), registry=r)
        self.queue_adds = Counter(
            "sedna_gm_workqueue_adds", "keys added to a work queue", ("name",), registry=r)
        self.queue_retries = Counter(
            "sedna_gm_workqueue_retries", "rate-limited re-adds to a work queue", ("name",),
            registry=r)
        self.events_sent = Counter(
            "sedna_gm_events", "events written by outcome", ("outcome",), registry=r)
        self.leader = Gauge(
            "sedna_gm_leader", "1 while this process holds the leader lease", registry=r)
        for outcome in EVENT_OUTCOMES:
            self.events_sent.labels(outcome)
