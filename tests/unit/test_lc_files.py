"""lc/files.py: user-named files are read only if regular and within caps, in stoppable chunks.

Every call that could block on the old `open()` runs through `finishes`, which fails the test
(instead of hanging it) when the call is still running after ten seconds.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lc import files
from lc.files import (
    CHUNK,
    Caps,
    FileMissing,
    FileRefused,
    FileTooLarge,
    FileUnwritable,
    NotRegularFile,
    Stopped,
    TooManyLines,
    Workers,
)

HANG = 10.0  # seconds after which a call that has not returned counts as blocked
CAN_MKNOD = os.geteuid() == 0


def finishes(call: Callable[[], Any]) -> Any:
    """`call()`'s result (or exception), failing the test if it does not return in HANG s."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG)
    assert not thread.is_alive(), "the call blocked"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def reader_waiting(path: Path) -> bool:
    """Whether someone holds (or is blocked opening) the FIFO for reading; releases them."""
    if not path.is_fifo():
        return False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return False
        raise
    os.close(fd)
    return True


@contextmanager
def fifo(path: Path) -> Iterator[Path]:
    os.mkfifo(path)
    try:
        yield path
    finally:
        reader_waiting(path)  # a reader blocked by a bug must not outlive the test


def reference_lines(data: bytes) -> int:
    """What Go's bufio.Scanner counts: every newline, plus an unterminated last line."""
    return data.count(b"\n") + (bool(data) and not data.endswith(b"\n"))


BIG = Caps(1 << 40, 1 << 40)


# ---- refused file types ---------------------------------------------------------------


def test_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    with fifo(tmp_path / "index") as path:
        with pytest.raises(NotRegularFile) as info:
            finishes(lambda: files.count_lines(str(path), BIG, what="index file"))
        assert str(info.value) == f"index file {path} is a FIFO, not a regular file"
        assert not reader_waiting(path)


@pytest.mark.parametrize("make", [
    pytest.param(lambda p: os.symlink("/dev/zero", p), id="symlink-to-dev-zero"),
    pytest.param(lambda p: os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(1, 5)), id="char-device",
                 marks=pytest.mark.skipif(not CAN_MKNOD, reason="mknod needs root")),
])
def test_character_device_is_refused_without_reading(tmp_path: Path, make) -> None:
    path = tmp_path / "index"
    make(path)
    with pytest.raises(NotRegularFile, match="is a character device, not a regular file"):
        finishes(lambda: files.read_bytes(str(path), BIG))


def test_directory_and_socket_are_refused(tmp_path: Path) -> None:
    with pytest.raises(NotRegularFile, match="is a directory, not a regular file"):
        finishes(lambda: files.count_lines(str(tmp_path), BIG))
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "s"))
        with pytest.raises(NotRegularFile, match="is a special file"):
            finishes(lambda: files.count_lines(str(tmp_path / "s"), BIG))
    finally:
        sock.close()


def test_missing_file_and_name_shown_in_errors(tmp_path: Path) -> None:
    with pytest.raises(FileMissing) as info:
        files.count_lines(str(tmp_path / "none"), BIG, what="index file", name="/data/none")
    assert (str(info.value), info.value.reason) == ("index file /data/none does not exist", "NotFound")


# ---- caps -----------------------------------------------------------------------------


