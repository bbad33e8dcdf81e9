"""The outbox is bounded in bytes and loses nothing: with no GM, a worker report that would
take it over LC_OUTBOX_BYTES is a 503 with Retry-After and nothing of it is stored; what the
outbox holds is all delivered once a GM appears, and reports are accepted again. A stream of
latest-wins reports of one object never fills it. Worker POSTs to a real LC, its link to a
real GM hub (tests/linkrig.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from lc.app import LocalController
from lc.link.dialer import GMLink
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
    serving,
)

JI = "JointInferenceService"
CAP = 1 << 20  # the smallest cap there is: three of the reports below fit
PAD = 300_000


@pytest.fixture
def source() -> MemSource:
    src = MemSource()
    for name in ("ji-0", "ji-1", "ji-2", "ji-3", "ji-stream"):
        src.put(NODE, JI, name, {"kind": JI, "metadata": {"name": name, "namespace": "default"}})
    return src


@pytest.fixture
def handler() -> MemHandler:
    return MemHandler()


@pytest.fixture
async def gm(source: MemSource, handler: MemHandler) -> AsyncIterator[HubServer]:
    async with serving(source, handler) as server:
        yield server


@pytest.fixture
async def lc(tmp_path: Path) -> AsyncIterator[LocalController]:
    controller = LocalController(dataclasses.replace(lc_config(tmp_path, None),
                                                     outbox_bytes=CAP))
    await controller.start()
    try:
        yield controller
    finally:
        await controller.stop()


@pytest.fixture
async def links(lc: LocalController) -> AsyncIterator[list[GMLink]]:
    """Links attached to `lc`, stopped before it (they apply objects to its store)."""
    async with link_list() as started:
        yield started


def report(worker: str, owner: str, n: int) -> dict[str, Any]:
    return {"name": worker, "namespace": "default", "ownerName": owner,
            "ownerKind": "jointinferenceservice", "kind": "inference",
            "ownerInfo": {"n": n, "pad": "x" * PAD}}


async def post(lc: LocalController, body: dict[str, Any]) -> tuple[int, dict[str, Any], str]:
    """(status, JSON reply, Retry-After) of one report."""
    url = f"http://127.0.0.1:{lc.port}/sedna/workers/{body['name']}/info"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT)) as http, \
            http.post(url, json=body) as resp:
        return resp.status, await resp.json(), resp.headers.get("Retry-After", "")


def applied(handler: MemHandler) -> list[tuple[str, int]]:
    return [(name, body["output"]["ownerInfo"]["n"]) for *_, name, body in handler.applied
            if body["output"]["ownerInfo"]["pad"] == "x" * PAD]


async def test_a_full_outbox_refuses_until_a_gm_takes_what_it_holds(
        lc: LocalController, links: list[GMLink], gm: HubServer, handler: MemHandler) -> None:
    assert lc.store is not None
    for i in range(3):
        assert (await post(lc, report(f"w{i}", f"ji-{i}", i)))[0] == 200
    status, reply, retry = await post(lc, report("w3", "ji-3", 3))
    assert (status, retry) == (503, "3")
    assert reply["Message"].startswith("report of worker(name=w3) not stored: the outbox is "
                                       "full: ")
    held = await lc.store.pending()
    assert [(e.name, e.body["output"]["ownerInfo"]["n"]) for e in held] == [
        ("ji-0", 0), ("ji-1", 1), ("ji-2", 2)]
    assert "w3" not in [w.name for w in await lc.store.workers()]  # nothing of it kept

    attach(lc, links, gm.address)
    await eventually(lambda: lc.store.outbox_size == 0, within=TIMEOUT,
                     message="the GM took every report the outbox held")
    assert sorted(applied(handler)) == [("ji-0", 0), ("ji-1", 1), ("ji-2", 2)]

    assert (await post(lc, report("w3", "ji-3", 3)))[0] == 200  # the retry, now there is room
    await eventually(lambda: ("ji-3", 3) in applied(handler), within=TIMEOUT,
                     message="the retried report delivered")


async def test_a_stream_of_latest_wins_reports_never_fills_the_outbox(
        lc: LocalController, links: list[GMLink], gm: HubServer, handler: MemHandler) -> None:
    assert lc.store is not None
    for n in range(20):  # 6 MB of reports of one object from one worker, with no GM
        assert (await post(lc, report("w", "ji-stream", n)))[0] == 200
        assert await lc.store.outbox_bytes() <= CAP
    assert lc.store.outbox_size <= 4
    attach(lc, links, gm.address)
    await eventually(lambda: lc.store.outbox_size == 0, within=TIMEOUT, message="settled")
    assert applied(handler) == [("ji-stream", 19)]  # the newest, which covered the others
