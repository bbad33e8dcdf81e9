"""`make demo` as a user runs it: examples/demo.py as a process (which runs `make run` as one in
turn, drives it with kubectl and HTTP, and prints a table of what held).

Every kind with workers must hold every seed scenario, the IL cycle must go through a real
deploy (upstream's deploy trigger, `precision_delta` named without an index, fires when every
element holds), and the demo must then exit 0.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("JointInferenceService", "FederatedLearningJob", "IncrementalLearningJob", "LifelongLearningJob",
         "FeatureExtractionService", "ObjectSearchService", "ObjectTrackingService", "ReidJob", "VideoAnalyticsJob")
HEADER = ["kind", "create", "reports", "edit", "self-heal", "delete", "IL", "cycle"]
RUN_TIMEOUT = 240.0  # the demo's own deadline is 170 s, plus starting and stopping `make run`


def table(out: str) -> tuple[dict[str, list[str]], list[str]]:
    """The printed table's rows (kind -> cells) and its list of failures."""
    lines = out[out.index("\nkind "):].strip().splitlines()
    assert lines[0].split() == HEADER, lines[0]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:1 + len(KINDS)]}
    failed = [line.strip() for line in lines[1 + len(KINDS):] if line.startswith("  ")]
    return rows, failed


@pytest.mark.timeout(RUN_TIMEOUT + 30)
def test_demo_holds_every_scenario_of_every_kind(tmp_path: Path):
    state = tmp_path / "run"
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py"), "--state", str(state)], cwd=ROOT,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    log = (state / "devrun.log").read_text(errors="replace")[-3000:] if (state / "devrun.log").exists() else ""
    context = f"{done.stdout[-6000:]}\n{done.stderr[-2000:]}\nthe end of make run's log:\n{log}"
    assert "\nkind " in done.stdout, context
    rows, failed = table(done.stdout)
    assert list(rows) == list(KINDS), context
    assert done.returncode == 0, context
    assert not failed, context
    assert rows == {kind: ["held"] * 5 + ["held" if kind == "IncrementalLearningJob" else "-"] for kind in KINDS}, \
        context
