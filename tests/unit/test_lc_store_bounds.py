"""The LC store stays bounded in bytes: worker records (tighter for owners this node does not
hold), dead letters (and each one's body), and listings read page by page."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from lc.store import SCHEMA_VERSION, Store, StoreBounds

JI = "JointInferenceService"


def report(name: str, owner: str, pad: int = 0, *, owner_kind: str = "") -> dict[str, Any]:
    return {"name": name, "namespace": "default", "ownerName": owner, "ownerKind": owner_kind,
            "kind": "train", "status": "", "ownerInfo": {"pad": "x" * pad}, "results": None}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        self.now += 0.001  # every read a little later: records keep their order
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


async def _open(tmp_path: Path, clock: Clock, **bounds: Any) -> Store:
    return await Store.open(str(tmp_path / "lc.db"), bounds=StoreBounds(**bounds), clock=clock)


@pytest.fixture
async def store(tmp_path: Path, clock: Clock) -> AsyncIterator[Store]:
    s = await _open(tmp_path, clock, unknown_owner_bytes=100_000, workers_bytes=250_000)
    yield s
    await s.close()


async def _names(store: Store) -> list[str]:
    return [w.name for w in await store.workers()]


async def _usage(store: Store) -> dict[str, tuple[int, int]]:
    rows = await store._read(lambda c: c.execute("SELECT what, records, bytes FROM lc_usage")
                             .fetchall())
    return {what: (count, size) for what, count, size in rows}


async def _sums(store: Store) -> dict[str, tuple[int, int]]:
    """What lc_usage must hold, counted from the tables themselves."""
    def count(c: sqlite3.Connection) -> dict[str, tuple[int, int]]:
        q = "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM "
        return {"workers": c.execute(q + "lc_workers").fetchone(),
                "unknown_owner": c.execute(q + "lc_workers WHERE owner_known = 0").fetchone(),
                "deadletters": c.execute(q + "lc_deadletters").fetchone()}
    return await store._read(count)


# ---- worker records -----------------------------------------------------------------------

async def test_reports_of_unknown_owners_are_bounded_in_bytes_oldest_first(store: Store) -> None:
    for i in range(10):  # about 30 kB each: three fit under 100 000 bytes
        await store.record_report(report(f"w{i}", f"nobody-{i}", 30_000), routed_kind=None,
                                  entries=[])
    assert await _names(store) == ["w7", "w8", "w9"]
    assert store.dropped == {"unknown_owner": 7}
    assert await _usage(store) == await _sums(store)
    assert (await _usage(store))["unknown_owner"][1] <= 100_000


async def test_a_report_routed_to_a_job_this_node_does_not_hold_counts_as_unknown(
        store: Store) -> None:
    await store.put_resource(JI, "default", "ji", {"metadata": {"uid": "u1"}})
    await store.record_report(report("known", "ji", 30_000), routed_kind=JI, entries=[])
    for i in range(5):  # routed by their ownerKind, but no such job on this node
        await store.record_report(report(f"ghost{i}", f"ghost-{i}", 30_000), routed_kind=JI,
                                  entries=[])
    assert await _names(store) == ["ghost2", "ghost3", "ghost4", "known"]
    assert store.dropped == {"unknown_owner": 2}
    [known] = [w for w in await store.workers() if w.name == "known"]
    assert known.owner_known and known.routed_kind == JI


async def test_the_whole_workers_table_is_bounded_in_bytes(store: Store) -> None:
    await store.put_resource(JI, "default", "ji", {})
    for i in range(10):
        await store.record_report(report(f"w{i}", "ji", 40_000), routed_kind=JI, entries=[])
    assert await _names(store) == ["w4", "w5", "w6", "w7", "w8", "w9"]  # 6 x 40 kB < 250 kB
    assert store.dropped == {"worker": 4}
    assert await _usage(store) == await _sums(store)


async def test_a_report_bigger_than_the_cap_is_kept_until_the_next_one(store: Store) -> None:
    await store.record_report(report("big", "nobody", 150_000), routed_kind=None, entries=[])
    assert await _names(store) == ["big"]  # answered 200: never dropped by its own write
    await store.record_report(report("next", "nobody-2", 10), routed_kind=None, entries=[])
    assert await _names(store) == ["next"]
    assert store.dropped == {"unknown_owner": 1}


async def test_reports_of_unknown_owners_expire_sooner(tmp_path: Path, clock: Clock) -> None:
    store = await _open(tmp_path, clock, unknown_owner_ttl=600, worker_ttl=7 * 86400)
    try:
        await store.put_resource(JI, "default", "ji", {})
        await store.record_report(report("known", "ji"), routed_kind=JI, entries=[])
        await store.record_report(report("lost", "nobody"), routed_kind=None, entries=[])
        await store.record_report(report("ghost", "ghost"), routed_kind=JI, entries=[])
        await store.record_report(report("late", "late-job"), routed_kind=JI, entries=[])
        await store.put_resource(JI, "default", "late-job", {})  # its job arrived: kept
        clock.now += 601
        assert await _names(store) == ["known", "late"]
        await store.record_report(report("new", "nobody-2"), routed_kind=None, entries=[])
        rows = await store._read(lambda c: c.execute(
            "SELECT name FROM lc_workers ORDER BY name").fetchall())
        assert rows == [("known",), ("late",), ("new",)]  # deleted, not only hidden
        assert store.dropped == {}  # expiry is not a drop
    finally:
        await store.close()


async def test_a_waiting_report_routed_to_its_job_is_known(store: Store, clock: Clock) -> None:
    await store.record_report(report("w", "fl"), routed_kind=None, entries=[])
    [waiting] = await store.unrouted("default", "fl")
    assert not waiting.owner_known
    await store.put_resource("FederatedLearningJob", "default", "fl", {})
    assert await store.route_worker("default", "w", waiting.received_at,
                                    routed_kind="FederatedLearningJob", entries=[])
    [routed] = await store.workers()
    assert routed.owner_known and routed.routed_kind == "FederatedLearningJob"
    assert await _usage(store) == await _sums(store)


async def test_workers_are_listed_page_by_page_with_bounded_reports(store: Store) -> None:
    await store.put_resource(JI, "default", "ji", {})
    for name, pad in (("a", 10), ("b", 70_000), ("c", 10), ("d", 10), ("e", 10)):
        await store.record_report(report(name, "ji", pad), routed_kind=JI, entries=[])
    first = await store.worker_page(limit=2, after=None, item_bytes=4096, page_bytes=1 << 20)
    assert [w.name for w in first.items] == ["a", "b"] and first.next_key == ("default", "b")
    assert orjson.loads(first.items[0].report_json) == report("a", "ji", 10)
    marker = orjson.loads(first.items[1].report_json)
    stored = len(orjson.dumps(report("b", "ji", 70_000)))
    assert marker["truncated"] is True and marker["bytes"] == stored
    assert marker["head"].startswith('{"name":"b"') and len(first.items[1].report_json) <= 4096
    rest = await store.worker_page(limit=10, after=first.next_key, item_bytes=4096,
                                   page_bytes=1 << 20)
    assert [w.name for w in rest.items] == ["c", "d", "e"] and rest.next_key is None
    # a page also ends at its byte budget (but always holds one item)
    small = await store.worker_page(limit=10, after=None, item_bytes=4096, page_bytes=300)
    assert [w.name for w in small.items] == ["a"] and small.next_key == ("default", "a")


# ---- dead letters -------------------------------------------------------------------------

async def _dead(store: Store, body: Any) -> int:
    seq = await store.append_report("Model", "default", "m", body)
    assert await store.dead_letter(seq, reason="refused", error="not assigned")
    return seq


async def test_dead_letter_bodies_are_truncated_with_their_length(tmp_path: Path,
                                                                   clock: Clock) -> None:
    store = await _open(tmp_path, clock, dead_letter_body=4096)
    try:
        body = {"pad": "y" * 10_000}
        await _dead(store, body)
        await _dead(store, {"small": 1})
        small, big = await store.dead_letters()
        assert small.body == {"small": 1}
        assert big.body["truncated"] is True
        assert big.body["bytes"] == len(orjson.dumps(body))
        assert big.body["head"].startswith('{"pad":"yyyy')
        assert len(orjson.dumps(big.body)) <= 4096
    finally:
        await store.close()


async def test_dead_letters_are_bounded_in_bytes_and_count(tmp_path: Path, clock: Clock) -> None:
    store = await _open(tmp_path, clock, dead_letters_bytes=100_000, dead_letters=4)
    try:
        seqs = [await _dead(store, {"pad": "z" * 30_000}) for _ in range(5)]
        assert [d.seq for d in await store.dead_letters()] == seqs[:1:-1]  # 3 x 30 kB fit
        assert store.dropped == {"dead_letter": 2}
        more = [await _dead(store, {"n": i}) for i in range(4)]
        assert [d.seq for d in await store.dead_letters()] == more[::-1]  # the count cap
        assert store.dropped == {"dead_letter": 5}
        assert store.dead_letter_counts == {"refused": 4}
        assert await _usage(store) == await _sums(store)
    finally:
        await store.close()


async def test_dead_letters_are_listed_page_by_page_newest_first(store: Store) -> None:
    seqs = [await _dead(store, {"n": i}) for i in range(5)]
    first = await store.dead_letter_page(limit=2, after=None, page_bytes=1 << 20)
    assert [d.seq for d in first.items] == [seqs[4], seqs[3]] and first.next_key == (seqs[3],)
    rest = await store.dead_letter_page(limit=5, after=first.next_key, page_bytes=1 << 20)
    assert [d.seq for d in rest.items] == [seqs[2], seqs[1], seqs[0]] and rest.next_key is None
    assert orjson.loads(rest.items[0].body_json) == {"n": 2}


# ---- an older database --------------------------------------------------------------------

SCHEMA_3 = """
CREATE TABLE lc_resources (kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    object TEXT NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (kind, namespace, name)) WITHOUT ROWID;
CREATE TABLE lc_outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL,
    namespace TEXT NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL, created_at REAL NOT NULL, fold TEXT);
