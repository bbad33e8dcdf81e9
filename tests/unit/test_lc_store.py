"""The LC store: outbox seq/ack, group commit, resources and state, errors, durability."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from lc.errors import (
    StoreBusyError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreOpenError,
)
from lc.groupcommit import GroupCommitter
from lc.store.facade import Store
from lc.store.schema import SCHEMA_VERSION
from tests.conftest import eventually

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(str(tmp_path / "state" / "lc.db"))
    yield s
    await s.close()


async def test_outbox_sequence_pending_and_ack(store: Store) -> None:
    seqs = [await store.append_report("Dataset", "ns", f"d{i}", {"numberOfSamples": i})
            for i in range(5)]
    assert seqs == [1, 2, 3, 4, 5]
    assert (store.outbox_size, store.last_seq) == (5, 5)
    page = await store.pending(after_seq=1, limit=2)
    assert [(e.seq, e.name, e.body) for e in page] == [
        (2, "d1", {"numberOfSamples": 1}), (3, "d2", {"numberOfSamples": 2})]
    assert page[0].to_dict() == {"seq": 2, "kind": "Dataset", "namespace": "ns", "name": "d1",
                                 "body": {"numberOfSamples": 1}}
    assert await store.ack(3) == 3
    assert await store.ack_one(5) is True
    assert await store.ack_one(5) is False
    assert [e.seq for e in await store.pending()] == [4]
    assert store.outbox_size == 1


async def test_seq_never_reused_after_ack_and_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "lc.db")
    s = await Store.open(path)
    await s.append_report("Dataset", "ns", "a", {"numberOfSamples": 1})
    await s.append_report("Dataset", "ns", "a", {"numberOfSamples": 2})
    await s.ack(2)
    await s.close()
    s = await Store.open(path)
    try:
        assert (s.outbox_size, s.last_seq) == (0, 2)
        assert await s.append_report("Dataset", "ns", "a", {"numberOfSamples": 3}) == 3
    finally:
        await s.close()


def _wipe(directory: Path) -> None:
    for leftover in directory.iterdir():
        leftover.unlink()


async def test_outbox_epoch_is_kept_across_reopen_and_new_with_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "lc.db"
    s = await Store.open(str(path))
    epoch = s.outbox_epoch
    await s.close()
    s = await Store.open(str(path))
    assert s.outbox_epoch == epoch and len(epoch) == 16
    await s.close()
    _wipe(tmp_path)  # the outbox is gone: seqs start again at 1
    s = await Store.open(str(path))
    try:
        assert s.outbox_epoch != epoch
        assert await s.append_report("Dataset", "ns", "a", {"numberOfSamples": 1}) == 1
    finally:
        await s.close()


async def test_group_commit_batches_concurrent_appends(store: Store) -> None:
    before = store.transactions
    seqs = await asyncio.gather(*(store.append_report("JointInferenceService", "ns", "ji",
                                                      {"n": i}) for i in range(64)))
    assert sorted(seqs) == list(range(1, 65))
    assert store.outbox_size == 64
    assert 1 <= store.transactions - before < 64
    bodies = {e.seq: e.body["n"] for e in await store.pending(limit=100)}
    assert {bodies[s] for s in seqs} == set(range(64))


async def test_failing_op_spares_the_rest_of_its_batch(store: Store) -> None:
    def bad(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO no_such_table VALUES (1)")

    results = await asyncio.gather(
        store.append_report("Dataset", "ns", "a", {"numberOfSamples": 1}),
        store.write(bad),
        store.append_report("Dataset", "ns", "b", {"numberOfSamples": 2}),
        return_exceptions=True)
    assert results[0] == 1 and results[2] == 2
    assert isinstance(results[1], StoreError)
    assert "no such table: no_such_table" in str(results[1])
    assert [e.name for e in await store.pending()] == ["a", "b"]


async def test_an_op_failing_after_it_wrote_leaves_nothing_and_spares_its_batch(store: Store) -> None:
    """The batch runs again with savepoints: the failed op's own write is undone, the others'
    are not written twice."""
    def half(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO lc_meta VALUES ('half', 'written')")
        conn.execute("INSERT INTO no_such_table VALUES (1)")

    before = store.transactions
    results = await asyncio.gather(
        store.append_report("Dataset", "ns", "a", {"numberOfSamples": 1}),
        store.write(half),
        store.append_report("Dataset", "ns", "b", {"numberOfSamples": 2}),
        return_exceptions=True)
    assert isinstance(results[1], StoreError)
    assert await store.get_meta("half") is None
    assert [(e.seq, e.name) for e in await store.pending()] == [(results[0], "a"), (results[2], "b")]
    assert store.transactions - before <= 2  # one batch (or the first report alone, then the rest)


async def test_wait_outbox_wakes_on_commit_and_times_out(store: Store) -> None:
    assert await store.wait_outbox(0, within=0.05) is False
    waiter = asyncio.create_task(store.wait_outbox(0, within=5))
    await asyncio.sleep(0)
    await store.append_report("Dataset", "ns", "a", {"numberOfSamples": 1})
    assert await waiter is True
    assert await store.wait_outbox(0, within=0) is True  # already there


async def test_resources_state_and_delete(store: Store) -> None:
    obj = {"kind": "Dataset", "metadata": {"name": "d", "namespace": "ns"}, "spec": {"url": "/x"}}
    await store.put_resource("Dataset", "ns", "d", obj)
    await store.put_resource("Model", "ns", "m", {"spec": {}})
    await store.put_state("Dataset", "ns", "d", {"reported": 7})
    assert await store.get_resource("Dataset", "ns", "d") == obj
    assert [r[:3] for r in await store.list_resources()] == [("Dataset", "ns", "d"),
                                                            ("Model", "ns", "m")]
    assert [r[2] for r in await store.list_resources("Model")] == ["m"]
    assert await store.get_state("Dataset", "ns", "d") == {"reported": 7}
    assert await store.delete_resource("Dataset", "ns", "d") is True
    assert await store.delete_resource("Dataset", "ns", "d") is False
    assert await store.get_resource("Dataset", "ns", "d") is None
    assert await store.get_state("Dataset", "ns", "d") is None


async def test_closed_store_refuses_work(tmp_path: Path) -> None:
    s = await Store.open(str(tmp_path / "lc.db"))
    await s.close()
    with pytest.raises(StoreClosedError):
        await s.append_report("Dataset", "ns", "a", {})
    with pytest.raises(StoreClosedError):
        await s.pending()


async def test_close_commits_what_was_submitted(tmp_path: Path) -> None:
    path = str(tmp_path / "lc.db")
    s = await Store.open(path)
    appends = [asyncio.create_task(s.append_report("Dataset", "ns", "a", {"n": i}))
               for i in range(10)]
    await asyncio.sleep(0)  # the appends are queued, not yet committed
    await s.close()
    assert sorted([await t for t in appends]) == list(range(1, 11))
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM lc_outbox").fetchone()[0] == 10


async def test_file_is_owner_only(tmp_path: Path) -> None:
    s = await Store.open(str(tmp_path / "lc.db"))
    await s.close()
    assert (tmp_path / "lc.db").stat().st_mode & 0o777 == 0o600


def _under_a_file(path: Path) -> Path:
    (path.parent / "plain").write_text("x")  # fails even for root, unlike permissions
    return path.parent / "plain" / "lc.db"


@pytest.mark.parametrize(("setup", "error", "text"), [
    pytest.param(lambda p: p.write_bytes(b"this is not sqlite" * 100) and p, StoreCorruptError,
                 "is corrupt: file is not a database", id="garbage"),
    pytest.param(lambda p: p.mkdir() or p, StoreOpenError, "it is a directory", id="directory"),
    pytest.param(_under_a_file, StoreOpenError, "File exists (", id="parent-is-a-file"),
    pytest.param(lambda p: _future_schema(p) or p, StoreOpenError,
                 f"has schema version 99; this LC understands up to {SCHEMA_VERSION}", id="newer-schema"),
])
async def test_unusable_database_is_a_clear_error(tmp_path: Path, setup, error, text) -> None:
    target = setup(tmp_path / "lc.db")
    with pytest.raises(error) as info:
        await Store.open(str(target))
    assert text in str(info.value)
    assert str(target) in str(info.value)


def _future_schema(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")


async def test_coexists_with_upstream_resources_table(tmp_path: Path) -> None:
    path = tmp_path / "database.db"
    with sqlite3.connect(path) as conn:  # what upstream's gorm leaves behind
        conn.execute("CREATE TABLE resources (id integer PRIMARY KEY AUTOINCREMENT, name text "
                     "UNIQUE, type_meta text, object_meta text, spec text)")
    s = await Store.open(str(path))
    try:
        await s.put_resource("Dataset", "ns", "d", {"spec": {}})
        assert await s.get_resource("Dataset", "ns", "d") == {"spec": {}}
    finally:
        await s.close()


# ---- durability across SIGKILL of a real sedna-lc process --------------------------------

async def _start_lc(db: Path) -> tuple[asyncio.subprocess.Process, int]:
    env = {**os.environ, "ROOTFS_MOUNT_DIR": "", "LC_DB_PATH": str(db), "BIND_PORT": "0",
           "BIND_ADDRESS": "127.0.0.1", "LOG_FORMAT": "json", "GM_ADDRESS": ""}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lc.cli", cwd=ROOT, env=env, stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    async with asyncio.timeout(30):
        while line := await proc.stderr.readline():
            record = orjson.loads(line)
            if record["msg"] == "serving":
                return proc, int(record["port"])
    raise AssertionError(f"sedna-lc exited with {await proc.wait()} before serving")


async def test_reports_answered_200_survive_sigkill(tmp_path: Path) -> None:
    db = tmp_path / "database.db"
    proc, port = await _start_lc(db)
    accepted: list[str] = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http:
            async def post(i: int) -> None:
                body = {"name": f"w{i}", "namespace": "default", "ownerName": "ji",
                        "ownerKind": "jointinferenceservice", "kind": "inference",
                        "ownerInfo": {"inferenceNumber": i}}
                url = f"http://127.0.0.1:{port}/sedna/workers/w{i}/info"
                async with http.post(url, json=body) as resp:
                    if resp.status == 200:
                        accepted.append(f"w{i}")
            await asyncio.gather(*(post(i) for i in range(32)))
    finally:
        proc.send_signal(signal.SIGKILL)
        assert await proc.wait() == -signal.SIGKILL
    assert len(accepted) == 32
    with sqlite3.connect(db) as conn:
        workers = {r[0] for r in conn.execute("SELECT name FROM lc_workers")}
        bodies = [orjson.loads(r[0]) for r in conn.execute("SELECT body FROM lc_outbox")]
    assert workers == set(accepted)
    assert sorted(b["output"]["ownerInfo"]["inferenceNumber"] for b in bodies) == list(range(32))


async def test_group_committer_refuses_beyond_its_backlog() -> None:
    started, gate = threading.Event(), threading.Event()
    batches: list[int] = []

    def run_batch(ops: list) -> list:
        started.set()
        gate.wait(5)
        batches.append(len(ops))
        return [op(None) for op in ops]

    committer = GroupCommitter(run_batch, max_waiting=2)
    committer.start()
    first = asyncio.create_task(committer.submit(lambda _: "a"))
    assert await asyncio.to_thread(started.wait, 5)  # "a" is now in a running commit
    queued = [asyncio.create_task(committer.submit(lambda _, i=i: i)) for i in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(StoreBusyError, match="2 writes already wait for a commit"):
        await committer.submit(lambda _: "too many")
    gate.set()
    assert [await first, *[await q for q in queued]] == ["a", 0, 1]
    await committer.close()
    assert batches == [1, 2]


async def test_a_batch_waits_for_the_disk_only_when_one_of_its_writes_must_be_durable() -> None:
    seen: list[tuple[str, int]] = []
    started, gate = threading.Event(), threading.Event()

    def run_batch(ops: list) -> list:
        started.set()
        gate.wait(5)
        seen.append(("batch", len(ops)))
        return [op(None) for op in ops]

    committer = GroupCommitter(run_batch, sync=lambda: seen.append(("sync", 0)))
    committer.start()
    gate.set()
    await committer.submit(lambda _: 1, durable=False)
    gate.clear()  # the next batch is held until 2 and 3 wait behind it
    started.clear()
    held = asyncio.create_task(committer.submit(lambda _: "held", durable=False))
    assert await asyncio.to_thread(started.wait, 5)
    both = asyncio.gather(committer.submit(lambda _: 2, durable=False), committer.submit(lambda _: 3))
    await asyncio.sleep(0)
    gate.set()
    assert await held == "held" and await both == [2, 3]
    await committer.submit(lambda _: 4)
    await committer.close()
    assert seen == [("batch", 1), ("batch", 1), ("batch", 2), ("sync", 0), ("batch", 1), ("sync", 0)]


async def test_a_durable_write_is_answered_only_after_the_sync_that_covers_it() -> None:
    """With writes waiting, a committed batch's sync goes to the sync thread and the DB thread
    commits the next batch meanwhile; a caller is answered once a sync begun after its commit
    returned, batches in commit order."""
    syncing, release = threading.Event(), threading.Event()
    running, go_on = threading.Event(), threading.Event()
    commits: list[str] = []
    syncs: list[tuple[str, list[str]]] = []  # (thread, what had committed when it began)

    def sync() -> None:
        syncs.append((threading.current_thread().name, list(commits)))
        syncing.set()
        release.wait(5)

    def first_op(_: object) -> str:
        running.set()
        go_on.wait(5)
        commits.append("a")
        return "a"

    committer = GroupCommitter(lambda ops: [op(None) for op in ops], sync=sync, name="db")
    committer.start()
    first = asyncio.create_task(committer.submit(first_op))
    assert await asyncio.to_thread(running.wait, 5)
    def second_op(_: object) -> str:
        syncing.wait(5)  # committed while "a" is being synced
        commits.append("b")
        return "b"

    second = asyncio.create_task(committer.submit(second_op))
    await asyncio.sleep(0)  # "b" waits while "a" is being committed
    go_on.set()
    assert await asyncio.to_thread(syncing.wait, 5)
    await eventually(lambda: "b" in commits)
    ack = await committer.submit(lambda _: commits.append("ack") or "ack", durable=False)
    assert ack == "ack"  # not durable: answered at its commit, while "a" still waits for the disk
    assert not first.done() and not second.done()
    release.set()
    assert await first == "a" and await second == "b"
    await committer.close()
    assert syncs == [("db-sync", ["a"]), ("db-sync", ["a", "b", "ack"])]


async def test_a_lone_durable_write_is_synced_by_the_db_thread() -> None:
    """Nothing waiting to be committed and nothing at the sync thread: the DB thread syncs
    the batch itself (waking the sync thread would cost as much as the disk), and the caller
    is still answered only after that sync."""
    events: list[tuple[str, str]] = []

    def sync() -> None:
        events.append(("sync", threading.current_thread().name))

    committer = GroupCommitter(lambda ops: [op(None) for op in ops], sync=sync, name="db")
    committer.start()
    for value in ("a", "b"):
        assert await committer.submit(lambda _, v=value: events.append(("commit", v)) or v) == value
        assert events[-1] == ("sync", "db")  # answered after its sync, made on the DB thread
    await committer.close()
    assert events == [("commit", "a"), ("sync", "db"), ("commit", "b"), ("sync", "db")]


@pytest.mark.expect_log_errors(r"store sync failed")
async def test_a_failed_sync_fails_its_callers_but_counts_what_committed() -> None:
    committed: list[str] = []

    def sync() -> None:
        raise OSError(5, "Input/output error")

    committer = GroupCommitter(lambda ops: [op(None) for op in ops], sync=sync)
    committer.start()
    with pytest.raises(StoreError, match="not known to be on disk: .*Input/output error"):
        await committer.submit(lambda _: "x", on_commit=committed.append)
    assert committed == ["x"]  # it is in the database: the outbox counts must say so
    assert await committer.submit(lambda _: "y", durable=False) == "y"
    await committer.close()


async def test_acks_commit_without_an_fsync_and_reports_with_one(store: Store) -> None:
    """The delete of an acked report may be undone by a crash (the report is sent again and
    found stale); a report may not. Every commit runs with NORMAL (in WAL mode it does not
    wait for the disk); a report's batch is answered after an fsync of the log."""
    def synchronous(conn: sqlite3.Connection) -> int:
        return conn.execute("PRAGMA synchronous").fetchone()[0]

    assert await store._read(synchronous) == 1  # NORMAL
    syncs = store.syncs
    seq = await store.append_report("Dataset", "ns", "a", {"numberOfSamples": 1})
    assert store.syncs == syncs + 1
    assert await store.ack_one(seq)
    assert store.syncs == syncs + 1
    await store.append_report("Dataset", "ns", "a", {"numberOfSamples": 2})
    assert store.syncs == syncs + 2


