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
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.runtime.process import ImageEntry
from lc.app import LocalController
from lc.config import load
from lc.link.dialer import link_factory
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


def _current(status: dict[str, Any]) -> tuple[str, str]:
    """(stage, type) of a learning job's current condition: the last, True one."""
    conds = status.get("conditions") or [{}]
    last = conds[-1]
    return (last.get("stage", ""), last.get("type", "")) if last.get("status") == "True" else ("", "")


def _completed(status: dict[str, Any], stage: str) -> bool:
    return any(c.get("type") == "Completed" and c.get("stage") == stage for c in status.get("conditions") or ())


def _cycled(status: dict[str, Any]) -> bool:
    """One whole cycle: trained, evaluated, deployed, and back to waiting for the train trigger."""
    return (status.get("cycle", 0) >= 1 and all(_completed(status, s) for s in ("Train", "Eval", "Deploy"))
            and _current(status) == ("Train", "Waiting"))


def _knowledge_base(status: dict[str, Any]) -> bool:
    kb = status.get("knowledgeBase") or {}
    return (kb.get("AIModels") or {}).get("numberOfAIModels", 0) >= 1 \
        and (kb.get("AIClasses") or {}).get("numberOfAIClasses", 0) >= 1


def _docs_of(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d.get("kind") == kind]
    return doc


def _fast_trigger(trigger: dict[str, Any]) -> None:
    """Checked every second and at any time of day (the examples' timers would make a run
    depend on the clock; their 60 s period on patience)."""
    trigger["checkPeriodSeconds"] = 1
    trigger.pop("timer", None)


def _fast_il(docs: list[dict[str, Any]]) -> None:
    spec = _docs_of(docs, "IncrementalLearningJob")["spec"]
    _fast_trigger(spec["trainSpec"]["trigger"])
    spec["deploySpec"]["model"]["pollPeriodSeconds"] = 1
    # the deploy trigger stays upstream's, `precision_delta > 0.1` over the eval's per-class
    # lists: the simulated eval worker reports the new model better on every class


def _fast_ll(docs: list[dict[str, Any]]) -> None:
    _fast_trigger(_docs_of(docs, "LifelongLearningJob")["spec"]["trainSpec"]["trigger"])


def _node_file(dc, node: str, path: str) -> Path:
    return Path(dc.runtime.node_root(node)) / path.lstrip("/")


def _il_deployed(dc) -> None:
    """The hot update put the trained model over the deploy Model's file and told the worker."""
    deployed = _node_file(dc, "edge-node-1", "/models/deploy_model/saved_model.pb")
    assert deployed.read_text().startswith("trained by helmet-detection-demo-train-1")
    config = _node_file(dc, "edge-node-1", "/var/lib/sedna/model-hot-update/default/incrementallearningjob/"
                                           "helmet-detection-demo/model_config.json")
    assert json.loads(config.read_text())["model_config"]["model_path"] == "/model-hot-update/model.pb"


def _ll_deployed(dc) -> None:
    """The LC copied the evaluated knowledge base index where the inference worker loads it."""
    index = _node_file(dc, "edge-node-2", "/output/deploy/index.pkl")
    assert index.read_text().startswith("knowledge base of atcii-classifier-demo-train-1")


