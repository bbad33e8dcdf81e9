"""A loopback TCP proxy in front of the S3 test server (devcluster/s3server.py): it counts what
it relays, can hold connections without a byte, and can answer S3's 503 SlowDown."""

from __future__ import annotations

import asyncio

_SLOW_DOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                   b"<Message>Please reduce your request rate.</Message></Error>")
SLOW_DOWN = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n"
             b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(_SLOW_DOWN_BODY)) + _SLOW_DOWN_BODY


class CountingProxy:
    """A loopback TCP proxy to `upstream` that counts the bytes it relays to the client and the
    connections it accepted; with `upstream=None` it accepts and holds every connection without
    a byte in either direction (a server that takes connections and never answers). The first
    `throttle_first` connections get S3's 503 SlowDown to their first request instead."""

    def __init__(self, upstream: tuple[str, int] | None, *, throttle_first: int = 0) -> None:
        self.upstream = upstream
        self.throttle_first = throttle_first  # connections answered 503 SlowDown, then closed
        self.connections = 0
        self.bytes_down = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def __aenter__(self) -> CountingProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.create_task(self._serve(reader, writer), name=f"proxy {self.connections}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self.upstream is None:
                await asyncio.Event().wait()  # held until the proxy stops
            if self.connections <= self.throttle_first:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(SLOW_DOWN)
                await writer.drain()
                return
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            try:
                await asyncio.gather(self._pipe(reader, up_writer, count=False),
                                     self._pipe(up_reader, writer, count=True))
            finally:
                up_writer.close()
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass  # either side went away: the proxied connection ends with it
        finally:
            writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                    count: bool) -> None:
        try:
            while data := await reader.read(65536):
                if count:
                    self.bytes_down += len(data)
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()
