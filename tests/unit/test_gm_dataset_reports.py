"""Dataset reports at the GM: a problem the LC reports becomes the IndexReadable condition.

The parsing and the status mutation are pure (gm/reports.py); the Event and the CR
write are exercised end to end in tests/e2e/test_lc_dataset_files.py.
"""

from __future__ import annotations

import pytest

from gm.reports import (
    INDEX_READABLE,
    DatasetReport,
    DatasetStatusUpdate,
    IndexProblem,
    ReportInvalid,
    parse_dataset_status,
)

NOW, LATER = "2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z"
FIFO = IndexProblem("NotRegularFile", "index file /data/pipe is a FIFO, not a regular file")


def apply(status: dict, report: DatasetReport, now: str = NOW) -> tuple[dict, bool]:
    update = DatasetStatusUpdate(report, now=now)
    return update(status), update.raised


def test_a_plain_count_is_upstreams_report() -> None:
    assert parse_dataset_status({"numberOfSamples": 5}) == DatasetReport(5)
    status, raised = apply({}, DatasetReport(5))
    assert (status, raised) == ({"numberOfSamples": 5, "updateTime": NOW}, False)  # no condition


def test_a_problem_sets_the_condition_false_and_is_raised_once() -> None:
    report = parse_dataset_status({"numberOfSamples": 0, "error": {
        "reason": FIFO.reason, "message": FIFO.message}})
    assert report == DatasetReport(0, FIFO)
    status, raised = apply({}, report)
    assert raised
    assert status == {"numberOfSamples": 0, "updateTime": NOW, "conditions": [{
        "type": INDEX_READABLE, "status": "False", "reason": FIFO.reason, "message": FIFO.message,
        "lastTransitionTime": NOW}]}
    again, raised = apply(dict(status), report, LATER)  # a resend, or the next write attempt
    assert (again, raised) == (status, False)
    other = IndexProblem("TooLarge", "index file /data/pipe is 2 bytes, over the limit of 1 bytes")
    changed, raised = apply(dict(status), DatasetReport(0, other), LATER)
    assert raised and changed["conditions"][0]["reason"] == "TooLarge"
    assert changed["conditions"][0]["lastTransitionTime"] == NOW  # still False since then


def test_a_count_after_a_problem_sets_it_true_and_keeps_other_conditions() -> None:
    status = {"numberOfSamples": 3, "updateTime": NOW, "conditions": [
        {"type": "Other", "status": "True"},
        {"type": INDEX_READABLE, "status": "False", "reason": "NotFound", "message": "gone",
         "lastTransitionTime": NOW}]}
    cleared, raised = apply(status, DatasetReport(3), LATER)
    assert not raised
    assert cleared["numberOfSamples"] == 3 and cleared["updateTime"] == NOW  # count unchanged
    assert cleared["conditions"] == [{"type": "Other", "status": "True"}, {
        "type": INDEX_READABLE, "status": "True", "reason": "Counted",
        "message": "the index file was read and its samples counted", "lastTransitionTime": LATER}]


def test_upstream_decoding_keeps_the_count_of_a_problem_report() -> None:
    # Upstream's GM decodes the body into DatasetStatus: unknown keys are ignored, the count
    # (the LC's last one) is what it writes. Ours writes the same count.
    status, _ = apply({"numberOfSamples": 7, "updateTime": NOW}, DatasetReport(7, FIFO), LATER)
    assert (status["numberOfSamples"], status["updateTime"]) == (7, NOW)


@pytest.mark.parametrize(("error", "message"), [
    pytest.param("boom", "error must be an object, got str", id="not-an-object"),
    pytest.param({"message": "m"}, "error.reason must be a CamelCase word", id="no-reason"),
    pytest.param({"reason": "not a word", "message": "m"}, "error.reason must be a CamelCase word",
                 id="reason-with-spaces"),
    pytest.param({"reason": "R" * 129, "message": "m"}, "of at most 128 characters", id="long-reason"),
    pytest.param({"reason": "NotFound", "message": 3}, "error.message must be a string, got int",
                 id="message-type"),
    pytest.param({"reason": "NotFound", "message": " "}, "error.message must not be empty", id="empty-message"),
])
def test_malformed_problems_are_refused(error, message: str) -> None:
    with pytest.raises(ReportInvalid, match=message):
        parse_dataset_status({"numberOfSamples": 0, "error": error})


def test_long_messages_are_cut_to_the_condition_limit() -> None:
    report = parse_dataset_status({"numberOfSamples": 0, "error": {"reason": "Unreadable", "message": "x" * 5000}})
    assert report.problem is not None and len(report.problem.message) == 1024
