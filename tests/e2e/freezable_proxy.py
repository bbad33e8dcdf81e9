"""A loopback TCP proxy that can be frozen: a blackholed network path for failure tests.

While frozen, connections are still accepted (as a kernel would) but no byte moves in
either direction, on open connections or new ones: requests hang instead of failing,
exactly what a partitioned link to the API server looks like to a client. Thawing lets
the held bytes through.
"""

from __future__ import annotations

import asyncio
import contextlib


class FreezableProxy:
    """`await start()`, point a client at `url`, then `freeze()` / `thaw()`; `await stop()`."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.connections = 0
        self._open = asyncio.Event()  # set while bytes may flow
        self._open.set()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def freeze(self) -> None:
        self._open.clear()

    def thaw(self) -> None:
        self._open.set()

    async def stop(self) -> None:
        self.thaw()
        if self._server is not None:
            self._server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # the connection runs as a task the proxy owns: asyncio's stream server logs an error
        # for a cancelled handler, and stop() must cancel connections held frozen
        self.connections += 1
        task = asyncio.create_task(self._connection(reader, writer), name=f"proxy conn {self.connections}")
        self._pipes.add(task)
        task.add_done_callback(self._pipes.discard)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._open.wait()
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            try:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(self._pipe(reader, up_writer))
                    tg.create_task(self._pipe(up_reader, writer))
            finally:
                up_writer.close()
        except (OSError, ExceptionGroup):
            pass  # either side went away: the connection is over
        finally:
            writer.close()

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        while data := await src.read(65536):
            await self._open.wait()  # frozen: hold the bytes
            dst.write(data)
            await dst.drain()
        with contextlib.suppress(OSError):
            dst.write_eof()
