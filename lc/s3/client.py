"""One credential's S3 client: bounded downloads, uploads, server-side copies, with retries.

Requests go through aiobotocore (botocore signs them; its own retries are off, so that one
policy here decides). Every request has a deadline (`request_timeout`, upstream's 100 s per
operation) on top of the connect and read timeouts; a transient failure (lc/s3/retry.py) is
retried with exponential backoff up to `attempts` requests in all, a permanent one is raised
at once.

Reads are bounded like local files (lc/files.py): an object is fetched in ranged GETs of at
most `part_bytes`, never asking for more than `caps.bytes + 1` bytes in all. The first answer
states the object's whole size (Content-Range) before its body is read, and an object over
the cap is refused then, unread; every later part checks the size and the ETag again, and
the bytes counted as they arrive stop the read once past the cap whatever the headers said.
So a 100 GB object costs one request and no body, and one replaced while it is read by a
larger one is refused at its next part. A part that failed is asked for again from where
the read stopped.

Uploads of more than one part are multipart uploads (aborted on any failure, cancellation
included), so a file of any size within its cap is sent in bounded memory, and a part that
failed is sent again alone. Local files are opened through lc/files.py (regular files only,
within the caps) and read on its daemon threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession, get_session
from botocore.exceptions import ClientError

from lc import files
from lc.errors import StorageChanged, StorageError, StorageTooLarge, StorageUnavailable
from lc.files import Caps, FileTooLarge
from lc.s3.credential import S3Credential
from lc.s3.retry import REQUEST_ERRORS, backoff, classify, transient
from lc.s3.url import S3Url
from shared.logs import event

log = logging.getLogger("lc.s3")
T = TypeVar("T")

MiB, GiB = 1 << 20, 1 << 30
READ_CHUNK = 1 << 20  # bytes asked of a response body at once
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")
_session: AioSession | None = None  # one per process: it caches botocore's service models


@dataclass(frozen=True, slots=True)
class S3Settings:
    """Timeouts, retries and part sizes of S3 requests (the defaults are the LC's)."""

    connect_timeout: float = 10.0
    read_timeout: float = 30.0  # the most a response may stay silent
    request_timeout: float = 100.0  # one request from send to last byte (upstream's MaxTimeOut)
    attempts: int = 5  # requests per part or call, the first included
    backoff_base: float = 0.5
    backoff_max: float = 10.0
    part_bytes: int = 8 * MiB  # one ranged GET, one multipart part (S3: at least 5 MiB)
    single_copy_bytes: int = 5 * GiB  # larger copies go part by part (S3's CopyObject limit)
    max_dir_files: int = 10_000  # files one directory upload may send


DEFAULT_SETTINGS = S3Settings()


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    size: int
    etag: str


class S3Client:
    """S3 requests signed with one credential: `async with S3Client(cred) as s3: ...`."""

    def __init__(self, credential: S3Credential, *, settings: S3Settings = DEFAULT_SETTINGS,
                 workers: files.Workers | None = None) -> None:
        self.credential = credential
        self.settings = settings
        self._workers = workers or files.Workers()
        self._stack = contextlib.AsyncExitStack()
        self._client: Any = None

    async def __aenter__(self) -> S3Client:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        s = self.settings
        config = AioConfig(
            connect_timeout=s.connect_timeout, read_timeout=s.read_timeout,
            retries={"total_max_attempts": 1},  # the retries are ours (retry.py)
            signature_version="s3v4", s3={"addressing_style": "path"},
            # checksums only where S3 requires them: S3-compatible servers differ on the rest
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required")
        c = self.credential
        self._client = await self._stack.enter_async_context(_shared_session().create_client(
            "s3", endpoint_url=c.endpoint_url, region_name=c.region, aws_access_key_id=c.access_key,
            aws_secret_access_key=c.secret_key, config=config))

    async def close(self) -> None:
        await self._stack.aclose()
        self._client = None

    # ---- reading ---------------------------------------------------------------------

    async def stat(self, url: S3Url) -> ObjectInfo:
        """The object's size and ETag (HEAD)."""
        head = await self._request("stat", url, lambda: self._client.head_object(
            Bucket=url.bucket, Key=url.key))
        return ObjectInfo(int(head.get("ContentLength") or 0), str(head.get("ETag") or ""))

    async def stream(self, url: S3Url, caps: Caps, *, what: str = "object") -> AsyncGenerator[bytes, None]:
        """The object's bytes, one part at a time; StorageTooLarge as soon as its size (or what
        arrived) is over `caps.bytes`, StorageChanged if it is replaced meanwhile."""
        pos, first = 0, None
        while first is None or pos < first.size:
            end = min(pos + self.settings.part_bytes, caps.bytes + 1) - 1
            data, info = await self._request("download", url, self._get_range_call(
                url, pos, end, caps, what=what))
            if first is None:
                first = info
            elif info.etag != first.etag or info.size != first.size:  # (over the cap: refused)
                raise StorageChanged(f"download {url}: the object changed while it was read")
            pos += len(data)
            if pos > caps.bytes:
                raise StorageTooLarge(f"{what} {url} grew over the limit of {caps.bytes} bytes while read")
            if not data:
                if pos < first.size:
                    raise StorageUnavailable(f"download {url}: the server sent {pos} of {first.size} bytes")
                return
            yield data

    async def read(self, url: S3Url, caps: Caps, *, what: str = "object") -> bytes:
        """The whole object, within `caps.bytes`; read again from the start if it changes."""
        return await self._restarting(url, lambda: self._collect(url, caps, what=what))

    async def download(self, url: S3Url, path: str, caps: Caps, *, what: str = "object") -> int:
        """Write the object to `path` (replaced whole, as lc/files.py writes); its size."""
        return await self._restarting(url, lambda: self._download_once(url, path, caps, what=what))

    # ---- writing ---------------------------------------------------------------------

    async def upload_bytes(self, data: bytes, url: S3Url) -> None:
        """Store `data` as the object `url`."""
        part = self.settings.part_bytes

        async def parts() -> AsyncGenerator[bytes, None]:
            for start in range(0, max(len(data), 1), part):
                yield data[start:start + part]
        await self._put(url, parts())

    async def upload_file(self, path: str, url: S3Url, caps: Caps, *, what: str = "file") -> int:
        """Store regular file `path` (within `caps`) as the object `url`; the bytes sent."""
        stop = threading.Event()
        part = self.settings.part_bytes
        handle = _Handle(await self._workers.run(
            lambda: files.open_regular(path, caps, what=what), stop=stop))
        sent = 0

        async def parts() -> AsyncGenerator[bytes, None]:
            nonlocal sent
            while True:
                read = functools.partial(_read_part, size=part, most=caps.bytes - sent + 1)
                chunk = await self._workers.run(functools.partial(handle.use, read), stop=stop)
                sent += len(chunk)
                if sent > caps.bytes:
                    raise FileTooLarge(what, path, f"grew over the limit of {caps.bytes} bytes while read")
                if chunk or not sent:  # an empty part only for an empty file
                    yield chunk
                if len(chunk) < part:
                    return
        try:
            await self._put(url, parts())
        finally:
            handle.close()
        return sent

    async def upload_dir(self, directory: str, prefix: S3Url, caps: Caps, *,
                         what: str = "file") -> list[S3Url]:
        """Store every regular file under `directory` (recursively, symlinked directories not
        followed) under `prefix`, keys relative to it with `/`; the objects written."""
        limit = self.settings.max_dir_files
        names = await self._workers.run(lambda: _list_files(directory, limit, what=what),
                                        stop=threading.Event())
        written = []
        for name in names:
            target = prefix.child(name)
            await self.upload_file(os.path.join(directory, name), target, caps, what=what)
            written.append(target)
        return written

    async def copy(self, source: S3Url, target: S3Url, caps: Caps, *, what: str = "object") -> int:
        """Copy `source` to `target` on the server (no byte passes the LC); its size."""
        info = await self.stat(source)
        if info.size > caps.bytes:
            raise StorageTooLarge(f"{what} {source} is {info.size} bytes, over the limit of {caps.bytes} bytes")
        if info.size <= self.settings.single_copy_bytes:
            await self._request("copy", target, lambda: self._client.copy_object(
                Bucket=target.bucket, Key=target.key, CopySourceIfMatch=info.etag,
                CopySource={"Bucket": source.bucket, "Key": source.key}))
        else:
            await self._multipart(target, self._copy_parts(source, target, info))
        return info.size

    # ---- requests --------------------------------------------------------------------

    async def _request(self, action: str, url: S3Url, call: Callable[[], Awaitable[T]]) -> T:
        """`call()` under the request deadline, retried while it fails transiently."""
        s = self.settings
        for attempt in range(1, s.attempts + 1):
            try:
                async with asyncio.timeout(s.request_timeout):
                    return await call()
            except REQUEST_ERRORS as exc:
                error = classify(exc, action=action, target=f"{url} at {self.credential.endpoint}",
                                 attempts=attempt)
            if not transient(error):
                raise error
            if attempt == s.attempts:  # the message says that retrying did not help
                raise type(error)(f"{error} (gave up after {attempt} attempts)", attempts=attempt)
            delay = backoff(attempt, base=s.backoff_base, cap=s.backoff_max)
            event(log, "s3 request retried", level=logging.WARNING, action=action, url=str(url),
                  endpoint=self.credential.endpoint, attempt=attempt, delay=round(delay, 3),
                  error=str(error))
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt raises")

    def _get_range_call(self, url: S3Url, start: int, end: int, caps: Caps, *,
                        what: str) -> Callable[[], Awaitable[tuple[bytes, ObjectInfo]]]:
        async def call() -> tuple[bytes, ObjectInfo]:
            try:
                response = await self._client.get_object(Bucket=url.bucket, Key=url.key,
                                                          Range=f"bytes={start}-{end}")
            except ClientError as exc:  # an empty object has no byte 0 to give: 416
                if start or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") != 416:
                    raise
                response = await self._client.get_object(Bucket=url.bucket, Key=url.key)
            body = response["Body"]
            try:
                info = _info(response, start=start, url=url)
                if info.size > caps.bytes and not start:
                    raise StorageTooLarge(f"{what} {url} is {info.size} bytes, over the limit of "
                                          f"{caps.bytes} bytes")
                if info.size > caps.bytes:
                    raise StorageTooLarge(f"{what} {url} grew over the limit of {caps.bytes} bytes "
                                          f"while read (to {info.size} bytes)")
                return await _read_body(body, end - start + 1), info
            finally:
                await body.aclose()
        return call

    async def _collect(self, url: S3Url, caps: Caps, *, what: str) -> bytes:
        async with contextlib.aclosing(self.stream(url, caps, what=what)) as parts:
            return b"".join([part async for part in parts])

    async def _download_once(self, url: S3Url, path: str, caps: Caps, *, what: str) -> int:
        stop = threading.Event()
        tmp = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.tmp")
        handle = _Handle(await self._workers.run(lambda: _create(tmp, path, what=what), stop=stop))
        size, done = 0, False
        try:
            try:
                async with contextlib.aclosing(self.stream(url, caps, what=what)) as parts:
                    async for part in parts:
                        await self._workers.run(lambda data=part: handle.use(
                            lambda fd: _write_all(fd, data, path, what=what)), stop=stop)
                        size += len(part)
            finally:
                handle.close()
            await self._workers.run(lambda: _rename(tmp, path, what=what), stop=stop)
            done = True
        finally:
            if not done:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        return size

    async def _restarting(self, url: S3Url, once: Callable[[], Awaitable[T]]) -> T:
        """`once()` again from the start while the object changes under it (bounded)."""
        for attempt in range(1, self.settings.attempts + 1):
            try:
                return await once()
            except StorageChanged as exc:
                if attempt == self.settings.attempts:
                    raise
                event(log, "s3 object changed while read, reading again", url=str(url),
                      endpoint=self.credential.endpoint, attempt=attempt, error=str(exc))
        raise AssertionError("unreachable: the last attempt raises")

    async def _put(self, url: S3Url, parts: AsyncGenerator[bytes, None]) -> None:
        """One PUT when the first part is all there is, else a multipart upload."""
        async with contextlib.aclosing(parts):
            first = await anext(parts, b"")
            second = await anext(parts, None)
            if second is None:
                await self._request("upload", url, lambda: self._client.put_object(
                    Bucket=url.bucket, Key=url.key, Body=first))
                return

            async def all_parts() -> AsyncIterator[bytes]:
                yield first
                yield second
                async for part in parts:
                    yield part
            await self._multipart(url, self._upload_parts(url, all_parts()))

    async def _multipart(self, url: S3Url,
                         parts: Callable[[str], AsyncIterator[dict[str, Any]]]) -> None:
        """Create a multipart upload, send `parts(upload_id)`, complete it; abort on failure."""
        created = await self._request("upload", url, lambda: self._client.create_multipart_upload(
            Bucket=url.bucket, Key=url.key))
        upload_id = created["UploadId"]
        try:
            done = [part async for part in parts(upload_id)]
            await self._request("upload", url, lambda: self._client.complete_multipart_upload(
                Bucket=url.bucket, Key=url.key, UploadId=upload_id, MultipartUpload={"Parts": done}))
        except BaseException:
            await asyncio.shield(self._abort(url, upload_id))
            raise

    def _upload_parts(self, url: S3Url, data: AsyncIterator[bytes]
                      ) -> Callable[[str], AsyncIterator[dict[str, Any]]]:
        async def parts(upload_id: str) -> AsyncIterator[dict[str, Any]]:
            number = 0
            async for chunk in data:
                number += 1
                sent = await self._request("upload", url, lambda n=number, b=chunk: self._client.upload_part(
                    Bucket=url.bucket, Key=url.key, UploadId=upload_id, PartNumber=n, Body=b))
                yield {"PartNumber": number, "ETag": sent["ETag"]}
        return parts

    def _copy_parts(self, source: S3Url, target: S3Url, info: ObjectInfo
                    ) -> Callable[[str], AsyncIterator[dict[str, Any]]]:
        async def parts(upload_id: str) -> AsyncIterator[dict[str, Any]]:
            step = self.settings.part_bytes
            for number, start in enumerate(range(0, info.size, step), 1):
                end = min(start + step, info.size) - 1
                copied = await self._request("copy", target, lambda n=number, a=start, b=end: (
                    self._client.upload_part_copy(
                        Bucket=target.bucket, Key=target.key, UploadId=upload_id, PartNumber=n,
                        CopySource={"Bucket": source.bucket, "Key": source.key},
                        CopySourceRange=f"bytes={a}-{b}", CopySourceIfMatch=info.etag)))
                yield {"PartNumber": number, "ETag": copied["CopyPartResult"]["ETag"]}
        return parts

    async def _abort(self, url: S3Url, upload_id: str) -> None:
        try:
            async with asyncio.timeout(self.settings.request_timeout):
                await self._client.abort_multipart_upload(Bucket=url.bucket, Key=url.key,
                                                          UploadId=upload_id)
        except REQUEST_ERRORS as exc:  # the server drops it itself later (lifecycle rules)
            event(log, "s3 multipart upload not aborted", level=logging.WARNING, url=str(url),
                  endpoint=self.credential.endpoint, error=str(classify(
                      exc, action="abort", target=str(url), attempts=1)))


# ---- helpers ----------------------------------------------------------------------------


class _Handle:
    """A descriptor used on daemon threads and closed from the loop, never under a use.

    A task cancelled while its thread reads or writes returns at once (files.Workers); were
    the descriptor closed then, the thread's next call could hit a new file that reused its
    number. So `close` closes it only when no use is running, and otherwise the use closes it
    as it ends; a use that starts after `close` is refused (files.Stopped)."""

    __slots__ = ("_fd", "_lock", "_busy", "_closing")

    def __init__(self, fd: int) -> None:
        self._fd, self._lock = fd, threading.Lock()
        self._busy = self._closing = False

    def use(self, fn: Callable[[int], T]) -> T:
        with self._lock:
            if self._closing:
                raise files.Stopped("closed")
            self._busy = True
        try:
            return fn(self._fd)
        finally:
            with self._lock:
                self._busy = False
                if self._closing:
                    os.close(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = True
            if self._busy:
                return
        os.close(self._fd)


def _shared_session() -> AioSession:
    global _session
    if _session is None:
        _session = get_session()
    return _session


def _info(response: dict[str, Any], *, start: int, url: S3Url) -> ObjectInfo:
    """The object's whole size and ETag from a (ranged) GET's headers."""
    etag = str(response.get("ETag") or "")
    match = _CONTENT_RANGE.fullmatch(str(response.get("ContentRange") or ""))
    if match:
        if int(match[1]) != start:
            raise StorageError(f"download {url}: the server sent bytes from {match[1]}, not {start}")
        return ObjectInfo(int(match[3]), etag)
    if start:  # a server that ignores Range answers the whole object again
        raise StorageError(f"download {url}: the server ignored the byte range asked for")
    return ObjectInfo(int(response.get("ContentLength") or 0), etag)


async def _read_body(body: Any, most: int) -> bytes:
    """At most `most` bytes of a response body, and one more if the server sends more (so a
    caller that counts them sees the excess); the rest is left unread (the body is closed)."""
    parts: list[bytes] = []
    got = 0
    while got <= most:
        chunk = await body.read(min(READ_CHUNK, most + 1 - got))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _read_part(fd: int, *, size: int, most: int) -> bytes:
    """Up to `size` bytes of `fd` (fewer only at its end), at most `most`."""
    parts: list[bytes] = []
    want = min(size, most)
    while want > 0:
        chunk = os.read(fd, min(want, files.CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        want -= len(chunk)
    return b"".join(parts)


_OPEN_TEMP = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC


def _create(tmp: str, path: str, *, what: str) -> int:
    """The temporary file beside `path`, created exclusively (whatever held its name removed)."""
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        return os.open(tmp, _OPEN_TEMP, 0o666)
    except OSError as exc:
        raise files.FileUnwritable(what, path, f"cannot be written: {exc.strerror}") from None


def _write_all(fd: int, data: bytes, path: str, *, what: str) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise files.FileUnwritable(what, path, f"cannot be written: {exc.strerror}") from None


def _rename(tmp: str, path: str, *, what: str) -> None:
    try:
        os.replace(tmp, path)
    except OSError as exc:
        raise files.FileUnwritable(what, path, f"cannot be written: {exc.strerror}") from None


def _list_files(directory: str, limit: int, *, what: str) -> list[str]:
    """Regular files under `directory`, relative, `/`-separated, sorted; at most `limit`."""
    if not os.path.isdir(directory):
        raise files.FileMissing(what, directory, "is not a directory")
    names: list[str] = []
    for root, dirs, found in os.walk(directory):
        dirs.sort()
        for name in sorted(found):
            full = os.path.join(root, name)
            if not os.path.isfile(full):  # a FIFO, socket or device is not uploaded
                continue
            names.append(os.path.relpath(full, directory).replace(os.sep, "/"))
            if len(names) > limit:
                raise files.FileRefused(what, directory, f"holds more than {limit} files")
    return names
