"""IL/LL at the edge: triggers, samples, sample files, the stage decisions and their reports.

The pure parts (trigger evaluation, sample splitting, files, deploy metrics, conditions)
are tested directly; the stage decisions run in a real LC (SQLite store, HTTP API), fed
the objects the GM would send, and are read back from the outbox the GM is sent.
"""

from __future__ import annotations

import base64
import importlib.util
import json
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
import yaml

from gm.kindlib.learning import parse_stage_report
from lc.errors import LearningError
from lc.managers.incrementallearning import hot_update_config
from lc.managers.learning.kind import LearningKind
from lc.managers.learning.models import matching_model, upstream_model
from lc.managers.learning.samples import split_new, write_samples
from lc.managers.learning.stages import current_stage, reported_models
from lc.managers.learning.state import JobState
from lc.managers.learning.triggers import deploy_stats, metric_values, parse_trigger
from proto.message import Message, Op
from proto.upstream import encode_upstream
from tests.conftest import eventually
from tests.unit.test_lc_support import running_lc, session

ROOT = Path(__file__).resolve().parents[2]


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


# ---- triggers ---------------------------------------------------------------------------


@pytest.mark.parametrize(("operator", "value", "threshold", "fires"), [
    (">", 6, 5, True), ("gt", 5, 5, False), (">=", 5, 5, True), ("ge", 4.9, 5, False),
    ("==", 5.0000001, 5, True), ("eq", 5.1, 5, False), ("=", 5, "5", True),
    ("!=", 5, 5, False), ("ne", 6, 5, True), ("<=", 5, 5, True), ("le", 6, 5, False),
    ("<", 4, 5, True), ("lt", 5, 5, False), ("<", "4.5", 5, True),
])
def test_condition_operators(operator: str, value: Any, threshold: Any, fires: bool) -> None:
    trigger = parse_trigger(_trigger(operator, threshold, "m"), "t")
    assert trigger.fires({"m": value}, datetime(2026, 12, 1, 12, 0)) is fires


@pytest.mark.parametrize(("metric", "values"), [
    ("precision_delta[1]", [0.2]), (" precision_delta [0]", [0.1]), ("precision_delta[2]", None),
    ("precision_delta[-1]", None), ("precision_delta[x]", None), ("precision_delta[0", None),
    ("precision_delta", [0.1, 0.2]), ("empty", []), ("mixed", None), ("num", [7.0]),
    ("missing", None), ("text", None),
])
def test_metric_lookup_never_crashes(metric: str, values: Any) -> None:
    stats = {"precision_delta": [0.1, 0.2], "empty": [], "mixed": [0.1, "x"], "num": 7, "text": "many"}
    assert metric_values(stats, metric) == values


STATS = {"precision_delta": [0.2, 0.15, 0.3], "recall_delta": [0.2, 0.05, 0.3], "empty": [],
         "num_of_samples": 12}


@pytest.mark.parametrize(("metric", "fires", "message"), [
    pytest.param("num_of_samples", True, "num_of_samples > 0.1 is true: the value is 12", id="scalar"),
    pytest.param("precision_delta", True,
                 "precision_delta > 0.1 is true for every element of [0.2, 0.15, 0.3]", id="list-all-true"),
    pytest.param("recall_delta", False,
                 "recall_delta > 0.1 is false: element 1 is 0.05 in [0.2, 0.05, 0.3]", id="list-one-false"),
    pytest.param("empty", False, "empty > 0.1 is false: the list is empty", id="empty-list"),
    pytest.param("recall_delta[1]", False, "recall_delta[1] > 0.1 is false: the value is 0.05",
                 id="indexed-false"),
    pytest.param("recall_delta[2]", True, "recall_delta[2] > 0.1 is true: the value is 0.3",
                 id="indexed-true"),
    pytest.param("recall_delta[3]", False,
                 "recall_delta[3] > 0.1 is false: the metrics have no number at recall_delta[3] (they have: "
                 "empty, num_of_samples, precision_delta, recall_delta)", id="indexed-out-of-range"),
])
def test_a_list_metric_holds_when_every_element_does(metric: str, fires: bool, message: str) -> None:
    trigger = parse_trigger(_trigger(">", 0.1, metric), "t")
    verdict = trigger.decide(STATS, datetime(2026, 12, 1, 12, 0))
    assert (verdict.holds, verdict.message) == (fires, message)
    assert trigger.fires(STATS, datetime(2026, 12, 1, 12, 0)) is fires


