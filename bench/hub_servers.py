"""Servers for the hub benchmarks, each in a process of its own spoken to over stdin/stdout:
the hub alone (gm/edge/hub.py on an in-memory object source, served as the GM serves it: one
Dataset per node, every report applied at once) and the reference, a bare aiohttp websocket
server that answers each LC's hello and an empty snapshot, then only reads.

    python bench/hub_servers.py hub --port P --count N [--trace] [--top K]
    python bench/hub_servers.py bare --port P

`mem` on the hub's stdin prints its RSS, tasks and sessions (with --trace, the allocations
made since `base`, by line); `quit` stops either.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parents[1]
sys.path.insert(0, str(ROOT))

from bench.lean_lc import Clients, log_file, node_name  # noqa: E402
from bench.procstat import Usage, cpu_seconds, rss_kib  # noqa: E402
from bench.status_harness import NS  # noqa: E402
from proto import SUBPROTOCOL, Message, encode_native, hello, snapshot_begin, snapshot_end  # noqa: E402
from shared.ports import free_port  # noqa: E402


def dataset(node: str) -> dict:
    return {"apiVersion": "sedna.io/v1alpha1", "kind": "Dataset", "metadata": {"name": f"ds-{node}", "namespace": NS},
            "spec": {"url": f"/data/{node}/index.txt", "format": "txt", "nodeName": node}}


class _Source:
    """The hub's ObjectSource: one Dataset per node, as the GM would place it."""

    def __init__(self, n: int) -> None:
        self.objects = {node_name(i): dict(dataset(node_name(i)), metadata={
            "name": f"ds-{node_name(i)}", "namespace": NS, "uid": f"uid-{i}", "resourceVersion": str(i + 1)})
            for i in range(n)}

    def objects_for_node(self, node: str) -> list[tuple[str, str, str, dict]]:
        obj = self.objects.get(node)
        return [("Dataset", NS, obj["metadata"]["name"], obj)] if obj is not None else []

    def is_assigned(self, node: str, kind: str, namespace: str, name: str) -> bool:
        return name == f"ds-{node}"


class _Handler:
    """Every report applied at once."""

    def submit(self, node: str, message: Message, *, epoch: str = "") -> asyncio.Future[None]:
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


async def hub_main(args: argparse.Namespace) -> None:
    """A process serving only the hub, as the GM serves it; `mem` on stdin prints its RSS, tasks
    and sessions, and with --trace the allocations made since `base`, by line."""
    import logging
    import tracemalloc

    from aiohttp import web

    from gm.edge.capacity import raise_fd_limit, session_capacity
    from gm.edge.hub import Hub
    from gm.edge.site import serve_hub
    from gm.http_errors import error_response, json_errors
    from shared.server_limits import guarded_runner

    logging.basicConfig(level=logging.WARNING)
    if args.trace:
        tracemalloc.start(1)
    hub = Hub(_Source(args.count), _Handler(), max_sessions=session_capacity(raise_fd_limit()))
    app = web.Application(middlewares=[json_errors])
    hub.attach(app)
    runner = guarded_runner(app, handle_signals=False, access_log=None, error_response=error_response)
    await runner.setup()
    _, lane = await serve_hub(runner, hub, "127.0.0.1", args.port)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    base: tracemalloc.Snapshot | None = None
    print(json.dumps({"ready": True}), flush=True)
    while line := (await reader.readline()).decode().strip():
        if line == "base" and args.trace:
            base = tracemalloc.take_snapshot()
        elif line == "mem":
            out: dict[str, Any] = {"rss_kb": rss_kib(os.getpid()), "sessions": hub.sessions_active,
                                   "tasks": len(asyncio.all_tasks())}
            if base is not None:
                diff = tracemalloc.take_snapshot().compare_to(base, "lineno")
                out["top"] = [(str(d.traceback), d.size_diff, d.count_diff) for d in diff[:args.top]]
                out["traced"] = sum(d.size_diff for d in diff)
            print(json.dumps(out), flush=True)
        elif line == "quit":
            break
    await hub.close()
    await lane.close()
    await runner.cleanup()


