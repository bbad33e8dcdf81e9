"""What `make run` runs: the example list, the image map, and the simulated workers.

The simulated worker (examples/workers/sim.py) picks its role from the env the GM gives
it; the JI and FL roles are checked against the env the GM's own builders produce for the
examples, the others against the env spec/upstream-gm.md §3.6-3.9 lists. Each reporting
role is then run as a real process against a real LocalController.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from gm.config import WorkerConfig
from gm.kinds.federatedlearning import build_fl_children
from gm.kinds.jointinference import build_ji_children
from tests.conftest import eventually
from tests.unit.test_lc_support import running_lc

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "examples" / "workers" / "sim.py"
EXAMPLES_DIR = ROOT / "examples" / "upstream"
PROCESS_TIMEOUT = 20.0
RECONCILED = {"JointInferenceService", "FederatedLearningJob", "FeatureExtractionService",
              "ReidJob", "VideoAnalyticsJob", "ObjectSearchService", "ObjectTrackingService",
              "IncrementalLearningJob", "LifelongLearningJob"}


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sim = _load(SIM, "sim_worker")
devrun = _load(ROOT / "examples" / "devrun.py", "devrun")


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES_DIR / name).read_text()) if d]


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind]
    return {**doc, "metadata": {"namespace": "default", "uid": "u1", **doc["metadata"]}}


def _env(obj: dict[str, Any]) -> dict[str, str]:
    """A worker's env as its process sees it (a Downward API value is the pod's name)."""
    spec = obj["spec"]
    pod_spec = spec["template"]["spec"] if "template" in spec else spec
    return {e["name"]: e.get("value", "pod-name" if "valueFrom" in e else "")
            for e in pod_spec["containers"][0].get("env") or ()}


# ---- what `make run` applies and runs -----------------------------------------------------


def test_make_run_applies_an_example_of_every_reconciled_kind() -> None:
    kinds = {d["kind"] for name in devrun.EXAMPLES for d in _docs(name)}
    assert kinds >= RECONCILED
    assert all((EXAMPLES_DIR / name).is_file() for name in devrun.EXAMPLES)


def test_every_example_image_runs_the_simulated_worker() -> None:
    images = {m for name in devrun.EXAMPLES
              for m in re.findall(r"^\s*(?:-\s+)?image:\s*(\S+)\s*$",
                                  (EXAMPLES_DIR / name).read_text(), re.MULTILINE)}
    assert len(images) >= 9  # JI 2, FL 2, FE, Reid, VA, user, tracking, reid workers
    mapped = devrun.image_map()
    assert set(mapped) == images
    assert {tuple(entry["command"]) for entry in mapped.values()} == {(sys.executable, str(SIM))}


def test_every_node_has_an_lc_and_workers_find_theirs(monkeypatch: pytest.MonkeyPatch) -> None:
    from devcluster.controllers.nodes import DEFAULT_NODES
    assert set(devrun.LC_PORTS) == set(DEFAULT_NODES)
    monkeypatch.setenv("LC_SERVER", "http://localhost:9100")
    monkeypatch.setenv("SIM_LC_PORTS", devrun.image_map().popitem()[1]["env"]["SIM_LC_PORTS"])
    monkeypatch.setenv("NODE_NAME", "cloud-node")
    assert sim.lc_server() == "http://localhost:9102"


# ---- roles --------------------------------------------------------------------------------


def test_roles_of_the_gm_built_ji_and_fl_workers() -> None:
    config = WorkerConfig()
    ji_docs = _docs("joint-inference-helmet-detection.yaml")
    models = {d["metadata"]["name"]: d for d in ji_docs if d["kind"] == "Model"}
    ji = build_ji_children(_one(ji_docs, "JointInferenceService"), config=config,
                           edge_model=models["helmet-detection-inference-little-model"],
                           cloud_model=models["helmet-detection-inference-big-model"])
    assert sim.role(_env(ji.edge_deployment)) == "ji-edge"
    assert sim.role(_env(ji.cloud_deployment)) == "idle"
    fl_docs = _docs("federated-learning-surface-defect.yaml")
    fl = build_fl_children(
        _one(fl_docs, "FederatedLearningJob"), config=config,
        models={d["metadata"]["name"]: d for d in fl_docs if d["kind"] == "Model"},
        datasets={d["metadata"]["name"]: d for d in fl_docs if d["kind"] == "Dataset"})
    assert sim.role(_env(fl.aggregation_pod)) == "fl-aggregation"
    assert {sim.role(_env(pod)) for pod in fl.training_pods} == {"fl-train"}


BASE = {"NAMESPACE": "default", "WORKER_NAME": "pod-name", "LC_SERVER": "http://localhost:9100"}


@pytest.mark.parametrize(("env", "role"), [
    pytest.param({**BASE, "SERVICE_NAME": "fe", "JOB_NAME": "fe", "MODEL_URL": "/m/yolox.pth",
                  "KAFKA_ENABLED": "true"}, "fe", id="feature-extraction"),
    pytest.param({**BASE, "JOB_NAME": "reid", "KAFKA_ENABLED": "true"}, "reid", id="reid"),
    pytest.param({**BASE, "JOB_NAME": "va", "MODEL_NAME": "m3l", "MODEL_URL": "/m/yolox.pth"},
                 "videoanalytics", id="video-analytics"),
    pytest.param({"NAMESPACE": "default", "SERVICE_NAME": "os", "WORKER_NAME": "pod-name",
                  "USERWORKER_URL": "os-userworker.default:9379",
                  "EDGEMESH_URL": "os-reidworker.default:9378"}, "tracking", id="os-tracking"),
    pytest.param({"NAMESPACE": "default", "SERVICE_NAME": "ot", "WORKER_NAME": "pod-name",
                  "EDGEMESH_URL": "ot-reidworker.default:9378"}, "tracking", id="ot-tracking"),
    pytest.param({"NAMESPACE": "default", "SERVICE_NAME": "os", "WORKER_NAME": "pod-name"},
                 "idle", id="os-user-worker"),
    pytest.param({}, "idle", id="os-reid-worker-no-env"),
    pytest.param({**BASE, "JOB_NAME": "reid", "HEM_NAME": ""}, "reid", id="empty-value-is-unset"),
])
def test_roles_of_the_multi_edge_workers(env: dict[str, str], role: str) -> None:
    assert sim.role(env) == role


# ---- the reporting roles, as processes against a real LC ----------------------------------


@contextlib.asynccontextmanager
async def worker(base: str, **env: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """sim.py as the process runtime starts it; killed on exit if it is still running."""
    full = {"PATH": os.environ.get("PATH", ""), "LC_SERVER": base, "NAMESPACE": "default",
            "SIM_PERIOD": "0.05", "SIM_ROUNDS": "3", "SIM_RETRY_WAIT": "0.1", **env}
    proc = await asyncio.create_subprocess_exec(sys.executable, str(SIM), env=full,
                                                stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await asyncio.wait_for(proc.wait(), PROCESS_TIMEOUT)


async def _bodies(lc, kind: str) -> list[dict[str, Any]]:
    return [e.body for e in await lc.store.pending() if e.kind == kind]


async def test_feature_extraction_worker_reports_growing_counts(tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, base), worker(
            base, WORKER_NAME="fe-deployment-fe-abc-x1", SERVICE_NAME="fe", JOB_NAME="fe",
            MODEL_URL="/m/yolox.pth") as proc:
        await eventually(lambda: _count_at_least(lc, "FeatureExtractionService", 2),
                         message="two FE reports")
        assert proc.returncode is None  # a service: it keeps running
        entries = [e for e in await lc.store.pending() if e.kind == "FeatureExtractionService"]
    assert {(e.namespace, e.name) for e in entries} == {("default", "fe")}
    first, second = (e.body for e in entries[:2])
    for body in (first, second):
        assert (body["phase"], body["status"], body["output"]["models"]) == ("inference", "", None)
        assert set(body["output"]["ownerInfo"]) == {"startTime", "updateTime", "frameNumber",
                                                    "featureNumber"}
    assert second["output"]["ownerInfo"]["frameNumber"] > first["output"]["ownerInfo"]["frameNumber"]


async def _count_at_least(lc, kind: str, n: int) -> bool:
    return len(await _bodies(lc, kind)) >= n


@pytest.mark.parametrize(("env", "kind", "counters"), [
    pytest.param({"JOB_NAME": "reid", "WORKER_NAME": "reid-reid-0"}, "ReidJob",
                 {"queryNumber", "matchNumber"}, id="reid"),
    pytest.param({"JOB_NAME": "va", "WORKER_NAME": "va-videoanalytics-0", "MODEL_NAME": "m3l",
                  "MODEL_URL": "/m/yolox.pth"}, "VideoAnalyticsJob",
                 {"frameNumber", "detectionNumber"}, id="video-analytics"),
])
async def test_job_worker_reports_progress_then_completes(tmp_path: Path, env: dict[str, str],
                                                          kind: str, counters: set[str]) -> None:
    async with running_lc(tmp_path) as (lc, base), worker(base, **env) as proc:
        assert await asyncio.wait_for(proc.wait(), PROCESS_TIMEOUT) == 0
        entries = [e for e in await lc.store.pending() if e.kind == kind]
    assert [(e.namespace, e.name) for e in entries] == [("default", env["JOB_NAME"])] * 3
    assert [e.body["status"] for e in entries] == ["running", "running", "completed"]
    for entry in entries:
        assert set(entry.body["output"]["ownerInfo"]) == {"startTime", "updateTime", *counters}


def _learning_pods(example: str, kind: str) -> dict[str, dict[str, Any]]:
    """The train, eval and inference pods the GM builds for a learning example, from the
    stage inputs its LC reports."""
    from gm.kindlib.learningpods import StageInput, learning_job
    from gm.kinds.incrementallearning import ILModels, il_eval_pod, il_infer_pod, il_train_pod
    from gm.kinds.lifelonglearning import ll_eval_pod, ll_infer_pod, ll_train_pod
    docs = _docs(example)
    datasets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Dataset"}
    job = learning_job(_one(docs, kind), kind=kind, datasets=datasets, secrets={}, config=WorkerConfig())
    train = StageInput(("/models/base_model",), "/output/data/train/1/data.txt", "", "/output/train/1")
    evaluate = StageInput(("/output/train/1/model.pb", "/models/deploy_model/saved_model.pb"),
                          "/output/data/eval/1/data.txt", "", "/output/eval/1")
    if kind == "IncrementalLearningJob":
        models = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Model"}
        found = ILModels(initial=models["initial-model"], deploy=models["deploy-model"])
        return {"train": il_train_pod(job, found, name="j-train-1", given=train),
                "eval": il_eval_pod(job, found, name="j-eval-1", given=evaluate),
                "inference": il_infer_pod(job, found, name="j-infer", deploys=0)}
    return {"train": ll_train_pod(job, name="j-train-1", given=train, kb_index=None, initial_done=False),
            "eval": ll_eval_pod(job, name="j-eval-1", given=evaluate),
            "inference": ll_infer_pod(job, name="j-infer", deploys=1)}


@pytest.mark.parametrize(("example", "kind", "roles"), [
    pytest.param("incremental-learning-helmet-detection.yaml", "IncrementalLearningJob",
                 {"train": "il-train", "eval": "il-eval", "inference": "il-inference"}, id="il"),
    pytest.param("lifelong-learning-atcii.yaml", "LifelongLearningJob",
                 {"train": "ll-train", "eval": "ll-eval", "inference": "ll-inference"}, id="ll"),
])
def test_roles_of_the_gm_built_learning_workers(example: str, kind: str, roles: dict[str, str]) -> None:
    pods = _learning_pods(example, kind)
    assert {worker: sim.role(_env(pod)) for worker, pod in pods.items()} == roles


def test_a_reported_url_is_the_nodes_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host directory of the process runtime maps back to the container path, and
    DATA_PATH_PREFIX goes, as the library strips it."""
    monkeypatch.setenv("DEVCLUSTER_MOUNTS", '{"/home/data/output/train/": "/r/nodes/edge-node-1/output/train",'
                                            ' "/home/data/output/": "/r/nodes/edge-node-1/output"}')
    monkeypatch.setenv("DATA_PATH_PREFIX", "/home/data")
    assert sim.node_path("/r/nodes/edge-node-1/output/train/1/model.pb") == "/output/train/1/model.pb"
    assert sim.node_path("/r/nodes/edge-node-1/output") == "/output"
    assert sim.node_path("/elsewhere/model.pb") == "/elsewhere/model.pb"
    monkeypatch.delenv("DEVCLUSTER_MOUNTS")
    assert sim.node_path("/home/data/models/m.pb") == "/models/m.pb"