def test_a_long_list_is_quoted_in_part_and_a_closed_timer_says_so() -> None:
    trigger = parse_trigger(_trigger("<", 1, "p", timer={"start": "08:00", "end": "09:00"}), "t")
    values = [0.5] * 20
    assert trigger.decide({"p": values}, datetime(2026, 12, 1, 8, 30)).message == (
        "p < 1 is true for every element of [" + ", ".join(["0.5"] * 16) + ", ... (4 more)]")
    late = trigger.decide({"p": values}, datetime(2026, 12, 1, 21, 3))
    assert (late.holds, late.message) == (False, "the time 21:03 is outside the timer's 08:00-09:00")


@pytest.mark.parametrize(("start", "end", "now", "fires"), [
    ("08:00", "17:30", "08:00", True), ("08:00", "17:30", "17:30", True),
    ("08:00", "17:30", "17:31", False), ("8:00", "9:05", "09:00", True),
    ("22:00", "02:00", "23:59", True), ("22:00", "02:00", "01:00", True),
    ("22:00", "02:00", "12:00", False),
    # the shipped lifelong-learning example's window: 24:00 is midnight, the end of the day
    ("02:00", "24:00", "23:59", True), ("02:00", "24:00", "02:00", True),
    ("02:00", "24:00", "01:59", False), ("24:00", "01:00", "23:59", False),
    ("24:00", "01:00", "00:30", True),
])
def test_timer_window_is_inclusive_and_wraps_midnight(start: str, end: str, now: str,
                                                      fires: bool) -> None:
    trigger = parse_trigger(_trigger(">", 0, timer={"start": start, "end": end}), "t")
    hour, minute = map(int, now.split(":"))
    at = datetime(2026, 12, 1, hour, minute, 42)
    assert trigger.fires({"num_of_samples": 1}, at) is fires
    assert not trigger.fires({"num_of_samples": 0}, at)  # and the condition still counts


@pytest.mark.parametrize(("raw", "message"), [
    (_trigger("about"), "t.condition.operator 'about' is not one of"),
    (_trigger(threshold="lots"), "t.condition.threshold 'lots' is not a number"),
    (_trigger(metric=""), "t.condition.metric must be a non-empty string"),
    (_trigger(timer={"start": "8am", "end": "09:00"}), "t.timer.start must be a time HH:MM"),
    (_trigger(timer={"start": "08:00", "end": "24:01"}), "t.timer.end must be a time HH:MM"),
    (_trigger(timer={"start": "08:00", "end": "25:00"}), "t.timer.end must be a time HH:MM"),
    (_trigger(checkPeriodSeconds=0), "t.checkPeriodSeconds must be a positive number"),
    ("sometimes", "t must be an object"),
])
def test_bad_triggers_are_errors_naming_the_field(raw: Any, message: str) -> None:
    with pytest.raises(LearningError, match="^" + message.replace("(", r"\(").replace(".", r"\.")):
        parse_trigger(raw, "t")


def test_check_period_seconds_sets_how_often_the_train_trigger_is_evaluated() -> None:
    kind = LearningKind()
    job = {"spec": {"trainSpec": {"trigger": _trigger(checkPeriodSeconds=30)}}}
    assert kind.check_period(job) == 30.0
    assert kind.check_period({"spec": {"trainSpec": {"trigger": _trigger()}}}) == 10.0
    assert kind.check_period({"spec": {}}) == 10.0


def test_deploy_stats_give_each_metric_and_its_delta() -> None:
    new = {"format": "pb", "url": "/n", "metrics": {"precision": [0.7, 0.5], "recall": [0.5, 0.5]}}
    old = {"format": "pb", "url": "/o", "metrics": {"precision": [0.6, 0.6], "recall": [0.5, 0.25]}}
    stats = deploy_stats([new, old])
    assert stats["precision"] == [0.7, 0.5]
    assert stats["precision_delta"] == pytest.approx([0.1, -0.1])
    assert stats["recall_delta"] == pytest.approx([0.0, 0.25])


@pytest.mark.parametrize(("models", "message"), [
    ([], "eval reported 0 models, the deploy trigger needs 2"),
    ([{"metrics": {"p": [1]}}], "eval reported 1 models"),
    ([{"metrics": {"p": [1, 2]}}, {"metrics": {"p": [1]}}], "metric 'p' of the deployed model does not match"),
    ([{"metrics": {"p": 0.5}}, {"metrics": {"p": [1]}}], "metric 'p' of the new model is not a list"),
    ([{"metrics": None}, {"metrics": {}}], "the new model's metrics must be an object"),
])
def test_deploy_stats_refuse_what_upstream_crashes_on(models: list, message: str) -> None:
    with pytest.raises(LearningError, match=message):
        deploy_stats(models)


# ---- samples, files, conditions, models ---------------------------------------------------