CASES = [
    pytest.param("joint-inference-helmet-detection.yaml", [
        ("JointInferenceService", "helmet-detection-inference-example",
         lambda s: {"inferenceNumber", "hardExampleNumber"} <= _metric_keys(s),
         "the edge worker's counters as metrics"),
    ], None, None, id="ji"),
    pytest.param("federated-learning-surface-defect.yaml", [
        ("FederatedLearningJob", "surface-defect-detection", lambda s: s.get("phase") == "Succeeded",
         "every trainer's rounds reported and the job complete"),
    ], None, None, id="fl"),
    pytest.param("multi-edge-inference-pedestrian-tracking.yaml", [
        ("FeatureExtractionService", "feature-extraction",
         lambda s: {"frameNumber", "featureNumber"} <= _metric_keys(s),
         "the feature extraction worker's counters as metrics"),
        ("ReidJob", "reid", lambda s: s.get("phase") == "Succeeded",
         "the reid worker's progress reports, then its end"),
        ("VideoAnalyticsJob", "video-analytics", lambda s: s.get("phase") == "Succeeded",
         "the video analytics worker's progress reports, then its end"),
    ], None, None, id="pedestrian-tracking"),
    pytest.param("object-search-pedestrian.yaml", [
        ("ObjectSearchService", "pedestrian-search", lambda s: _true(s, "Running"),
         "the user, reid and tracking workers up"),
    ], None, None, id="object-search"),
    pytest.param("object-tracking-pedestrian.yaml", [
        ("ObjectTrackingService", "pedestrian-tracking", lambda s: _true(s, "Running"),
         "the reid and tracking workers up"),
    ], None, None, id="object-tracking"),
    pytest.param("incremental-learning-helmet-detection.yaml", [
        ("IncrementalLearningJob", "helmet-detection-demo", _cycled,
         "trained, evaluated, hot-updated on the inference worker, and waiting for the next round"),
    ], _fast_il, _il_deployed, id="incremental-learning"),
    pytest.param("lifelong-learning-atcii.yaml", [
        ("LifelongLearningJob", "atcii-classifier-demo", _knowledge_base, "the knowledge base from the reports"),
        ("LifelongLearningJob", "atcii-classifier-demo", lambda s: _cycled(s) and s.get("deploys", 0) >= 1,
         "trained, evaluated, deployed to a new inference worker, and waiting for the next round"),
    ], _fast_ll, _ll_deployed, id="lifelong-learning"),
]
Edit = Callable[[list[dict[str, Any]]], None]  # a change to the example's documents, in place
After = Callable[[Any], None]  # what must hold on the nodes once the checks pass


def _true(status: dict[str, Any], condition_type: str) -> bool:
    return any(c.get("type") == condition_type and c.get("status") == "True"
               for c in status.get("conditions") or ())


@contextlib.asynccontextmanager
async def local_controllers(dc, tmp_path: Path, gm_port: int) -> AsyncIterator[dict[str, int]]:
    """An LC per node, linked to the GM, with the example Datasets' files; yields node -> port.
    Each LC's root filesystem is its node's (the one the process runtime gives that node's
    hostPath volumes), so the LC reads what the workers write, as on a real node."""
    async with contextlib.AsyncExitStack() as stack:
        ports = {}
        for node in devrun.LC_PORTS:
            rootfs = Path(dc.runtime.node_root(node))
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


def _pods(dc) -> dict[str, str]:
    """name -> phase and the end of the log of every pod, to say where a case got stuck."""
    rt = dc.store.registry.lookup(group="", version="v1", resource="pods")
    return {name: f"{(p.get('status') or {}).get('phase', '')}: {(dc.runtime.logs(NS, name) or b'')[-300:]!r}"
            for p in dc.store.list(rt, NS)[0] if (name := (p.get("metadata") or {}).get("name", ""))}


def _status(dc, kind: str, name: str) -> dict[str, Any]:
    rt = dc.store.registry.lookup(group=apis.GROUP, version=apis.VERSION,
                                  resource=apis.require(kind).plural)
    obj = dc.store.get(rt, NS, name)
    return (obj or {}).get("status") or {}


def _manifest(example: str, edit: Edit | None, tmp_path: Path) -> Path:
    """The example as shipped, or a copy with the case's edit."""
    path = ROOT / "examples" / "upstream" / example
    if edit is None:
        return path
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    edit(docs)
    edited = tmp_path / example
    edited.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return edited


@pytest.mark.parametrize(("example", "checks", "edit", "after"), CASES)
async def test_example_workers_report_through_their_lc(start_gm, sedna_cluster, tmp_path: Path,
                                                       example: str, checks: list[Check],
                                                       edit: Edit | None, after: After | None) -> None:
    dc = sedna_cluster
    gm = await start_gm()
    async with local_controllers(dc, tmp_path, gm.port) as ports:
        await eventually(lambda: set(gm.hub.connected_nodes()) == set(ports), within=10,
                         message="every LC connected")
        dc.runtime.image_map.update(simulated_images(ports))
        dc.apply_manifests(_manifest(example, edit, tmp_path))
        for kind, name, healthy, what in checks:
            try:
                await eventually(lambda k=kind, n=name, h=healthy: h(_status(dc, k, n)), within=WITHIN,
                                 message=f"{kind}/{name}: {what}")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; its status: {json.dumps(_status(dc, kind, name))}; "
                                     f"pods: {_pods(dc)}") from None
        if after is not None:
            after(dc)
