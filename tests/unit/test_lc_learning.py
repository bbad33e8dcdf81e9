"""IL/LL at the edge: the stage decisions and their reports.

The stage decisions run in a real LC (SQLite store, HTTP API), fed the objects the GM would
send, and are read back from the outbox the GM is sent (the pure parts:
test_lc_learning_parts.py)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from gm.kindlib.learning import parse_stage_report
from lc.managers.learning.models import upstream_model
from proto.message import Message, Op
from proto.upstream import encode_upstream
from tests.conftest import eventually
from tests.learningjobs import (
    IL,
    LINES,
    LL,
    NS,
    SIM,
    _another_tick,
    _bodies,
    _cond,
    _il_job,
    _ll_job,
    _node_objects,
    _obj,
    _pending,
)
from tests.unit.test_lc_support import running_lc, session

ROOT = Path(__file__).resolve().parents[2]


TRAINED = [{"format": "pb", "url": "/output/train/1/model.pb", "metrics": {"loss": 0.8}},
           {"format": "ckpt", "url": "/output/train/1", "metrics": {"loss": 0.8}}]


async def test_il_train_is_reported_once_per_cycle_with_its_sample_files(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    waiting = [_cond("Train", "Waiting", 0)]
    async with running_lc(tmp_path) as (lc, _):
        await _node_objects(lc, rootfs)
        await lc.apply_upsert(IL, NS, "il", _il_job(waiting))
        [body] = await _bodies(lc, 1)
        assert body == {"phase": "Train", "status": "Ready", "input": {
            "models": [{"format": "pb", "url": "/models/base/model.pb", "classes": None}],
            "dataURL": "/output/data/train/1/data.txt", "outputDir": "/output/train/1"},
            "output": None, "reason": "TrainTriggerFired",
            "message": "round 1: num_of_samples > 5 is true: the value is 8"}
        assert (rootfs / "output/data/train/1/data.txt").read_text().splitlines() == LINES[:8]
        await _another_tick(lc, IL, "il", _il_job(waiting))  # the GM's view has not moved yet
        assert len(await _pending(lc, 1)) == 1
    async with running_lc(tmp_path) as (lc, _):  # a restart neither resends nor forgets
        job = lc.dispatcher.manager(IL).job(NS, "il")
        await job.tick()
        assert len(await _pending(lc, 1)) == 1
        assert (job.state.rounds, job.state.previous, job.state.train) == (1, 10, [])
        done = [*waiting, _cond("Train", "Ready", 1), _cond("Train", "Running", 2),
                _cond("Train", "Completed", 3, TRAINED), _cond("Train", "Waiting", 4)]
        await _another_tick(lc, IL, "il", _il_job(done))  # a new cycle, but no new samples
        assert len(await _pending(lc, 1)) == 1
        (rootfs / "data" / "index").write_text("".join(f"{x}\n" for x in LINES + LINES[:9]))
        await _another_tick(lc, IL, "il")
        _, second = await _bodies(lc, 2)
    assert second["input"] == {"models": [upstream_model(TRAINED[0])],
                               "dataURL": "/output/data/train/2/data.txt",
                               "outputDir": "/output/train/2"}
    assert (rootfs / "output/data/train/2/data.txt").read_text().splitlines() == LINES[:7]


async def test_il_train_waits_for_the_trigger_and_only_the_dataset_node_decides(
        tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    async with running_lc(tmp_path) as (lc, _):
        await lc.apply_upsert(IL, NS, "il", _il_job([_cond("Train", "Waiting", 0)], threshold=8))
        await _another_tick(lc, IL, "il")  # no Dataset on this node: not its decision
        await _node_objects(lc, rootfs)
        await _another_tick(lc, IL, "il")  # 8 train samples, the trigger wants more than 8
        assert await _pending(lc, 0) == []
        (rootfs / "data" / "index").write_text("".join(f"{x}\n" for x in LINES * 2))
        await _another_tick(lc, IL, "il")
        [body] = await _bodies(lc, 1)
    assert (rootfs / "output/data/train/1/data.txt").read_text().splitlines() == LINES[:8] * 2
    assert body["input"]["dataURL"] == "/output/data/train/1/data.txt"


def _il_until_eval(extra: list[dict]) -> list[dict]:
    return [_cond("Train", "Waiting", 0), _cond("Train", "Ready", 1),
            _cond("Train", "Completed", 2, TRAINED), _cond("Eval", "Waiting", 3), *extra]


async def _il_round_one(lc: Any, rootfs: Path, **job: Any) -> None:
    await _node_objects(lc, rootfs)
    await lc.apply_upsert(IL, NS, "il", _il_job([_cond("Train", "Waiting", 0)], **job))
    await _bodies(lc, 1)


async def test_il_eval_then_deploy_copy_the_trained_model(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "output/train/1").mkdir(parents=True)
    (rootfs / "output/train/1/model.pb").write_bytes(b"new")
    (rootfs / "models/deploy").mkdir(parents=True)
    (rootfs / "models/deploy/model.pb").write_bytes(b"the old, longer model")
    evaluated = [{"format": "pb", "url": "/output/train/1/model.pb",
                  "metrics": {"precision": [0.7, 0.6], "recall": [0.5, 0.5]}},
                 {"format": "pb", "url": "/models/deploy/model.pb",
                  "metrics": {"precision": [0.6, 0.6], "recall": [0.6, 0.5]}}]
    async with running_lc(tmp_path) as (lc, _):
        await _il_round_one(lc, rootfs)
        await lc.apply_upsert(IL, NS, "il", _il_job(_il_until_eval([])))
        _, eval_body = await _bodies(lc, 2)
        deploy = _il_until_eval([_cond("Eval", "Completed", 4, evaluated), _cond("Deploy", "Waiting", 5)])
        await lc.apply_upsert(IL, NS, "il", _il_job(deploy))
        *_, deploy_body = await _bodies(lc, 3)
    assert eval_body == {"phase": "Eval", "status": "Ready", "input": {
        "models": [upstream_model(TRAINED[0]),
                   {"format": "pb", "url": "/models/deploy/model.pb", "classes": None}],
        "dataURL": "/output/data/eval/1/data.txt"}, "output": None, "reason": "TrainedModelFound",
        "message": "evaluating /output/train/1/model.pb against /models/deploy/model.pb"}
    assert (rootfs / "output/data/eval/1/data.txt").read_text().splitlines() == LINES[8:]
    assert deploy_body == {"phase": "Deploy", "status": "Ready", "input": {"models": [
        upstream_model(TRAINED[0]),
        {"format": "pb", "url": "/models/deploy/model.pb", "classes": None}]}, "output": None,
        "reason": "DeployTriggerFired", "message": "deploying /output/train/1/model.pb: "
        "precision_delta[0] > 0.05 is true: the value is 0.1"}
    assert (rootfs / "models/deploy/model.pb").read_bytes() == b"new"


@pytest.mark.parametrize(("new", "status", "reason", "message"), [
    pytest.param([0.62, 0.6], "Completed", "DeployTriggerNotFired",
                 "the trained model is not deployed: precision_delta[0] > 0.05 is false: the value is 0.02",
                 id="no-better-no-deploy"),
    pytest.param([0.7], "Failed", "StageFailed",
                 "metric 'precision' of the deployed model does not match the new one",
                 id="metrics-do-not-match"),
])
async def test_il_deploy_without_a_better_model_or_with_bad_metrics(
        tmp_path: Path, new: list, status: str, reason: str, message: str) -> None:
    evaluated = [{"format": "pb", "url": "/output/train/1/model.pb", "metrics": {"precision": new}},
                 {"format": "pb", "url": "/models/deploy/model.pb", "metrics": {"precision": [0.6, 0.6]}}]
    async with running_lc(tmp_path) as (lc, _):
        await _il_round_one(lc, tmp_path / "rootfs")
        deploy = _il_until_eval([_cond("Eval", "Completed", 4, evaluated), _cond("Deploy", "Waiting", 5)])
        await lc.apply_upsert(IL, NS, "il", _il_job(deploy))
        _, body = await _bodies(lc, 2)
    assert body == {"phase": "Deploy", "status": status, "output": None, "reason": reason,
                    "message": message}


def _example_eval_report(monkeypatch: pytest.MonkeyPatch, urls: list[str]) -> dict[str, Any]:
    """What the example's simulated eval worker reports for `urls` (new, deployed)."""
    sent: list[dict[str, Any]] = []
    for name, value in {"NAMESPACE": NS, "WORKER_NAME": "il-eval-1", "JOB_NAME": "il",
                        "LC_SERVER": "http://localhost:9100", "TEST_DATASET_URL": "/d/eval.txt",
                        "MODEL_URLS": ";".join(urls), "SIM_PERIOD": "0"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(SIM, "post", lambda body: sent.append(body) or True)
    SIM.ROLES["il-eval"](0, 1)
    [body] = sent
    return body


def _as_the_gm_keeps_it(report: dict[str, Any], second: int) -> dict[str, Any]:
    """The Eval/Completed condition the GM makes of a relayed eval report (its own parser)."""
    parsed = parse_stage_report({"phase": report["kind"], "status": report["status"],
                                 "output": {"models": report["results"], "ownerInfo": None}})
    return {"type": parsed.type, "stage": parsed.stage, "status": "True", "data": parsed.data,
            "lastTransitionTime": f"2026-12-01T10:00:{second:02d}Z"}


EXAMPLE_DEPLOY_TRIGGER = next(d for d in yaml.safe_load_all(
    (ROOT / "examples/upstream/incremental-learning-helmet-detection.yaml").read_text())
    if d and d["kind"] == "IncrementalLearningJob")["spec"]["deploySpec"]["trigger"]


@pytest.mark.parametrize(("worse_class", "status", "message"), [
    pytest.param(None, "Ready", "deploying /output/train/1/model.pb: precision_delta > 0.1 is true for "
                 "every element of [0.2, 0.2, 0.2, 0.2]", id="better-on-every-class"),
    pytest.param(2, "Completed", "the trained model is not deployed: precision_delta > 0.1 is false: "
                 "element 2 is -0.04 in [0.2, 0.2, -0.04, 0.2]", id="worse-on-one-class"),
])
async def test_the_upstream_examples_deploy_trigger_reads_its_eval_workers_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worse_class: int | None, status: str,
        message: str) -> None:
    """`precision_delta > 0.1` as upstream ships it, over the per-class lists its eval worker
    reports: a model better on every class is deployed, one worse on any class is not."""
    assert EXAMPLE_DEPLOY_TRIGGER["condition"] == {"operator": ">", "threshold": 0.1,
                                                   "metric": "precision_delta"}
    report = _example_eval_report(monkeypatch, ["/output/train/1/model.pb", "/models/deploy/model.pb"])
    if worse_class is not None:
        new, old = (r["metrics"]["precision"] for r in report["results"])
        new[worse_class] = old[worse_class] - 0.04
    rootfs = tmp_path / "rootfs"
    (rootfs / "output/train/1").mkdir(parents=True)
    (rootfs / "output/train/1/model.pb").write_bytes(b"new")
    async with running_lc(tmp_path) as (lc, _):
        await _il_round_one(lc, rootfs, deploy_trigger=EXAMPLE_DEPLOY_TRIGGER)
        deploy = _il_until_eval([_as_the_gm_keeps_it(report, 4), _cond("Deploy", "Waiting", 5)])
        await lc.apply_upsert(IL, NS, "il", _il_job(deploy, deploy_trigger=EXAMPLE_DEPLOY_TRIGGER))
        _, body = await _bodies(lc, 2)
    assert (body["phase"], body["status"], body["message"]) == ("Deploy", status, message)
    assert (rootfs / "models/deploy/model.pb").exists() is (status == "Ready")


