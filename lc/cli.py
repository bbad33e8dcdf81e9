"""`sedna-lc`: run one LocalController until SIGTERM/SIGINT.

Configuration comes only from the environment (lc/config.py, table in lc/README.md), as
with upstream's LC; the command line takes just --help, --version and klog's `-v N` as
upstream's LC does (shared/cliflags.py; it overrides LOG_LEVEL). Exit codes: 0 after
a clean shutdown, 2 for a configuration, store or bind error (printed as one clear line).

Stopping is bounded. The LC's own stop has a deadline (`STOP_TIMEOUT`), and the loop is run
here rather than by `asyncio.run`, which waits without limit for the default executor's
threads (and the interpreter joins them again at exit): a thread stuck in a system call,
say a read from a hung network mount, would keep a stopped LC alive. The store is closed by
then, so once `EXIT_GRACE` has passed with threads still busy the process exits without them.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from lc.app import LinkFactory, LocalController
from lc.config import LCConfig, load
from lc.errors import ConfigError, StoreError
from lc.link.dialer import link_factory
from shared import cliflags, logs

log = logging.getLogger("lc")

STOP_TIMEOUT = 30.0  # the LC's ordered stop (HTTP 10 s, link 10 s, managers, store)
EXIT_GRACE = 5.0  # then, for threads still running


async def serve(config: LCConfig) -> None:
    """Run the LC until a stop signal, then shut it down in order."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    factory: LinkFactory | None = link_factory if config.gm_address else None
    lc = LocalController(config, link_factory=factory)
    await lc.start()
    try:
        await stop.wait()
        logs.event(log, "stop signal received")
    finally:
        try:
            async with asyncio.timeout(STOP_TIMEOUT):
                await lc.stop()
        except TimeoutError:
            logs.event(log, "stop timed out, exiting anyway", level=logging.ERROR,
                       within=STOP_TIMEOUT)


def run(main: Coroutine[Any, Any, None], *,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop) -> None:
    """Run `main` to completion, then cancel what is left and close the loop, without waiting
    for the default executor's threads (closing the loop tells them to end; `exit_code`
    bounds the wait)."""
    loop = loop_factory()
    try:
        loop.run_until_complete(main)
    finally:
        try:
            _cancel_remaining(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def _cancel_remaining(loop: asyncio.AbstractEventLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def busy_threads(within: float) -> list[str]:
    """Names of the non-daemon threads still running after waiting up to `within` seconds."""
    deadline = time.monotonic() + within
    for thread in _non_daemon_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in _non_daemon_threads()]


def _non_daemon_threads() -> list[threading.Thread]:
    main = threading.main_thread()
    return [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]


def exit_code(code: int) -> int:
    """`code`, once the threads left have ended; if some are stuck, exit now without them."""
    stuck = busy_threads(EXIT_GRACE)
    if stuck:
        logs.event(log, "threads still busy at exit, exiting without them", level=logging.WARNING,
                   threads=",".join(stuck), within=EXIT_GRACE)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="sedna-lc", description="Sedna LocalController (configured by environment).")
    cliflags.add_common_flags(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = load()
    except ConfigError as exc:
        print(f"sedna-lc: configuration error: {exc}", file=sys.stderr)
        return 2
    logs.setup(cliflags.chosen_log_level(args, configured=config.log_level), config.log_format)
    return exit_code(_serve_until_stopped(config))


def _serve_until_stopped(config: LCConfig) -> int:
    try:
        import uvloop
        loop_factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    except ImportError:
        loop_factory = asyncio.new_event_loop
    try:
        run(serve(config), loop_factory=loop_factory)
    except ConfigError as exc:  # checked at start: certificates that do not load
        print(f"sedna-lc: configuration error: {exc}", file=sys.stderr)
        return 2
    except (StoreError, OSError) as exc:  # unusable DB, port in use, address not available
        logs.event(log, "cannot start", level=logging.ERROR, error=str(exc))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
