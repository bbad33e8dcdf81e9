"""Dataset monitor: count the samples in each dataset's index file and report changes.

For every Dataset assigned to this node the LC re-reads the index file named by
`spec.url` every period and sends the GM `{"numberOfSamples": N}` when N differs from the
last count it reported, exactly as upstream does (upstream-lc.md section 4.1): `txt`
counts every line, `csv` every line after the header. The URL is a host path, read under
ROOTFS_MOUNT_DIR, or an `s3://bucket/key` object, read with the credential the GM sends
with the Dataset (`sedna.io/credential`, from its `credentialName`). Unlike upstream, the
URL and format are re-read from the latest object on each pass, a spec change triggers an
immediate re-count, long lines are counted correctly, the last reported count survives
restarts (job state in the store), paths that escape the mount are refused, and an s3
Dataset without a credential is a problem reported on the Dataset, where upstream's LC
crashes (its bug B-8).

The last reported count belongs to one Dataset object, identified by its uid: a Dataset
deleted and recreated under the same name (while this LC was away, say) is a new object
whose status has no count yet, so its count is reported again even if it is unchanged.

A local index is read through lc/files.py: a FIFO, device, socket or directory is refused
without being read, a file over LC_INDEX_MAX_BYTES or LC_INDEX_MAX_LINES is refused whole
(never partly counted), and the read runs in chunks in a daemon thread, so deleting the
Dataset or stopping the LC ends it after at most one chunk. An s3 index is streamed and
counted part by part with the same caps (lc/s3/: refused by its stated size before its body
is read), never stored on disk; each monitor keeps one S3 client while the Dataset's
credential stays the same, and closes it when the Dataset goes. A stored Dataset is counted
only once the GM has confirmed it still exists (lc/managers/base.py `Confirmations`).

A missing, unreadable or refused index is the user's data, not a fault of the LC: it is
logged at WARNING and reported to the GM, when it first appears or changes, as
`{"numberOfSamples": <last count>, "error": {"reason", "message"}}`; an S3 failure is
reported the same way with the reason of lc/errors.py's StorageError (`AccessDenied`,
`NotFound`, `TooLarge`, `StorageUnavailable` after the client's retries, `CredentialMissing`,
`InvalidStorage`). Two are only logged, as upstream does: a path that leaves the mount (its
message names the LC's mount point), and a missing local index file (a Dataset is often
created before its data arrives), unless it replaces a problem already reported, which
would otherwise stay on the Dataset describing a file that is gone; the GM turns it into
the Dataset's `IndexReadable` condition and a Warning Event. Upstream's GM reads only
`numberOfSamples` from that body, which keeps the last count. After an error, the next
successful count is reported even if unchanged, so the GM can clear the condition.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from lc import files
from lc.errors import DatasetError, PathEscapeError, StorageChanged, StorageError, StoreError
from lc.files import DEFAULT_LIMITS, Caps, FileLimits, FileRefused
from lc.managers.base import FileWork, Loops, ObjectLoop, Outgoing
from lc.report import WorkerReport
from lc.rootfs import host_to_local
from lc.s3 import ANNOTATION, S3Client, S3Clients, S3Credential, S3Url, is_s3
from lc.store.facade import Store
from shared.logs import event
from shared.text import clip

log = logging.getLogger(__name__)

KIND = "Dataset"
FORMATS = ("txt", "csv")
MAX_MESSAGE = 512  # characters of an error message sent to the GM
MISSING = files.FileMissing.reason
Problem = dict[str, str]  # {"reason": CamelCase word, "message": text}


class IndexRefused(DatasetError):
    """The index file cannot be counted; `reason` says why in one CamelCase word."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def reason_of(exc: DatasetError | StorageError) -> str | None:
    """The condition reason for a dataset that cannot be counted; None for a path that
    leaves the mount, which is only logged (its message names the LC's mount point)."""
    if isinstance(exc, IndexRefused | StorageError):
        return exc.reason
    if isinstance(exc, PathEscapeError):
        return None
    return "InvalidDataset"


