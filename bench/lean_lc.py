"""Lean LCs for the hub benchmarks: thousands of sessions per process, each doing on the wire
what lc/link does, as callbacks on a protocol (no task per session).

A session dials with the headers the LC's aiohttp client sends (`Node-Name`, the native
subprotocol) within the LC's connect timeout, sends the hello, reads the GM's hello and the
snapshot (begin, one upsert per object, end), optionally sends one status report and reads its
ack, then stays: it answers the GM's pings, pings every 10 s, considers the GM dead after 30 s
without a frame, and redials after the LC's own backoff (lc/link/backoff.py) when a dial fails or
a session ends. The real LC link needs a SQLite store and five tasks per session, too much for
thousands per process, and aiohttp's client costs more CPU per dial than the GM does. Each
session dials from a loopback address of its own group (127.1.x.y, 50 sessions each): nodes dial
from their own addresses, and the GM caps connections per peer address (512), which dials
abandoned in a storm would otherwise reach.

`Clients` runs the processes (this file, `PER_CLIENT` sessions each: a process may hold 20,000
descriptors here, as the GM) and sums what they tally; each takes `dial`, `cut` and `quit` on
stdin and prints its tally as a JSON line every 0.25 s.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import resource
import struct
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import msgpack
from aiohttp._websocket.helpers import websocket_mask

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parents[1]
sys.path.insert(0, str(ROOT))

from bench.procstat import cpu_jiffies, rss_kib  # noqa: E402
from bench.status_harness import NS  # noqa: E402
from lc.link.backoff import Backoff  # noqa: E402
from proto import SUBPROTOCOL, Message, Op, encode_native, hello  # noqa: E402

PER_ADDRESS = 50  # sessions dialling from one loopback address (the GM admits 512 per peer)
PER_CLIENT = 5000  # sessions per client process (each holds one descriptor per session)
CONNECT_TIMEOUT = 10.0  # the LC's (lc/link/dialer.py LinkSettings)
PING_INTERVAL = 10.0
SILENCE = 30.0
STABLE_AFTER = 10.0  # a session this long resets the backoff
USER_AGENT = "Python/3.11 aiohttp/3.14.5"
EPOCH = "bench-hub-fleet"


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def address_of(i: int) -> str:
    group = i // PER_ADDRESS
    return f"127.1.{group // 250}.{group % 250 + 1}"


@dataclass(slots=True)
class Tally:
    """What one client process's sessions saw; printed as a JSON line every 0.25 s."""

    sessions: int = 0  # sessions up now (snapshot read)
    synced: int = 0  # snapshots read, ever
    objects: int = 0  # objects received in snapshots
    dials: int = 0
    timeouts: int = 0  # no websocket within CONNECT_TIMEOUT
    refused_503: int = 0
    refused_other: int = 0  # another HTTP status for the upgrade
    resets: int = 0  # connection refused, reset or closed before the upgrade was answered
    ended: int = 0  # established sessions that ended
    acks: int = 0
    first_sync: float = 0.0  # time.monotonic() of the first and last snapshot read since `mark`
    last_sync: float = 0.0
    cpu: float = 0.0
    rss_kb: int = 0


