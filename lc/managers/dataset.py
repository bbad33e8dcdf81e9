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

A missing, unreadable or refused index file is the user's data, not a fault of the LC:
it is logged at WARNING when it first appears or changes, not on every period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import urlsplit

from lc.errors import DatasetError, StoreError
from lc.managers.base import Outgoing, every, supervise
from lc.report import WorkerReport
from lc.rootfs import host_to_local
from lc.store import Store
from shared.logs import event

log = logging.getLogger(__name__)

KIND = "Dataset"
FORMATS = ("txt", "csv")
_CHUNK = 1 << 20


def count_lines(path: str) -> int:
    """Lines as Go's bufio.Scanner sees them: a final newline adds no empty line."""
    lines, last = 0, b"\n"
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                lines += chunk.count(b"\n")
                last = chunk[-1:]
    except FileNotFoundError:
        raise DatasetError(f"index file {path} does not exist") from None
    except IsADirectoryError:
        raise DatasetError(f"index file {path} is a directory") from None
    except OSError as exc:
        raise DatasetError(f"cannot read index file {path}: {exc.strerror}") from None
    return lines + (last != b"\n")


def count_samples(path: str, fmt: str) -> int:
    """Samples in an index file of format txt (all lines) or csv (lines after the header)."""
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise DatasetError(f"dataset format {fmt!r} is not supported (txt or csv)")
    lines = count_lines(path)
    if fmt == "txt":
        return lines
    if lines == 0:
        raise DatasetError(f"csv index file {path} is empty: it needs a header line")
    return lines - 1


def index_path(obj: dict[str, Any], rootfs: str) -> tuple[str, str]:
    """(local index path, format) for a Dataset object; DatasetError if unusable."""
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
    return host_to_local(rootfs, url), fmt


def uid_of(obj: dict[str, Any]) -> str:
    """The object's metadata.uid ("" when the GM sent none)."""
    meta = obj.get("metadata")
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return uid if isinstance(uid, str) else ""


def scan(obj: dict[str, Any], rootfs: str) -> int:
    """Count the samples of a Dataset object now (blocking file I/O)."""
    path, fmt = index_path(obj, rootfs)
    return count_samples(path, fmt)


class DatasetMonitor:
    """One dataset's periodic re-count; reports to the outbox when the count changes."""

    def __init__(self, store: Store, namespace: str, name: str, obj: dict[str, Any], *,
                 rootfs: str, period: float, reported: int) -> None:
        self.namespace, self.name = namespace, name
        self.obj = obj
        self.reported = reported  # last count the GM was sent (0 = none, as upstream)
        self._store = store
        self._rootfs = rootfs
        self._period = period
        self._wake = asyncio.Event()
        self._scanning = asyncio.Lock()  # one count at a time: no duplicate reports
        self._last_error: str | None = None
        self.scans = 0

    def update(self, obj: dict[str, Any]) -> None:
        """Take a newer object; re-count at once if its spec changed or it is a new object."""
        replaced = uid_of(obj) != uid_of(self.obj)
        changed = replaced or obj.get("spec") != self.obj.get("spec")
        self.obj = obj
        if replaced:
            self.reported = 0  # the new object's status has no count yet
        if changed:
            self._wake.set()

    async def run(self) -> None:
        """Scan now and then every period (or sooner when woken) until cancelled."""
        await every(lambda: self._period, self._wake, self.scan_once)

    async def scan_once(self) -> None:
        """One pass: count, and report upstream if the count changed."""
        async with self._scanning:
            await self._scan()

    async def _scan(self) -> None:
        key = f"{self.namespace}/{self.name}"
        try:
            count = await asyncio.to_thread(scan, self.obj, self._rootfs)
        except DatasetError as exc:
            self._log_error(key, str(exc))
            return
        finally:
            self.scans += 1
        self._last_error = None
        if count != self.reported:
            await self._report(key, count)

    async def _report(self, key: str, count: int) -> None:
        try:
            # Outbox first: a crash between the two writes only resends the same count.
            await self._store.append_report(KIND, self.namespace, self.name,
                                            {"numberOfSamples": count})
            await self._store.put_state(KIND, self.namespace, self.name,
                                        {"reported": count, "uid": uid_of(self.obj)})
        except StoreError as exc:
            self._log_error(key, f"cannot queue sample count: {exc}")
            return
        event(log, "dataset samples changed", key=key, samples=count, previous=self.reported)
        self.reported = count

    def _log_error(self, key: str, error: str) -> None:
        # Logged when the error first appears or changes, not on every period.
        if error != self._last_error:
            event(log, "dataset scan failed", level=logging.WARNING, key=key, error=error)
        self._last_error = error


class DatasetManager:
    """Owns one DatasetMonitor task per dataset on this node."""

    kind = KIND
    takes_reports = False

    def __init__(self, store: Store, *, rootfs: str, period: float) -> None:
        self._store = store
        self._rootfs = rootfs
        self._period = period
        self._monitors: dict[tuple[str, str], tuple[DatasetMonitor, asyncio.Task[None]]] = {}

    def monitor(self, namespace: str, name: str) -> DatasetMonitor | None:
        entry = self._monitors.get((namespace, name))
        return entry[0] if entry else None

    async def upsert(self, namespace: str, name: str, obj: dict[str, Any]) -> None:
        entry = self._monitors.get((namespace, name))
        if entry is not None:
            entry[0].update(obj)
            return
        monitor = DatasetMonitor(self._store, namespace, name, obj, rootfs=self._rootfs,
                                 period=self._period, reported=await self._reported(namespace, name, obj))
        task = supervise(monitor.run, name=f"dataset-monitor:{namespace}/{name}")
        self._monitors[(namespace, name)] = (monitor, task)

    async def _reported(self, namespace: str, name: str, obj: dict[str, Any]) -> int:
        """The count last reported for this very object (same uid), else 0."""
        state = await self._store.get_state(KIND, namespace, name) or {}
        if state.get("uid", "") != uid_of(obj):
            return 0
        return int(state.get("reported", 0))

    async def delete(self, namespace: str, name: str) -> None:
        entry = self._monitors.pop((namespace, name), None)
        if entry is not None:
            await _cancel(entry[1])

    def report_entries(self, report: WorkerReport, *, namespace: str,
                       name: str) -> list[Outgoing]:
        return []  # upstream ignores worker reports about datasets

    async def stop(self) -> None:
        monitors, self._monitors = self._monitors, {}
        for _, task in monitors.values():
            await _cancel(task)


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
