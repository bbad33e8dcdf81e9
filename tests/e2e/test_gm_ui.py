"""The GM's status page (`GET /ui`) against the dev cluster: a job's Warning and its deletion as
the page shows them, and the page in a real browser (headless Chromium from Debian's packages,
`make chromium`) with an LC per node and example jobs whose simulated workers report.

The browser loads the page from the GM's port with every background service of Chromium off
(this network reaches no outside host) and a fresh profile; `--dump-dom` gives the DOM after
load, which is checked for the nodes, the jobs and a chart per job, and a screenshot goes to
.artifacts/ui.png for a person to look at.
"""

from __future__ import annotations

import asyncio
import os
from html.parser import HTMLParser
from pathlib import Path

import aiohttp
import pytest

from gm.kube.resources import JI
from tests.conftest import eventually
from tests.e2e.conftest import load_example
from tests.e2e.test_examples import local_controllers, simulated_images

ROOT = Path(__file__).resolve().parents[2]
NS = "default"
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
# headless, and nothing started that would dial out (updates, sync, field trials, QUIC probes)
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")
BROWSER_TIMEOUT = 90.0
SCREENSHOT = ROOT / ".artifacts" / "ui.png"
HISTORY_INTERVAL = 1.0  # seconds between a chart's points (gm/ui/history.py: 5 s): a second point sooner
EXAMPLES = ("joint-inference-helmet-detection.yaml", "federated-learning-surface-defect.yaml",
            "multi-edge-inference-pedestrian-tracking.yaml")
JOBS = {("JointInferenceService", "default/helmet-detection-inference-example"),
        ("FederatedLearningJob", "default/surface-defect-detection"),
        ("FeatureExtractionService", "default/feature-extraction"), ("ReidJob", "default/reid"),
        ("VideoAnalyticsJob", "default/video-analytics")}


