"""A learning job's samples: read from its Dataset's index, the new ones split into train and
eval sets, written as the sample files a stage's worker reads (blocking file I/O through
lc/files.py: regular files within the caps, stoppable between chunks)."""

from __future__ import annotations

import math
import os
import threading
from typing import Any

from lc import files
from lc.errors import LearningError
from lc.files import DEFAULT_LIMITS, FileLimits, FileRefused
from lc.managers.dataset import index_url
from lc.managers.learning.state import JobState
from lc.rootfs import host_to_local


def read_samples(dataset: dict[str, Any], rootfs: str, *, limits: FileLimits = DEFAULT_LIMITS,
                 stop: threading.Event | None = None) -> tuple[list[str], str]:
    """(sample lines, csv header or "") of a Dataset's index file (blocking file I/O)."""
    url, fmt = index_url(dataset)
    try:
        data = files.read_bytes(host_to_local(rootfs, url), limits.index, what="index file",
                                name=url, stop=stop)
    except FileRefused as exc:
        raise LearningError(str(exc)) from None
    text = data.decode("utf-8", errors="surrogateescape")
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    if fmt.lower() == "csv":
        return lines[1:], lines[0] if lines else ""
    return lines, ""


def split_new(state: JobState, lines: list[str], header: str, train_prob: float) -> bool:
    """Split the samples past `state.previous` into train and eval (floor(p*n) train);
    True if the state changed. A dataset that shrank is read on once it grows past it."""
    if len(lines) <= state.previous:
        return False
    new = lines[state.previous:]
    cut = math.floor(train_prob * len(new))
    state.train.extend(new[:cut])
    state.evals.append(new[cut:])
    state.previous, state.header = len(lines), header
    return True


def write_samples(directory: str, samples: list[str], fmt: str, header: str, *,
                  stop: threading.Event | None = None) -> str:
    """Write `samples` as `data.txt` or `data.csv` (header first) in `directory`, created
    if needed, replacing any earlier file whole; returns the file's name."""
    fmt = fmt.lower()
    if fmt not in ("txt", "csv"):
        raise LearningError(f"dataset format {fmt!r} cannot be written (txt or csv)")
    name = f"data.{fmt}"
    lines = ([header] if fmt == "csv" else []) + samples
    data = "".join(line + "\n" for line in lines).encode("utf-8", errors="surrogateescape")
    try:
        os.makedirs(directory, exist_ok=True)
        files.replace_file(os.path.join(directory, name), [data], what="samples file", stop=stop)
    except OSError as exc:
        raise LearningError(f"cannot write samples in {directory}: {exc.strerror}") from None
    except FileRefused as exc:
        raise LearningError(f"cannot write samples in {directory}: {exc.detail}") from None
    return name
