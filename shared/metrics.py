"""What both services' `/metrics` pages share: one registry per service, built the same way.

Each GlobalManager and LocalController owns a `CollectorRegistry` (never prometheus_client's
global one), so several of them in one process (the tests, `make run`) keep apart. A service
registry carries the process and platform collectors and `sedna_build_info`; the service
adds its own metrics, updated where things happen, and custom collectors that read live
state at scrape time (the hub's sessions, the stores' counts) instead of copying it into
counters. The page is the Prometheus text format 0.0.4. docs/metrics.md lists every family.

Counters export no `_created` series: a timestamp per label set doubles the series a
scrape returns and no dashboard of ours reads it.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable

from prometheus_client import (
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from shared.version import package_version

disable_created_metrics()

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "sedna_"
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Buckets of the latency histograms: from a millisecond, where the report path lives."""


def service_registry(service: str) -> CollectorRegistry:
    """A registry for one `service` ("gm" or "lc") with the process, platform and build-info
    collectors on it."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    registry.register(BuildInfo(service))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The registry's page in the text format (`CONTENT_TYPE`)."""
    return generate_latest(registry)


def sample(registry: CollectorRegistry, name: str, /, **labels: str) -> float:
    """One sample's value as a scrape would show it; 0 when the label set has none yet."""
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


class BuildInfo(Collector):
    """`sedna_build_info{service, version, python} 1`: what runs, for joins and upgrades."""

    def __init__(self, service: str) -> None:
        self.labels = {"service": service, "version": package_version(),
                       "python": platform.python_version()}

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(f"{PREFIX}build_info", "The running service, its version and "
                                   "its Python version; always 1.", labels=list(self.labels))
        family.add_metric(list(self.labels.values()), 1)
        yield family
