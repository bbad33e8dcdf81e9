"""Shared helpers of the LC tests (no tests here): a real LocalController on an ephemeral port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp

from lc.app import LocalController
from lc.config import load


@asynccontextmanager
async def running_lc(tmp_path: Path, **env: str) -> AsyncIterator[tuple[LocalController, str]]:
    """Start an LC (no link) and yield it with its base URL."""
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir(exist_ok=True)
    config = load({"ROOTFS_MOUNT_DIR": str(rootfs), "LC_DB_PATH": str(tmp_path / "lc.db"),
                   "BIND_PORT": "0", "BIND_ADDRESS": "127.0.0.1", **env})
    lc = LocalController(config)
    await lc.start()
    try:
        yield lc, f"http://127.0.0.1:{lc.port}"
    finally:
        await lc.stop()


def session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
