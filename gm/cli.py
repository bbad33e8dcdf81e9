"""`sedna-gm --config FILE`: run the GlobalManager until SIGTERM or SIGINT.

Also `--log-level LEVEL`, `--version`, and klog's `-v N` as upstream's GM takes it
(shared/cliflags.py: the forms accepted and how a verbosity maps to a log level).

Exit codes: 0 after a stop signal, 1 when the GM stopped by itself (a task it cannot
work without ended, caches that did not sync in time, lost leadership: the log says
which) or cannot reach the cluster, 2 for a bad configuration file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

from gm import heap
from gm.app import GlobalManager
from gm.config import load_config
from gm.errors import ConfigError, KubeConfigError
from shared import cliflags, logs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sedna-gm", description="Sedna GlobalManager")
    parser.add_argument("--config", default="./sedna-gm.yaml", help="config file (default %(default)s)")
    parser.add_argument("--log-level", default=None, help="overrides log.level of the config and -v")
    cliflags.add_common_flags(parser)
    return parser.parse_args(argv)


async def run(config_path: str, log_level: str | None, verbosity: int | None = None) -> int:
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        print(f"sedna-gm: {exc}", file=sys.stderr)
        return 2
    flags = argparse.Namespace(verbosity=verbosity)
    logs.setup(cliflags.chosen_log_level(flags, configured=config.log.level, explicit=log_level),
               config.log.format)
    heap.configure()
    gm = GlobalManager(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await gm.start()
    except KubeConfigError as exc:
        logging.getLogger("gm").error("cannot reach the cluster: %s", exc)
        await gm.stop()
        return 1
    except ConfigError as exc:  # settings only checkable at start: token tables, certificates
        print(f"sedna-gm: {exc}", file=sys.stderr)
        await gm.stop()
        return 2
    waiter = asyncio.create_task(gm.wait())
    stopper = asyncio.create_task(stop.wait())
    settler = asyncio.create_task(_settle_when_synced(gm))
    await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    await gm.stop()
    for task in (waiter, stopper, settler):
        task.cancel()
    if gm.failure is not None:
        logs.event(logging.getLogger("gm"), "exiting after a failure", level=logging.ERROR,
                   why=gm.failure)
        return 1
    return 0 if stop.is_set() else 1


async def _settle_when_synced(gm: GlobalManager) -> None:
    assert gm.informers is not None
    with contextlib.suppress(Exception):  # caches that never sync are the GM's failure, told by it
        await gm.informers.wait_synced()
        heap.settle()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        runner = asyncio.run
    sys.exit(runner(run(args.config, args.log_level, args.verbosity)))


if __name__ == "__main__":
    main()