async def test_with_normal_the_store_never_syncs_itself(tmp_path) -> None:
    store = await Store.open(str(tmp_path / "lc.db"), synchronous="NORMAL")
    try:
        await store.append_report("Dataset", "ns", "a", {"numberOfSamples": 1})
        assert store.syncs == 0
    finally:
        await store.close()


async def test_outbox_accounting_survives_cancelled_callers(store: Store) -> None:
    # a caller cancelled after submitting still has its write committed: the counts must follow
    append = asyncio.create_task(store.append_report("Dataset", "default", "d1", {"n": 1}))
    await asyncio.sleep(0)
    append.cancel()
    await store.wait_outbox(0, within=2)
    assert store.outbox_size == 1 and store.last_seq >= 1
    seq = (await store.pending())[0].seq
    ack = asyncio.create_task(store.ack_one(seq))
    await asyncio.sleep(0)
    ack.cancel()
    for _ in range(200):
        if store.outbox_size == 0:
            break
        await asyncio.sleep(0.01)
    assert store.outbox_size == 0 and await store.pending() == []


async def test_the_link_following_the_outbox_gets_new_entries_from_memory(store: Store, monkeypatch) -> None:
    """What was just committed is handed on without a read, exactly as a read returns it."""
    seqs = [await store.append_report("Dataset", "ns", f"d{i}", {"numberOfSamples": i}) for i in range(3)]
    reads = 0
    read = store._read

    async def counting(fn):
        nonlocal reads
        reads += 1
        return await read(fn)

    monkeypatch.setattr(store, "_read", counting)
    from_memory = await store.pending(0)
    assert reads == 0
    assert [e.seq for e in from_memory] == seqs
    store._tail.restart(store.last_seq)  # as if nobody had followed it: read back
    from_disk = await store.pending(0)
    assert reads == 1 and from_disk == from_memory


