"""The failover test's stand-in for the GM Service (bench/service_proxy.py): connections go to the
backends in turn, a backend that refuses is skipped, established connections stay where they
are, and the Node-Name of each upgrade request is noted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bench.service_proxy import RoundRobinProxy
from tests.conftest import eventually


class Echo:
    """A backend that answers every line with its name and the line."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.server: asyncio.Server | None = None
        self.port = 0
        self.clients: list[asyncio.StreamWriter] = []

    async def start(self) -> Echo:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.clients.append(writer)
        while line := await reader.readline():
            writer.write(f"{self.name} {line.decode()}".encode())
            await writer.drain()
        writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.clients:  # as a killed process's sockets are
            writer.transport.abort()
        await self.server.wait_closed()


@pytest.fixture
async def backends() -> AsyncIterator[list[Echo]]:
    echoes = [await Echo("a").start(), await Echo("b").start()]
    yield echoes
    for echo in echoes:
        if echo.server is not None and echo.server.is_serving():
            await echo.stop()


async def ask(port: int, line: str, node: str = "edge-node-1") -> tuple[str, asyncio.StreamWriter,
                                                                        asyncio.StreamReader]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET / HTTP/1.1\r\nNode-Name: {node}\r\n\r\n{line}\n".encode())
    await writer.drain()
    await reader.readline()  # the echo of the request line
    while (echoed := await reader.readline()) and echoed.split(b" ", 1)[1] != f"{line}\n".encode():
        pass
    return echoed.decode().split(" ", 1)[0], writer, reader


async def test_round_robin_skips_a_dead_backend_and_keeps_established_connections(backends: list[Echo]) -> None:
    proxy = RoundRobinProxy([("127.0.0.1", b.port) for b in backends])
    port = await proxy.start()
    try:
        first, w1, r1 = await ask(port, "one", "edge-node-1")
        second, w2, _ = await ask(port, "two", "edge-node-2")
        assert (first, second) == ("a", "b")
        assert (proxy.nodes_on(0), proxy.nodes_on(1)) == ({"edge-node-1"}, {"edge-node-2"})
        await backends[1].stop()  # b dies: its connection ends, new ones all go to a
        await eventually(lambda: not proxy.nodes_on(1), message="b's connection closed")
        later = [await ask(port, f"n{i}", f"edge-node-{i}") for i in range(3, 6)]
        assert [backend for backend, *_ in later] == ["a", "a", "a"] and proxy.skipped == [0, 2]
        w1.write(b"still\n")  # the first connection never moved
        await w1.drain()
        assert await r1.readline() == b"a still\n"
        assert [c.node for c in proxy.relayed if c.open and c.backend == 0] == [
            "edge-node-1", "edge-node-3", "edge-node-4", "edge-node-5"]
        w2.close()
    finally:
        await proxy.stop()
    assert all(not c.open for c in proxy.relayed)
