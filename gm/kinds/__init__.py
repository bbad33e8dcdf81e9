"""One module per reconciled kind: its declaration, its pure `build` and its pure `status`.

`DECLARATIONS` is the list the GM runs (gm/app.py builds one generic controller per entry,
gm/reconcile/reconciler.py), and the kinds whose reports it takes (gm/edge/status.py) and
whose objects it sends to the edge (gm/edge/objects.py). A kind module imports from
gm/reconcile (the declaration), gm/kindlib (what several kinds share: conditions, waiting,
job, learning and multi-edge rules), gm/workers (the child building blocks) and
gm/reports (report rules), never from another kind module or from gm/edge, which sits above
the kinds.
"""

from __future__ import annotations

from gm.kinds import (
    featureextraction,
    federatedlearning,
    incrementallearning,
    jointinference,
    lifelonglearning,
    objectsearch,
    objecttracking,
    reid,
    videoanalytics,
)
from gm.reconcile.declaration import KindDeclaration, ReportRule
from shared import apis

DECLARATIONS: tuple[KindDeclaration, ...] = (
    jointinference.DECLARATION,
    federatedlearning.DECLARATION,
    objectsearch.DECLARATION,
    objecttracking.DECLARATION,
    featureextraction.DECLARATION,
    reid.DECLARATION,
    videoanalytics.DECLARATION,
    incrementallearning.DECLARATION,
    lifelonglearning.DECLARATION,
)


def report_rules() -> list[tuple[apis.SednaKind, ReportRule]]:
    """Each declared kind's report rule, for the upstream report handler."""
    return [(d.api, d.report) for d in DECLARATIONS if d.report is not None]


def reconciled_kinds() -> tuple[apis.SednaKind, ...]:
    return tuple(d.api for d in DECLARATIONS)