class LeanLC(asyncio.Protocol):
    """One node's link, driven by callbacks (no task per session, so thousands per process cost
    the GM's machine little): dial within CONNECT_TIMEOUT, the upgrade with `Node-Name` and the
    native subprotocol, hello, snapshot, one report (if asked), then pong every ping, ping every
    PING_INTERVAL, and end the session after SILENCE without a frame; after a failed dial or
    an ended session, redial after the LC's backoff. Frames go out masked, as a client's must."""

    def __init__(self, node: str, index: int, urls: list[tuple[str, int]], tally: Tally, *, report: bool) -> None:
        self.node, self.dataset, self.address, self.urls, self.tally = node, f"ds-{node}", address_of(index), urls, tally
        self.report, self.acked = report, 0
        self.backoff = Backoff(base=0.5, cap=30.0)
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.state = "idle"  # idle, dialling, upgrade, hello, begin, snapshot, up
        self.buffer = bytearray()
        self.count = 0
        self.heard = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.connecting: asyncio.Task[None] | None = None
        self.up_since = 0.0
        self.stopped = False

    # -- dialling

    def dial(self) -> None:
        if self.stopped:
            return
        self.tally.dials += 1
        self.state = "dialling"
        self._arm(CONNECT_TIMEOUT, self._timed_out)
        host, port = random.choice(self.urls)
        self.connecting = self.loop.create_task(self._connect(host, port))

    async def _connect(self, host: str, port: int) -> None:
        try:
            await self.loop.create_connection(lambda: self, host, port, local_addr=(self.address, 0))
        except OSError:
            if self.state == "dialling":
                self.tally.resets += 1
                self._retry()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.state = "upgrade"
        self.buffer.clear()
        key = base64.b64encode(os.urandom(16)).decode()
        host, port = transport.get_extra_info("peername")[:2]
        self.transport.write(  # what the LC's aiohttp client sends
            f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Protocol: {SUBPROTOCOL}\r\n"
            f"Node-Name: {self.node}\r\nAccept: */*\r\nAccept-Encoding: gzip, deflate\r\n"
            f"User-Agent: {USER_AGENT}\r\n\r\n".encode())

    def _timed_out(self) -> None:
        self.tally.timeouts += 1
        self._drop()

    def _retry(self, *, ended: bool = False) -> None:
        """Wait the backoff, then dial again; a session that lasted STABLE_AFTER resets it first."""
        if ended:
            self.tally.ended += 1
            if self.loop.time() - self.up_since >= STABLE_AFTER:
                self.backoff.reset()
        self.state = "idle"
        if not self.stopped:
            self._arm(self.backoff.next_delay(), self.dial)

    def _drop(self) -> None:
        """End the connection at once (a timed out dial, a cut, a silent GM) and retry."""
        was_up = self.state == "up"
        if was_up:
            self.tally.sessions -= 1
        transport, self.transport = self.transport, None
        if transport is not None:
            transport.abort()
        elif self.state == "dialling" and self.connecting is not None:
            self.connecting.cancel()
        self._retry(ended=was_up)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:  # the GM closed it
            self.transport = None
            if self.state == "up":
                self.tally.sessions -= 1
                self._retry(ended=True)
            else:
                self.tally.resets += self.state == "upgrade"
                self._retry()

    def cut(self) -> None:
        if self.state == "up":
            self._drop()

    def stop(self) -> None:
        self.stopped = True
        if self.timer is not None:
            self.timer.cancel()
        if self.transport is not None:
            self.transport.abort()

    def _arm(self, delay: float, then) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_later(delay, then)

    # -- reading

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.state == "upgrade" and not self._upgraded():
            return
        offset = 0
        while (frame := _frame_at(self.buffer, offset)) is not None:
            opcode, payload, offset = frame
            self._on_frame(opcode, payload)
            if self.transport is None:
                return
        del self.buffer[:offset]

    def _upgraded(self) -> bool:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = bytes(self.buffer[:end]).decode("latin-1")
        del self.buffer[:end + 4]
        status = int(head.split(" ", 2)[1])
        if status != 101 or f"Sec-WebSocket-Protocol: {SUBPROTOCOL}".lower() not in head.lower():
            if status == 503:
                self.tally.refused_503 += 1
            else:
                self.tally.refused_other += 1
            self.transport, transport = None, self.transport
            transport.close()
            self._retry()
            return False
        self.state = "hello"
        self._arm(CONNECT_TIMEOUT, self._timed_out)
        self._send(0x2, encode_native(hello(self.node, acked=self.acked, epoch=EPOCH)))
        return True

    def _on_frame(self, opcode: int, payload: bytes) -> None:
        self.heard = self.loop.time()
        if opcode == 0x9:
            self._send(0xA, payload)
        elif opcode == 0x8:
            self.transport, transport = None, self.transport
            transport.close()
            if self.state == "up":
                self.tally.sessions -= 1
            self._retry(ended=self.state == "up")
        elif opcode == 0x2:
            self._on_message(payload)

    def _on_message(self, payload: bytes) -> None:
        op = _op_of(payload)
        if self.state == "hello" and op == "hello":
            self.state, self.count = "begin", 0
        elif self.state == "begin" and op == "snapshot":
            self.state = "snapshot"
        elif self.state == "snapshot" and op in ("upsert", "delete"):
            self.count += 1
        elif self.state == "snapshot" and op == "snapshot":
            self._synced()
        elif op == "ack":
            self.acked = max(self.acked, msgpack.unpackb(payload).get("seq", 0))
            self.tally.acks += 1

    def _synced(self) -> None:
        t, now = self.tally, time.monotonic()
        t.first_sync = t.first_sync or now
        t.last_sync = now
        t.synced += 1
        t.objects += self.count
        t.sessions += 1
        self.state = "up"
        self.up_since = self.loop.time()
        if self.report and self.acked == 0:
            self._send(0x2, encode_native(Message(Op.STATUS, 1, "Dataset", NS, self.dataset, {"numberOfSamples": 1})))
        self.heard = self.loop.time()
        self._arm(PING_INTERVAL, self._beat)

    def _beat(self) -> None:
        """Every PING_INTERVAL: a ping, or the end of a session whose GM has been silent."""
        if self.loop.time() - self.heard > SILENCE:
            self._drop()
            return
        self._send(0x9, b"")
        self._arm(PING_INTERVAL, self._beat)

    def _send(self, opcode: int, payload: bytes) -> None:
        if self.transport is None:
            return
        mask = os.urandom(4)
        masked = bytearray(payload)
        websocket_mask(mask, masked)
        n = len(payload)
        head = bytes((0x80 | opcode, 0x80 | n)) if n < 126 else struct.pack("!BBH", 0x80 | opcode, 0xFE, n) \
            if n < 65536 else struct.pack("!BBQ", 0x80 | opcode, 0xFF, n)
        self.transport.write(head + mask + masked)