def count_lines(path: str, caps: Caps = DEFAULT_LIMITS.index, *, name: str | None = None,
                stop: threading.Event | None = None) -> int:
    """Lines as Go's bufio.Scanner sees them: a final newline adds no empty line."""
    try:
        return files.count_lines(path, caps, what="index file", name=name, stop=stop)
    except FileRefused as exc:
        raise IndexRefused(str(exc), reason=exc.reason) from None


def count_samples(path: str, fmt: str, caps: Caps = DEFAULT_LIMITS.index, *,
                  name: str | None = None, stop: threading.Event | None = None) -> int:
    """Samples in an index file of format txt (all lines) or csv (lines after the header)."""
    check_format(fmt)
    return samples_of(count_lines(path, caps, name=name, stop=stop), fmt, name=name or path)


def check_format(fmt: str) -> None:
    """DatasetError unless `fmt` is one the LC counts (txt or csv, any case)."""
    if fmt.lower() not in FORMATS:
        raise DatasetError(f"dataset format {fmt.lower()!r} is not supported (txt or csv)")


def samples_of(lines: int, fmt: str, *, name: str) -> int:
    """The samples in an index of `lines` lines: all of them for txt, those after the header
    for csv."""
    if fmt.lower() == "txt":
        return lines
    if lines == 0:
        raise IndexRefused(f"csv index file {name} is empty: it needs a header line",
                           reason="MissingHeader")
    return lines - 1


async def count_s3_samples(client: S3Client, url: S3Url, fmt: str,
                           caps: Caps = DEFAULT_LIMITS.index) -> int:
    """Samples in an s3 index, streamed part by part within `caps` (lines as `count_lines`);
    an object replaced while it is counted is counted once more from its start."""
    check_format(fmt)
    for attempt in (1, 2):
        try:
            return samples_of(await _count_s3_lines(client, url, caps), fmt, name=str(url))
        except StorageChanged:
            if attempt == 2:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")


async def _count_s3_lines(client: S3Client, url: S3Url, caps: Caps) -> int:
    newlines, last = 0, b"\n"
    async with contextlib.aclosing(client.stream(url, caps, what="index file")) as parts:
        async for part in parts:
            newlines += part.count(b"\n")
            last = part[-1:]
            _check_lines(newlines, caps, url)
    lines = newlines + (last != b"\n")
    _check_lines(lines, caps, url)
    return lines


def _check_lines(lines: int, caps: Caps, url: S3Url) -> None:
    if caps.lines is not None and lines > caps.lines:
        raise IndexRefused(f"index file {url} has more than {caps.lines} lines",
                           reason=files.TooManyLines.reason)


def index_path(obj: dict[str, Any], rootfs: str) -> tuple[str, str]:
    """(local index path, format) for a Dataset object; DatasetError if unusable."""
    url, fmt = index_url(obj)
    return host_to_local(rootfs, url), fmt


def index_url(obj: dict[str, Any]) -> tuple[str, str]:
    """(host index path or s3:// URL, format) of a Dataset object; DatasetError if unusable
    (an s3 URL that is not one: IndexRefused with reason InvalidStorage)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise DatasetError("dataset has no spec")
    url, fmt = spec.get("url"), spec.get("format")
    if not isinstance(url, str) or not url:
        raise DatasetError("spec.url must be a non-empty string")
    if not isinstance(fmt, str):
        raise DatasetError("spec.format must be a string")
    if is_s3(url):
        try:
            S3Url.parse(url)
        except StorageError as exc:
            raise IndexRefused(str(exc), reason=exc.reason) from None
        return url, fmt
    scheme = urlsplit(url).scheme
    if scheme:
        raise DatasetError(f"dataset URL scheme {scheme!r} is not supported (local path or s3)")
    return url, fmt


def url_prefix(url: str) -> str:
    """The index URL without its last path element, keeping the `/` (upstream's URLPrefix:
    `s3://bucket/dataset/index.txt` -> `s3://bucket/dataset/`), which sample paths are
    relative to."""
    return url[:url.rfind("/") + 1]


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The object's metadata.annotations ({} when it has none)."""
    meta = obj.get("metadata")
    notes = meta.get("annotations") if isinstance(meta, Mapping) else None
    return notes if isinstance(notes, Mapping) else {}


