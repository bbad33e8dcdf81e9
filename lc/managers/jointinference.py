"""Joint inference: edge worker statistics become status reports for the GM.

The edge worker of a JointInferenceService posts cumulative inference counts every
LC_PERIOD seconds (`ownerInfo`: inferenceNumber, hardExampleNumber, uploadCloudRatio,
startTime, updateTime) and no `status`. Upstream forwards each one with `models: null`;
the GM turns `ownerInfo` minus the two times into `status.metrics`. The counts are
cumulative, so each report supersedes the previous one and nothing needs local state.
"""

from __future__ import annotations

from lc.managers.forward import ReportForwarder

KIND = "JointInferenceService"


class JointInferenceManager(ReportForwarder):
    """Relays JI edge-worker stats; drops `results` as upstream does."""

    include_models = False

    def __init__(self) -> None:
        super().__init__(KIND)