async def test_il_eval_without_a_trained_model_of_its_format_fails_the_stage(
        tmp_path: Path) -> None:
    conditions = [_cond("Train", "Waiting", 0), _cond("Train", "Completed", 2, TRAINED[1:]),
                  _cond("Eval", "Waiting", 3)]
    async with running_lc(tmp_path) as (lc, _):
        await _il_round_one(lc, tmp_path / "rootfs")
        await lc.apply_upsert(IL, NS, "il", _il_job(conditions))
        _, body = await _bodies(lc, 2)
    assert body == {"phase": "Eval", "status": "Failed", "output": None, "reason": "StageFailed",
                    "message": "no trained model of format 'pb' was reported"}


async def test_il_eval_against_the_initial_eval_model_on_csv_data(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    rows = [f"img{i}.jpg,{i % 2}" for i in range(10)]
    async with running_lc(tmp_path) as (lc, _):
        await _node_objects(lc, rootfs, "csv", rows)
        await lc.apply_upsert(IL, NS, "il", _il_job([_cond("Train", "Waiting", 0)], eval_model=True))
        [train] = await _bodies(lc, 1)
        await lc.apply_upsert(IL, NS, "il", _il_job(_il_until_eval([]), eval_model=True))
        _, body = await _bodies(lc, 2)
    assert train["input"]["dataURL"] == "/output/data/train/1/data.csv"
    assert (rootfs / "output/data/train/1/data.csv").read_text().splitlines() == ["path,label", *rows[:8]]
    assert body["input"]["models"][1] == {"format": "pb", "url": "/models/eval/model.pb", "classes": None}
    assert body["input"]["dataURL"] == "/output/data/eval/1/data.csv"


async def test_il_train_completion_is_relayed_with_its_models(tmp_path: Path) -> None:
    report = {"name": "il-train-x8k2q", "namespace": NS, "ownerName": "il",
              "ownerKind": "incrementallearningjob", "kind": "train", "status": "completed",
              "results": TRAINED}
    async with running_lc(tmp_path) as (lc, base), session() as http:
        await lc.apply_upsert(IL, NS, "il", _il_job([_cond("Train", "Running", 2)]))
        async with http.post(f"{base}/sedna/workers/{report['name']}/info",
                             data=json.dumps(report),
                             headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 200
        [entry] = await lc.store.pending()
    assert (entry.kind, entry.namespace, entry.name) == (IL, NS, "il")
    assert entry.body == {"phase": "train", "status": "completed",
                          "output": {"models": TRAINED, "ownerInfo": None}}


async def test_a_recreated_job_starts_afresh(tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, _):
        await _il_round_one(lc, tmp_path / "rootfs")
        await lc.apply_delete(IL, NS, "il")
        assert await lc.store.get_state(IL, NS, "il") is None
        await lc.apply_upsert(IL, NS, "il", _il_job([_cond("Train", "Waiting", 0)], uid="uid-il-2"))
        _, body = await _bodies(lc, 2)
    assert body["input"]["outputDir"] == "/output/train/1"  # round 1 again, all samples new


async def test_ll_cycle_train_eval_deploy(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    trained = [{"format": "pkl", "url": "/ll-out/train/1/index.pkl", "metrics": None}]
    evaluated = [{"format": "pkl", "url": "/ll-out/eval/1/index.pkl",
                  "current_metric": {"task": {"precision": 0.9}}}]
    (rootfs / "ll-out/eval/1").mkdir(parents=True)
    (rootfs / "ll-out/eval/1/index.pkl").write_bytes(b"kb")
    history = [_cond("Train", "Waiting", 0)]
    async with running_lc(tmp_path) as (lc, _):
        await _node_objects(lc, rootfs)
        await lc.apply_upsert(LL, NS, "ll", _ll_job(history))
        [train] = await _bodies(lc, 1)
        history += [_cond("Train", "Completed", 1, trained), _cond("Eval", "Waiting", 2)]
        await lc.apply_upsert(LL, NS, "ll", _ll_job(history))
        _, evaluation = await _bodies(lc, 2)
        history += [_cond("Eval", "Completed", 3, evaluated), _cond("Deploy", "Waiting", 4)]
        await lc.apply_upsert(LL, NS, "ll", _ll_job(history))
        *_, deploy = await _bodies(lc, 3)
    assert train == {"phase": "Train", "status": "Ready", "input": {
        "dataURL": "/ll-out/data/train/1/data.txt", "outputDir": "/ll-out/train/1"}, "output": None,
        "reason": "TrainTriggerFired", "message": "round 1: num_of_samples >= 5 is true: the value is 5"}
    assert (rootfs / "ll-out/data/train/1/data.txt").read_text().splitlines() == LINES[:5]
    assert evaluation == {"phase": "Eval", "status": "Ready", "input": {
        "models": [{"format": "pkl", "url": "/ll-out/train/1/index.pkl", "classes": None}],
        "dataURL": "/ll-out/data/eval/1/data.txt", "outputDir": "/ll-out/eval/1"}, "output": None,
        "reason": "TrainedModelFound", "message": "evaluating the models of train round 1: 1"}
    assert (rootfs / "ll-out/data/eval/1/data.txt").read_text().splitlines() == LINES[5:]
    assert deploy == {"phase": "Deploy", "status": "Ready", "input": {"models": [
        {"format": "pkl", "url": "/ll-out/eval/1/index.pkl", "classes": None}]}, "output": None,
        "reason": "EvaluatedModelFound",
        "message": "deploying /ll-out/eval/1/index.pkl to /ll-out/deploy/index.pkl"}
    assert (rootfs / "ll-out/deploy/index.pkl").read_bytes() == b"kb"


async def test_ll_eval_without_trained_models_fails_instead_of_reporting_null(
        tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, _):
        await _node_objects(lc, tmp_path / "rootfs")
        await lc.apply_upsert(LL, NS, "ll", _ll_job([_cond("Train", "Completed", 1, []),
                                                    _cond("Eval", "Waiting", 2)]))
        [body] = await _bodies(lc, 1)
    assert body == {"phase": "Eval", "status": "Failed", "output": None, "reason": "StageFailed",
                    "message": "no trained model was reported"}


async def test_deploy_is_decided_on_the_eval_node_the_job_names(tmp_path: Path) -> None:
    evaluated = [{"format": "pb", "url": "/n", "metrics": {"precision": [0.6]}},
                 {"format": "pb", "url": "/o", "metrics": {"precision": [0.6]}}]
    conditions = _il_until_eval([_cond("Eval", "Completed", 4, evaluated), _cond("Deploy", "Waiting", 5)])
    elsewhere = _il_job(conditions)
    elsewhere["metadata"]["annotations"] = {"sedna.io/Eval": "edge-2"}
    for node in ("edge-1", "edge-2"):
        (tmp_path / node).mkdir()
    async with running_lc(tmp_path / "edge-1", NODENAME="edge-1") as (lc, _):
        await _node_objects(lc, tmp_path / "edge-1" / "rootfs")
        await lc.apply_upsert(IL, NS, "il", elsewhere)
        await _another_tick(lc, IL, "il")  # the Dataset is here, but edge-2 evaluates
        assert await _pending(lc, 0) == []
    here = _il_job(conditions)
    here["metadata"]["annotations"] = {"sedna.io/Eval": "edge-2"}
    async with running_lc(tmp_path / "edge-2", NODENAME="edge-2") as (lc, _):
        for name in ("initial", "deployed"):  # no Dataset on the eval node
            await lc.apply_upsert("Model", NS, name, _obj("Model", name, {"format": "pb", "url": "/m"}))
        await lc.apply_upsert(IL, NS, "il", here)
        [body] = await _bodies(lc, 1)
    assert body == {"phase": "Deploy", "status": "Completed", "output": None,
                    "reason": "DeployTriggerNotFired", "message": "the trained model is not deployed: "
                    "precision_delta[0] > 0.05 is false: the value is 0"}


async def test_ll_deploy_without_an_evaluated_model_needs_no_deploy(tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, _):
        await _node_objects(lc, tmp_path / "rootfs")
        await lc.apply_upsert(LL, NS, "ll", _ll_job([_cond("Eval", "Completed", 1, []),
                                                    _cond("Deploy", "Waiting", 2)]))
        [body] = await _bodies(lc, 1)
    assert body == {"phase": "Deploy", "status": "Completed", "output": None,
                    "reason": "NoEvaluatedModel", "message": "the eval reported no model to deploy"}


async def test_stage_reports_travel_in_upstream_frames(tmp_path: Path) -> None:
    async with running_lc(tmp_path) as (lc, _):
        await _node_objects(lc, tmp_path / "rootfs")
        await lc.apply_upsert(IL, NS, "il", _il_job([_cond("Train", "Waiting", 0)]))
        [entry] = await eventually(lambda: _pending(lc, 1), "the train report")
    frame = orjson.loads(encode_upstream(Message(Op.STATUS, entry.seq, entry.kind, entry.namespace,
                                                 entry.name, entry.body)))
    assert frame["header"] == {"namespace": NS, "resourceKind": IL, "resourceName": "il",
                               "operation": "status"}
    content = orjson.loads(base64.b64decode(frame["content"]))
    assert content == entry.body and content["output"] is None


async def test_il_hot_update_replaces_the_model_the_worker_polls_once(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "output/train/1").mkdir(parents=True)
    (rootfs / "output/train/1/model.pb").write_bytes(b"new")
    (rootfs / "models/deploy").mkdir(parents=True)
    (rootfs / "models/deploy/model.pb").write_bytes(b"old")
    evaluated = [{"format": "pb", "url": "/output/train/1/model.pb", "metrics": {"precision": [0.9]}},
                 {"format": "pb", "url": "/models/deploy/model.pb", "metrics": {"precision": [0.6]}}]
    waiting = _il_until_eval([_cond("Eval", "Completed", 4, evaluated), _cond("Deploy", "Waiting", 5)])
    job_dir = rootfs / "var/lib/sedna/model-hot-update/default/incrementallearningjob/il"

    def hot(conditions: list[dict]) -> dict:
        job = _il_job(conditions)
        job["spec"]["deploySpec"]["model"]["hotUpdateEnabled"] = True
        return job

    async with running_lc(tmp_path) as (lc, _):
        await _il_round_one(lc, rootfs)
        await lc.apply_upsert(IL, NS, "il", hot(waiting))
        _, ready = await _bodies(lc, 2)
        assert ready["status"] == "Ready"
        assert (rootfs / "models/deploy/model.pb").read_bytes() == b"old"  # the worker reloads
        running = [*waiting, _cond("Deploy", "Ready", 6), _cond("Deploy", "Running", 7)]
        await _another_tick(lc, IL, "il", hot(running))
        config = json.loads((job_dir / "model_config.json").read_text())
        assert config["model_config"]["model_path"] == "/model-hot-update/model.pb"
        assert (job_dir / "model.pb").read_bytes() == b"new"
        assert (rootfs / "models/deploy/model.pb").read_bytes() == b"new"
        await _another_tick(lc, IL, "il", hot(running))  # the same Running condition: done
        assert json.loads((job_dir / "model_config.json").read_text()) == config
        assert len(await _pending(lc, 2)) == 2  # the worker reports the reload, not the LC
        await lc.apply_delete(IL, NS, "il")
    assert not job_dir.exists()


async def test_pending_train_samples_survive_a_restart(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    async with running_lc(tmp_path) as (lc, _):
        await _node_objects(lc, rootfs)
        await lc.apply_upsert(IL, NS, "il", _il_job([_cond("Train", "Waiting", 0)], threshold=8))
        await _another_tick(lc, IL, "il")  # 8 train samples pending, the trigger wants more
        assert await _pending(lc, 0) == []
    (rootfs / "data" / "index").write_text("".join(f"{x}\n" for x in LINES * 2))
    async with running_lc(tmp_path) as (lc, _):  # resumed from the store alone
        [body] = await _bodies(lc, 1)
    assert body["input"]["models"] == [{"format": "pb", "url": "/models/base/model.pb",
                                        "classes": None}]
    assert (rootfs / "output/data/train/1/data.txt").read_text().splitlines() == LINES[:8] * 2
