"""The LC store stays bounded in bytes: worker records (tighter for owners this node does not
hold), dead letters (and each one's body), and listings read page by page."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from lc.store.bounds import StoreBounds
from lc.store.facade import EXPIRE_EVERY, Store
from lc.store.schema import SCHEMA_VERSION

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
                "deadletters": c.execute(q + "lc_deadletters").fetchone(),
                "outbox": c.execute(q + "lc_outbox").fetchone(),
                "outbox_covered": c.execute(q + "lc_outbox WHERE covered = 1").fetchone()}
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


async def test_a_batch_over_the_cap_keeps_every_record_it_wrote(store: Store) -> None:
    for name in ("old1", "old2"):
        await store.record_report(report(name, f"nobody-{name}", 30_000), routed_kind=None,
                                  entries=[])
    before = store.transactions
    batch = [f"w{i}" for i in range(5)]  # 150 kB together, over the cap of 100 kB
    await asyncio.gather(*(store.record_report(report(name, f"nobody-{name}", 30_000),
                                               routed_kind=None, entries=[]) for name in batch))
    assert store.transactions == before + 1  # one group commit, swept once
    assert await _names(store) == batch  # each was answered 200: none dropped by its batch
    assert store.dropped == {"unknown_owner": 2}
    await store.record_report(report("next", "nobody-next", 30_000), routed_kind=None,
                              entries=[])
    assert await _names(store) == ["next", "w3", "w4"]  # the next batch trims the rest
    assert store.dropped == {"unknown_owner": 5}
    assert await _usage(store) == await _sums(store)


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


async def test_expired_records_are_deleted_at_most_every_second_caps_every_batch(
        tmp_path: Path, clock: Clock) -> None:
    """Deleting expired records only frees room (reads skip them), so a batch does it at
    most every EXPIRE_EVERY seconds (a tenth of the shorter TTL if less: 10 s here); the
    byte caps are kept by every batch."""
    assert EXPIRE_EVERY == 1.0
    store = await _open(tmp_path, clock, unknown_owner_ttl=10, unknown_owner_bytes=30_000)
    try:
        async def stored() -> list[str]:
            rows = await store._read(lambda c: c.execute(
                "SELECT name FROM lc_workers ORDER BY name").fetchall())
            return [name for (name,) in rows]

        async def write(name: str, after: float, pad: int = 0) -> None:
            clock.now += after
            await store.record_report(report(name, "nobody", pad), routed_kind=None, entries=[])

        await write("a", 0)  # expired records deleted now (none), next after 1 s
        await write("x", 0.9)
        await write("b", 9.5)  # "a" expired: deleted; next deletion after 1 s
        assert await stored() == ["b", "x"]
        await write("c", 0.6)  # "x" just expired: hidden, but no deletion is due
        assert await _names(store) == ["b", "c"]
        assert await stored() == ["b", "c", "x"]
        await write("d", 0.5)  # a second since the last deletion: "x" goes
        assert await stored() == ["b", "c", "d"]
        await write("e", 0.1, 20_000)
        await write("f", 0.1, 20_000)  # no deletion due, but over the cap: the oldest go
        assert await stored() == ["f"]
        assert store.dropped == {"unknown_owner": 4}
        assert await _usage(store) == await _sums(store)
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
        assert version == SCHEMA_VERSION == 6
        await store.record_report(report("new", "ji"), routed_kind=JI, entries=[])
    finally:
        await store.close()


# ---- the outbox ---------------------------------------------------------------------------

FL = "FederatedLearningJob"  # its reports never fold


def entry(kind: str, owner: str, pad: int, n: int = 0) -> tuple[str, str, str, Any]:
    """An outbox entry as a manager builds it; JI's with ownerInfo fold (lc/fold.py)."""
    return (kind, "default", owner, {"phase": "", "status": "", "output": {
        "models": None, "ownerInfo": {"n": n, "pad": "x" * pad}}})


async def _report_to(store: Store, worker: str, kind: str, owner: str, pad: int,
                     n: int = 0) -> list[int]:
    return await store.record_report(report(worker, owner, 10, owner_kind=kind.lower()),
                                     routed_kind=kind, entries=[entry(kind, owner, pad, n)])


async def _outbox(store: Store) -> tuple[int, int]:
    """(rows, bytes) of the outbox as the usage table holds them."""
    return (await _usage(store))["outbox"]


