"""Dataset monitor: count the samples in each dataset's index file and report changes.

For every Dataset assigned to this node the LC re-reads the index file named by
`spec.url` (a host path, read under ROOTFS_MOUNT_DIR) every period and sends the GM
`{"numberOfSamples": N}` when N differs from the last count it reported, exactly as
upstream does (upstream-lc.md section 4.1): `txt` counts every line, `csv` every line
after the header. Unlike upstream, the URL and format are re-read from the latest object
on each pass, a spec change triggers an immediate re-count, long lines are counted
correctly, the last reported count survives restarts (job state in the store), and
paths that escape the mount are refused.

The last reported count belongs to one Dataset object, identified by its uid: a Dataset
deleted and recreated under the same name (while this LC was away, say) is a new object
whose status has no count yet, so its count is reported again even if it is unchanged.

The index is read through lc/files.py: a FIFO, device, socket or directory is refused
without being read, a file over LC_INDEX_MAX_BYTES or LC_INDEX_MAX_LINES is refused whole
(never partly counted), and the read runs in chunks in a daemon thread, so deleting the
Dataset or stopping the LC ends it after at most one chunk. A stored Dataset is counted only
once the GM has confirmed it still exists (lc/managers/base.py `Confirmations`).

A missing, unreadable or refused index file is the user's data, not a fault of the LC: it
is logged at WARNING and reported to the GM, when it first appears or changes, as
`{"numberOfSamples": <last count>, "error": {"reason", "message"}}`. Two are only logged, as
upstream does: a path that leaves the mount (its message names the LC's mount point), and a
missing index file (a Dataset is often created before its data arrives), unless it replaces
a problem already reported, which would otherwise stay on the Dataset describing a file that
is gone; the GM turns it into
the Dataset's `IndexReadable` condition and a Warning Event. Upstream's GM reads only
`numberOfSamples` from that body, which keeps the last count. After an error, the next
successful count is reported even if unchanged, so the GM can clear the condition.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from lc import files
from lc.errors import DatasetError, PathEscapeError, StoreError
from lc.files import DEFAULT_LIMITS, Caps, FileLimits, FileRefused
from lc.managers.base import FileWork, Loops, ObjectLoop, Outgoing
from lc.report import WorkerReport
from lc.rootfs import host_to_local
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


def reason_of(exc: DatasetError) -> str | None:
    """The condition reason for a dataset that cannot be counted; None for a path that
    leaves the mount, which is only logged (its message names the LC's mount point)."""
    if isinstance(exc, IndexRefused):
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
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise DatasetError(f"dataset format {fmt!r} is not supported (txt or csv)")
    lines = count_lines(path, caps, name=name, stop=stop)
    if fmt == "txt":
        return lines
    if lines == 0:
        raise IndexRefused(f"csv index file {name or path} is empty: it needs a header line",
                           reason="MissingHeader")
    return lines - 1


def index_path(obj: dict[str, Any], rootfs: str) -> tuple[str, str]:
    """(local index path, format) for a Dataset object; DatasetError if unusable."""
    url, fmt = index_url(obj)
    return host_to_local(rootfs, url), fmt


def index_url(obj: dict[str, Any]) -> tuple[str, str]:
    """(host index path, format) of a Dataset object; DatasetError if unusable."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise DatasetError("dataset has no spec")
    url, fmt = spec.get("url"), spec.get("format")
    if not isinstance(url, str) or not url:
        raise DatasetError("spec.url must be a non-empty string")
    if not isinstance(fmt, str):
        raise DatasetError("spec.format must be a string")
    scheme = urlsplit(url).scheme
    if scheme == "s3":
        raise DatasetError(f"s3 dataset {url} is not supported by this LC yet")
    if scheme:
        raise DatasetError(f"dataset URL scheme {scheme!r} is not supported (local path or s3)")
    return url, fmt


def uid_of(obj: dict[str, Any]) -> str:
    """The object's metadata.uid ("" when the GM sent none)."""
    meta = obj.get("metadata")
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return uid if isinstance(uid, str) else ""


def scan(obj: dict[str, Any], rootfs: str, *, limits: FileLimits = DEFAULT_LIMITS,
         stop: threading.Event | None = None) -> int:
    """Count the samples of a Dataset object now (blocking file I/O; errors name the host path)."""
    url, fmt = index_url(obj)
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
        self.scans = 0

    @property
    def task_name(self) -> str:
        return f"dataset-monitor:{self.key}"

    def update(self, obj: dict[str, Any]) -> None:
        """Take a newer object; re-count at once if its spec changed or it is a new object."""
        replaced = uid_of(obj) != uid_of(self.obj)
        changed = replaced or obj.get("spec") != self.obj.get("spec")
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
        stop = threading.Event()
        try:
            count = await self._work.workers.run(
                functools.partial(scan, self.obj, self._rootfs, limits=self._work.limits, stop=stop),
                stop=stop, name=f"dataset-scan:{self.key}")
        except DatasetError as exc:
            self.stats.failed += 1
            await self._failed(exc)
            return
        finally:
            self.scans += 1
        self.stats.counted += 1
        self._last_error = None
        if count != self.reported or self.error is not None:
            await self._report(count, None)

    async def _failed(self, exc: DatasetError) -> None:
        self._log_error(str(exc))
        reason = reason_of(exc)
        if reason is None or (reason == MISSING and self.error is None):
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
