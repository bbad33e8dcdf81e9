"""The S3 clients one object uses, one per credential, and the scratch files it downloads.

A Dataset, a learning job or a Model names s3:// objects and carries the credential to reach
them (`sedna.io/credential`). Its loop holds one `S3Clients`: a client per credential in use,
opened on first use and kept while the credential stays the same, so a Dataset counted every
minute reuses one connection pool; a rotated secret is a new credential, whose client
replaces the old one when the loop `keep`s only the credentials it still uses. `close` ends
every client and removes the object's scratch directory (temporary downloads), which is
what the LC fetched for the object: nothing of it outlives the object on this node.

The credentials are held only here, in memory, for as long as the object needs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Iterable

from lc.s3.client import DEFAULT_SETTINGS, S3Client, S3Settings
from lc.s3.credential import S3Credential


class S3Clients:
    """One object's S3 clients by credential, and its scratch directory.

    Invariant: every client held is open; `close` leaves none and no scratch directory."""

    __slots__ = ("settings", "_clients", "_lock", "_scratch", "_prefix")

    def __init__(self, *, settings: S3Settings = DEFAULT_SETTINGS, prefix: str = "sedna-lc-") -> None:
        self.settings = settings
        self._clients: dict[S3Credential, S3Client] = {}
        self._lock = asyncio.Lock()
        self._scratch: str | None = None
        self._prefix = prefix

    def __len__(self) -> int:
        return len(self._clients)

    async def get(self, credential: S3Credential) -> S3Client:
        """The open client of `credential`, opened now if it has none."""
        async with self._lock:
            client = self._clients.get(credential)
            if client is None:
                client = S3Client(credential, settings=self.settings)
                await client.open()
                self._clients[credential] = client
            return client

    async def keep(self, credentials: Iterable[S3Credential | None]) -> None:
        """Close the clients of every credential not among `credentials`."""
        wanted = {c for c in credentials if c is not None}
        async with self._lock:
            gone = [c for c in self._clients if c not in wanted]
            for credential in gone:
                await self._clients.pop(credential).close()

    def scratch(self) -> str:
        """The object's directory for temporary downloads (created on first use)."""
        if self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix=self._prefix)
        return self._scratch

    async def close(self) -> None:
        """Close every client and remove the scratch directory and what it holds."""
        try:
            await self.keep(())
        finally:
            scratch, self._scratch = self._scratch, None
            if scratch is not None:
                with contextlib.suppress(FileNotFoundError):
                    await asyncio.to_thread(shutil.rmtree, scratch)