def test_sparse_file_over_the_byte_cap_is_refused_before_any_read(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "sparse"
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # 1 GiB, no blocks
    reads: list[int] = []
    monkeypatch.setattr(files, "_read", lambda fd, n: reads.append(n) or os.read(fd, n))
    with pytest.raises(FileTooLarge) as info:
        files.count_lines(str(path), Caps(64 << 20, 1_000_000))
    assert str(info.value) == f"file {path} is {1 << 30} bytes, over the limit of {64 << 20} bytes"
    assert reads == []


def test_file_that_grows_past_the_cap_while_read_is_refused(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "index"
    path.write_bytes(b"a\n" * 4)
    real = os.read

    def grow_then_read(fd: int, n: int) -> bytes:
        with open(path, "ab") as f:
            f.write(b"b\n")
        return real(fd, n)

    monkeypatch.setattr(files, "_read", grow_then_read)
    with pytest.raises(FileTooLarge, match="grew over the limit of 9 bytes while read"):
        files.count_lines(str(path), Caps(9))


def test_line_cap_refuses_whole(tmp_path: Path) -> None:
    path = tmp_path / "index"
    path.write_bytes(b"a\nb\nc")  # three lines, the last unterminated
    assert files.count_lines(str(path), Caps(100, 3)) == 3
    with pytest.raises(TooManyLines, match="has more than 2 lines") as info:
        files.count_lines(str(path), Caps(100, 2))
    assert info.value.reason == "TooManyLines"


# ---- stopping -------------------------------------------------------------------------


def test_a_set_stop_flag_ends_the_read_before_the_next_chunk(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "index"
    path.write_bytes(b"x\n" * (CHUNK * 2))  # four chunks
    stop = threading.Event()
    reads: list[int] = []

    def read_then_stop(fd: int, n: int) -> bytes:
        reads.append(n)
        stop.set()  # as a cancelled caller does while this chunk is read
        return os.read(fd, n)

    monkeypatch.setattr(files, "_read", read_then_stop)
    with pytest.raises(Stopped):
        files.count_lines(str(path), BIG, stop=stop)
    assert len(reads) == 1


async def test_cancelling_the_caller_returns_at_once_and_frees_the_slot() -> None:
    workers = Workers(size=1)
    started, release = threading.Event(), threading.Event()
    stop = threading.Event()

    def blocked() -> str:
        started.set()
        release.wait(HANG)  # a read stuck in the kernel
        return "late"

    first = asyncio.create_task(workers.run(blocked, stop=stop, name="test-blocked"))
    second = asyncio.create_task(workers.run(lambda: "next", stop=threading.Event()))
    try:
        assert await asyncio.to_thread(started.wait, HANG)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first  # while the thread is still blocked
        assert stop.is_set()
        assert await asyncio.wait_for(second, HANG) == "next"
        [thread] = [t for t in threading.enumerate() if t.name == "test-blocked"]
        assert thread.daemon  # never joined at exit
    finally:
        release.set()


async def test_errors_reach_the_caller() -> None:
    def refuse() -> None:
        raise FileMissing("file", "/x", "does not exist")

    with pytest.raises(FileMissing, match="file /x does not exist"):
        await Workers().run(refuse, stop=threading.Event())


# ---- writing and copying --------------------------------------------------------------


def test_copy_replaces_the_target_whole(tmp_path: Path) -> None:
    source, target = tmp_path / "model", tmp_path / "out" / "model"
    source.write_bytes(b"m" * (CHUNK + 3))
    target.parent.mkdir()
    target.write_bytes(b"old and longer" * CHUNK)
    files.copy_file(str(source), str(target), Caps(CHUNK + 3))
    assert target.read_bytes() == source.read_bytes()
    assert sorted(p.name for p in target.parent.iterdir()) == ["model"]


def test_copy_refuses_special_and_oversized_sources_and_leaves_the_target(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"deployed")
    big = tmp_path / "big"
    big.write_bytes(b"b" * 11)
    os.symlink("/dev/zero", tmp_path / "zero")
    with fifo(tmp_path / "pipe") as pipe:
        for source, error in ((pipe, NotRegularFile), (tmp_path / "zero", NotRegularFile),
                              (big, FileTooLarge)):
            with pytest.raises(error):
                finishes(lambda s=source: files.copy_file(str(s), str(target), Caps(10), what="model"))
    assert target.read_bytes() == b"deployed"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big", "pipe", "target", "zero"]


def test_a_fifo_at_the_temporary_name_is_replaced_not_opened(tmp_path: Path) -> None:
    target = tmp_path / "config.json"
    with fifo(tmp_path / ".config.json.tmp"):
        finishes(lambda: files.replace_file(str(target), [b"{}"]))
    assert target.read_bytes() == b"{}"
    assert not (tmp_path / ".config.json.tmp").exists()


def test_unwritable_target_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileUnwritable, match="cannot be written: No such file or directory") as info:
        files.replace_file(str(tmp_path / "no" / "dir" / "f"), [b"x"])
    assert info.value.reason == "Unwritable"


# ---- property: every file type and size around the caps --------------------------------


LINE_PIECES = st.sampled_from([b"a", b"bc", b"\n", b"\r\n", b"\n\n", b"x" * 300, b"\x00\xff"])
SMALL = st.lists(LINE_PIECES, max_size=40).map(b"".join)
AROUND_CHUNK = st.integers(CHUNK - 3, CHUNK + 3).flatmap(
    lambda n: st.sampled_from([b"ab\n", b"abc", b"\n"]).map(lambda unit: (unit * (n // len(unit) + 1))[:n]))


@st.composite
def regular_cases(draw) -> tuple[str, bytes, Caps]:
    data = draw(st.one_of(SMALL, AROUND_CHUNK))
    lines = reference_lines(data)
    max_bytes = max(0, len(data) + draw(st.integers(-2, 2)))
    max_lines = draw(st.none() | st.integers(-2, 2).map(lambda d: max(0, lines + d)))
    return "regular", data, Caps(max_bytes, max_lines)


SPECIAL = st.sampled_from(["fifo", "directory", "symlink-to-device",
                           *(["char-device"] if CAN_MKNOD else [])])
CASES = st.one_of(regular_cases(), SPECIAL.map(lambda kind: (kind, b"", Caps(1 << 20, 10))))


def make_file(directory: Path, kind: str, data: bytes) -> Path:
    path = directory / "index"
    if kind == "regular":
        path.write_bytes(data)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "symlink-to-device":
        os.symlink("/dev/zero", path)
    else:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    return path


def expected(kind: str, data: bytes, caps: Caps) -> int | type[FileRefused]:
    if kind != "regular":
        return NotRegularFile
    if len(data) > caps.bytes:
        return FileTooLarge
    if caps.lines is not None and reference_lines(data) > caps.lines:
        return TooManyLines
    return reference_lines(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=CASES)
def test_reader_counts_exactly_or_refuses_and_never_blocks(case: tuple[str, bytes, Caps]) -> None:
    kind, data, caps = case
    want = expected(kind, data, caps)
    with tempfile.TemporaryDirectory() as tmp:
        path = make_file(Path(tmp), kind, data)
        try:
            for read in (files.count_lines, files.read_bytes):
                if isinstance(want, int):
                    got = finishes(lambda r=read: r(str(path), caps))
                    assert got == (want if read is files.count_lines else data)
                else:
                    with pytest.raises(want):
                        finishes(lambda r=read: r(str(path), caps))
        finally:
            if kind == "fifo":
                assert not reader_waiting(path)
