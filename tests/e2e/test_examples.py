"""The examples as `make run` runs them: simulated workers report through the LCs to the GM.

The dev cluster's process runtime runs every example image as examples/workers/sim.py
(the image map examples/devrun.py builds), an LC runs on every node and the GM reconciles
the examples; each case then waits for what the workers' reports or their ends make of
the CR's status. Nothing here posts a report by hand: the GM's env picks each worker's
role, the worker finds the LC of its node, and the LC relays to the GM. A case whose kinds
the GM does not reconcile yet (no declaration in gm/kinds) is skipped, saying which.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from devcluster.runtime import ImageEntry
from lc.app import LocalController
from lc.config import load
from lc.link import link_factory
from shared import apis
from tests.conftest import eventually

ROOT = Path(__file__).resolve().parents[2]
NS = "default"
WITHIN = 60.0
Check = tuple[str, str, Callable[[dict[str, Any]], bool], str]  # kind, name, on status, what


def _devrun():
    spec = importlib.util.spec_from_file_location("devrun", ROOT / "examples" / "devrun.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


devrun = _devrun()


def _metric_keys(status: dict[str, Any]) -> set[str]:
    return {m.get("key") for m in status.get("metrics") or ()}


CASES = [
    pytest.param("joint-inference-helmet-detection.yaml", [
        ("JointInferenceService", "helmet-detection-inference-example",
         lambda s: {"inferenceNumber", "hardExampleNumber"} <= _metric_keys(s),
         "the edge worker's counters as metrics"),
    ], id="ji"),
    pytest.param("federated-learning-surface-defect.yaml", [
        ("FederatedLearningJob", "surface-defect-detection", lambda s: s.get("phase") == "Succeeded",
         "every trainer's rounds reported and the job complete"),
    ], id="fl"),
    pytest.param("multi-edge-inference-pedestrian-tracking.yaml", [
        ("FeatureExtractionService", "feature-extraction",
         lambda s: {"frameNumber", "featureNumber"} <= _metric_keys(s),
         "the feature extraction worker's counters as metrics"),
        ("ReidJob", "reid", lambda s: s.get("phase") == "Succeeded",
         "the reid worker's progress reports, then its end"),
        ("VideoAnalyticsJob", "video-analytics", lambda s: s.get("phase") == "Succeeded",
         "the video analytics worker's progress reports, then its end"),
    ], id="pedestrian-tracking"),
    pytest.param("object-search-pedestrian.yaml", [
        ("ObjectSearchService", "pedestrian-search", lambda s: _true(s, "Running"),
         "the user, reid and tracking workers up"),
    ], id="object-search"),
    pytest.param("object-tracking-pedestrian.yaml", [
        ("ObjectTrackingService", "pedestrian-tracking", lambda s: _true(s, "Running"),
         "the reid and tracking workers up"),
    ], id="object-tracking"),
]


def _true(status: dict[str, Any], condition_type: str) -> bool:
    return any(c.get("type") == condition_type and c.get("status") == "True"
               for c in status.get("conditions") or ())


@contextlib.asynccontextmanager
async def local_controllers(tmp_path: Path, gm_port: int) -> AsyncIterator[dict[str, int]]:
    """An LC per node, linked to the GM, with the example Datasets' files; yields node -> port."""
    async with contextlib.AsyncExitStack() as stack:
        ports = {}
        for node in devrun.LC_PORTS:
            rootfs = tmp_path / f"rootfs-{node}"
            rootfs.mkdir()
            devrun.write_datasets(rootfs, node)
            lc = LocalController(load({
                "GM_ADDRESS": f"127.0.0.1:{gm_port}", "NODENAME": node, "BIND_ADDRESS": "127.0.0.1",
                "BIND_PORT": "0", "ROOTFS_MOUNT_DIR": str(rootfs),
                "LC_DB_PATH": str(tmp_path / f"lc-{node}.db"), "LC_DATASET_PERIOD": "0.2"}),
                link_factory=link_factory)
            await lc.start()
            stack.push_async_callback(lc.stop)
            ports[node] = lc.port
        yield ports


def simulated_images(ports: dict[str, int]) -> dict[str, ImageEntry]:
    """devrun's image map, pointed at these LCs' ports and paced for a test."""
    entries = {}
    for image, raw in devrun.image_map().items():
        env = {**raw["env"], "SIM_LC_PORTS": ",".join(f"{n}={p}" for n, p in ports.items()),
               "SIM_PERIOD": "0.2", "SIM_ROUNDS": "3", "SIM_RETRY_WAIT": "0.2"}
        entries[image] = ImageEntry(tuple(raw["command"]), append_args=False, env=env)
    return entries


def _status(dc, kind: str, name: str) -> dict[str, Any]:
    rt = dc.store.registry.lookup(group=apis.GROUP, version=apis.VERSION,
                                  resource=apis.require(kind).plural)
    obj = dc.store.get(rt, NS, name)
    return (obj or {}).get("status") or {}


@pytest.mark.parametrize(("example", "checks"), CASES)
async def test_example_workers_report_through_their_lc(start_gm, sedna_cluster, tmp_path: Path,
                                                       example: str, checks: list[Check]) -> None:
    dc = sedna_cluster
    gm = await start_gm()
    async with local_controllers(tmp_path, gm.port) as ports:
        await eventually(lambda: set(gm.hub.connected_nodes()) == set(ports), within=10,
                         message="every LC connected")
        dc.runtime.image_map.update(simulated_images(ports))
        dc.apply_manifests(ROOT / "examples" / "upstream" / example)
        for kind, name, healthy, what in checks:
            await eventually(lambda k=kind, n=name, h=healthy: h(_status(dc, k, n)), within=WITHIN,
                             message=f"{kind}/{name}: {what}")
