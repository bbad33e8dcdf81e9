"""A learning job's samples: read from its Dataset's index, the new ones split into train and
eval sets, written as the sample files a stage's worker reads (blocking file I/O through
lc/files.py: regular files within the caps, stoppable between chunks). An s3 index is read
by the job's loop (lc/managers/learning/loop.py) and parsed here; for an s3 Dataset the
sample file comes with upstream's `dataIndex.txt`, the sample files' paths under the
Dataset's URL prefix."""

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
from lc.s3 import is_s3


def read_samples(dataset: dict[str, Any], rootfs: str, *, limits: FileLimits = DEFAULT_LIMITS,
                 stop: threading.Event | None = None) -> tuple[list[str], str]:
    """(sample lines, csv header or "") of a Dataset's index file (blocking file I/O)."""
    url, fmt = index_url(dataset)
    if is_s3(url):
        raise LearningError(f"{url} is an s3 index: the job's loop reads it")
    try:
        data = files.read_bytes(host_to_local(rootfs, url), limits.index, what="index file",
                                name=url, stop=stop)
    except FileRefused as exc:
        raise LearningError(str(exc)) from None
    return parse_samples(data, fmt)


def parse_samples(data: bytes, fmt: str, *, max_lines: int | None = None,
                  name: str = "index file") -> tuple[list[str], str]:
    """(sample lines, csv header or "") of an index's content; LearningError over
    `max_lines` lines."""
    text = data.decode("utf-8", errors="surrogateescape")
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    if max_lines is not None and len(lines) > max_lines:
        raise LearningError(f"index file {name} has more than {max_lines} lines")
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
    name, data = sample_file(samples, fmt, header)
    try:
        os.makedirs(directory, exist_ok=True)
        files.replace_file(os.path.join(directory, name), [data], what="samples file", stop=stop)
    except OSError as exc:
        raise LearningError(f"cannot write samples in {directory}: {exc.strerror}") from None
    except FileRefused as exc:
        raise LearningError(f"cannot write samples in {directory}: {exc.detail}") from None
    return name


INDEX_FILE = "dataIndex.txt"


def sample_file(samples: list[str], fmt: str, header: str) -> tuple[str, bytes]:
    """The sample file's name (`data.txt` or `data.csv`) and content: one sample a line, a
    csv's header first."""
    fmt = fmt.lower()
    if fmt not in ("txt", "csv"):
        raise LearningError(f"dataset format {fmt!r} cannot be written (txt or csv)")
    lines = ([header] if fmt == "csv" else []) + samples
    return f"data.{fmt}", "".join(line + "\n" for line in lines).encode("utf-8", errors="surrogateescape")


def sample_index(samples: list[str], prefix: str) -> bytes:
    """Upstream's `dataIndex.txt` for a txt Dataset on S3: the Dataset's URL prefix, then every
    token of every sample that names a file (its last path element has an extension, as Go's
    filepath.Ext sees it: `images/1.jpg 1` gives `images/1.jpg`)."""
    paths = [token for line in samples for token in line.split(" ")
             if "." in token.rsplit("/", 1)[-1]]
    return "".join(f"{line}\n" for line in [prefix, *paths]).encode("utf-8", errors="surrogateescape")