async def test_a_full_outbox_refuses_worker_reports_and_keeps_what_it_holds(
        tmp_path: Path, clock: Clock) -> None:
    from lc.store.outbox import OutboxFullError

    store = await _open(tmp_path, clock, outbox_bytes=100_000)
    try:
        seqs = [(await _report_to(store, f"w{i}", FL, "fl", 30_000))[0] for i in range(3)]
        with pytest.raises(OutboxFullError, match="the outbox is full: 90.* bytes of reports "
                                                  "wait for the GM, and 30.* more would pass "
                                                  "its cap of 100000"):
            await _report_to(store, "w3", FL, "fl", 30_000)
        assert [e.seq for e in await store.pending()] == seqs  # nothing old dropped for it
        assert [w.name for w in await store.workers()] == ["w0", "w1", "w2"]  # nor stored
        assert store.outbox_size == 3 and store.dropped == {}
        await store.ack(seqs[0])  # the GM took one: room again
        assert len(await _report_to(store, "w3", FL, "fl", 30_000)) == 1
        assert await _usage(store) == await _sums(store)
        assert (await _outbox(store))[1] == await store.outbox_bytes() <= 100_000
    finally:
        await store.close()


async def test_a_stream_of_latest_wins_reports_never_fills_the_outbox(
        tmp_path: Path, clock: Clock) -> None:
    store = await _open(tmp_path, clock, outbox_bytes=100_000)
    try:
        await _report_to(store, "other", FL, "fl", 30_000)  # never folds, stays
        for n in range(40):  # 40 x 30 kB of one object and worker: each covers the last
            await _report_to(store, "w", JI, "ji", 30_000, n)
            assert (await _outbox(store))[1] <= 100_000
        pending = await store.pending()
        assert pending[0].kind == FL
        assert pending[-1].body["output"]["ownerInfo"]["n"] == 39  # the newest is kept
        assert store.outbox_size == len(pending) <= 3
        assert store.dropped["outbox_covered"] == 40 - (len(pending) - 1)
        assert await _usage(store) == await _sums(store)
    finally:
        await store.close()


async def test_below_its_cap_the_outbox_keeps_covered_reports_for_the_link(
        tmp_path: Path, clock: Clock) -> None:
    store = await _open(tmp_path, clock, outbox_bytes=1 << 20)
    try:
        for n in range(5):
            await _report_to(store, "w", JI, "ji", 100, n)
        pending = await store.pending()
        assert [e.body["output"]["ownerInfo"]["n"] for e in pending] == [0, 1, 2, 3, 4]
        covered = await store._read(lambda c: c.execute(
            "SELECT covered FROM lc_outbox ORDER BY seq").fetchall())
        assert covered == [(1,), (1,), (1,), (1,), (0,)]
        assert await store.ack_one(pending[-1].seq, fold=pending[-1].fold)  # settles them all
        assert await store.pending() == [] and await _outbox(store) == (0, 0)
        assert await _usage(store) == await _sums(store)
    finally:
        await store.close()


async def test_a_report_superseding_the_newest_fits_in_a_full_outbox(
        tmp_path: Path, clock: Clock) -> None:
    from lc.store.outbox import OutboxFullError

    store = await _open(tmp_path, clock, outbox_bytes=100_000)
    try:
        await _report_to(store, "w", JI, "ji", 30_000, 0)
        await _report_to(store, "a", FL, "fl", 30_000)
        await _report_to(store, "b", FL, "fl", 30_000)
        with pytest.raises(OutboxFullError):  # another worker's report: its own fold key
            await _report_to(store, "w2", JI, "ji", 30_000, 0)
        await _report_to(store, "w", JI, "ji", 30_000, 1)  # takes the place of the one it covers
        assert [e.name for e in await store.pending()] == ["fl", "fl", "ji"]
        assert store.dropped == {"outbox_covered": 1}
    finally:
        await store.close()


