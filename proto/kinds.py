"""Spelling of Sedna kinds on the wire.

Inside the project a kind is always its CamelCase Kubernetes name (`Dataset`,
`IncrementalLearningJob`). Upstream's envelope lower-cases kinds going down to the LC
and accepts any case coming up (its LC sends both `Dataset` and `jointinferenceservice`),
so the upstream codec maps through this table. Kinds outside it keep their spelling:
refusing them is the receiver's decision, not the codec's.
"""

from __future__ import annotations

SEDNA_KINDS: tuple[str, ...] = (
    "Dataset",
    "Model",
    "JointInferenceService",
    "FederatedLearningJob",
    "IncrementalLearningJob",
    "LifelongLearningJob",
    "ObjectSearchService",
    "ObjectTrackingService",
    "FeatureExtractionService",
    "ReidJob",
    "VideoAnalyticsJob",
)

_BY_LOWER: dict[str, str] = {k.lower(): k for k in SEDNA_KINDS}


def canonical_kind(kind: str) -> str:
    """The CamelCase name of a Sedna kind spelled in any case; unknown kinds unchanged."""
    return _BY_LOWER.get(kind.lower(), kind)


def upstream_kind(kind: str) -> str:
    """The spelling upstream LCs route on: the kind in lower case."""
    return kind.lower()
