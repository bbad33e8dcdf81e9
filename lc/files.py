"""Reading and writing the files users name in CRs (dataset indexes, models): typed, bounded,
stoppable.

A Dataset's `spec.url` or a Model's `url` is whatever the user wrote, and the LC opens it.
A plain `open()` of a FIFO waits for a writer forever, and a read of `/dev/zero` never ends;
either pins a thread that the process then waits for at exit. So here:

- a file is opened `O_RDONLY | O_NONBLOCK | O_NOCTTY` (opening a FIFO returns at once, a
  terminal never becomes the controlling one), then the *opened descriptor* is `fstat`ed and
  anything but a regular file (FIFO, character or block device, socket, directory) is refused
  before a byte is read: what was checked is what is read, whatever the path names meanwhile;
- caps on bytes and lines: the byte cap is checked against the size first (a 1 GB sparse file
  is refused without reading it) and again while reading (a file may grow); a file over a cap
  is refused whole, never partly counted or copied;
- the work runs in chunks in a daemon thread that checks a stop flag before every chunk.
  `Workers.run` sets the flag when the awaiting task is cancelled (Dataset deleted, LC
  stopping) and returns at once, so at most one chunk read outlives the task, and a thread
  stuck in the kernel (a hung network mount) can never hold the process open at exit;
- files are written through an exclusively created temporary file renamed over the target,
  so a FIFO or device left at the temporary name is never opened either.

Errors are `FileRefused` with a CamelCase `reason` (what a status condition carries) and a
message naming the file as the caller describes it (`what`, e.g. "index file").
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import stat
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from lc.errors import LCError

T = TypeVar("T")

CHUNK = 1 << 20  # bytes per read: the most one cancelled read may still do
MiB, GiB = 1 << 20, 1 << 30
DEFAULT_INDEX_BYTES = 64 * MiB
DEFAULT_INDEX_LINES = 1_000_000
DEFAULT_MODEL_BYTES = 8 * GiB
DEFAULT_THREADS = 4
_OPEN_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_OPEN_TEMP = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
_read = os.read  # one chunk's read (the seam tests use to hold a read in progress)


# ---- errors ---------------------------------------------------------------------------


class FileRefused(LCError):
    """A user-named file the LC will not (or cannot) read or write."""

    reason = "Unreadable"

    def __init__(self, what: str, path: str, detail: str) -> None:
        super().__init__(f"{what} {path} {detail}")
        self.path = path
        self.detail = detail


class FileMissing(FileRefused):
    reason = "NotFound"


class NotRegularFile(FileRefused):
    reason = "NotRegularFile"


class FileTooLarge(FileRefused):
    reason = "TooLarge"


class TooManyLines(FileRefused):
    reason = "TooManyLines"


class FileUnwritable(FileRefused):
    reason = "Unwritable"


class Stopped(Exception):  # noqa: N818 - not an error: the awaiting task went away
    """Raised in a worker thread whose stop flag was set; nobody is waiting for its result."""


# ---- caps -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Caps:
    """The most one file may hold: bytes, and lines when it is read as lines."""

    bytes: int
    lines: int | None = None


@dataclass(frozen=True, slots=True)
class FileLimits:
    """The LC's caps per use (LC_INDEX_MAX_BYTES, LC_INDEX_MAX_LINES, LC_MODEL_MAX_BYTES)."""

    index_bytes: int = DEFAULT_INDEX_BYTES
    index_lines: int = DEFAULT_INDEX_LINES
    model_bytes: int = DEFAULT_MODEL_BYTES

    @property
    def index(self) -> Caps:
        return Caps(self.index_bytes, self.index_lines)

    @property
    def model(self) -> Caps:
        return Caps(self.model_bytes)


DEFAULT_LIMITS = FileLimits()


# ---- reading --------------------------------------------------------------------------


def open_regular(path: str, caps: Caps, *, what: str = "file", name: str | None = None) -> int:
    """A descriptor of `path` open for reading, if it is a regular file within `caps.bytes`.
    Errors call the file `what name` (`name` defaults to the path)."""
    shown = name or path
    try:
        fd = os.open(path, _OPEN_READ)
    except OSError as exc:
        raise _refused(exc, what, shown) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(what, shown, f"is {_file_type(st.st_mode)}, not a regular file")
        if st.st_size > caps.bytes:
            raise FileTooLarge(what, shown, f"is {st.st_size} bytes, over the limit of {caps.bytes} bytes")
    except BaseException:
        os.close(fd)
        raise
    return fd


def chunks(fd: int, caps: Caps, *, path: str, what: str = "file",
           stop: threading.Event | None = None) -> Iterator[bytes]:
    """The bytes of an open file in chunks of at most CHUNK; FileTooLarge once more than
    `caps.bytes` were read; Stopped before a read once `stop` is set. `path` names the file
    in errors."""
    total = 0
    while True:
        if stop is not None and stop.is_set():
            raise Stopped(path)
        try:
            chunk = _read(fd, min(CHUNK, caps.bytes - total + 1))
        except OSError as exc:
            raise _refused(exc, what, path) from None
        if not chunk:
            return
        total += len(chunk)
        if total > caps.bytes:
            raise FileTooLarge(what, path, f"grew over the limit of {caps.bytes} bytes while read")
        yield chunk