async def bare_main(args: argparse.Namespace) -> None:
    """The reference: a bare aiohttp websocket server (no hub, no GM) that answers each LC's
    hello and an empty snapshot, then only reads (aiohttp answers the pings)."""
    from aiohttp import web

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    async def handle(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(protocols=(SUBPROTOCOL,), compress=False)
        await ws.prepare(request)
        await ws.receive()
        node = request.headers.get("Node-Name", "")
        for msg in (hello(node), snapshot_begin(1), snapshot_end(0, 2)):
            await ws.send_bytes(encode_native(msg))
        async for _ in ws:
            pass
        return ws

    app = web.Application()
    app.router.add_get("/", handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.port, backlog=4096).start()
    print(json.dumps({"ready": True}), flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while (await reader.readline()).strip() not in (b"quit", b""):
        pass
    await runner.cleanup()


class HubProc:
    """The `hub` role as a child process, spoken to over its stdin and stdout."""

    def __init__(self, n: int, *, trace: bool, log_dir: Path, role: str = "hub") -> None:
        self.n, self.trace, self.log_dir, self.port, self.role = n, trace, log_dir, free_port(), role
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> HubProc:
        cmd = [sys.executable, str(SCRIPT), self.role, "--port", str(self.port)]
        cmd += ["--count", str(self.n)] if self.role == "hub" else []
        with log_file(self.log_dir / f"{self.role}.log") as err:
            self.proc = await asyncio.create_subprocess_exec(
                *cmd, *(["--trace"] if self.trace else []), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=err, env={**os.environ, "PYTHONPATH": str(ROOT)},
                limit=1 << 24)
        assert json.loads(await self._line())["ready"]
        return self

    async def _line(self) -> bytes:
        assert self.proc is not None and self.proc.stdout is not None
        return await asyncio.wait_for(self.proc.stdout.readline(), 600.0)

    async def ask(self, command: str) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(f"{command}\n".encode())
        await self.proc.stdin.drain()
        return json.loads(await self._line()) if command == "mem" else {}

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ConnectionError):
                await self.ask("quit")
            try:
                await asyncio.wait_for(self.proc.wait(), 30.0)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()




def seconds(value: float | None) -> str:
    return "not within the wait" if value is None else f"{value:.1f} s"


async def scenario_bare(n: int, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    """The reference, measured in the same run: the same clients against a bare aiohttp
    websocket server (dial at once, steady state, all cut and redialled)."""
    server = await HubProc(n, trace=False, log_dir=log_dir, role="bare").start()
    assert server.proc is not None
    pid = server.proc.pid
    clients = await Clients(n, [f"ws://127.0.0.1:{server.port}/"], report=False, log_dir=log_dir).start()
    try:
        rss0, c0 = rss_kib(pid), cpu_seconds(pid)
        took, _ = await clients.run_until("dial", lambda t: t.sessions >= n)
        dial_cpu = cpu_seconds(pid) - c0
        await asyncio.sleep(2.0)
        usage = await Usage.over(pid, args.steady)
        before = clients.total()
        c0 = cpu_seconds(pid)
        again, _ = await clients.run_until("cut", lambda t: t.synced >= before.synced + n and t.sessions >= n)
        return {"n": n, "connect_s": took, "dial_cpu_s": dial_cpu, "cpu_share": usage.cpu_share,
                "kb_per_session": (usage.rss_kb - rss0) / n, "reconnect_s": again,
                "reconnect_cpu_s": cpu_seconds(pid) - c0}
    finally:
        await clients.stop()
        await server.stop()


def print_bare(r: dict[str, Any]) -> None:
    print(f"reference: {r['n']} sessions on a bare aiohttp websocket server: up in {seconds(r['connect_s'])} "
          f"(server CPU {r['dial_cpu_s']:.1f} s, {r['dial_cpu_s'] * 1000 / r['n']:.2f} ms per session); steady "
          f"{r['cpu_share'] * 100:.1f}% of a core, {r['kb_per_session']:.1f} KB per session; all cut: back in "
          f"{seconds(r['reconnect_s'])} (server CPU {r['reconnect_cpu_s']:.1f} s)")



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="role", required=True)
    bare = sub.add_parser("bare", help="the reference: a bare aiohttp websocket server")
    bare.add_argument("--port", type=int, required=True)
    hub = sub.add_parser("hub", help="the hub alone")
    hub.add_argument("--count", type=int, required=True)
    hub.add_argument("--port", type=int, required=True)
    hub.add_argument("--trace", action="store_true")
    hub.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    import uvloop
    uvloop.run(hub_main(args) if args.role == "hub" else bare_main(args))


if __name__ == "__main__":
    main()
