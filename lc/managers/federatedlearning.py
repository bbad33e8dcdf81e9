"""Federated learning: per-round training reports become status reports for the GM.

A train worker reports once per aggregation round (`status` running, then completed) with
`ownerInfo.currentRound`/`updateTime` and its models' metrics in `results`. The GM uses
`models[0].metrics` and appends a Training condition per round, so every report is
forwarded as is, in order, with its models. Upstream's Python library labels these
reports `ownerKind: "default"`; the dispatcher matches those to a known
FederatedLearningJob by namespace and owner name before they reach this manager.
"""

from __future__ import annotations

from lc.managers.forward import ReportForwarder

KIND = "FederatedLearningJob"


class FederatedLearningManager(ReportForwarder):
    """Relays FL round reports with their models."""

    include_models = True

    def __init__(self) -> None:
        super().__init__(KIND)