CREATE TABLE lc_job_state (kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    state TEXT NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (kind, namespace, name)) WITHOUT ROWID;
CREATE TABLE lc_workers (namespace TEXT NOT NULL, name TEXT NOT NULL, owner_kind TEXT NOT NULL,
    owner_name TEXT NOT NULL, report TEXT NOT NULL, received_at REAL NOT NULL, routed_kind TEXT,
    PRIMARY KEY (namespace, name)) WITHOUT ROWID;
CREATE INDEX lc_workers_owner ON lc_workers (namespace, owner_name);
CREATE INDEX lc_workers_received ON lc_workers (received_at);
CREATE TABLE lc_deadletters (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, namespace TEXT NOT NULL,
    name TEXT NOT NULL, body TEXT NOT NULL, created_at REAL NOT NULL, reason TEXT NOT NULL,
    error TEXT NOT NULL, dead_at REAL NOT NULL);
CREATE TABLE lc_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
PRAGMA user_version = 3;
"""


def _schema_3(path: Path, now: float) -> None:
    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA_3)
        conn.execute("INSERT INTO lc_resources VALUES (?,?,?,?,?)",
                     (JI, "default", "ji", "{}", now))
        for name, owner, routed, pad, age in (("known", "ji", JI, 10, 0),
                                              ("ghost", "ghost", JI, 10, 0),
                                              ("waiting", "fl", None, 10, 0),
                                              ("old-big", "nobody", None, 60_000, 5)):
            text = orjson.dumps(report(name, owner, pad)).decode()
            conn.execute("INSERT INTO lc_workers VALUES (?,?,?,?,?,?,?)",
                         ("default", name, "", owner, text, now - age, routed))
        conn.execute("INSERT INTO lc_deadletters VALUES (7, 'Model', 'default', 'm', ?, ?, "
                     "'refused', 'no', ?)", (orjson.dumps({"pad": "q" * 200_000}).decode(), now, now))


async def test_a_schema_3_database_opens_and_is_bounded(tmp_path: Path, clock: Clock) -> None:
    _schema_3(tmp_path / "lc.db", clock.now)
    store = await _open(tmp_path, clock, unknown_owner_bytes=50_000)
    try:
        known = {w.name: w.owner_known for w in await store.workers()}
        # the oldest unknown-owner record went at open to bring them under their cap
        assert known == {"ghost": False, "known": True, "waiting": False}
        assert store.dropped == {"unknown_owner": 1}
        [dead] = await store.dead_letters()
        assert dead.seq == 7 and dead.body["truncated"] is True
        assert dead.body["bytes"] == len(orjson.dumps({"pad": "q" * 200_000}))
        assert await _usage(store) == await _sums(store)
        version = await store._read(lambda c: c.execute("PRAGMA user_version").fetchone()[0])
        assert version == SCHEMA_VERSION == 4
        await store.record_report(report("new", "ji"), routed_kind=JI, entries=[])
    finally:
        await store.close()