async def test_the_tail_forgets_what_acks_and_dead_letters_deleted(store: Store) -> None:
    a1 = await store.append_report("Dataset", "ns", "a", {"numberOfSamples": 1})
    a2 = await store.append_report("Dataset", "ns", "a", {"numberOfSamples": 2})  # covers a1
    b = await store.append_report("Dataset", "ns", "b", {"numberOfSamples": 1})
    c = await store.append_report("Dataset", "ns", "c", {"numberOfSamples": 1})
    assert [e.seq for e in await store.pending(0)] == [a1, a2, b, c]
    assert await store.ack_one(a2, fold="Dataset/ns/a/")  # with a1, which it covered
    assert await store.dead_letter(b, reason="refused", error="no")
    assert [e.seq for e in await store.pending(0)] == [c]
    await store.ack(c)
    assert await store.pending(0) == []


async def test_a_reader_behind_the_tail_reads_the_database(store: Store) -> None:
    first = await store.append_report("Dataset", "ns", "a", {"numberOfSamples": 1})
    second = await store.append_report("Dataset", "ns", "b", {"numberOfSamples": 1})
    assert [e.seq for e in await store.pending(first)] == [second]  # the tail forgets <= first
    assert [e.seq for e in await store.pending(0)] == [first, second]  # from the database


