"""What `make run` starts: a dev cluster on 127.0.0.1:6443 (or the next free port) until Ctrl-C.

Kept a small orchestrator: later pieces (GM, LCs, example jobs) are added as more
components started after the cluster and stopped before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import sys
from pathlib import Path

from devcluster.cluster import DevCluster

KUBECONFIG = Path(".devcluster/kubeconfig")
FIRST_PORT = 6443
PORT_TRIES = 20


async def start_cluster(host: str = "127.0.0.1", first_port: int = FIRST_PORT, **options) -> DevCluster:
    """Start a DevCluster (with `options`) on the first free port from `first_port`."""
    for port in range(first_port, first_port + PORT_TRIES):
        dc = DevCluster(**{"process_runtime": True, **options})
        try:
            return await dc.start(host, port)
        except OSError as err:
            await dc.stop()
            if err.errno != errno.EADDRINUSE:
                raise
    raise OSError(errno.EADDRINUSE, f"no free port in {first_port}..{first_port + PORT_TRIES - 1}")


async def run() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    dc = await start_cluster()
    try:
        path = dc.write_kubeconfig(KUBECONFIG).resolve()
        print(f"devcluster serving {dc.url}\n"
              f"  export KUBECONFIG={path}\n"
              f"  kubectl get nodes\n"
              f"Ctrl-C to stop.", flush=True)
        await stop.wait()
    finally:
        await dc.stop()


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        asyncio.run(run())
    except OSError as err:
        print(f"devrun: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
