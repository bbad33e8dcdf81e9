"""The bytes of request bodies the LC holds at once are bounded (lc/budget.py).

The budget alone (first come first served, bounded waits, growth that never waits, nothing
leaked by an error or a cancel), then a real LocalController: a body that does not fit is a
503 with Retry-After whose body is not read (declared, chunked, or inflating past its
declared length), the budget comes back however a request ends, and a declared body may
wait its turn.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import zlib
from typing import Any

import pytest

from lc.api import BUDGET_KEY
from lc.budget import BodyBudget, BudgetExceeded
from shared.metrics import sample
from tests.conftest import eventually
from tests.scrape import value
from tests.unit.test_lc_support import running_lc, session

# ---- the budget ---------------------------------------------------------------------------


async def test_declared_lengths_wait_their_turn_first_come_first_served() -> None:
    budget = BodyBudget(10, wait=60)
    with budget.share() as first:
        await first.take(6)
        second, third = budget.share(), budget.share()
        waits = [asyncio.create_task(second.take(6)), asyncio.create_task(third.take(2))]
        await eventually(lambda: budget.waiting == 8, message="both waiting")
        assert budget.used == 6  # the small one does not pass the one before it
    await asyncio.gather(*waits)  # the first one's share came back: both fit now
    assert (budget.used, budget.waiting, second.held, third.held) == (8, 0, 6, 2)
    second.release()
    third.release()
    assert budget.used == 0


@pytest.mark.parametrize(("wait", "asked"), [
    pytest.param(0, 1, id="no-wait"),
    pytest.param(60, 11, id="more-than-all-of-it"),
    pytest.param(60, 6, id="waiting-bytes-bounded-too"),
])
async def test_what_cannot_wait_is_refused_at_once(wait: float, asked: int) -> None:
    budget = BodyBudget(10, wait=wait)
    holder, waiter = budget.share(), budget.share()
    await holder.take(10)
    if wait:
        waiting = asyncio.create_task(waiter.take(5))
        await eventually(lambda: budget.waiting == 5, message="one waiting")
    with pytest.raises(BudgetExceeded, match="holds at most 10 bytes of request bodies at once; "
                                             "10 are taken"):
        await budget.share().take(asked)
    holder.release()
    if wait:
        await waiting
        assert (budget.used, budget.waiting) == (5, 0)


async def test_a_wait_ends_with_a_refusal_and_lets_the_next_one_in() -> None:
    budget = BodyBudget(10, wait=0.01)
    holder = budget.share()
    await holder.take(8)
    with pytest.raises(BudgetExceeded):
        await budget.share().take(5)
    assert (budget.used, budget.waiting) == (8, 0)
    await budget.share().take(2)  # nothing stayed in the queue in front of it
    assert budget.used == 10


async def test_growing_never_waits() -> None:
    budget = BodyBudget(10, wait=60)
    holder, grower = budget.share(), budget.share()
    await holder.take(8)
    grower.grow_to(2)
    with pytest.raises(BudgetExceeded):
        grower.grow_to(3)
    assert (budget.used, grower.held) == (10, 2)


async def test_a_cancelled_or_failed_request_gives_its_share_back() -> None:
    budget = BodyBudget(10, wait=60)
    holder = budget.share()
    await holder.take(10)
    waiter = budget.share()
    waiting = asyncio.create_task(waiter.take(4))
    await eventually(lambda: budget.waiting == 4, message="waiting")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert (budget.used, budget.waiting, waiter.held) == (10, 0, 0)
    holder.release()
    with pytest.raises(RuntimeError), budget.share() as failing:
        await failing.take(7)
        failing.grow_to(9)
        raise RuntimeError("handler failed")
    assert budget.used == 0


# ---- a real LC ----------------------------------------------------------------------------

BUDGET = 1 << 20
SIZE = 600_000  # two of them do not fit in the budget


def report_text(worker: str, size: int) -> bytes:
    """A report of exactly `size` bytes (for an owner this node does not hold)."""
    body = {"name": worker, "namespace": "default", "ownerName": "nobody", "ownerKind": "default",
            "ownerInfo": {"pad": ""}}
    pad = size - len(json.dumps(body).encode())
    body["ownerInfo"]["pad"] = "x" * pad
    text = json.dumps(body).encode()
    assert len(text) == size
    return text


def head(worker: str, length: int | None, **headers: str) -> bytes:
    lines = [f"POST /sedna/workers/{worker}/info HTTP/1.1", "Host: x",
             "Content-Type: application/json",
             *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items()),
             f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunked(data: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(data[i:i + 65536]), data[i:i + 65536])
                    for i in range(0, len(data), 65536))


def gzip_zeros(size: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    return packer.compress(b" " * size) + packer.flush()


async def reply(reader: asyncio.StreamReader) -> tuple[bytes, dict[str, Any]]:
    """One reply: its head and its JSON body."""
    async with asyncio.timeout(10):
        raw = await reader.readuntil(b"\r\n\r\n")
        length = int(raw.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        return raw, json.loads(await reader.readexactly(length))


async def closed(reader: asyncio.StreamReader) -> bool:
    try:
        async with asyncio.timeout(10):
            return await reader.read() == b""
    except ConnectionResetError:  # closed with what the client sent unread
        return True


class Holder:
    """A request that holds SIZE bytes of the budget while its body is half sent."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.body = report_text("holder", SIZE)

    async def __aenter__(self) -> Holder:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(head("holder", SIZE) + self.body[:1000])
        await self.writer.drain()
        return self

    async def finish(self) -> int:
        self.writer.write(self.body[1000:])
        raw, _ = await reply(self.reader)
        return int(raw.split()[1])

    async def __aexit__(self, *exc: object) -> None:
        self.writer.close()