async def test_an_unfollowed_tail_starts_again_rather_than_grow(store: Store, monkeypatch) -> None:
    monkeypatch.setattr("lc.store.outbox.TAIL_ENTRIES", 3)
    seqs = [await store.append_report("Dataset", "ns", f"d{i}", {"numberOfSamples": i}) for i in range(5)]
    assert len(store._tail._entries) == 1  # started again after the 4th, holds the 5th
    assert [e.seq for e in await store.pending(0, limit=10)] == seqs


async def test_an_ack_rides_the_next_durable_commit_instead_of_its_own(monkeypatch) -> None:
    import lc.groupcommit
    monkeypatch.setattr(lc.groupcommit, "RIDE_WAIT", 5.0)
    batches: list[list[str]] = []

    def run_batch(ops: list) -> list:
        results = [op(None) for op in ops]
        batches.append(results)
        return results

    committer = GroupCommitter(run_batch, sync=lambda: None)
    committer.start()
    ack = asyncio.create_task(committer.submit(lambda _: "ack", durable=False))
    await asyncio.sleep(0.05)  # the DB thread holds the ack, waiting for company
    assert batches == [] and not ack.done()
    assert await committer.submit(lambda _: "report") == "report"
    assert await ack == "ack"
    assert batches == [["ack", "report"]]
    await committer.close()