async def test_the_lcs_own_and_waiting_reports_are_never_refused(
        tmp_path: Path, clock: Clock) -> None:
    store = await _open(tmp_path, clock, outbox_bytes=100_000)
    try:
        await store.record_report(report("late", "fl-late", 10), routed_kind=None, entries=[])
        for i in range(3):  # the outbox is full
            await _report_to(store, f"w{i}", FL, "fl", 30_000)
        await store.append_report("Dataset", "default", "ds", {"numberOfSamples": 1})
        await store.append_report_with_state("Model", "default", "m", {"pad": "m" * 30_000},
                                             {"done": True})
        [waiting] = await store.unrouted("default", "fl-late")
        assert await store.route_worker("default", "late", waiting.received_at, routed_kind=FL,
                                        entries=[entry(FL, "fl-late", 30_000)])
        assert store.outbox_size == 6
        assert (await _outbox(store))[1] > 100_000
    finally:
        await store.close()


SCHEMA_4_OUTBOX = """
CREATE TABLE lc_outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL,
    namespace TEXT NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL, created_at REAL NOT NULL,
    fold TEXT);
CREATE INDEX lc_outbox_fold ON lc_outbox (fold, seq) WHERE fold IS NOT NULL;
CREATE TABLE lc_usage (what TEXT PRIMARY KEY, records INTEGER NOT NULL,
    bytes INTEGER NOT NULL) WITHOUT ROWID;
PRAGMA user_version = 4;
"""


def _schema_4(path: Path, now: float) -> list[str]:
    """A schema 4 outbox: two folded reports of one key, one of another, one that never
    folds; the JSON bodies written, in seq order."""
    rows = [(JI, "ji", "JointInferenceService/default/ji/w", {"n": 0, "pad": "a" * 40_000}),
            ("Model", "m", None, {"n": 1, "pad": "é" * 20_000}),
            (JI, "ji", "JointInferenceService/default/ji/w", {"n": 2, "pad": "b" * 40_000}),
            (JI, "ji", "JointInferenceService/default/ji/v", {"n": 3})]
    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA_4_OUTBOX)
        for kind, name, fold, body in rows:
            conn.execute("INSERT INTO lc_outbox (kind, namespace, name, body, created_at, fold) "
                         "VALUES (?, 'default', ?, ?, ?, ?)",
                         (kind, name, orjson.dumps(body).decode(), now, fold))
    return [orjson.dumps(body).decode() for *_, body in rows]


async def test_a_schema_4_outbox_is_sized_and_folded_when_opened(
        tmp_path: Path, clock: Clock) -> None:
    bodies = _schema_4(tmp_path / "lc.db", clock.now)
    store = await _open(tmp_path, clock)
    try:
        rows = await store._read(lambda c: c.execute(
            "SELECT bytes, covered FROM lc_outbox ORDER BY seq").fetchall())
        assert rows == [(len(b.encode()), int(i == 0)) for i, b in enumerate(bodies)]
        assert await _usage(store) == await _sums(store)
        assert await store.outbox_bytes() == sum(len(b.encode()) for b in bodies)
        version = await store._read(lambda c: c.execute("PRAGMA user_version").fetchone()[0])
        assert version == SCHEMA_VERSION == 6
    finally:
        await store.close()
    # opened again under a smaller cap: the covered report goes, nothing else
    store = await _open(tmp_path, clock, outbox_bytes=80_000)
    try:
        assert [e.body["n"] for e in await store.pending()] == [1, 2, 3]
        assert store.outbox_size == 3 and store.dropped == {"outbox_covered": 1}
        assert await _usage(store) == await _sums(store)
    finally:
        await store.close()


OR_TRIGGER_5 = """
DROP TRIGGER lc_workers_changed;
CREATE TRIGGER lc_workers_changed AFTER UPDATE OF bytes, owner_known ON lc_workers BEGIN
    UPDATE lc_usage SET records = records - 1, bytes = bytes - OLD.bytes
     WHERE what = 'workers' OR (what = 'unknown_owner' AND OLD.owner_known = 0);
    UPDATE lc_usage SET records = records + 1, bytes = bytes + NEW.bytes
     WHERE what = 'workers' OR (what = 'unknown_owner' AND NEW.owner_known = 0);
END;
PRAGMA user_version = 5;
"""


