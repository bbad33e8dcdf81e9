"""Benchmark: what hostile Dataset index files cost one `sedna-lc`, and whether SIGTERM stops it.

The LC's store is seeded with Datasets as a restarted LC finds them: `--fifos` (7) whose index
is a FIFO (the default thread pool of a 2-core machine has six threads), one whose index is a
symlink to /dev/zero, one a 1 GB sparse file, plus one ordinary 3-line index, the Dataset the
user cares about. `sedna-lc` runs without a GM (so it resumes them at once) with
`LC_DATASET_PERIOD=1`. Measured from /proc: peak RSS (VmHWM), CPU seconds used (user + system)
over the run, whether the ordinary Dataset's count reached the outbox, then how long the
process takes to exit after SIGTERM (killed after --exit-wait seconds).

`--tree` runs another checkout's `lc.cli` (e.g. an export of an older commit) with this venv, to
compare. Not a test: figures depend on the machine; record them in docs/benchmarks.md.

    .venv/bin/python bench/lc_dataset_files.py [--duration 20] [--exit-wait 60] [--fifos 7] [--tree PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NS = "default"
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Result:
    peak_rss_mib: float
    cpu_seconds: float
    duration: float
    ordinary_counted: bool
    exit_seconds: float | None  # None: still running after --exit-wait, then killed
    exit_code: int | None


def dataset(name: str, url: str) -> dict:
    return {"kind": "Dataset", "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
            "spec": {"url": url, "format": "txt", "nodeName": "edge-1"}}


def seed(tmp: Path, tree: Path, fifos: int) -> None:
    """Index files, and the Datasets in a store created by the measured tree's own LC code."""
    data = tmp / "data"
    data.mkdir()
    objects = []
    for i in range(fifos):
        os.mkfifo(data / f"pipe{i}")
        objects.append(dataset(f"fifo{i}", str(data / f"pipe{i}")))
    os.symlink("/dev/zero", data / "zero")
    objects.append(dataset("zero", str(data / "zero")))
    with open(data / "sparse", "wb") as f:
        f.truncate(1 << 30)
    objects.append(dataset("sparse", str(data / "sparse")))
    (data / "ok.txt").write_text("a\nb\nc\n")
    objects.append(dataset("ordinary", str(data / "ok.txt")))
    script = ("import asyncio, json, sys\nfrom lc.store.facade import Store\n"
              "async def main():\n"
              "    s = await Store.open(sys.argv[1])\n"
              "    for o in json.loads(sys.argv[2]):\n"
              "        await s.put_resource('Dataset', o['metadata']['namespace'], o['metadata']['name'], o)\n"
              "    await s.close()\n"
              "asyncio.run(main())\n")
    import subprocess
    subprocess.run([sys.executable, "-c", script, str(tmp / "lc.db"), json.dumps(objects)],
                   cwd=tree, check=True)


def proc_stats(pid: int) -> tuple[float, float]:
    """(peak RSS in MiB, CPU seconds) of a live process."""
    with open(f"/proc/{pid}/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return hwm / 1024, (int(fields[11]) + int(fields[12])) / TICK


def counted(db: Path) -> bool:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT body FROM lc_outbox WHERE name = 'ordinary'").fetchall()
    return any(json.loads(r[0]).get("numberOfSamples") == 3 for r in rows)


async def run(tree: Path, duration: float, exit_wait: float, fifos: int) -> Result:
    with tempfile.TemporaryDirectory(prefix="lc-dataset-files-") as tmpdir:
        tmp = Path(tmpdir)
        seed(tmp, tree, fifos)
        env = {**os.environ, "ROOTFS_MOUNT_DIR": "", "LC_DB_PATH": str(tmp / "lc.db"), "BIND_PORT": "0",
               "BIND_ADDRESS": "127.0.0.1", "GM_ADDRESS": "", "LC_DATASET_PERIOD": "1",
               "LOG_LEVEL": "error"}
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "lc.cli", cwd=tree, env=env)
        try:
            started = time.monotonic()
            await asyncio.sleep(duration)
            rss, cpu = proc_stats(proc.pid)
            elapsed = time.monotonic() - started
            ordinary = counted(tmp / "lc.db")
            proc.send_signal(signal.SIGTERM)
            stopping = time.monotonic()
            try:
                code: int | None = await asyncio.wait_for(proc.wait(), exit_wait)
                exit_seconds: float | None = time.monotonic() - stopping
            except TimeoutError:
                code, exit_seconds = None, None
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            for i in range(fifos):  # release readers a killed LC may have left in open()
                try:
                    os.close(os.open(tmp / "data" / f"pipe{i}", os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    pass
        return Result(rss, cpu, elapsed, ordinary, exit_seconds, code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--exit-wait", type=float, default=60.0)
    parser.add_argument("--fifos", type=int, default=7)
    parser.add_argument("--tree", type=Path, default=ROOT)
    args = parser.parse_args()
    r = asyncio.run(run(args.tree.resolve(), args.duration, args.exit_wait, args.fifos))
    exit_text = f"{r.exit_seconds:.2f} s (code {r.exit_code})" if r.exit_seconds is not None \
        else f"still running after {args.exit_wait:.0f} s (killed)"
    print(f"| tree | FIFOs | peak RSS | CPU over {r.duration:.0f} s | ordinary Dataset counted | exit after SIGTERM |")
    print("|---|---|---|---|---|---|")
    print(f"| {args.tree} | {args.fifos} | {r.peak_rss_mib:.1f} MiB | {r.cpu_seconds:.1f} s ({100 * r.cpu_seconds / r.duration:.0f}% "
          f"of a core) | {'yes' if r.ordinary_counted else 'no'} | {exit_text} |")


if __name__ == "__main__":
    main()
