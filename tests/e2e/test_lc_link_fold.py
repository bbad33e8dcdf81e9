"""Folding and the per-object bound, end to end: worker POSTs to a real LC, its link to a real
GM hub (tests/linkrig.py), acks settling what they cover.

Reports of a latest-wins kind that pile up while the GM is away are relayed as one frame
per object and worker; that frame's ack empties the outbox; until then the covered reports
stay durable, across an LC restart too. One object whose reports the GM does not ack takes
at most `per_object` slots of the window, so another object's report still goes through.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from lc.app import LocalController
from lc.link.dialer import GMLink
from lc.store.facade import Store
from tests.conftest import eventually
from tests.hubfakes import MemSource
from tests.linkrig import (
    NODE,
    TIMEOUT,
    HubServer,
    MemHandler,
    attach,
    lc_config,
    link_list,
    model,
    serving,
)

JI = "JointInferenceService"


def ji(name: str) -> dict[str, Any]:
    return {"kind": JI, "metadata": {"name": name, "namespace": "default"}}


@pytest.fixture
def source() -> MemSource:
    src = MemSource()
    for name in ("ji", "ji2"):
        src.put(NODE, JI, name, ji(name))
    for name in ("slow", "fast"):
        src.put(NODE, "Model", name, model(name))
    return src


@pytest.fixture
def handler() -> MemHandler:
    return MemHandler()


@pytest.fixture
async def gm(source: MemSource, handler: MemHandler) -> AsyncIterator[HubServer]:
    async with serving(source, handler) as server:
        yield server


@pytest.fixture
async def links() -> AsyncIterator[list[GMLink]]:
    async with link_list() as started:
        yield started


async def started_lc(tmp_path: Path) -> LocalController:
    controller = LocalController(lc_config(tmp_path, None))
    await controller.start()
    return controller


async def stop(lc: LocalController, links: list[GMLink]) -> None:
    """Links first (as the LC does on shutdown), so none applies objects to a closed store."""
    while links:
        await links.pop().stop(within=5.0)
    await lc.stop()


async def post_reports(lc: LocalController, worker: str, owner: str, numbers: range) -> None:
    """POST one JI stats report per number, in order, as the edge worker would."""
    url = f"http://127.0.0.1:{lc.port}/sedna/workers/{worker}/info"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT)) as http:
        for n in numbers:
            body = {"name": worker, "namespace": "default", "ownerName": owner,
                    "ownerKind": "jointinferenceservice", "kind": "inference",
                    "ownerInfo": {"inferenceNumber": n}}
            async with http.post(url, json=body) as resp:
                assert resp.status == 200, await resp.text()


def applied_numbers(handler: MemHandler) -> list[tuple[str, int]]:
    return [(name, body["output"]["ownerInfo"]["inferenceNumber"])
            for *_, name, body in handler.applied]


async def test_reports_that_piled_up_go_as_one_frame_whose_ack_settles_them_all(
        tmp_path: Path, gm: HubServer, handler: MemHandler, links: list[GMLink]) -> None:
    lc = await started_lc(tmp_path)
    try:
        assert lc.store is not None
        await post_reports(lc, "w1", "ji", range(40))
        await post_reports(lc, "w2", "ji", range(100, 110))  # another worker: its own latest
        await post_reports(lc, "w1", "ji2", range(200, 205))
        assert lc.store.outbox_size == 55
        link = attach(lc, links, gm.address)
        await eventually(lambda: lc.store.outbox_size == 0, within=TIMEOUT,
                         message="every report settled by the acks of the newest ones")
        assert sorted(applied_numbers(handler)) == [("ji", 39), ("ji", 109), ("ji2", 204)]
        assert (link.info.sent, link.info.acked, link.info.covered) == (3, 3, 52)
        assert await lc.store.pending() == []
    finally:
        await stop(lc, links)


async def test_covered_reports_stay_durable_until_the_covering_ack_across_a_restart(
        tmp_path: Path, source: MemSource, gm: HubServer, handler: MemHandler,
        links: list[GMLink]) -> None:
    lc = await started_lc(tmp_path)
    try:
        assert lc.store is not None
        await post_reports(lc, "w1", "ji", range(30))
        handler.gate.clear()  # the GM takes the newest report and never finishes it
        link = attach(lc, links, gm.address)
        await eventually(lambda: handler.waiting == 1, within=TIMEOUT, message="GM busy")
        assert (link.info.sent, link.info.covered, lc.store.outbox_size) == (1, 29, 30)
        await links.pop().stop(within=5.0)
    finally:
        await stop(lc, links)
    reopened = await Store.open(str(tmp_path / "lc.db"))
    try:
        assert len(await reopened.pending()) == 30  # the covered reports are still there
    finally:
        await reopened.close()

    second_handler = MemHandler()
    second_gm = HubServer(source, second_handler)
    await second_gm.start()
    lc = await started_lc(tmp_path)
    try:
        assert lc.store is not None
        link = attach(lc, links, second_gm.address)
        await eventually(lambda: lc.store.outbox_size == 0, within=TIMEOUT,
                         message="one ack settled the 30 reports")
        assert applied_numbers(second_handler) == [("ji", 29)]
        assert (link.info.sent, link.info.covered) == (1, 29)
    finally:
        await stop(lc, links)
        await second_gm.stop()


async def test_refused_covering_report_takes_the_covered_ones_to_the_dead_letters(
        tmp_path: Path, gm: HubServer, handler: MemHandler, links: list[GMLink]) -> None:
    lc = await started_lc(tmp_path)
    try:
        assert lc.store is not None
        await post_reports(lc, "w1", "not-mine", range(5))
        link = attach(lc, links, gm.address)
        await eventually(lambda: lc.store.outbox_size == 0, within=TIMEOUT, message="settled")
        [dead] = await lc.store.dead_letters()
        assert (dead.name, dead.reason) == ("not-mine", "refused")
        assert dead.body["output"]["ownerInfo"] == {"inferenceNumber": 4}
        assert dead.error.endswith("(4 older reports of the same object it superseded were "
                                   "dropped with it)")
        assert (link.info.refused, handler.applied) == (1, [])
    finally:
        await stop(lc, links)


async def test_an_object_the_gm_does_not_ack_leaves_room_for_the_others(
        tmp_path: Path, gm: HubServer, handler: MemHandler, links: list[GMLink]) -> None:
    """Model reports do not fold: 20 of `slow` wait unacked, yet `fast` goes at once."""
    lc = await started_lc(tmp_path)
    try:
        assert lc.store is not None
        handler.defer["slow"] = 1_000  # the GM cannot apply slow's status: no ack
        slow = [await lc.store.append_report("Model", "default", "slow", {"n": i})
                for i in range(20)]
        fast = await lc.store.append_report("Model", "default", "fast", {"n": 0})
        link = attach(lc, links, gm.address, window=8, per_object=2, ack_timeout=60.0)
        await eventually(lambda: handler.seqs("fast") == [fast], within=TIMEOUT,
                         message="the other object's report applied")
        # fast's ack may still be on its way: then slow's two are all that stay in flight
        await eventually(lambda: link.session is not None and link.session.inflight == 2, within=TIMEOUT,
                         message="only slow's two in flight")
        assert (link.info.sent, link.info.resent) == (3, 0)
        # fast's ack leaves the window before its delete from the outbox commits
        async def only_slow_left() -> bool:
            return [e.seq for e in await lc.store.pending()] == slow
        await eventually(only_slow_left, "only slow's reports left in the outbox", within=TIMEOUT)
    finally:
        await stop(lc, links)
