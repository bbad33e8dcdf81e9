"""`sedna-lc`: run one LocalController until SIGTERM/SIGINT.

Configuration comes only from the environment (lc/config.py, table in lc/README.md), as
with upstream's LC; the command line takes just --help and --version. Exit codes: 0 after
a clean shutdown, 2 for a configuration, store or bind error (printed as one clear line).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from importlib import metadata

from lc.app import LinkFactory, LocalController
from lc.config import LCConfig, load
from lc.errors import ConfigError, StoreError
from shared import logs

log = logging.getLogger("lc")


def _version() -> str:
    try:
        return metadata.version("sedna-py")
    except metadata.PackageNotFoundError:
        return "unknown"


def _link_factory() -> LinkFactory | None:
    """The GM link from lc/link/dialer.py when that module is present."""
    try:
        from lc.link import dialer as link  # optional until the link lands
    except ImportError:
        return None
    return getattr(link, "link_factory", None)


async def serve(config: LCConfig) -> None:
    """Run the LC until a stop signal, then shut it down in order."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    factory = _link_factory() if config.gm_address else None
    lc = LocalController(config, link_factory=factory)
    await lc.start()
    try:
        await stop.wait()
        logs.event(log, "stop signal received")
    finally:
        await lc.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="sedna-lc", description="Sedna LocalController (configured by environment).")
    parser.add_argument("--version", action="version", version=f"sedna-lc {_version()}")
    parser.parse_args(argv)
    try:
        config = load()
    except ConfigError as exc:
        print(f"sedna-lc: configuration error: {exc}", file=sys.stderr)
        return 2
    logs.setup(config.log_level, config.log_format)
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        runner(serve(config))
    except ConfigError as exc:  # checked at start: certificates that do not load
        print(f"sedna-lc: configuration error: {exc}", file=sys.stderr)
        return 2
    except (StoreError, OSError) as exc:  # unusable DB, port in use, address not available
        logs.event(log, "cannot start", level=logging.ERROR, error=str(exc))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