async def test_il_train_worker_writes_its_model_and_reports_it(tmp_path: Path) -> None:
    out = tmp_path / "output" / "train" / "1"
    mounts = f'{{"/home/data/output/train/": "{tmp_path}/output/train"}}'
    async with running_lc(tmp_path) as (lc, base), worker(
            base, WORKER_NAME="j-train-1", JOB_NAME="j", BASE_MODEL_URL="/home/data/models/base",
            MODEL_URL=str(out), DATA_PATH_PREFIX="/home/data", DEVCLUSTER_MOUNTS=mounts) as proc:
        assert await asyncio.wait_for(proc.wait(), PROCESS_TIMEOUT) == 0
        [body] = await _bodies(lc, "IncrementalLearningJob")
    assert (out / "model.pb").read_text().startswith("trained by j-train-1")
    assert (body["phase"], body["status"], body["output"]["ownerInfo"]) == ("train", "completed", None)
    assert [(m["format"], m["url"]) for m in body["output"]["models"]] == [
        ("pb", "/output/train/1/model.pb"), ("ckpt", "/output/train/1")]


@pytest.mark.parametrize(("role", "env"), [
    pytest.param("il-eval", {"TEST_DATASET_URL": "/d/eval.txt"}, id="il"),
    pytest.param("ll-eval", {"TEST_DATASET_URL": "/d/eval.csv", "OUTPUT_URL": "/output/eval/1"}, id="ll"),
])
def test_eval_workers_report_each_model_in_order(role: str, env: dict[str, str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """One result per MODEL_URLS entry, in that order (the deploy trigger reads [new, deployed])."""
    sent: list[dict[str, Any]] = []
    for name, value in {**BASE, "JOB_NAME": "j", "MODEL_URLS": "/output/train/1/model.pb;/models/d.pb",
                        "SIM_PERIOD": "0", **env}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sim, "post", lambda body: sent.append(body) or True)
    sim.ROLES[role](0, 1)
    [body] = sent
    assert (body["kind"], body["status"], "ownerInfo" in body) == ("eval", "completed", False)
    assert [r["url"] for r in body["results"]] == ["/output/train/1/model.pb", "/models/d.pb"]
    if role == "il-eval":
        new, old = (r["metrics"]["precision"] for r in body["results"])
        assert all(a - b > 0.1 for a, b in zip(new, old, strict=True))
    else:
        assert all(r["current_metric"] and r["classes"] for r in body["results"])
