"""A stand-in for the GM's Kubernetes Service: a TCP round-robin proxy in front of GM replicas.

kube-proxy gives each new connection to one of the Service's endpoints and never moves an
established one; a replica that went away gets no new connections once its endpoint is gone.
This proxy does the same on one host: each accepted connection goes to the next backend in
turn, a backend whose connect fails is skipped (its port refuses once the process is dead),
and bytes are relayed both ways until either side closes, then both sides are closed, as a
connection through a dead pod's endpoint ends.

It also reads the `Node-Name` header of the websocket upgrade passing through, so a test can
tell which replica holds which LC's session, and when each connection opened and ended.
Used by bench/gm_failover.py and tests/e2e/test_gm_failover.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

CONNECT_TIMEOUT = 2.0
CHUNK = 1 << 16
MAX_HEAD = 16 << 10  # bytes of the upgrade request searched for Node-Name
_NODE_NAME = re.compile(rb"^node-name:[ \t]*([^\r\n]+)", re.I | re.M)


@dataclass(slots=True)
class Relayed:
    """One client connection and the backend it went to (perf_counter times)."""

    backend: int
    opened: float
    node: str = ""  # from the upgrade request's Node-Name ("" until seen, or if it has none)
    closed: float | None = None
    head: bytearray = field(default_factory=bytearray, repr=False)  # request bytes until the node is known

    @property
    def open(self) -> bool:
        return self.closed is None

    def sniff(self, data: bytes) -> None:
        if self.node or len(self.head) >= MAX_HEAD:
            return
        self.head += data[: MAX_HEAD - len(self.head)]
        if (m := _NODE_NAME.search(self.head)) is not None:
            self.node = m.group(1).decode("latin-1").strip()
            self.head = bytearray()


class RoundRobinProxy:
    """Listens on `port`; relays each connection to the next of `backends` that accepts it."""

    def __init__(self, backends: Sequence[tuple[str, int]], *, host: str = "127.0.0.1", port: int = 0,
                 connect_timeout: float = CONNECT_TIMEOUT) -> None:
        if not backends:
            raise ValueError("a proxy needs at least one backend")
        self.backends = list(backends)
        self.host, self.port = host, port
        self.connect_timeout = connect_timeout
        self.relayed: list[Relayed] = []  # every connection, in the order accepted
        self.skipped = [0] * len(self.backends)  # connects that failed, per backend
        self.unserved = 0  # clients closed at once: no backend accepted
        self._next = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task] = set()
        self._stopping = False

    async def start(self) -> int:
        """Listen; the port (the one asked for, or the one the kernel picked)."""
        self._server = await asyncio.start_server(self._handle, self.host, self.port, backlog=4096)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        """Stop listening and cut every relayed connection."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    def nodes_on(self, backend: int) -> set[str]:
        """Nodes whose connection to `backend` is open now."""
        return {r.node for r in self.relayed if r.backend == backend and r.open and r.node}

    def connections(self, node: str) -> list[Relayed]:
        return [r for r in self.relayed if r.node == node]

    # -- one connection ------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            if not self._stopping:
                raise
            # cut by stop(): asyncio's stream protocol would log a cancelled handler as an error
        finally:
            _abort(writer)
            self._handlers.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        picked = await self._connect()
        if picked is None:
            self.unserved += 1
            return
        index, (up_reader, up_writer) = picked
        conn = Relayed(index, time.perf_counter())
        self.relayed.append(conn)
        try:
            await self._relay(reader, writer, up_reader, up_writer, conn)
        finally:
            conn.closed = time.perf_counter()
            _abort(up_writer)

    async def _connect(self) -> tuple[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] | None:
        """The next backend in turn that accepts a connection; None when none does."""
        for _ in range(len(self.backends)):
            index = self._next
            self._next = (self._next + 1) % len(self.backends)
            host, port = self.backends[index]
            try:
                return index, await asyncio.wait_for(asyncio.open_connection(host, port), self.connect_timeout)
            except (OSError, TimeoutError):
                self.skipped[index] += 1
        return None

    @staticmethod
    async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up_reader: asyncio.StreamReader,
                     up_writer: asyncio.StreamWriter, conn: Relayed) -> None:
        """Both directions until either ends; the other is then cancelled."""
        tasks = [asyncio.create_task(_pipe(reader, up_writer, conn.sniff), name="proxy-up"),
                 asyncio.create_task(_pipe(up_reader, writer, None), name="proxy-down")]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                sniff: Callable[[bytes], None] | None) -> None:
    """Copy until EOF (then close the other side once what is queued for it is sent) or an
    error on either side (the handler aborts both)."""
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(CHUNK):
            if sniff is not None:
                sniff(data)
            writer.write(data)
            await writer.drain()
        writer.close()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close at once: whatever was queued for a side that is going away is of no use."""
    transport = writer.transport
    if not transport.is_closing():
        transport.abort()
