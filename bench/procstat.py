"""What the benchmarks read about processes and the machine from /proc (Linux)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


def memory_kib(pid: int) -> dict[str, int]:
    """VmHWM (peak) and VmRSS of a process, in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(value.split()[0])
    return out


def rss_kib(pid: int) -> int:
    return memory_kib(pid).get("VmRSS", 0)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU a process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def listen_overflows() -> int:
    """The kernel's count of connections its listen queues could not take (all processes)."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            return dict(zip(names.split()[1:], map(int, values.split()[1:]), strict=False)).get("ListenOverflows", 0)
    return 0


def cpu_jiffies() -> tuple[int, int, int]:
    """(busy, stolen by the host, all) jiffies of every CPU of the machine, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    steal = fields[7] if len(fields) > 7 else 0
    return sum(fields[:8]) - idle - steal, steal, sum(fields[:8])


@dataclass
class Usage:
    """A process's CPU share and RSS over a window."""

    cpu_share: float
    rss_kb: int

    @staticmethod
    async def over(pid: int, seconds: float) -> Usage:
        c0, t0 = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(seconds)
        return Usage((cpu_seconds(pid) - c0) / (time.monotonic() - t0), rss_kib(pid))


def py_spy(pid: int, label: str, out_dir: Path, seconds: float) -> subprocess.Popen | None:
    """BENCH_PYSPY names `gm` (or `hub`, a hub alone): sample the process for this phase
    (BENCH_PYSPY_SECONDS at most) into `out_dir/pyspy-<label>.txt`."""
    wanted = os.environ.get("BENCH_PYSPY", "").split(",")
    exe = Path(sys.executable).parent / "py-spy"
    if not ({"gm", "hub"} & set(wanted)) or not exe.exists():
        return None
    out = out_dir / f"pyspy-{label}.txt"
    print(f"# py-spy {label} -> {out}", flush=True)
    return subprocess.Popen([str(exe), "record", "-p", str(pid), "-r", "100", "-f", "raw", "-o", str(out),
                             "-d", str(int(min(seconds, float(os.environ.get("BENCH_PYSPY_SECONDS", seconds)))))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