def uid_of(obj: dict[str, Any]) -> str:
    """The object's metadata.uid ("" when the GM sent none)."""
    meta = obj.get("metadata")
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return uid if isinstance(uid, str) else ""


def scan(obj: dict[str, Any], rootfs: str, *, limits: FileLimits = DEFAULT_LIMITS,
         stop: threading.Event | None = None) -> int:
    """Count the samples of a Dataset object's local index now (blocking file I/O; errors
    name the host path)."""
    url, fmt = index_url(obj)
    if is_s3(url):
        raise DatasetError(f"{url} is an s3 index: it is counted by count_s3_samples")
    return count_samples(host_to_local(rootfs, url), fmt, limits.index, name=url, stop=stop)


@dataclass(slots=True)
class ScanStats:
    """Index scans of every monitor of one LC since start, by result (its /metrics)."""

    counted: int = 0  # the index was read and its samples counted
    failed: int = 0  # it could not be (missing, unreadable, refused, outside the mount)


class DatasetMonitor(ObjectLoop):
    """One dataset's periodic re-count; reports to the outbox when the count changes."""

    kind = KIND

    def __init__(self, store: Store, namespace: str, name: str, obj: dict[str, Any], *,
                 rootfs: str, period: float, reported: int, error: Problem | None = None,
                 work: FileWork | None = None, stats: ScanStats | None = None) -> None:
        super().__init__(store, namespace, name, obj, rootfs=rootfs, work=work)
        self.stats = stats if stats is not None else ScanStats()
        self.reported = reported  # last count the GM was sent (0 = none, as upstream)
        self.error = error  # the problem last reported to the GM, None once a count cleared it
        self._period = period
        self._s3 = S3Clients(settings=self._work.s3)
        self.scans = 0

    @property
    def task_name(self) -> str:
        return f"dataset-monitor:{self.key}"

    def update(self, obj: dict[str, Any]) -> None:
        """Take a newer object; re-count at once if its spec or its credential changed or it
        is a new object."""
        replaced = uid_of(obj) != uid_of(self.obj)
        changed = (replaced or obj.get("spec") != self.obj.get("spec")
                   or annotations_of(obj).get(ANNOTATION) != annotations_of(self.obj).get(ANNOTATION))
        self.obj = obj
        if replaced:
            self.reported, self.error = 0, None  # the new object's status has neither yet
        if changed:
            self._wake.set()

    def period(self) -> float:
        return self._period

    async def step(self) -> None:
        await self.scan_once()

    async def scan_once(self) -> None:
        """One pass: count, and report upstream if the count or the problem changed."""
        async with self._stepping:
            await self._scan()

    async def _scan(self) -> None:
        try:
            count = await self._count()
        except (DatasetError, StorageError) as exc:
            self.stats.failed += 1
            await self._failed(exc)
            return
        finally:
            self.scans += 1
        self.stats.counted += 1
        self._last_error = None
        if count != self.reported or self.error is not None:
            await self._report(count, None)

    async def _count(self) -> int:
        url, fmt = index_url(self.obj)
        if is_s3(url):
            return await self._count_s3(url, fmt)
        await self._s3.keep(())  # a Dataset moved off S3 needs no client
        stop = threading.Event()
        return await self._work.workers.run(
            functools.partial(scan, self.obj, self._rootfs, limits=self._work.limits, stop=stop),
            stop=stop, name=f"dataset-scan:{self.key}")

    async def _count_s3(self, url: str, fmt: str) -> int:
        check_format(fmt)  # refused before a request is made
        credential = S3Credential.required(annotations_of(self.obj), url=url,
                                           owner=f"Dataset {self.key}")
        await self._s3.keep([credential])  # a rotated secret: the old client goes
        client = await self._s3.get(credential)
        return await count_s3_samples(client, S3Url.parse(url), fmt, self._work.limits.index)

    async def close(self) -> None:
        """The Dataset left this node: its S3 client goes with it."""
        await self._s3.close()

    async def _failed(self, exc: DatasetError | StorageError) -> None:
        self._log_error(str(exc))
        reason = reason_of(exc)
        local_missing = reason == MISSING and not isinstance(exc, StorageError)
        if reason is None or (local_missing and self.error is None):
            return  # only logged (see the module docstring)
        problem = {"reason": reason, "message": clip(str(exc), MAX_MESSAGE)}
        if problem != self.error:
            await self._report(self.reported, problem)

    async def _report(self, count: int, problem: Problem | None) -> None:
        body: dict[str, Any] = {"numberOfSamples": count}
        state: dict[str, Any] = {"reported": count, "uid": uid_of(self.obj)}
        if problem is not None:
            body["error"] = state["error"] = problem
        try:
            # Outbox first: a crash between the two writes only resends the same report.
            await self._store.append_report(KIND, self.namespace, self.name, body)
            await self._store.put_state(KIND, self.namespace, self.name, state)
        except StoreError as exc:
            self._log_error(f"cannot queue the dataset report: {exc}")
            return
        if problem is None:
            event(log, "dataset samples changed", key=self.key, samples=count,
                  previous=self.reported)
        else:
            event(log, "dataset problem reported", key=self.key, reason=problem["reason"])
        self.reported, self.error = count, problem

    def _problem(self, error: str) -> None:
        event(log, "dataset scan failed", level=logging.WARNING, key=self.key, error=error)


