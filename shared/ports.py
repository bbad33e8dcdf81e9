"""A free loopback port for a service about to be started (tests, benchmarks, the dev
cluster's launchers)."""

from __future__ import annotations

import random
import socket

_HANDED_OUT: set[int] = set()  # ports free_port gave out in this process


def free_port() -> int:
    """A port that binds now and that this process has not handed out before, below the kernel's
    ephemeral range when it can be: the kernel offers the same port 0 twice over a hundred calls,
    and takes ports of that range for every outgoing connection, so a service started later
    with a port from it may find it taken (or, worse, another service answering on it)."""
    low = _ephemeral_low()
    for _ in range(1000):
        if low > 11_000:
            port = random.randrange(10_000, low)
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free port found")


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
