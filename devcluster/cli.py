"""`sedna-devcluster`: run the dev cluster until SIGINT/SIGTERM, then stop in order."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devcluster.controllers.nodes import DEFAULT_NODES
from devcluster.runtime.process import ImageMapError
from devcluster.servingcert import CertError
from shared.cliflags import add_common_flags


class UsageError(ValueError):
    """A command-line value that cannot be used; reported without a traceback."""


def parse_error_rate(text: str) -> tuple[str, str, float]:
    """`VERB:RESOURCE=RATE` (e.g. `create:pods=0.1`, `*:*=0.05`) -> (verb, resource, rate)."""
    try:
        target, rate_text = text.split("=", 1)
        verb, resource = target.split(":", 1)
        rate = float(rate_text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected VERB:RESOURCE=RATE, got {text!r}") from None
    if not 0.0 <= rate <= 1.0:
        raise argparse.ArgumentTypeError(f"rate must be between 0 and 1, got {rate}")
    if not verb or not resource:
        raise argparse.ArgumentTypeError(f"expected VERB:RESOURCE=RATE, got {text!r}")
    from devcluster.server.faults import VERBS

    if verb.lower() != "*" and verb.lower() not in VERBS:
        raise argparse.ArgumentTypeError(f"verb must be one of {', '.join(VERBS)} or '*', got {verb!r}")
    return verb.lower(), resource.lower(), rate


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sedna-devcluster", description="Single-process Kubernetes API emulator.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=6443, help="0 picks a free port")
    p.add_argument("--kubeconfig", help="write a kubeconfig for the cluster here")
    p.add_argument("--nodes", default=",".join(DEFAULT_NODES), help="comma-separated node names")
    p.add_argument("--process-runtime", action="store_true", help="run mapped images as local processes")
    p.add_argument("--image-map", help="YAML/JSON file: image -> local command (implies --process-runtime)")
    p.add_argument("--state", help="load state from FILE at start and save it there at stop")
    p.add_argument("--pki-dir", help="keep the CA and serving certificate here (default: pki/ beside --state, "
                                     "else a temporary directory)")
    p.add_argument("--insecure-http", action="store_true",
                   help="serve plain HTTP instead of HTTPS (kubectl then sends no token)")
    p.add_argument("--apply", action="append", default=[], metavar="PATH",
                   help="create the objects of a YAML file or directory at start (repeatable), e.g. CRDs")
    p.add_argument("--start-delay", type=float, default=0.2, help="seconds a pod stays Pending")
    p.add_argument("--termination-delay", type=float, default=0.1)
    p.add_argument("--fault-error-rate", action="append", default=[], type=parse_error_rate,
                   metavar="VERB:RESOURCE=RATE", help="fail this share of requests with 500 (repeatable)")
    p.add_argument("--fault-latency-ms", type=float, default=0.0, help="added latency per request")
    p.add_argument("--fault-watch-drop-seconds", type=float, default=0.0,
                   help="close every watch after this many seconds (0: never)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    add_common_flags(p, klog=False)  # --version
    return p


def node_list(text: str) -> list[str]:
    nodes = [n.strip() for n in text.split(",") if n.strip()]
    if not nodes:
        raise UsageError("--nodes needs at least one node name")
    return nodes


def build_faults(args: argparse.Namespace) -> Any:
    """Fault settings from the flags, or None when no fault is asked for."""
    if not (args.fault_error_rate or args.fault_latency_ms or args.fault_watch_drop_seconds):
        return None
    from devcluster.server.faults import ErrorRule, Faults

    return Faults(
        errors=[ErrorRule(rate=rate, verb=verb, resource=res) for verb, res, rate in args.fault_error_rate],
        latency=args.fault_latency_ms / 1000.0,
        watch_drop_after=args.fault_watch_drop_seconds or None,
    )


def pki_dir(args: argparse.Namespace, stack: contextlib.ExitStack) -> Path | None:
    """Where the CA and serving certificate live: None for plain HTTP. Beside the state file
    they outlive a restart (so do kubeconfigs that carry the CA); otherwise they last one run."""
    if args.insecure_http:
        return None
    if args.pki_dir:
        return Path(args.pki_dir)
    if args.state:
        return Path(args.state).resolve().parent / "pki"
    return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="devcluster-pki-")))


async def serve(args: argparse.Namespace) -> None:
    with contextlib.ExitStack() as stack:
        await _serve(args, pki_dir(args, stack))


async def _serve(args: argparse.Namespace, pki: Path | None) -> None:
    from devcluster.cluster import DevCluster
    from devcluster.machinery.errors import ApiError

    dc = DevCluster(
        nodes=node_list(args.nodes), process_runtime=bool(args.process_runtime or args.image_map),
        image_map=args.image_map, state_file=args.state, faults=build_faults(args),
        start_delay=args.start_delay, termination_delay=args.termination_delay, pki_dir=pki,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await dc.start(args.host, args.port)
    try:
        if args.apply:
            try:
                dc.apply_manifests(*args.apply)
            except (OSError, ValueError, ApiError) as exc:
                raise SystemExit(f"sedna-devcluster: --apply: {exc}") from None
        if args.kubeconfig:
            dc.write_kubeconfig(args.kubeconfig)
        where = [f"kubeconfig {args.kubeconfig}"] if args.kubeconfig else []
        where += [f"CA {dc.ca}"] if dc.ca else []
        print(f"devcluster serving {dc.url}" + (f" ({', '.join(where)})" if where else ""), flush=True)
        await stop.wait()
    finally:
        await dc.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        asyncio.run(serve(args))
    except (UsageError, ImageMapError, ValueError, OSError, CertError) as err:
        print(f"sedna-devcluster: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
