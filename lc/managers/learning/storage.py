"""Where a learning job's files go: host paths under the rootfs, or s3:// objects.

A stage task runs on a worker thread (lc/files.py `Workers`) and calls `JobStorage`, whose
methods block: local files are written and copied on that thread, and each S3 operation runs
on the event loop through the job's clients (lc/s3/clients.py) while the thread waits,
checking the tick's stop flag, so a cancelled tick (the job deleted, the LC stopping)
cancels the request in flight.

Which credential signs a request: the job's (`sedna.io/credential`, from its
`credentialName`) for its outputDir and for the models its workers trained there; a Model's
own for the Model's URL when the Model carries one, else the job's (upstream's LC uses the
job's for everything). A model is copied by where its two ends are:

| source | target | how |
|---|---|---|
| local | local | lc/files.py `copy_file` (a regular file within the cap, replaced whole) |
| s3 | s3, one credential | server-side copy: no byte passes the LC |
| s3 | s3, two credentials | download into the job's scratch directory, upload, remove |
| local | s3 | upload |
| s3 | local | download (to a temporary file beside the target, renamed over it) |

Every failure is a LearningError whose message names both ends and, for S3, the endpoint
and the reason (lc/errors.py's StorageError); the secret key is never in it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lc import files
from lc.errors import LearningError, StorageError
from lc.files import DEFAULT_LIMITS, FileLimits, FileRefused
from lc.managers.learning.models import copy_model
from lc.rootfs import host_to_local
from lc.s3 import S3Clients, S3Credential, S3Url, is_s3

T = TypeVar("T")
POLL = 0.1  # seconds between two looks at the stop flag while an S3 request runs


@dataclass(slots=True)
class JobStorage:
    """One tick's access to a job's files (see the module docstring)."""

    rootfs: str
    limits: FileLimits = DEFAULT_LIMITS
    stop: threading.Event = field(default_factory=threading.Event)
    loop: asyncio.AbstractEventLoop | None = None  # where S3 requests run
    clients: S3Clients | None = None
    annotations: Mapping[str, Any] = field(default_factory=dict)  # the job's
    owner: str = ""  # names the job in messages
    used: set[S3Credential] = field(default_factory=set)  # credentials this tick signed with

    def write(self, url: str, data: bytes, *, what: str) -> None:
        """Store `data` at host path or s3 URL `url`, replacing what was there."""
        if is_s3(url):
            target, credential = self._s3(url), self.credential(url)
            self._run(lambda client: client.upload_bytes(data, target), credential,
                      f"cannot write {what} {url}")
            return
        path = host_to_local(self.rootfs, url)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            files.replace_file(path, [data], what=what, name=url, stop=self.stop)
        except OSError as exc:
            raise LearningError(f"cannot write {what} {url}: {exc.strerror}") from None
        except FileRefused as exc:
            raise LearningError(str(exc)) from None

    def copy_model(self, source: str, target: str, *,
                   target_credential: S3Credential | None = None) -> None:
        """Copy a model between host paths and s3 URLs (the table of the module docstring);
        `target_credential` is the target Model's own, if it has one."""
        if not is_s3(source) and not is_s3(target):
            copy_model(source, target, self.rootfs, caps=self.limits.model, stop=self.stop)
            return
        failed = f"cannot copy model {source} to {target}"
        caps = self.limits.model
        if is_s3(source) and is_s3(target):
            src_cred = self.credential(source)
            dst_cred = target_credential or self.credential(target)
            if src_cred == dst_cred:
                src, dst = self._s3(source), self._s3(target)
                self._run(lambda client: client.copy(src, dst, caps, what="model"), src_cred, failed)
                return
            self._copy_through_scratch(source, target, src_cred, dst_cred, failed)
        elif is_s3(target):
            path, dst = self._local(source), self._s3(target)
            self._run(lambda client: client.upload_file(path, dst, caps, what="model"),
                      target_credential or self.credential(target), failed)
        else:
            src, path = self._s3(source), self._local(target, create=True)
            self._run(lambda client: client.download(src, path, caps, what="model"),
                      self.credential(source), failed)

    def credential(self, url: str) -> S3Credential:
        """The job's credential, which `url` (one of its s3 URLs) needs."""
        try:
            return S3Credential.required(self.annotations, url=url, owner=self.owner or "the job")
        except StorageError as exc:
            raise LearningError(str(exc)) from None

    def _copy_through_scratch(self, source: str, target: str, src_cred: S3Credential,
                              dst_cred: S3Credential, failed: str) -> None:
        if self.clients is None:
            raise LearningError(f"{failed}: no S3 client on this LC")
        src, dst = self._s3(source), self._s3(target)
        path = os.path.join(self.clients.scratch(), f"model-{threading.get_ident()}")
        caps = self.limits.model
        try:
            self._run(lambda client: client.download(src, path, caps, what="model"), src_cred, failed)
            self._run(lambda client: client.upload_file(path, dst, caps, what="model"), dst_cred, failed)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def _s3(self, url: str) -> S3Url:
        try:
            return S3Url.parse(url)
        except StorageError as exc:
            raise LearningError(str(exc)) from None

    def _local(self, url: str, *, create: bool = False) -> str:
        path = host_to_local(self.rootfs, url)
        if create:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
            except OSError as exc:
                raise LearningError(f"cannot create the directory of {url}: {exc.strerror}") from None
        return path

    def _run(self, call: Callable[[Any], Awaitable[T]], credential: S3Credential, failed: str) -> T:
        """`call(client)` on the event loop with `credential`'s client, waited for here."""
        if self.loop is None or self.clients is None:
            raise LearningError(f"{failed}: no S3 client on this LC")
        clients = self.clients
        self.used.add(credential)

        async def request() -> T:
            return await call(await clients.get(credential))
        future = asyncio.run_coroutine_threadsafe(request(), self.loop)
        while not concurrent.futures.wait([future], timeout=POLL).done:
            if self.stop.is_set():
                future.cancel()
                raise files.Stopped(failed)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise files.Stopped(failed) from None
        except (StorageError, FileRefused) as exc:
            raise LearningError(f"{failed}: {exc}") from None
