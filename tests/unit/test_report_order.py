"""The ordering rule of gm/edge/order.py: which report may be applied over the recorded one."""

from __future__ import annotations

import pytest

from gm.edge.order import (
    FIELD,
    MAX_NODES,
    Guard,
    ReportStamp,
    is_newer,
    parse_time,
    record_for,
    with_stamp,
)

NODE = "edge-1"


def stamp(seq: int = 0, *, epoch: str = "e1", time: str = "", node: str = NODE) -> ReportStamp:
    return ReportStamp(node, epoch if seq else "", seq, time)


@pytest.mark.parametrize(("new", "record", "newer"), [
    pytest.param(stamp(5), None, True, id="first-report"),
    pytest.param(stamp(6), {"node": NODE, "epoch": "e1", "seq": 5}, True, id="higher-seq"),
    pytest.param(stamp(5), {"node": NODE, "epoch": "e1", "seq": 5}, False, id="replay"),
    pytest.param(stamp(4), {"node": NODE, "epoch": "e1", "seq": 5}, False, id="late-retry"),
    pytest.param(stamp(1, epoch="e2"), {"node": NODE, "epoch": "e1", "seq": 900}, True, id="outbox-reset"),
    pytest.param(stamp(3, epoch=""), {"node": NODE, "seq": 5}, False, id="no-epoch-lc-ordered-by-seq"),
    pytest.param(stamp(3), {"node": NODE, "time": "2025-03-01 10:00:30"}, True, id="was-upstream-now-native"),
    pytest.param(stamp(3), {"node": NODE, "epoch": "e1", "seq": "5"}, True, id="malformed-record-seq"),
    pytest.param(stamp(3, time="2020-01-01 00:00:00"), {"node": NODE, "epoch": "e1", "seq": 2,
                                                         "time": "2025-03-01 10:00:30"}, True,
                 id="sequenced-ignores-time"),
    pytest.param(stamp(time="2025-03-01 10:00:31"), {"node": NODE, "time": "2025-03-01 10:00:30"}, True,
                 id="upstream-later-time"),
    pytest.param(stamp(time="2025-03-01 10:00:30"), {"node": NODE, "time": "2025-03-01 10:00:30"}, True,
                 id="upstream-same-second-arrival-order"),
    pytest.param(stamp(time="2025-03-01 10:00:29"), {"node": NODE, "time": "2025-03-01 10:00:30"}, False,
                 id="upstream-older-time"),
    pytest.param(stamp(time="2025-03-01T10:00:29Z"), {"node": NODE, "time": "2025-03-01T11:00:30+01:00"}, False,
                 id="upstream-rfc3339-offsets"),
    pytest.param(stamp(time="2025-03-01T10:00:29Z"), {"node": NODE, "time": "2025-03-01 10:00:30"}, True,
                 id="upstream-aware-vs-naive-arrival-order"),
    pytest.param(stamp(time="soon"), {"node": NODE, "time": "2025-03-01 10:00:30"}, True,
                 id="upstream-unparseable-arrival-order"),
    pytest.param(stamp(), {"node": NODE, "epoch": "e1", "seq": 7}, True, id="upstream-no-time"),
])
def test_is_newer(new: ReportStamp, record: dict | None, newer: bool) -> None:
    assert is_newer(new, record) is newer


def test_parse_time_accepts_rfc3339_and_upstream_local_time() -> None:
    assert parse_time("2025-03-01 10:00:30").isoformat() == "2025-03-01T10:00:30"
    assert parse_time("2025-03-01T10:00:30.123456789Z").isoformat() == "2025-03-01T10:00:30.123456+00:00"
    assert parse_time("") is None and parse_time(17) is None and parse_time("10:00") is None


def test_with_stamp_replaces_the_node_entry_and_moves_it_last() -> None:
    status = {FIELD: [{"node": NODE, "epoch": "e1", "seq": 3}, {"node": "cloud", "time": "t"}], "x": 1}
    out = with_stamp(status, stamp(4))
    assert out[FIELD] == [{"node": "cloud", "time": "t"}, {"node": NODE, "epoch": "e1", "seq": 4}]
    assert out["x"] == 1


def test_with_stamp_is_bounded_dropping_the_least_recent() -> None:
    status: dict = {}
    for i in range(MAX_NODES + 5):
        status = with_stamp(status, stamp(1, node=f"n{i}"))
    nodes = [r["node"] for r in status[FIELD]]
    assert nodes == [f"n{i}" for i in range(5, MAX_NODES + 5)]


def test_malformed_records_are_ignored() -> None:
    status = {FIELD: [{"seq": 9}, "junk", {"node": 3}, {"node": NODE, "epoch": "e1", "seq": 2}]}
    assert record_for(status, NODE) == {"node": NODE, "epoch": "e1", "seq": 2}
    assert with_stamp(status, stamp(3, node="n2"))[FIELD] == [
        {"node": NODE, "epoch": "e1", "seq": 2}, {"node": "n2", "epoch": "e1", "seq": 3}]
    assert record_for({FIELD: "junk"}, NODE) is None


def test_guard_applies_newer_reports_and_leaves_older_ones() -> None:
    def count(n: int):
        def mutate(status: dict) -> dict:
            status["numberOfSamples"] = n
            return status
        return mutate

    newer = Guard(stamp(7), count(70))
    status = newer({"numberOfSamples": 60, FIELD: [{"node": NODE, "epoch": "e1", "seq": 6}]})
    assert not newer.stale
    assert status == {"numberOfSamples": 70, FIELD: [{"node": NODE, "epoch": "e1", "seq": 7}]}

    older = Guard(stamp(6), count(60))
    assert older(dict(status)) == status and older.stale
    other_node = Guard(stamp(2, node="edge-2"), count(20))
    assert other_node(dict(status))["numberOfSamples"] == 20 and not other_node.stale