def _frame_at(buffer: bytearray, offset: int) -> tuple[int, bytes, int] | None:
    """(opcode, payload, offset after it) of the unmasked frame at `offset`, None if incomplete."""
    if len(buffer) - offset < 2:
        return None
    opcode, n, at = buffer[offset] & 0x0F, buffer[offset + 1] & 0x7F, offset + 2
    if n == 126:
        if len(buffer) - at < 2:
            return None
        n, at = struct.unpack_from("!H", buffer, at)[0], at + 2
    elif n == 127:
        if len(buffer) - at < 8:
            return None
        n, at = struct.unpack_from("!Q", buffer, at)[0], at + 8
    if len(buffer) - at < n:
        return None
    return opcode, bytes(buffer[at:at + n]), at + n


def _op_of(payload: bytes) -> str:
    """A native frame's op without decoding the rest: the map's first entry is `op`."""
    if payload[1:4] == b"\xa2op" and payload[4] & 0xE0 == 0xA0:
        return payload[5:5 + (payload[4] & 0x1F)].decode()
    return str(msgpack.unpackb(payload).get("op"))


async def client_main(args: argparse.Namespace) -> None:
    """A client process: sessions for nodes [first, first + count); commands on stdin
    (`dial`, `cut`, `quit`), its Tally on stdout every 0.25 s."""
    tally = Tally()
    urls = [(u.split("//", 1)[1].split(":")[0], int(u.rsplit(":", 1)[1].strip("/"))) for u in args.url]
    lcs = [LeanLC(node_name(i), i, urls, tally, report=args.report) for i in range(args.first, args.first + args.count)]
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def report() -> None:
        while True:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            tally.cpu = usage.ru_utime + usage.ru_stime
            tally.rss_kb = rss_kib(os.getpid())
            print(json.dumps(asdict(tally)), flush=True)
            await asyncio.sleep(0.25)

    reporter = asyncio.create_task(report())
    try:
        while line := (await reader.readline()).decode().strip():
            if line == "dial":
                for lc in lcs:
                    lc.dial()
            elif line == "cut":
                for lc in lcs:
                    lc.cut()
            elif line == "quit":
                break
    finally:
        reporter.cancel()
        for lc in lcs:
            lc.stop()
        await asyncio.gather(reporter, return_exceptions=True)