class DatasetManager:
    """Owns one DatasetMonitor task per dataset on this node."""

    kind = KIND
    takes_reports = False

    def __init__(self, store: Store, *, rootfs: str, period: float,
                 work: FileWork | None = None) -> None:
        self._store = store
        self._rootfs = rootfs
        self._period = period
        self._work = work or FileWork()
        self._monitors: Loops[DatasetMonitor] = Loops()
        self.stats = ScanStats()  # shared by its monitors: counts outlive a deleted Dataset

    def monitor(self, namespace: str, name: str) -> DatasetMonitor | None:
        return self._monitors.get(namespace, name)

    @property
    def monitored(self) -> int:
        """Datasets this LC counts now."""
        return len(self._monitors)

    async def upsert(self, namespace: str, name: str, obj: dict[str, Any]) -> None:
        monitor = self._monitors.get(namespace, name)
        if monitor is not None:
            monitor.update(obj)
            return
        reported, error = await self._reported(namespace, name, obj)
        self._monitors.add(DatasetMonitor(self._store, namespace, name, obj, rootfs=self._rootfs,
                                          period=self._period, reported=reported, error=error,
                                          work=self._work, stats=self.stats))

    async def _reported(self, namespace: str, name: str,
                        obj: dict[str, Any]) -> tuple[int, Problem | None]:
        """The count and problem last reported for this very object (same uid), else (0, None)."""
        state = await self._store.get_state(KIND, namespace, name) or {}
        if state.get("uid", "") != uid_of(obj):
            return 0, None
        error = state.get("error")
        return int(state.get("reported", 0)), error if isinstance(error, dict) else None

    async def delete(self, namespace: str, name: str) -> None:
        await self._monitors.remove(namespace, name)

    def report_entries(self, report: WorkerReport, *, namespace: str,
                       name: str) -> list[Outgoing]:
        return []  # upstream ignores worker reports about datasets

    async def stop(self) -> None:
        await self._monitors.stop()
