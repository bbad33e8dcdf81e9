"""No dashboard panel points at nothing: with every example running (simulated workers reporting
through an LC per node to the GM), each metric a dashboard's queries select has a series on the
GM's or an LC's /metrics. A series may come and go with its job's state (an FL job's round is in
its status only while it trains), so a name counts once any page showed it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import aiohttp

from tests.conftest import eventually
from tests.dashboards import dashboards, metric_names, queries
from tests.e2e.test_examples import (
    ROOT,
    _fast_il,
    _fast_ll,
    _manifest,
    local_controllers,
    simulated_images,
)
from tests.scrape import samples

EDITS = {"incremental-learning-helmet-detection.yaml": _fast_il, "lifelong-learning-atcii.yaml": _fast_ll}
SKIPPED = {"federated-learning-yolo-s3.yaml"}  # its data is on S3: its workers never start here
WITHIN = 120.0


def used_names() -> dict[str, set[str]]:
    """metric name -> the dashboards whose queries select it."""
    out: dict[str, set[str]] = {}
    for file, board in dashboards().items():
        for expr in queries(board):
            for name in metric_names(expr):
                out.setdefault(name, set()).add(file)
    return out


async def present(http: aiohttp.ClientSession, ports: list[int]) -> set[str]:
    """The sample names with at least one series on any of these pages."""
    names: set[str] = set()
    for port in ports:
        async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
            assert resp.status == 200
            names |= {s.name for s in samples(await resp.text())}
    return names


async def test_every_metric_a_dashboard_reads_has_series_while_the_examples_run(start_gm, sedna_cluster,
                                                                                 tmp_path: Path) -> None:
    dc, wanted = sedna_cluster, used_names()
    gm = await start_gm()
    async with local_controllers(dc, tmp_path, gm.port) as lcs, \
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        await eventually(lambda: set(gm.hub.connected_nodes()) == set(lcs), within=10, message="every LC connected")
        images = simulated_images(lcs)  # FL trainers report 30 rounds: a few seconds of training
        dc.runtime.image_map.update({image: dataclasses.replace(entry, env={**entry.env, "SIM_ROUNDS": "30"})
                                     for image, entry in images.items()})
        for example in sorted((ROOT / "examples" / "upstream").glob("*.yaml")):
            if example.name not in SKIPPED:
                dc.apply_manifests(_manifest(example.name, EDITS.get(example.name), tmp_path))
        ports, seen = [gm.port, *lcs.values()], set()

        async def all_seen() -> bool:
            seen.update(await present(http, ports))
            return set(wanted) <= seen

        try:
            await eventually(all_seen, within=WITHIN, interval=0.25, message="every dashboard metric")
        except AssertionError:
            missing = {n: files for n, files in wanted.items() if n not in seen}
            raise AssertionError(f"no series for {sorted(missing.items())}") from None