def test_new_samples_split_by_train_prob_and_are_taken_once() -> None:
    state = JobState(uid="u1")
    assert split_new(state, LINES, "", 0.8)
    assert (state.train, state.evals, state.previous) == (LINES[:8], [LINES[8:]], 10)
    assert not split_new(state, LINES, "", 0.8)  # nothing new
    assert not split_new(state, LINES[:4], "", 0.8)  # a shrunk index is read on once it grows
    more = [*LINES, "images/a.jpg 1", "images/b.jpg 0", "images/c.jpg 1"]
    assert split_new(state, more, "", 0.5)
    assert state.train == [*LINES[:8], "images/a.jpg 1"]
    assert state.evals == [LINES[8:], ["images/b.jpg 0", "images/c.jpg 1"]]


def test_sample_files_txt_and_csv_replace_any_earlier_file(tmp_path: Path) -> None:
    assert write_samples(str(tmp_path / "1"), ["a 1", "b 0"], "TXT", "") == "data.txt"
    assert (tmp_path / "1" / "data.txt").read_text() == "a 1\nb 0\n"
    write_samples(str(tmp_path / "1"), ["c 1"], "txt", "")
    assert (tmp_path / "1" / "data.txt").read_text() == "c 1\n"
    assert write_samples(str(tmp_path / "2"), ["a.jpg,1"], "csv", "path,label") == "data.csv"
    assert (tmp_path / "2" / "data.csv").read_text() == "path,label\na.jpg,1\n"
    with pytest.raises(LearningError, match="dataset format 'json' cannot be written"):
        write_samples(str(tmp_path / "3"), [], "json", "")


def _cond(stage: str, kind: str, second: int, models: list | None = None) -> dict[str, Any]:
    cond: dict[str, Any] = {"type": kind, "stage": stage, "status": "True",
                            "lastTransitionTime": f"2026-12-01T10:00:{second:02d}Z"}
    if models is not None:
        cond["data"] = json.dumps({"output": {"models": models}})
    return cond


def test_current_stage_and_reported_models_read_the_condition_history() -> None:
    old = [{"format": "pb", "url": "/out/train/1/model.pb"}]
    new = [{"format": "ckpt", "url": "/out/train/2"}, {"format": "pb", "url": "/out/train/2/m.pb"}]
    job = {"status": {"conditions": [
        _cond("Train", "Completed", 1, old), _cond("Train", "Completed", 2, new),
        _cond("Train", "Completed", 3, []), _cond("eval", "waiting", 4)]}}
    stage = current_stage(job)
    assert (stage.stage, stage.type) == ("Eval", "Waiting")
    assert reported_models(job, "Train") == new
    assert reported_models(job, "Eval") == []
    assert current_stage({"status": {}}) is None
    later = {"status": {"conditions": [*job["status"]["conditions"], _cond("Eval", "Waiting", 9)]}}
    assert current_stage(later).token != stage.token  # a new Waiting condition is a new cycle


def test_models_take_upstream_shape_and_match_format_and_device() -> None:
    model = {"url": "/m", "metrics": {"p": [1]}, "format": "pb", "extra": 1,
             "device_soc_versions": ["Ascend310"]}
    shaped = upstream_model(model)
    assert list(shaped) == ["format", "url", "device_soc_versions", "metrics", "classes"]
    assert shaped["classes"] is None
    models = [{"format": "ckpt", "url": "/a"}, {"format": "pb", "url": "/b", "device_soc_versions": ["x"]},
              {"format": "pb", "url": "/c"}]
    assert matching_model(models, "pb")["url"] == "/b"
    assert matching_model(models, "pb", ("y",))["url"] == "/c"
    assert matching_model(models, "onnx") is None


def test_job_state_belongs_to_one_object() -> None:
    state = JobState(uid="u1", rounds=3, previous=12, train=["a"], done="4|Train|Waiting|t")
    assert JobState.from_json(state.to_json(), "u1") == state
    assert JobState.from_json(state.to_json(), "u2") == JobState(uid="u2")
    assert JobState.from_json(None, "u1") == JobState(uid="u1")


# ---- the stage decisions in a real LC -------------------------------------------------------


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


def test_hot_update_config_stays_in_a_jobs_directory() -> None:
    job = _il_job([])
    assert hot_update_config(job) == \
        "/var/lib/sedna/model-hot-update/default/incrementallearningjob/il/model_config.json"
    for path in ("/etc/model_config.json", "/var/lib/sedna/model-hot-update/default/x.json",
                 "/var/lib/sedna/model-hot-update/a/b/../../../../etc/c/d/x.json"):
        job["metadata"]["annotations"] = {"sedna.io/model-hot-update-config": path}
        with pytest.raises(LearningError, match="is not in a job's directory"):
            hot_update_config(job)


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