async def test_a_schema_5_database_gets_the_worker_triggers_of_schema_6(
        tmp_path: Path, clock: Clock) -> None:
    store = await _open(tmp_path, clock)
    await store.record_report(report("w", "nobody", 100), routed_kind=None, entries=[])
    await store.close()
    with sqlite3.connect(tmp_path / "lc.db") as conn:
        conn.executescript(OR_TRIGGER_5)  # as schema 5 wrote it
    store = await _open(tmp_path, clock)
    try:
        triggers = await store._read(lambda c: c.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND "
            "tbl_name = 'lc_workers'").fetchall())
        assert sorted(name for name, _ in triggers) == [
            "lc_workers_added", "lc_workers_changed", "lc_workers_removed"]
        assert not [name for name, sql in triggers if " OR " in sql]
        await store.put_resource(JI, "default", "ji", {})
        await store.record_report(report("w", "ji", 300), routed_kind=JI, entries=[])
        await store.record_report(report("v", "nobody", 200), routed_kind=None, entries=[])
        assert (await _usage(store))["unknown_owner"][0] == 1
        assert await _usage(store) == await _sums(store)
        version = await store._read(lambda c: c.execute("PRAGMA user_version").fetchone()[0])
        assert version == SCHEMA_VERSION
    finally:
        await store.close()


# ---- reports of one batch, merged ---------------------------------------------------------

async def _hold_the_writer(store: Store) -> tuple[asyncio.Task[Any], Any]:
    """A write that keeps the DB thread busy until released, so what is submitted meanwhile
    forms the next batch."""
    import threading
    started, release = threading.Event(), threading.Event()

    def hold(_: sqlite3.Connection) -> None:
        started.set()
        release.wait(5)

    held = asyncio.create_task(store.write(hold))
    assert await asyncio.to_thread(started.wait, 5)
    return held, release


async def test_a_batch_of_reports_is_written_as_one_by_one(store: Store, monkeypatch) -> None:
    """Merged: the last report of each worker is its record, every entry gets its own seq in
    submission order, the usage table stays exact, and each caller gets its own seqs."""
    from lc.store.reportwrite import ReportWrite
    merged: list[int] = []
    merge = ReportWrite.merged

    def spy(conn: sqlite3.Connection, run: list[ReportWrite]) -> Any:
        result = merge(conn, run)
        merged.append(len(run) if result is not None else 0)
        return result

    monkeypatch.setattr(ReportWrite, "merged", staticmethod(spy))
    held, release = await _hold_the_writer(store)
    before = store.transactions
    sends = [("a", 1), ("b", 1), ("a", 2), ("c", 1), ("a", 3), ("b", 2)]
    tasks = [asyncio.create_task(_report_to(store, f"w-{w}", FL, f"fl-{w}", 100, n))
             for w, n in sends]
    await asyncio.sleep(0)
    release.set()
    await held
    seqs = [await t for t in tasks]
    assert store.transactions == before + 2  # the held write, then all six together
    assert merged == [6]
    flat = [s for per in seqs for s in per]
    assert flat == list(range(flat[0], flat[0] + 6))  # one each, in order
    pending = await store.pending()
    assert [(e.name, e.body["output"]["ownerInfo"]["n"]) for e in pending] == [
        (f"fl-{w}", n) for w, n in sends]
    store._tail.restart(store.last_seq)  # read back: memory and disk agree
    assert await store.pending() == pending
    records = {w.name: w.report["ownerInfo"] for w in await store.workers()}
    assert sorted(records) == ["w-a", "w-b", "w-c"]
    assert await _usage(store) == await _sums(store)


async def test_a_batch_that_might_not_fit_is_written_one_by_one(tmp_path: Path, clock: Clock,
                                                                 monkeypatch) -> None:
    from lc.store.outbox import OutboxFullError
    from lc.store.reportwrite import ReportWrite
    merged: list[Any] = []
    merge = ReportWrite.merged
    monkeypatch.setattr(ReportWrite, "merged",
                        staticmethod(lambda conn, run: merged.append(merge(conn, run))))
    store = await _open(tmp_path, clock, outbox_bytes=100_000)
    try:
        await _report_to(store, "w0", FL, "fl", 30_000)
        held, release = await _hold_the_writer(store)
        tasks = [asyncio.create_task(_report_to(store, f"w{i}", FL, "fl", 30_000))
                 for i in range(1, 4)]
        await asyncio.sleep(0)
        release.set()
        await held
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert merged == [None]  # 120 kB would pass the cap: one by one instead
        assert [type(r) for r in results] == [list, list, OutboxFullError]  # the third alone
        assert [w.name for w in await store.workers()] == ["w0", "w1", "w2"]
        assert store.outbox_size == 3
        assert await _usage(store) == await _sums(store)
    finally:
        await store.close()
