"""How many LC sessions one GM process can hold: its file-descriptor budget.

Every session is one socket. A process that runs out of descriptors cannot accept: the
kernel completes the TCP handshake, the accept fails, and the client sees its connection
reset with nothing logged on the GM's side. So at start the GM raises its soft descriptor
limit to the hard one (the most it may have without privileges), keeps a reserve for what
else it opens (API connections and watches, its listening sockets, logs, TLS files), and
the hub refuses sessions beyond the rest with a 503 the LC backs off from (to another
replica behind the Service).
"""

from __future__ import annotations

import resource

RESERVED_FDS = 512  # API client pool (100) and watches, listeners, files, headroom
MIN_CAPACITY = 16


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft if soft != resource.RLIM_INFINITY else 1 << 20
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft
    return target


def session_capacity(fd_limit: int, *, configured: int = 0) -> int:
    """The sessions to admit: `configured` when set (never above what the descriptors allow),
    else the descriptor limit less the reserve."""
    available = max(fd_limit - RESERVED_FDS, MIN_CAPACITY)
    return min(configured, available) if configured > 0 else available
