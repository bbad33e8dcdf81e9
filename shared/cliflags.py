"""The command-line flags every sedna-py command shares: `--version`, and klog's `-v`.

Upstream starts its GM and LC with klog's global flags (`sedna-gm --config FILE -v 2`), so
manifests and scripts written for upstream pass `-v N` in one of the forms klog (Go's `flag`
package) accepts: `-v N`, `-vN`, `-v=N`, `--v=N`, `--v N`. klog's verbosity is a level of
detail, not a severity; it maps onto our log levels as:

| `-v` | log level | why |
|---|---|---|
| 0-1 | `info` | Kubernetes' convention: what an operator always wants to see |
| 2-3 | `info` | the steady-state and change details Kubernetes components log at 2-3 are what our INFO lines say (we have no finer level between INFO and DEBUG) |
| 4 and more | `debug` | Kubernetes' debug verbosity, as our DEBUG lines are |

A service's own log-level setting (`--log-level` on the GM) wins over `-v`; `-v` wins over
its configuration (the GM's `log.level`, the LC's `LOG_LEVEL`), as a flag given at start
wins over a file.

`--version` prints shared/version.py's answer. Standard library only.
"""

from __future__ import annotations

import argparse

from shared.version import package_version

DEBUG_FROM = 4  # the klog verbosity from which we log at DEBUG


def verbosity(text: str) -> int:
    """klog's `-v` value: a non-negative integer (argparse reports anything else)."""
    try:
        value = int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, not {text!r}")
    return value


def log_level_of(v: int) -> str:
    """The log level a klog verbosity stands for (the table in the module docstring)."""
    return "debug" if v >= DEBUG_FROM else "info"


def add_common_flags(parser: argparse.ArgumentParser, *, klog: bool = True) -> None:
    """`--version` (prints `<prog> <version>`, exits 0) and, with `klog`, `-v`/`--v N`."""
    parser.add_argument("--version", action="version",
                        version=f"{parser.prog} {package_version()}")
    if klog:
        parser.add_argument("-v", "--v", dest="verbosity", type=verbosity, default=None,
                            metavar="N", help="klog verbosity, as upstream's flag: 0-3 log at "
                            "info, 4 and more at debug")


def chosen_log_level(args: argparse.Namespace, *, configured: str,
                     explicit: str | None = None) -> str:
    """The log level to run at: `explicit` (a service's own flag), else `-v`, else `configured`."""
    if explicit:
        return explicit
    if getattr(args, "verbosity", None) is not None:
        return log_level_of(args.verbosity)
    return configured
