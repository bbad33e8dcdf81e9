"""IL/LL at the edge, the pure parts: trigger evaluation, sample splitting, sample files, deploy
metrics, the condition history, models, job state and the hot-update config."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from lc.errors import LearningError
from lc.managers.incrementallearning import hot_update_config
from lc.managers.learning.kind import LearningKind
from lc.managers.learning.models import matching_model, upstream_model
from lc.managers.learning.samples import split_new, write_samples
from lc.managers.learning.stages import current_stage, reported_models
from lc.managers.learning.state import JobState
from lc.managers.learning.triggers import deploy_stats, metric_values, parse_trigger
from tests.learningjobs import (
    LINES,
    _cond,
    _il_job,
    _trigger,
)


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


def test_hot_update_config_stays_in_a_jobs_directory() -> None:
    job = _il_job([])
    assert hot_update_config(job) == \
        "/var/lib/sedna/model-hot-update/default/incrementallearningjob/il/model_config.json"
    for path in ("/etc/model_config.json", "/var/lib/sedna/model-hot-update/default/x.json",
                 "/var/lib/sedna/model-hot-update/a/b/../../../../etc/c/d/x.json"):
        job["metadata"]["annotations"] = {"sedna.io/model-hot-update-config": path}
        with pytest.raises(LearningError, match="is not in a job's directory"):
            hot_update_config(job)
