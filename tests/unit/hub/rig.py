"""The hub's tests' side of the wire: a recording report handler, Dataset objects, and native
and upstream clients that connect, read snapshots and send reports."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import orjson
from aiohttp import WSMsgType

import proto
from gm.edge.hub import Hub
from gm.reports import ReportDeferred, ReportInvalid
from proto import SUBPROTOCOL, Message, Op, decode_native, encode_native

NODE = "edge-1"
OTHER = "edge-2"
TIMEOUT = 5.0


class MemHandler:
    """Records applied reports; object names steer it into refusing, deferring or failing."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, Message]] = []
        self.epochs: list[str] = []
        self.unavailable: set[str] = set()  # names deferred while listed here
        self.defer_seqs: set[int] = set()  # seqs deferred while listed here
        self.refuse_seqs: set[int] = set()  # seqs refused while listed here
        self.gates: dict[str, asyncio.Event] = {}  # names whose reports wait for their gate

    def submit(self, node: str, message: Message, *, epoch: str = ""):
        return self.handle_status(node, message, epoch=epoch)

    async def handle_status(self, node: str, message: Message, *, epoch: str = "") -> None:
        if message.name == "invalid" or message.seq in self.refuse_seqs:
            raise ReportInvalid("numberOfSamples must be an integer")
        if message.name == "later" or message.name in self.unavailable or message.seq in self.defer_seqs:
            raise ReportDeferred("api server unavailable")
        if (gate := self.gates.get(message.name)) is not None:
            await gate.wait()
        self.epochs.append(epoch)
        if message.name == "crash":
            raise RuntimeError("handler bug")
        self.applied.append((node, message))


def dataset(name: str, node: str = NODE, **extra: Any) -> dict[str, Any]:
    return {"kind": "Dataset", "metadata": {"name": name, "namespace": "default"},
            "spec": {"url": f"/data/{name}.txt", "format": "txt", "nodeName": node, **extra}}


HubFactory = Callable[..., Awaitable[tuple[Hub, str]]]


async def recv(ws: aiohttp.ClientWebSocketResponse) -> Message:
    frame = await ws.receive(timeout=TIMEOUT)
    assert frame.type is WSMsgType.BINARY, (frame.type, frame.data, frame.extra)
    return decode_native(frame.data)


async def recv_close(ws: aiohttp.ClientWebSocketResponse) -> tuple[int, str]:
    """Skip data frames until the close frame; its code and reason."""
    while True:
        frame = await ws.receive(timeout=TIMEOUT)
        if frame.type is WSMsgType.CLOSE:
            return frame.data, frame.extra
        if frame.type in (WSMsgType.CLOSED, WSMsgType.CLOSING):
            return ws.close_code, ""
        assert frame.type in (WSMsgType.BINARY, WSMsgType.TEXT), frame.type


async def connect(http: aiohttp.ClientSession, url: str, node: str = NODE, *, acked: int = 0,
                  epoch: str | None = None, headers: Mapping[str, str] | None = None,
                  **kw: Any) -> aiohttp.ClientWebSocketResponse:
    """A native client that has sent its hello and read the GM's."""
    ws = await http.ws_connect(url, headers={"Node-Name": node, **(headers or {})}, protocols=(SUBPROTOCOL,), **kw)
    assert ws.protocol == SUBPROTOCOL
    await ws.send_bytes(encode_native(proto.hello(node, acked=acked, epoch=epoch)))
    assert await recv(ws) == proto.hello(node, versions=(1,))
    return ws


async def read_snapshot(ws: aiohttp.ClientWebSocketResponse) -> list[Message]:
    begin = await recv(ws)
    assert (begin.op, begin.body) == (Op.SNAPSHOT, {"phase": "begin"})
    frames = []
    while (msg := await recv(ws)).op is not Op.SNAPSHOT:
        frames.append(msg)
    assert msg.body == {"phase": "end", "count": len(frames)}
    assert [m.seq for m in (begin, *frames, msg)] == list(range(begin.seq, msg.seq + 1))
    return frames


async def send_status(ws: aiohttp.ClientWebSocketResponse, seq: int, name: str, body: dict | None = None) -> None:
    msg = Message(Op.STATUS, seq, "Dataset", "default", name, body or {"numberOfSamples": seq})
    await ws.send_bytes(encode_native(msg))


async def connect_upstream(http: aiohttp.ClientSession, url: str, node: str = NODE) -> aiohttp.ClientWebSocketResponse:
    """A client that behaves like upstream's Go LC: no subprotocol, bare header first."""
    ws = await http.ws_connect(url, headers={"Node-Name": node})
    assert ws.protocol is None
    await ws.send_str(proto.BARE_HEADER)
    return ws


async def recv_text(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    frame = await ws.receive(timeout=TIMEOUT)
    assert frame.type is WSMsgType.TEXT, (frame.type, frame.data)
    assert frame.data.endswith("}\n")
    envelope = orjson.loads(frame.data)
    return {"header": envelope["header"], "content": orjson.loads(base64.b64decode(envelope["content"]))}
