"""IL and LL jobs as the GM sends them to an LC, the Dataset and Models that come with them, and
the stage reports read back from the LC's outbox; SIM is examples/workers/sim.py."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.conftest import eventually

ROOT = Path(__file__).resolve().parents[1]


def _sim() -> ModuleType:
    """examples/workers/sim.py, the simulated workers of the examples."""
    spec = importlib.util.spec_from_file_location("sim_worker", ROOT / "examples/workers/sim.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SIM = _sim()
IL, LL = "IncrementalLearningJob", "LifelongLearningJob"
NS = "default"
LINES = [f"images/{i}.jpg {i % 2}" for i in range(10)]


def _trigger(operator: str = ">", threshold: Any = 5, metric: str = "num_of_samples",
             **extra: Any) -> dict[str, Any]:
    return {"condition": {"operator": operator, "threshold": threshold, "metric": metric}, **extra}


def _cond(stage: str, kind: str, second: int, models: list | None = None) -> dict[str, Any]:
    cond: dict[str, Any] = {"type": kind, "stage": stage, "status": "True",
                            "lastTransitionTime": f"2026-12-01T10:00:{second:02d}Z"}
    if models is not None:
        cond["data"] = json.dumps({"output": {"models": models}})
    return cond


def _obj(kind: str, name: str, spec: dict, **meta: Any) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", **meta},
            "spec": spec}


def _il_job(conditions: list[dict], *, threshold: Any = 5, eval_model: bool = False,
            uid: str = "uid-il", deploy_trigger: dict | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "dataset": {"name": "ds", "trainProb": 0.8}, "initialModel": {"name": "initial"},
        "trainSpec": {"trigger": _trigger(">", threshold, checkPeriodSeconds=60)},
        "evalSpec": {"initialEvalModel": {"name": "evalm"}} if eval_model else {},
        "deploySpec": {"model": {"name": "deployed"},
                       "trigger": deploy_trigger or _trigger(">", 0.05, "precision_delta[0]")},
        "outputDir": "/output/",
    }
    job = _obj(IL, "il", spec, uid=uid)
    job["status"] = {"conditions": conditions}
    return job


def _ll_job(conditions: list[dict]) -> dict[str, Any]:
    spec = {"dataset": {"name": "ds", "trainProb": 0.5},
            "trainSpec": {"trigger": _trigger(">=", 5, checkPeriodSeconds=60)},
            "outputDir": "/ll-out"}
    job = _obj(LL, "ll", spec)
    job["status"] = {"conditions": conditions}
    return job


async def _node_objects(lc: Any, rootfs: Path, fmt: str = "txt", lines: list[str] = LINES) -> None:
    """The Dataset (index file under the rootfs) and the Models the GM sends with an IL job."""
    (rootfs / "data").mkdir(exist_ok=True)
    header = ["path,label"] if fmt == "csv" else []
    (rootfs / "data" / "index").write_text("".join(f"{x}\n" for x in header + lines))
    await lc.apply_upsert("Dataset", NS, "ds", _obj("Dataset", "ds", {
        "url": "/data/index", "format": fmt, "nodeName": "edge-1"}))
    for name, url in (("initial", "/models/base/model.pb"), ("deployed", "/models/deploy/model.pb"),
                      ("evalm", "/models/eval/model.pb")):
        await lc.apply_upsert("Model", NS, name, _obj("Model", name, {"format": "pb", "url": url}))


async def _bodies(lc: Any, count: int) -> list[Any]:
    entries = await eventually(lambda: _pending(lc, count), f"{count} outbox entries")
    return [e.body for e in entries]


async def _pending(lc: Any, count: int) -> list[Any] | None:
    """The jobs' outbox entries (the dataset monitor reports its counts too)."""
    entries = [e for e in await lc.store.pending() if e.kind != "Dataset"]
    assert len(entries) <= count, [e.body for e in entries]
    return entries if len(entries) == count else None


async def _another_tick(lc: Any, kind: str, name: str, obj: dict | None = None) -> None:
    """Give the job (optionally a newer object first) one tick that surely sees it."""
    if obj is not None:
        await lc.apply_upsert(kind, NS, name, obj)
    await lc.dispatcher.manager(kind).job(NS, name).tick()
