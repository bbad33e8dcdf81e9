"""Which outbox entries a newer one makes pointless: the fold key of a report. Pure.

Some kinds' status keeps only the latest report (the GM's rule for them replaces a value):
a Dataset's `numberOfSamples` (gm/reports.py `set_sample_count`, one count per node),
and the `status.metrics` of the kinds whose rule is `metrics_report` (JointInference,
FeatureExtraction, ObjectSearch, ObjectTracking, Reid, VideoAnalytics), which replaces the
metrics with the report's `output.ownerInfo`. For these, once a newer report of the same
object from the same source (worker) is in the outbox, an older unsent one changes nothing
the newer one does not overwrite, so the link sends only the newest and settles the older
ones with its ack (lc/link/backlog.py, Store.ack_one).

Never folded: FederatedLearningJob (round reports only move forward and carry model
metrics), IncrementalLearningJob and LifelongLearningJob (every stage report moves the job's
state machine), and a metrics report without `ownerInfo`, which the GM's rule ignores, so it
cannot stand for an older report that had one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DATASET = "Dataset"
METRICS_KINDS = frozenset({
    "JointInferenceService", "FeatureExtractionService", "ObjectSearchService",
    "ObjectTrackingService", "ReidJob", "VideoAnalyticsJob",
})
"""Kinds whose report rule is the GM's `metrics_report`: the latest ownerInfo wins."""


def fold_key(kind: str, namespace: str, name: str, body: Any, *, source: str = "") -> str | None:
    """The key under which the newest report replaces the older ones; None: never folded.

    `source` is the reporting worker ("" for the LC's own reports, e.g. dataset counts)."""
    if kind == DATASET:
        return f"{kind}/{namespace}/{name}/{source}"
    if kind in METRICS_KINDS and _has_owner_info(body):
        return f"{kind}/{namespace}/{name}/{source}"
    return None


def _has_owner_info(body: Any) -> bool:
    output = body.get("output") if isinstance(body, Mapping) else None
    return isinstance(output, Mapping) and isinstance(output.get("ownerInfo"), Mapping)
