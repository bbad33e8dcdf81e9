"""The GM's status page (`GET /ui`): edge nodes, jobs with a chart each, recent warnings.

Read-only and self-contained (no external asset: it must work on an air-gapped cluster).
`history.py` keeps each job's recent key values in memory, bounded; `warnings.py` the last
Warning events this GM emitted; `jobs.py` reads a job's status; `model.py` builds the page
from those and the hub's sessions; `svg.py` and `render.py` turn it into HTML; `page.py`
wires the sources and serves it.
"""

from gm.ui.page import StatusPage

__all__ = ["StatusPage"]