async def _metrics(base: str) -> str:
    async with session() as http, http.get(base + "/metrics") as resp:
        return await resp.text()


async def _post(base: str, worker: str, size: int) -> int:
    async with session() as http, http.post(
            f"{base}/sedna/workers/{worker}/info", data=report_text(worker, size),
            headers={"Content-Type": "application/json"}) as resp:
        return resp.status


REFUSED = [
    pytest.param(head("w", SIZE), report_text("w", SIZE)[:1000], id="declared"),
    pytest.param(head("w", None), chunked(report_text("w", SIZE)[:500_000]), id="chunked"),
    pytest.param(head("w", len(gzip_zeros(SIZE)), Content_Encoding="gzip"), gzip_zeros(SIZE),
                 id="gzip-inflating-past-its-length"),
]


@pytest.mark.parametrize(("request_head", "sent"), REFUSED)
async def test_a_body_that_does_not_fit_is_503_and_not_read(tmp_path, request_head: bytes,
                                                             sent: bytes) -> None:
    env = {"LC_BODY_BUDGET_BYTES": str(BUDGET), "LC_BODY_BUDGET_WAIT": "0"}
    async with running_lc(tmp_path, **env) as (lc, base):
        budget = lc.app[BUDGET_KEY]
        async with Holder(lc.port) as holder:
            await eventually(lambda: budget.used == SIZE, message="the holder's share taken")
            reader, writer = await asyncio.open_connection("127.0.0.1", lc.port)
            try:
                writer.write(request_head + sent)  # and never the rest of the body
                raw, body = await reply(reader)
                assert await closed(reader)  # by the LC, though the body did not all come
            finally:
                writer.close()
            assert raw.startswith(b"HTTP/1.1 503") and b"Retry-After: 1\r\n" in raw
            assert b"Connection: close" in raw
            assert body["Status"] == 503
            assert body["Message"].startswith(f"report of worker(name=w) not read: this LC "
                                              f"holds at most {BUDGET} bytes of request bodies")
            assert body["Message"].endswith("; retry")
            assert budget.used == SIZE  # what the refused one took came back
            assert await holder.finish() == 200
        assert budget.used == 0
        assert await _post(base, "w", SIZE) == 200  # the same report, once there is room
        assert value(await _metrics(base), "sedna_lc_reports_rejected_total", reason="body_budget") == 1
        assert [w.name for w in await lc.store.workers()] == ["holder", "w"]


async def test_a_client_gone_mid_body_gives_its_share_back(tmp_path) -> None:
    async with running_lc(tmp_path, LC_BODY_BUDGET_BYTES=str(BUDGET)) as (lc, base):
        budget = lc.app[BUDGET_KEY]
        async with Holder(lc.port) as holder:
            await eventually(lambda: budget.used == SIZE, message="the holder's share taken")
            sock = holder.writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await eventually(lambda: sample(lc.metrics.registry, "sedna_lc_clients_gone_total") == 1, message="client gone")
        assert budget.used == 0
        assert await _post(base, "w", SIZE) == 200


async def test_a_declared_body_waits_for_room(tmp_path) -> None:
    env = {"LC_BODY_BUDGET_BYTES": str(BUDGET), "LC_BODY_BUDGET_WAIT": "60"}
    async with running_lc(tmp_path, **env) as (lc, base):
        budget = lc.app[BUDGET_KEY]
        async with Holder(lc.port) as holder:
            await eventually(lambda: budget.used == SIZE, message="the holder's share taken")
            waiting = asyncio.create_task(_post(base, "w", SIZE))
            await eventually(lambda: budget.waiting == SIZE, message="the second one waiting")
            assert value(await _metrics(base), "sedna_lc_body_budget_bytes", state="waiting") == 600000
            assert await holder.finish() == 200
        assert await waiting == 200
        assert (budget.used, budget.waiting) == (0, 0)
