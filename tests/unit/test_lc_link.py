"""The LC link's pure parts: backoff math, the in-flight window, ordered downstream application."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lc.errors import ResourceError
from lc.link.apply import DELETE, DownstreamApplier, DownstreamQueue, Sweep, Upsert, object_key
from lc.link.backoff import Backoff
from lc.link.dialer import LinkSettings
from lc.link.window import InFlight
from lc.store.outbox import OutboxEntry

TIMEOUT = 5.0


# ---- backoff ------------------------------------------------------------------------------


def test_backoff_ceiling_doubles_to_the_cap() -> None:
    b = Backoff(base=0.5, cap=30.0)
    assert [b.ceiling(n) for n in range(1, 10)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert b.ceiling(10_000) == 30.0  # a long outage neither overflows nor exceeds the cap


@pytest.mark.parametrize(("rand", "expected"), [
    pytest.param(0.0, [0.25, 0.5, 1.0, 2.0], id="lowest-jitter-is-half-the-ceiling"),
    pytest.param(1.0, [0.5, 1.0, 2.0, 4.0], id="highest-jitter-is-the-ceiling"),
    pytest.param(0.5, [0.375, 0.75, 1.5, 3.0], id="middle"),
])
def test_backoff_jitter_stays_between_half_and_full_ceiling(rand: float, expected: list[float]) -> None:
    b = Backoff(base=0.5, cap=30.0, rand=lambda: rand)
    assert [b.next_delay() for _ in range(4)] == expected
    assert b.failures == 4


def test_backoff_reset_starts_from_base_again() -> None:
    b = Backoff(base=1.0, cap=8.0, rand=lambda: 1.0)
    assert [b.next_delay() for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    b.reset()
    assert b.failures == 0
    assert b.next_delay() == 1.0


@pytest.mark.parametrize("kwargs", [
    pytest.param({"base": 0.0}, id="zero-base"),
    pytest.param({"base": 5.0, "cap": 1.0}, id="base-above-cap"),
    pytest.param({"factor": 0.5}, id="shrinking-factor"),
])
def test_backoff_rejects_bad_parameters(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Backoff(**kwargs)


# ---- in-flight window ---------------------------------------------------------------------


def entry(seq: int, name: str = "d1") -> OutboxEntry:
    return OutboxEntry(seq, "Dataset", "default", name, {"numberOfSamples": seq}, 0.0)


def test_window_room_shrinks_and_acks_free_it() -> None:
    w = InFlight(limit=3, ack_timeout=10.0)
    for seq in (1, 2, 3):
        w.add(entry(seq), now=0.0)
    assert (len(w), w.room()) == (3, 0)
    assert w.ack(2) == entry(2)
    assert (len(w), w.room(), 2 in w, 1 in w) == (2, 1, False, True)
    assert w.ack(2) is None  # a duplicate ack frees nothing


def test_window_acks_out_of_order_leave_the_deferred_one() -> None:
    w = InFlight(limit=10, ack_timeout=5.0)
    for seq in (1, 2, 3):
        w.add(entry(seq), now=float(seq))
    w.ack(3)
    w.ack(1)
    assert w.overdue(now=6.9) == []
    assert w.overdue(now=7.0) == [entry(2)]
    assert w.next_deadline() == 7.0


def test_window_overdue_is_oldest_seq_first_and_resend_restarts_the_clock() -> None:
    w = InFlight(limit=10, ack_timeout=1.0)
    w.add(entry(5), now=0.5)
    w.add(entry(4), now=0.0)
    assert [e.seq for e in w.overdue(now=2.0)] == [4, 5]
    w.add(entry(4), now=2.0)  # resent
    assert (w.sends(4), w.sends(5), w.sends(9)) == (2, 1, 0)
    assert [e.seq for e in w.overdue(now=2.5)] == [5]
    assert w.next_deadline() == 1.5


def test_window_empty_has_no_deadline_and_rejects_bad_limits() -> None:
    assert InFlight(limit=1, ack_timeout=1.0).next_deadline() is None
    with pytest.raises(ValueError):
        InFlight(limit=0, ack_timeout=1.0)
    with pytest.raises(ValueError):
        InFlight(limit=1, ack_timeout=0.0)


# ---- downstream queue ---------------------------------------------------------------------


def test_queue_keeps_one_op_per_object_and_moves_it_back() -> None:
    q = DownstreamQueue()
    a, b = object_key("Model", "ns", "a"), object_key("model", "ns", "b")
    q.put(a, Upsert({"v": 1}))
    q.put(b, Upsert({"v": 1}))
    q.put(a, DELETE)
    assert len(q) == 2
    assert q.pop() == (("Model", "ns", "b"), Upsert({"v": 1}))  # lower-case kind is the same object
    assert q.pop() == (a, DELETE)
    assert q.pop() is None


def test_queue_sweep_markers_are_distinct_and_excluded_from_pending_keys() -> None:
    q = DownstreamQueue()
    a = object_key("Model", "ns", "a")
    q.put_sweep({a})
    q.put_sweep(set())
    q.put(a, DELETE)
    assert q.pending_keys() == {a}
    first, second = q.pop(), q.pop()
    assert isinstance(first[0], Sweep) and first[0].keep == frozenset({a})
    assert isinstance(second[0], Sweep) and second[0].keep == frozenset()
    assert q.pop() == (a, DELETE)


# ---- downstream applier -------------------------------------------------------------------


class MemSink:
    """Objects held in a dict; records every call in order; a kind named Bad is refused."""

    def __init__(self, held: dict[tuple[str, str, str], dict[str, Any]] | None = None) -> None:
        self.held = dict(held or {})
        self.calls: list[tuple[str, str, dict[str, Any] | None]] = []
        self.gate: asyncio.Event | None = None

    async def apply_upsert(self, kind: str, namespace: str, name: str, obj: dict[str, Any]) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if kind == "Bad":
            raise ResourceError(f"kind {kind!r} is not handled by this LC")
        self.calls.append(("upsert", name, obj))
        self.held[(kind, namespace, name)] = obj

    async def apply_delete(self, kind: str, namespace: str, name: str) -> None:
        self.calls.append(("delete", name, None))
        self.held.pop((kind, namespace, name), None)

    async def keys(self) -> list[tuple[str, str, str]]:
        return list(self.held)


async def run_until_drained(applier: DownstreamApplier) -> None:
    task = asyncio.create_task(applier.run(), name="test-applier")
    try:
        async with asyncio.timeout(TIMEOUT):
            await applier.drained()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_applier_applies_latest_op_per_object_in_order() -> None:
    sink = MemSink()
    applier = DownstreamApplier(sink, sink.keys)
    applier.upsert("Model", "ns", "a", {"v": 1})
    applier.upsert("Model", "ns", "b", {"v": 1})
    applier.delete("Model", "ns", "a")  # replaces the pending upsert of a
    applier.upsert("Model", "ns", "c", {"v": 1})
    applier.upsert("Model", "ns", "c", {"v": 2})
    await run_until_drained(applier)
    assert sink.calls == [("upsert", "b", {"v": 1}), ("delete", "a", None), ("upsert", "c", {"v": 2})]
    assert (applier.stats.upserts, applier.stats.deletes) == (2, 1)


async def test_applier_delete_never_overtakes_an_upsert_in_progress() -> None:
    sink = MemSink()
    sink.gate = asyncio.Event()
    applier = DownstreamApplier(sink, sink.keys)
    task = asyncio.create_task(applier.run(), name="test-applier")
    try:
        applier.upsert("Model", "ns", "a", {"v": 1})
        async with asyncio.timeout(TIMEOUT):
            while len(applier.queue):  # noqa: ASYNC110 - the applier must have taken the upsert
                await asyncio.sleep(0)
        applier.delete("Model", "ns", "a")  # arrives while the upsert is blocked in the sink
        sink.gate.set()
        async with asyncio.timeout(TIMEOUT):
            await applier.drained()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert sink.calls == [("upsert", "a", {"v": 1}), ("delete", "a", None)]
    assert sink.held == {}


async def test_sweep_deletes_what_the_snapshot_left_out_but_not_newer_work() -> None:
    sink = MemSink({("Model", "ns", "stale"): {}, ("Model", "ns", "kept"): {},
                    ("Model", "ns", "later"): {}})
    applier = DownstreamApplier(sink, sink.keys)
    applier.upsert("Model", "ns", "kept", {"v": 2})
    applier.sweep({("Model", "ns", "kept")})
    applier.upsert("Model", "ns", "later", {"v": 3})  # a delta after the snapshot's end
    # Sweep sees "later" still queued behind it, so it must not delete it first.
    await run_until_drained(applier)
    assert sink.calls == [("upsert", "kept", {"v": 2}), ("delete", "stale", None),
                          ("upsert", "later", {"v": 3})]
    assert set(sink.held) == {("Model", "ns", "kept"), ("Model", "ns", "later")}
    assert applier.stats.swept == 1


async def test_applier_survives_a_refused_object() -> None:
    sink = MemSink()
    applier = DownstreamApplier(sink, sink.keys)
    applier.upsert("Bad", "ns", "x", {})
    applier.upsert("Model", "ns", "a", {"v": 1})
    await run_until_drained(applier)
    assert sink.calls == [("upsert", "a", {"v": 1})]
    assert applier.stats.errors == 1


# ---- settings -----------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "message"), [
    pytest.param({"node": ""}, "node name", id="no-node"),
    pytest.param({"url": "http://gm:9000/"}, "ws:// or wss://", id="http-url"),
    pytest.param({"ping_interval": 30.0}, "ping_interval", id="ping-not-below-silence"),
    pytest.param({"ack_timeout": 0.0}, "ack_timeout", id="zero-ack-timeout"),
    pytest.param({"window": 0}, "window", id="zero-window"),
])
def test_settings_reject_bad_values(kwargs: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {"url": "ws://gm:9000/", "node": "edge-1"}
    with pytest.raises(ValueError, match=message):
        LinkSettings(**{**base, **kwargs})
