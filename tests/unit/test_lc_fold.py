"""Folding latest-wins reports: the fold key rule, the link's backlog, and the store's settling.

The GM keeps only the latest Dataset count and the latest metrics of the metrics kinds, so an
unsent report of those is covered by a newer one from the same source; everything else is
sent one by one. Covered reports stay in the outbox until the covering report's ack deletes
them, in the same transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lc.fold import fold_key
from lc.link.backlog import Backlog
from lc.link.window import InFlight
from lc.store.facade import Store
from lc.store.outbox import OutboxEntry


def metrics_body(n: int | None) -> dict[str, Any]:
    owner_info = None if n is None else {"inferenceNumber": n}
    return {"phase": "inference", "status": "", "output": {"models": None, "ownerInfo": owner_info}}


# ---- which reports fold ---------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "body", "folds"), [
    pytest.param("Dataset", {"numberOfSamples": 3}, True, id="dataset"),
    *(pytest.param(kind, metrics_body(1), True, id=kind) for kind in (
        "JointInferenceService", "FeatureExtractionService", "ObjectSearchService",
        "ObjectTrackingService", "ReidJob", "VideoAnalyticsJob")),
    pytest.param("JointInferenceService", metrics_body(None), False, id="ji-without-ownerInfo"),
    pytest.param("FederatedLearningJob", metrics_body(1), False, id="fl"),
    pytest.param("IncrementalLearningJob", metrics_body(1), False, id="il"),
    pytest.param("LifelongLearningJob", metrics_body(1), False, id="ll"),
    pytest.param("Model", {"n": 1}, False, id="model"),
])
def test_only_latest_wins_kinds_fold(kind: str, body: dict[str, Any], folds: bool) -> None:
    key = fold_key(kind, "default", "x", body, source="w1")
    assert (key is not None) == folds
    if folds:
        assert key == f"{kind}/default/x/w1"
        assert fold_key(kind, "default", "x", body, source="w2") != key


# ---- the backlog ----------------------------------------------------------------------------


def entry(seq: int, name: str, *, fold: bool = True, source: str = "w1",
          kind: str = "JointInferenceService") -> OutboxEntry:
    body = metrics_body(seq)
    return OutboxEntry(seq, kind, "default", name, body, 0.0,
                       fold_key(kind, "default", name, body, source=source) if fold else None)


def test_newer_report_covers_older_ones_of_its_key_only() -> None:
    backlog = Backlog(per_object=3)
    for e in [entry(1, "a"), entry(2, "a", source="w2"), entry(3, "b"), entry(4, "a"),
              entry(5, "a", fold=False), entry(6, "a"), entry(7, "a", fold=False)]:
        backlog.add(e)
    assert backlog.covered == 2  # 1 and 4, by 6 (same object, same worker)
    window = InFlight(limit=64, ack_timeout=60.0)
    assert [e.seq for e in backlog.take(64, window)] == [2, 3, 5, 6]  # per object: 3 at most
    assert len(backlog) == 1
    assert [e.seq for e in backlog.take(64, window)] == [7]  # nothing was recorded in flight


def test_an_object_at_its_bound_does_not_hold_back_the_others() -> None:
    backlog = Backlog(per_object=2)
    window = InFlight(limit=8, ack_timeout=60.0)
    for seq in range(1, 6):
        backlog.add(entry(seq, "slow", fold=False))
    backlog.add(entry(6, "other", fold=False))
    sent = backlog.take(8, window)
    assert [e.seq for e in sent] == [1, 2, 6]
    for e in sent:
        window.add(e, now=0.0)
    assert backlog.take(8, window) == []  # slow has 2 in flight
    assert window.of_object(("JointInferenceService", "default", "slow")) == 2
    window.ack(2)  # an ack of slow frees one of its slots: the next one in seq order
    assert [e.seq for e in backlog.take(8, window)] == [3]
    assert backlog.lowest() is not None and backlog.lowest().seq == 4


def test_take_lowest_sends_the_oldest_alone_or_nothing() -> None:
    backlog = Backlog(per_object=1)
    window = InFlight(limit=8, ack_timeout=60.0)
    backlog.add(entry(1, "a", fold=False))
    backlog.add(entry(2, "a", fold=False))
    backlog.add(entry(3, "b", fold=False))
    first = backlog.take_lowest(window)
    assert first is not None and first.seq == 1
    window.add(first, now=0.0)
    assert backlog.take_lowest(window) is None  # 2 is next and a is at its bound
    with pytest.raises(ValueError):
        Backlog(per_object=0)


# ---- the store settles covered reports with the covering one --------------------------------


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(str(tmp_path / "lc.db"), synchronous="NORMAL")
    try:
        yield s
    finally:
        await s.close()


async def _append(store: Store, name: str, n: int, source: str = "w1") -> int:
    return await store.append_report("JointInferenceService", "default", name, metrics_body(n),
                                     source=source)


async def test_ack_of_the_covering_report_deletes_the_older_ones_of_its_key(store: Store) -> None:
    older = [await _append(store, "ji", i) for i in range(3)]
    other_worker = await _append(store, "ji", 9, source="w2")
    other_object = await _append(store, "other", 9)
    covering = await _append(store, "ji", 3)
    newer = await _append(store, "ji", 4)
    entries = {e.seq: e for e in await store.pending()}
    assert entries[covering].fold == "JointInferenceService/default/ji/w1"
    assert await store.ack_one(covering, fold=entries[covering].fold)
    assert [e.seq for e in await store.pending()] == [other_worker, other_object, newer]
    assert store.outbox_size == 3 and older


async def test_refused_covering_report_takes_the_covered_ones_with_it(store: Store) -> None:
    for i in range(3):
        await _append(store, "ji", i)
    covering = await _append(store, "ji", 3)
    fold = (await store.pending())[-1].fold
    assert await store.dead_letter(covering, reason="refused", error="not assigned", fold=fold)
    assert await store.pending() == [] and store.outbox_size == 0
    [dead] = await store.dead_letters()
    assert dead.seq == covering and dead.body == metrics_body(3)
    assert dead.error == ("not assigned (3 older reports of the same object it superseded "
                          "were dropped with it)")


async def test_reports_without_a_fold_key_are_settled_alone(store: Store) -> None:
    first = await store.append_report("FederatedLearningJob", "default", "fl", metrics_body(1))
    second = await store.append_report("FederatedLearningJob", "default", "fl", metrics_body(2))
    assert [e.fold for e in await store.pending()] == [None, None]
    assert await store.ack_one(second, fold=None)
    assert [e.seq for e in await store.pending()] == [first]


async def test_a_schema_2_outbox_is_migrated_and_its_rows_never_fold(tmp_path: Path) -> None:
    path = str(tmp_path / "old.db")
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE lc_outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL,
            namespace TEXT NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL,
            created_at REAL NOT NULL);
        INSERT INTO lc_outbox (kind, namespace, name, body, created_at)
            VALUES ('Dataset', 'default', 'd', '{"numberOfSamples": 1}', 0);
        PRAGMA user_version = 2;""")
    conn.close()
    store = await Store.open(path)
    try:
        new = await store.append_report("Dataset", "default", "d", {"numberOfSamples": 2})
        old, fresh = await store.pending()
        assert (old.fold, fresh.seq, fresh.fold) == (None, new, "Dataset/default/d/")
    finally:
        await store.close()