def count_lines(path: str, caps: Caps, *, what: str = "file", name: str | None = None,
                stop: threading.Event | None = None) -> int:
    """Lines as Go's bufio.Scanner sees them (a final newline adds no empty line), refused
    whole when over a cap."""
    shown = name or path
    newlines, last = 0, b"\n"
    fd = open_regular(path, caps, what=what, name=shown)
    try:
        for chunk in chunks(fd, caps, path=shown, what=what, stop=stop):
            newlines += chunk.count(b"\n")
            last = chunk[-1:]
            _check_lines(newlines, caps, what=what, path=shown)
    finally:
        os.close(fd)
    lines = newlines + (last != b"\n")
    _check_lines(lines, caps, what=what, path=shown)
    return lines


def read_bytes(path: str, caps: Caps, *, what: str = "file", name: str | None = None,
               stop: threading.Event | None = None) -> bytes:
    """The whole content of a regular file within `caps` (lines counted as `count_lines`)."""
    shown = name or path
    parts: list[bytes] = []
    newlines = 0
    fd = open_regular(path, caps, what=what, name=shown)
    try:
        for chunk in chunks(fd, caps, path=shown, what=what, stop=stop):
            parts.append(chunk)
            newlines += chunk.count(b"\n")
            _check_lines(newlines, caps, what=what, path=shown)
    finally:
        os.close(fd)
    data = b"".join(parts)
    _check_lines(newlines + (data[-1:] not in (b"", b"\n")), caps, what=what, path=shown)
    return data


def _check_lines(lines: int, caps: Caps, *, what: str, path: str) -> None:
    if caps.lines is not None and lines > caps.lines:
        raise TooManyLines(what, path, f"has more than {caps.lines} lines")


# ---- writing --------------------------------------------------------------------------


def replace_file(path: str, data: Iterable[bytes], *, what: str = "file", name: str | None = None,
                 stop: threading.Event | None = None) -> None:
    """Write `data` to `path`, replacing it whole: into `.<name>.tmp` beside it, created
    exclusively (whatever held that name is removed first, never opened), then renamed."""
    shown = name or path
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        fd = os.open(tmp, _OPEN_TEMP, 0o666)
    except OSError as exc:
        raise FileUnwritable(what, shown, f"cannot be written: {exc.strerror}") from None
    try:
        try:
            for chunk in data:
                if stop is not None and stop.is_set():
                    raise Stopped(path)
                _write_all(fd, chunk)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        _discard(tmp)
        raise FileUnwritable(what, shown, f"cannot be written: {exc.strerror}") from None
    except BaseException:
        _discard(tmp)
        raise


def copy_file(source: str, target: str, caps: Caps, *, what: str = "file",
              names: tuple[str, str] | None = None, stop: threading.Event | None = None) -> None:
    """Copy regular file `source` within `caps` over `target` (replaced whole); `names` are
    how errors call the two files (default: their paths)."""
    shown_source, shown_target = names or (source, target)
    fd = open_regular(source, caps, what=what, name=shown_source)
    try:
        replace_file(target, chunks(fd, caps, path=shown_source, what=what, stop=stop),
                     what=what, name=shown_target, stop=stop)
    finally:
        os.close(fd)


def _write_all(fd: int, chunk: bytes) -> None:
    view = memoryview(chunk)
    while view:
        view = view[os.write(fd, view):]


def _discard(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


# ---- running the work -----------------------------------------------------------------


class Workers:
    """Daemon threads for blocking file work, at most `size` at once.

    Not asyncio's default executor: its threads are joined when the loop closes and at
    interpreter exit, so one read that never returns keeps the process alive. A thread here
    is a daemon, started per call; cancelling the caller sets the call's stop flag and frees
    its slot at once (the thread ends after the chunk it is reading)."""

    def __init__(self, size: int = DEFAULT_THREADS) -> None:
        self._slots = asyncio.Semaphore(size)

    async def run(self, fn: Callable[[], T], *, stop: threading.Event, name: str = "lc-files") -> T:
        """`fn()` in a daemon thread; `fn` must check `stop` between chunks of its work."""
        async with self._slots:
            loop = asyncio.get_running_loop()
            done: asyncio.Future[T] = loop.create_future()
            threading.Thread(target=_call, args=(fn, loop, done), name=name, daemon=True).start()
            try:
                return await done
            except asyncio.CancelledError:
                stop.set()
                raise


def _call(fn: Callable[[], T], loop: asyncio.AbstractEventLoop, done: asyncio.Future[T]) -> None:
    try:
        result = fn()
    except BaseException as exc:  # handed to the awaiting task, which re-raises it
        _hand_over(loop, done, None, exc)
    else:
        _hand_over(loop, done, result, None)


def _hand_over(loop: asyncio.AbstractEventLoop, done: asyncio.Future[T], result: T | None,
               exc: BaseException | None) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        loop.call_soon_threadsafe(_settle, done, result, exc)


def _settle(done: asyncio.Future[T], result: T | None, exc: BaseException | None) -> None:
    if done.done():  # the caller was cancelled meanwhile
        return
    if exc is not None:
        done.set_exception(exc)
    else:
        done.set_result(result)  # type: ignore[arg-type]


# ---- messages -------------------------------------------------------------------------


_TYPES = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _file_type(mode: int) -> str:
    return next((name for test, name in _TYPES if test(mode)), "not a file")


def _refused(exc: OSError, what: str, path: str) -> FileRefused:
    if exc.errno == errno.ENOENT:
        return FileMissing(what, path, "does not exist")
    if exc.errno == errno.ENXIO:  # a socket, or a device with no driver behind it
        return NotRegularFile(what, path, "is a special file, not a regular file")
    return FileRefused(what, path, f"cannot be read: {exc.strerror}")