async def get_ui(gm) -> tuple[aiohttp.ClientResponse, str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http, \
            http.get(f"http://127.0.0.1:{gm.port}/ui") as resp:
        return resp, await resp.text()


async def test_a_warning_and_a_deleted_job_as_the_page_shows_them(gm, api, sedna_cluster):
    ji = next(d for d in load_example("joint-inference-helmet-detection.yaml") if d["kind"] == "JointInferenceService")
    await api.create(JI, ji, namespace=NS)  # its Models are missing: Failed, and a Warning
    name = ji["metadata"]["name"]
    await eventually(lambda: [w for w in gm.status_page.warnings.recent() if w.reason == "ModelNotFound"],
                     within=10, message="the GM's ModelNotFound warning")
    resp, body = await get_ui(gm)
    assert resp.status == 200 and resp.headers["Content-Security-Policy"].startswith("default-src 'none'")
    page = Dom(body)
    assert [row for row in page.warnings if "ModelNotFound" in row] != []
    phase = page.jobs[("JointInferenceService", f"{NS}/{name}")].titles[2]
    assert phase.startswith("ModelNotFound: ") and "does not exist" in phase

    await api.delete(JI, name, namespace=NS)
    await eventually(lambda: not gm.status_page.page().jobs, within=10, message="the job gone from the caches")
    # a page made in the last 2 s is served again (gm/ui/page.py): the next one has no job
    await eventually(lambda: served_no_job(gm), within=5, message="a page without the job")
    assert gm.status_page.history.series(("JointInferenceService", NS, name)) == []


async def test_the_page_in_a_browser(start_gm, sedna_cluster, tmp_path: Path):
    browser = chromium_path()
    dc = sedna_cluster
    gm = await start_gm()
    gm.status_page.history.min_interval = HISTORY_INTERVAL
    async with local_controllers(dc, tmp_path, gm.port) as ports:
        await eventually(lambda: set(gm.hub.connected_nodes()) == set(ports), within=10, message="every LC connected")
        dc.runtime.image_map.update(simulated_images(ports))
        for example in EXAMPLES:
            dc.apply_manifests(ROOT / "examples" / "upstream" / example)
        # a point per HISTORY_INTERVAL at most (gm/ui/history.py): the JI's second comes after that
        await eventually(lambda: charted(gm, "JointInferenceService", "helmet-detection-inference-example", 2)
                         and charted(gm, "FederatedLearningJob", "surface-defect-detection", 1)
                         and charted(gm, "ReidJob", "reid", 1), within=60, message="the jobs' reports charted")
        url = f"http://127.0.0.1:{gm.port}/ui"
        dom = await chromium(browser, new_dir(tmp_path / "profile-dom"), "--dump-dom", url)
        shot = new_dir(SCREENSHOT.parent, exist_ok=True) / SCREENSHOT.name
        await chromium(browser, new_dir(tmp_path / "profile-shot"), f"--screenshot={shot}", "--window-size=1280,1600", url)
    page = Dom(dom)
    assert page.title == "Sedna GM status"
    assert {node: row.attrs.get("data-state") for node, row in page.nodes.items()} == dict.fromkeys(ports, "up")
    assert set(page.jobs) == JOBS
    for key, row in page.jobs.items():
        assert row.charts == 1, f"{key}: {row.charts} charts"
    ji = page.jobs[("JointInferenceService", "default/helmet-detection-inference-example")]
    assert ji.lines == 2 and "inferenceNumber" in ji.cells[5] and "hardExampleNumber" in ji.cells[5]
    assert "inferenceNumber" in ji.cells[6]  # the chart's legend
    fl = page.jobs[("FederatedLearningJob", "default/surface-defect-detection")]
    assert fl.lines == 1 and "round" in fl.cells[6]
    assert screenshot_size() > 10_000


async def served_no_job(gm) -> bool:
    """Whether the page served now lists no job."""
    _, body = await get_ui(gm)
    return Dom(body).jobs == {}


def charted(gm, kind: str, name: str, points: int) -> bool:
    series = gm.status_page.history.series((kind, NS, name))
    return bool(series) and len(series[0].times) >= points


def new_dir(path: Path, *, exist_ok: bool = False) -> Path:
    path.mkdir(exist_ok=exist_ok)
    return path


def screenshot_size() -> int:
    return SCREENSHOT.stat().st_size


def chromium_path() -> Path:
    """The browser; outside CI a missing one skips the test (`make chromium` installs it)."""
    if not os.access(CHROMIUM, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: `make test` runs `make chromium` first", pytrace=False)
        pytest.skip(f"{CHROMIUM} is missing: run `make chromium`")
    return CHROMIUM


async def chromium(browser: Path, profile: Path, *args: str) -> str:
    """Run headless Chromium with `profile`, a new empty dir (the event loop keeps serving the GM)."""
    proc = await asyncio.create_subprocess_exec(
        str(browser), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), BROWSER_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
    return out.decode()


class Row:
    def __init__(self, attrs: dict[str, str]):
        self.attrs = attrs
        self.cells: list[str] = []
        self.titles: list[str] = []  # each cell's title attribute
        self.charts = 0  # svg.chart elements in the row
        self.lines = 0  # paths in them


class Dom(HTMLParser):
    """The page's title, its node, job and warning rows (with their cells' text), from HTML."""

    def __init__(self, text: str):
        super().__init__()
        self.title = ""
        self.nodes: dict[str, Row] = {}
        self.jobs: dict[tuple[str, str], Row] = {}
        self.warnings: list[str] = []
        self._row: Row | None = None
        self._in: str = ""
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if tag == "tr" and a.get("class") in ("node", "job", "warning"):
            self._row = Row(a)
            if a["class"] == "node":
                self.nodes[a["data-node"]] = self._row
            elif a["class"] == "job":
                self.jobs[(a["data-kind"], a["data-name"])] = self._row
        elif tag == "td" and self._row is not None:
            self._row.cells.append("")
            self._row.titles.append(a.get("title", ""))
        elif tag == "svg" and self._row is not None and a.get("class") == "chart":
            self._row.charts += 1
        elif tag == "path" and self._row is not None:
            self._row.lines += 1
        elif tag == "title" and self._row is None:
            self._in = "title"

    def handle_endtag(self, tag):
        if tag == "tr" and self._row is not None:
            if self._row.attrs.get("class") == "warning":
                self.warnings.append(" ".join(self._row.cells))
            self._row = None
        elif tag == "title":
            self._in = ""

    def handle_data(self, data):
        if self._in == "title":
            self.title += data
        elif self._row is not None and self._row.cells:
            self._row.cells[-1] += data