async def test_an_ack_alone_commits_after_a_short_wait(monkeypatch) -> None:
    import lc.groupcommit
    monkeypatch.setattr(lc.groupcommit, "RIDE_WAIT", 0.05)
    committer = GroupCommitter(lambda ops: [op(None) for op in ops], sync=lambda: None)
    committer.start()
    async with asyncio.timeout(2):
        assert await committer.submit(lambda _: "ack", durable=False) == "ack"
    await committer.close()


async def test_out_of_wal_mode_the_commits_themselves_wait_for_the_disk(tmp_path, monkeypatch) -> None:
    """Where SQLite cannot use WAL mode there is no log to fsync: FULL stays on the connection."""
    import lc.store.facade
    monkeypatch.setattr(lc.store.facade, "_in_wal_mode", lambda conn: False)
    store = await Store.open(str(tmp_path / "lc.db"))
    try:
        assert await store._read(lambda c: c.execute("PRAGMA synchronous").fetchone()[0]) == 2
        await store.append_report("Dataset", "ns", "a", {"numberOfSamples": 1})
        assert store.syncs == 0
    finally:
        await store.close()


async def test_a_report_is_not_handed_to_the_link_before_it_is_on_disk(store: Store, monkeypatch) -> None:
    """Committed but not yet synced: in the database, yet neither answered nor pending."""
    import lc.store.facade
    syncing, release = threading.Event(), threading.Event()
    fdatasync = os.fdatasync

    def held_sync(fd: int) -> None:
        syncing.set()
        release.wait(5)
        fdatasync(fd)

    monkeypatch.setattr(lc.store.facade.os, "fdatasync", held_sync)
    append = asyncio.create_task(store.append_report("Dataset", "ns", "a", {"numberOfSamples": 1}))
    assert await asyncio.to_thread(syncing.wait, 5)
    with sqlite3.connect(store.path) as other:  # committed: another reader sees it
        assert other.execute("SELECT COUNT(*) FROM lc_outbox").fetchone()[0] == 1
    assert not append.done()
    assert await store.pending() == [] and store.last_seq == 0
    release.set()
    seq = await append
    assert [e.seq for e in await store.pending()] == [seq] and store.last_seq == seq
