"""Metrics of the cluster-access layer, registered up front so they show before first use.

One `KubeMetrics` per process is created on the service's `Registry`; the client, the
informers, the work queues and the event recorder take it as an optional argument and
fall back to a private registry (tests, tools) when none is given.
"""

from __future__ import annotations

from shared.metrics import Registry

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class KubeMetrics:
    """API calls, rate-limit waits, informer relists, queue depth and event drops."""

    def __init__(self, registry: Registry | None = None):
        r = registry if registry is not None else Registry()
        self.registry = r
        self.api_requests = r.counter(
            "gm_api_requests_total", "API requests by verb and HTTP code", ("verb", "code"))
        self.api_latency = r.histogram(
            "gm_api_request_duration_seconds", "API request latency by verb", ("verb",),
            buckets=LATENCY_BUCKETS)
        self.api_throttle = r.histogram(
            "gm_api_rate_limiter_wait_seconds", "time spent waiting for the client QPS limiter",
            buckets=LATENCY_BUCKETS)
        self.informer_lists = r.counter(
            "gm_informer_lists_total", "full lists by resource", ("resource",))
        self.informer_watches = r.counter(
            "gm_informer_watches_total", "watch requests by resource", ("resource",))
        self.informer_objects = r.gauge(
            "gm_informer_objects", "objects in an informer cache", ("resource",))
        self.queue_depth = r.gauge("gm_workqueue_depth", "keys waiting in a work queue", ("name",))
        self.queue_adds = r.counter("gm_workqueue_adds_total", "keys added to a work queue", ("name",))
        self.queue_retries = r.counter(
            "gm_workqueue_retries_total", "rate-limited re-adds to a work queue", ("name",))
        self.events_sent = r.counter(
            "gm_events_total", "events written by outcome", ("outcome",))
        self.leader = r.gauge("gm_leader", "1 while this process holds the leader lease")
