"""The edge side's metrics, read at scrape time from the hub, the edge objects and the status
pipeline: their stats objects are the one count of each thing, and a session's liveness is
where the hub keeps it (gm/edge/session.py), so nothing is updated per frame for /metrics.

Per-node series carry a `node` label. A connected node has all of them; a node whose session
ended keeps `connected 0` and its last frame time for the hub's `departed_retention`, or
until the node is forgotten, so the series stay bounded by the nodes that exist.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gm.edge.hub import Hub
from gm.edge.objects import EdgeObjects
from gm.edge.pipeline import APPLY_BUCKETS, PipelineStats, StatusPipeline

# label value -> the stats attribute that counts it
SESSIONS = {"opened": "sessions_opened", "replaced": "sessions_replaced", "dead": "sessions_dead",
            "broken": "sessions_broken", "rejected": "handshakes_rejected",
            "abandoned": "handshakes_abandoned", "over_capacity": "handshakes_over_capacity",
            "busy": "handshakes_busy"}
REPORTS = {"applied": "status_applied", "refused": "refused", "deferred": "deferred",
           "error": "handler_errors", "placement_wait": "placement_waits"}
FRAMES = {"in": "frames_in", "out": "frames_out", "ping": "pings_out", "ack": "acks_out",
          "skipped": "skipped_out"}
PIPELINE = {"writes": "writes", "unchanged": "unchanged", "retries": "retries", "refused": "refused",
            "stale": "stale", "coalesced": "coalesced"}
CHANGES = {"upsert": "published", "delete": "deletes"}
CREDENTIALS = {"ok": "credential_reads", "unreadable": "credential_failures"}


class EdgeCollector(Collector):
    """The hub's, edge sync's and status pipeline's metrics; zeros until `watch` is called."""

    def __init__(self) -> None:
        self.hub: Hub | None = None
        self.edge: EdgeObjects | None = None
        self.pipeline: StatusPipeline | None = None

    def watch(self, *, hub: Hub, edge: EdgeObjects, pipeline: StatusPipeline) -> None:
        self.hub, self.edge, self.pipeline = hub, edge, pipeline

    def collect(self) -> Iterable[Metric]:
        hub, edge, pipeline = self.hub, self.edge, self.pipeline
        hub_stats = hub.stats if hub is not None else None
        yield _counts("sedna_gm_hub_sessions", "LC sessions by how they began or ended", "event",
                      SESSIONS, hub_stats)
        yield _counts("sedna_gm_hub_status_reports", "LC status reports by outcome", "result",
                      REPORTS, hub_stats)
        yield _counts("sedna_gm_hub_frames", "websocket frames by kind", "kind", FRAMES, hub_stats)
        yield GaugeMetricFamily("sedna_gm_hub_sessions_active", "LC sessions open now",
                                value=hub.sessions_active if hub is not None else 0)
        yield GaugeMetricFamily("sedna_gm_hub_session_capacity",
                                "LC sessions this process admits (its file-descriptor budget)",
                                value=(hub.max_sessions or 0) if hub is not None else 0)
        yield GaugeMetricFamily("sedna_gm_edge_objects", "objects some edge node needs",
                                value=len(edge) if edge is not None else 0)
        edge_stats = edge.stats if edge is not None else None
        yield _counts("sedna_gm_edge_changes", "changes handed to the hub", "op", CHANGES, edge_stats)
        yield _counts("sedna_gm_edge_credential_reads",
                      "credential annotations for downstream objects by outcome", "result",
                      CREDENTIALS, edge_stats)
        yield _counts("sedna_gm_status_pipeline", "edge status pipeline: committed writes, unchanged "
                      "batches, retried writes, refused, stale and coalesced reports", "event",
                      PIPELINE, pipeline.stats if pipeline is not None else None)
        yield GaugeMetricFamily("sedna_gm_status_pipeline_queued",
                                "reports waiting for their status write",
                                value=pipeline.queued() if pipeline is not None else 0)
        yield apply_histogram(pipeline.stats if pipeline is not None else None)
        yield from node_series(hub)


def apply_histogram(stats: PipelineStats | None) -> Metric:
    """Seconds from a report reaching the status pipeline to the commit of the write that
    settled it: the GM's own share of a report's way to the status."""
    counts = stats.apply_counts if stats is not None else [0] * (len(APPLY_BUCKETS) + 1)
    cumulative = list(itertools.accumulate(counts))
    buckets = [(f"{bound:g}", n) for bound, n in zip(APPLY_BUCKETS, cumulative, strict=False)]
    buckets.append(("+Inf", cumulative[-1]))
    return HistogramMetricFamily("sedna_gm_status_pipeline_apply_seconds",
                                 "seconds from a report reaching the status pipeline to the commit "
                                 "of the write that applied it", buckets=buckets,
                                 sum_value=stats.apply_sum if stats is not None else 0.0)


def node_series(hub: Hub | None) -> Iterable[Metric]:
    """The per-node families: connected nodes' sessions, then the recently departed."""
    connected = GaugeMetricFamily("sedna_gm_hub_node_connected",
                                  "1 while the node has a session; 0 for a while after it ended",
                                  labels=["node"])
    since = GaugeMetricFamily("sedna_gm_hub_node_session_start_time_seconds",
                              "unix time the node's session opened", labels=["node"])
    heard = GaugeMetricFamily("sedna_gm_hub_node_last_frame_time_seconds",
                              "unix time of the last frame from the node (its heartbeat)",
                              labels=["node"])
    pending = GaugeMetricFamily("sedna_gm_hub_node_pending_objects",
                                "object versions waiting to be written to the node",
                                labels=["node"])
    acked = GaugeMetricFamily("sedna_gm_hub_node_acked_seq",
                              "highest report seq acked to the node in this session", labels=["node"])
    if hub is not None:
        for view in hub.sessions():
            connected.add_metric([view.node], 1)
            since.add_metric([view.node], view.since)
            heard.add_metric([view.node], view.last_frame)
            pending.add_metric([view.node], view.pending)
            acked.add_metric([view.node], view.acked_seq)
        for node, last_frame in hub.departed().items():
            connected.add_metric([node], 0)
            heard.add_metric([node], last_frame)
    yield from (connected, since, heard, pending, acked)


def _counts(name: str, doc: str, label: str, attrs: Mapping[str, str], stats: object | None) -> Metric:
    """A counter family with one sample per label value, read from `stats` (0 without it)."""
    family = CounterMetricFamily(name, doc, labels=[label])
    for value, attr in attrs.items():
        family.add_metric([value], getattr(stats, attr) if stats is not None else 0)
    return family
