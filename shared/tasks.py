"""Running a group of tasks until the first one ends: a session's reader, writer, pinger...

A session (GM hub, LC link) is over when any of its loops ends, normally or by raising;
the others are then cancelled and awaited. Plain tasks and `asyncio.wait` rather than a
TaskGroup: on Python 3.11 a TaskGroup whose child fails can swallow a cancellation of
the parent arriving at the same moment, and a shutdown must always end every session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


async def until_first_done(tasks: Iterable[asyncio.Task]) -> set[asyncio.Task]:
    """Wait for the first task to finish, cancel and await the rest; returns the finished set.
    If the caller is cancelled, every task is cancelled and awaited before it propagates."""
    tasks = list(tasks)
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return done