def log_file(path: Path):
    return open(path, "ab")  # handed to a child process, closed once it started


class Clients:
    """The client processes for nodes [0, n), `PER_CLIENT` each; their tallies summed."""

    def __init__(self, n: int, urls: list[str], *, report: bool, log_dir: Path) -> None:
        self.n, self.urls, self.report, self.log_dir = n, urls, report, log_dir
        self.procs: list[asyncio.subprocess.Process] = []
        self.tallies: list[Tally] = []
        self._readers: list[asyncio.Task[None]] = []

    async def start(self) -> Clients:
        for k, first in enumerate(range(0, self.n, PER_CLIENT)):
            count = min(PER_CLIENT, self.n - first)
            cmd = [sys.executable, str(SCRIPT), "--first", str(first),
                   "--count", str(count), *(a for u in self.urls for a in ("--url", u))]
            cmd += ["--report"] if self.report else []
            with log_file(self.log_dir / f"client-{k}.log") as err:
                proc = await asyncio.create_subprocess_exec(
                    *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
                    env={**os.environ, "PYTHONPATH": str(ROOT)}, limit=1 << 20)
            self.procs.append(proc)
            self.tallies.append(Tally())
            self._readers.append(asyncio.create_task(self._read(k, proc)))
        return self

    async def _read(self, k: int, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            with contextlib.suppress(ValueError, TypeError):
                self.tallies[k] = Tally(**json.loads(line))

    async def send(self, command: str) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(f"{command}\n".encode())
            await proc.stdin.drain()

    def total(self) -> Tally:
        out = Tally()
        for t in self.tallies:
            for name in ("sessions", "synced", "objects", "dials", "timeouts", "refused_503", "refused_other",
                         "resets", "ended", "acks", "cpu", "rss_kb"):
                setattr(out, name, getattr(out, name) + getattr(t, name))
        firsts = [t.first_sync for t in self.tallies if t.first_sync]
        out.first_sync = min(firsts) if firsts else 0.0
        out.last_sync = max((t.last_sync for t in self.tallies), default=0.0)
        return out

    async def wait(self, predicate, within: float) -> float | None:
        """Seconds until `predicate(total)` holds, None after `within`."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < within:
            if predicate(self.total()):
                return time.monotonic() - t0
            await asyncio.sleep(0.1)
        return None

    async def run_until(self, command: str, predicate, within: float = 600.0) -> tuple[float | None, float | None]:
        """Send the clients `command`: (seconds until the last snapshot read, until `predicate`
        held), None when it did not within `within` seconds. Says how busy the machine was."""
        t0, j0 = time.monotonic(), cpu_jiffies()
        await self.send(command)
        held = await self.wait(predicate, within)
        j1 = cpu_jiffies()
        total = max(j1[2] - j0[2], 1)
        print(f"# {command}: the machine's CPUs {100 * (j1[0] - j0[0]) / total:.0f}% busy, "
            f"{100 * (j1[1] - j0[1]) / total:.0f}% taken by the host (steal)", flush=True)
        if held is None:
            return None, None
        await asyncio.sleep(0.3)  # one more tally from every client
        return self.total().last_sync - t0, time.monotonic() - t0 - 0.3

    async def stop(self) -> None:
        for proc in self.procs:
            if proc.returncode is None and proc.stdin is not None:
                with contextlib.suppress(ConnectionError):
                    proc.stdin.write(b"quit\n")
        for proc in self.procs:
            try:
                await asyncio.wait_for(proc.wait(), 20.0)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        for reader in self._readers:
            reader.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="(internal) one process of lean LCs")
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--url", action="append", required=True)
    parser.add_argument("--report", action="store_true")
    import uvloop
    uvloop.run(client_main(parser.parse_args()))
