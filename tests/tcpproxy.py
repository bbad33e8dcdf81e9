"""A loopback TCP proxy for failure tests: between a client and the server it tests against,
it counts what it relays, can be frozen (a blackholed path), can hold every connection without
a byte (a server that accepts and never answers) and can answer the first connections itself
(S3's 503 SlowDown, say)."""

from __future__ import annotations

import asyncio
import contextlib

_SLOW_DOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                   b"<Message>Please reduce your request rate.</Message></Error>")
SLOW_DOWN = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n"
             b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(_SLOW_DOWN_BODY)) + _SLOW_DOWN_BODY


class TcpProxy:
    """`async with TcpProxy((host, port)) as proxy:` (or `await start()` ... `await stop()`),
    then point a client at `proxy.url` / `proxy.endpoint`.

    - `upstream=None`: every connection is accepted and held without a byte either way.
    - `freeze()` / `thaw()`: while frozen, connections are still accepted (as a kernel would)
      but no byte moves on open or new ones, so requests hang instead of failing; thawing lets
      the held bytes through.
    - `answer_first=N`: the first N connections get `answer` (default S3's 503 SlowDown) to
      their first request, then are closed.
    - `connections` accepted so far; `bytes_down` relayed from the server to clients."""

    def __init__(self, upstream: tuple[str, int] | None, *, answer_first: int = 0,
                 answer: bytes = SLOW_DOWN) -> None:
        self.upstream = upstream
        self.answer_first, self.answer = answer_first, answer
        self.connections = 0
        self.bytes_down = 0
        self.port = 0
        self._open = asyncio.Event()  # set while bytes may flow
        self._open.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.thaw()
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> TcpProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def freeze(self) -> None:
        self._open.clear()

    def thaw(self) -> None:
        self._open.set()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # the connection runs as a task the proxy owns: asyncio's stream server logs an error
        # for a cancelled handler, and stop() must cancel connections it holds
        self.connections += 1
        task = asyncio.create_task(self._connection(self.connections, reader, writer),
                                   name=f"proxy connection {self.connections}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connection(self, number: int, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        try:
            if self.upstream is None:
                await asyncio.Event().wait()  # held until the proxy stops
            await self._open.wait()
            if number <= self.answer_first:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(self.answer)
                await writer.drain()
                return
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            try:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(self._pipe(reader, up_writer, down=False))
                    tg.create_task(self._pipe(up_reader, writer, down=True))
            finally:
                up_writer.close()
        except (OSError, asyncio.IncompleteReadError, ExceptionGroup):
            pass  # either side went away: the proxied connection ends with it
        finally:
            writer.close()

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, *, down: bool) -> None:
        while data := await src.read(65536):
            await self._open.wait()  # frozen: hold the bytes
            if down:
                self.bytes_down += len(data)
            dst.write(data)
            await dst.drain()
        with contextlib.suppress(OSError):
            dst.write_eof()
