"""What a hostile LC -> GM frame costs the GM to decode and check, by shape.

Builds frames byte by byte (so building them costs the parent nothing): status frames whose
body is nested maps with long keys, one long list of small ints, lists of one- and two-char
strings, many small maps, deep nesting, list headers that claim more items than the frame
holds; native msgpack and the upstream JSON envelope. Each frame is decoded in its own
subprocess, as the GM's hub decodes it (`decode_native` / `decode_upstream` with the limit
given), and the row shows what happened, the CPU time of decode+check and the peak RSS the
decode added on top of the process holding the frame (least CPU and most memory of --repeat
runs: CPU time on a shared machine only ever reads high). Not a test: prints a table.

    .venv/bin/python bench/frames.py                       # this checkout's proto/
    .venv/bin/python bench/frames.py --proto-root /tmp/old # another checkout's proto/ (before/after)
    .venv/bin/python bench/frames.py --profile int_list    # cProfile of one shape
"""

from __future__ import annotations

import argparse
import base64
import json
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024

# --- msgpack by hand -----------------------------------------------------------------------


def _str(text: bytes) -> bytes:
    n = len(text)
    if n < 32:
        return bytes([0xA0 | n]) + text
    return (b"\xd9" + bytes([n]) if n < 256 else b"\xdb" + struct.pack(">I", n)) + text


def _arr(n: int) -> bytes:
    return b"\xdd" + struct.pack(">I", n)


def _status_frame(body: bytes) -> bytes:
    """A native status frame around an already packed body."""
    head = b"".join([b"\x85", _str(b"op"), _str(b"status"), _str(b"seq"), b"\x01",
                     _str(b"kind"), _str(b"Dataset"), _str(b"name"), _str(b"d"), _str(b"body")])
    return head + body


def _in_x(items: bytes, n: int) -> bytes:
    """body {"x": [n packed items]}."""
    return b"\x81" + _str(b"x") + _arr(n) + items


def native_nested_long_keys(size: int) -> bytes:
    key = size // 100 - 8
    return _status_frame((b"\x81" + _str(b"k" * key)) * 100 + b"\x80")


def native_list(item: bytes) -> Callable[[int], bytes]:
    """body {"x": [item, item, ...]}: one list."""
    def build(size: int) -> bytes:
        n = (size - 64) // len(item)
        return _status_frame(_in_x(item * n, n))
    return build


CHUNK = 50_000
"""Items per list in the chunked shapes: under any per-list limit, so the whole frame is built."""


def _chunks(item: bytes, room: int, per_list: int = CHUNK) -> tuple[bytes, int]:
    """Lists of `per_list` items filling `room` bytes, and how many lists."""
    chunk = _arr(per_list) + item * per_list
    n = room // len(chunk)
    return chunk * n, n


def native_chunked(item: bytes, per_list: int = CHUNK) -> Callable[[int], bytes]:
    """body {"x": [[item * per_list], [item * per_list], ...]}: the same items, in lists."""
    def build(size: int) -> bytes:
        chunks, n = _chunks(item, size - 64, per_list)
        return _status_frame(_in_x(chunks, n))
    return build


def _letters_map(n: int) -> bytes:
    """A map of `n` distinct one-letter keys to 1."""
    return b"\xde" + struct.pack(">H", n) + b"".join(_str(bytes([65 + i])) + b"\x01" for i in range(n))


def native_deep(size: int) -> bytes:
    """1000 nested one-item lists, the innermost holding lists of small ints up to `size`."""
    chunks, n = _chunks(b"\x01", size - 1100)
    return _status_frame(b"\x81" + _str(b"x") + b"\x91" * 1000 + _arr(n) + chunks)


def native_claimed_lists(size: int) -> bytes:
    """1000 nested list headers each claiming size/2 items: msgpack sizes each list from its header."""
    head = _arr(size // 2) * 1000
    return _status_frame(b"\x81" + _str(b"x") + head + b"\x01" * (size - len(head) - 64))


# --- upstream envelope ---------------------------------------------------------------------


def _envelope(content: bytes) -> bytes:
    header = b'{"namespace":"default","resourceKind":"Dataset","resourceName":"d","operation":"status"}'
    return b'{"header":' + header + b',"content":"' + base64.b64encode(content) + b'"}\n'


def _json_room(size: int) -> int:
    """Bytes of JSON content whose envelope is `size` bytes."""
    return (size - 160) * 3 // 4


def upstream_nested_long_keys(size: int) -> bytes:
    key = _json_room(size) // 100 - 8
    return _envelope((b'{"' + b"k" * key + b'":') * 100 + b"{}" + b"}" * 100)


def upstream_list(item: bytes) -> Callable[[int], bytes]:
    def build(size: int) -> bytes:
        n = (_json_room(size) - 16) // (len(item) + 1)
        return _envelope(b'{"x":[' + b",".join([item] * n) + b"]}")
    return build


def upstream_junk_in_envelope(size: int) -> bytes:
    """Empty maps outside `content`: the envelope itself is parsed before content is looked at."""
    n = (size - 200) // 3
    env = _envelope(b"{}")
    return env[:-2] + b',"x":[' + b",".join([b"{}"] * n) + b"]}\n"


SHAPES: dict[str, tuple[str, Callable[[int], bytes]]] = {
    "nested_long_keys": ("native", native_nested_long_keys),
    "int_list": ("native", native_list(b"\x01")),
    "int_chunks": ("native", native_chunked(b"\x01")),
    "str1_chunks": ("native", native_chunked(_str(b"a"))),
    "str2_list": ("native", native_list(_str(b"ab"))),
    "str2_chunks": ("native", native_chunked(_str(b"ab"))),
    "empty_map_chunks": ("native", native_chunked(b"\x80")),
    "small_map_chunks": ("native", native_chunked(b"\x81" + _str(b"a") + b"\x01")),
    "map7_chunks": ("native", native_chunked(_letters_map(7), 1000)),
    "map31_chunks": ("native", native_chunked(_letters_map(31), 1000)),
    "list7_chunks": ("native", native_chunked(b"\x97" + b"\x01" * 7, 1000)),
    "deep_lists": ("native", native_deep),
    "claimed_lists": ("native", native_claimed_lists),
    "up_nested_long_keys": ("upstream", upstream_nested_long_keys),
    "up_int_list": ("upstream", upstream_list(b"1")),
    "up_str2_list": ("upstream", upstream_list(b'"ab"')),
    "up_empty_maps": ("upstream", upstream_list(b"{}")),
    "up_envelope_junk": ("upstream", upstream_junk_in_envelope),
}

# --- one measurement, in a fresh process ---------------------------------------------------

_CHILD = r"""
import gc, json, sys, time
sys.path.insert(0, sys.argv[1])
mode, path, limit, profile = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
import proto
with open(path, "rb") as f:
    data = f.read()
if mode == "upstream":
    data = data.decode("utf-8")  # a text frame arrives as str
decode = proto.decode_native if mode == "native" else proto.decode_upstream
gc.collect()

def status_mb(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field)) / 1024

base = status_mb("VmRSS:")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM, the peak RSS, to the current RSS
prof = None
if profile:
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
start = time.process_time()
try:
    decode(data, max_bytes=limit)
    outcome = "accepted"
except proto.ProtocolError as exc:
    outcome = f"{type(exc).__name__}: {exc}"
except RecursionError:
    outcome = "RecursionError"
cpu = time.process_time() - start
if prof is not None:
    import pstats
    prof.disable()
    pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(12)
print(json.dumps({"outcome": outcome, "cpu": cpu, "mb": status_mb("VmHWM:") - base}))
"""


def measure(proto_root: Path, mode: str, frame: bytes, limit: int, *, profile: bool = False) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".frame") as f:
        f.write(frame)
        f.flush()
        out = subprocess.run([sys.executable, "-c", _CHILD, str(proto_root), mode, f.name, str(limit),
                              "1" if profile else "0"], capture_output=True, text=True, check=False)
    if profile:
        sys.stderr.write(out.stderr)
    if out.returncode != 0:
        return {"outcome": f"crashed rc={out.returncode}: {out.stderr.strip()[-120:]}", "cpu": 0.0, "mb": 0.0}
    return json.loads(out.stdout)


def _limits(proto_root: Path) -> dict[str, int]:
    """The limits the GM passes, read from the checkout measured (the frame limit without them)."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import proto.limits as l; "
            "f = l.MAX_FRAME_BYTES; print(json.dumps({'native': getattr(l, 'MAX_REPORT_BYTES', f), "
            "'upstream': getattr(l, 'MAX_REPORT_ENVELOPE_BYTES', f), 'frame': f}))")
    out = subprocess.run([sys.executable, "-c", code, str(proto_root)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _size(token: str, limit: int) -> int:
    return limit - 64 if token == "limit" else int(float(token) * MiB)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--proto-root", type=Path, default=ROOT, help="checkout whose proto/ is measured")
    parser.add_argument("--sizes", default="8,limit",
                        help="frame sizes in MiB, comma separated; 'limit' is the GM's limit for the shape's mode")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--frame-limit", action="store_true",
                        help="decode with MAX_FRAME_BYTES (the downstream limit) instead of the report limits")
    parser.add_argument("--repeat", type=int, default=3,
                        help="decodes per row (each in a fresh process): the least CPU, the most memory")
    parser.add_argument("--profile", metavar="SHAPE", help="cProfile one shape at the first size")
    args = parser.parse_args()
    limits = _limits(args.proto_root)
    sizes = args.sizes.split(",")
    if args.profile:
        mode, build = SHAPES[args.profile]
        print(measure(args.proto_root, mode, build(_size(sizes[0], limits[mode])), limits["frame"], profile=True))
        return
    print(f"proto: {args.proto_root}  limits: native {limits['native']:,} / upstream {limits['upstream']:,} "
          f"bytes{' (frame limit forced)' if args.frame_limit else ''}")
    print(f"| {'shape':20} | {'frame bytes':>11} | {'CPU s':>6} | {'peak +MB':>8} | outcome")
    print(f"|{'-' * 22}|{'-' * 13}:|{'-' * 7}:|{'-' * 9}:|---")
    for name in args.shapes.split(","):
        mode, build = SHAPES[name]
        for size in sizes:
            frame = build(_size(size, limits[mode]))
            limit = limits["frame"] if args.frame_limit else limits[mode]
            runs = [measure(args.proto_root, mode, frame, limit) for _ in range(args.repeat)]
            r = {**runs[0], "cpu": min(x["cpu"] for x in runs), "mb": max(x["mb"] for x in runs)}
            outcome = r["outcome"] if len(r["outcome"]) <= 90 else r["outcome"][:87] + "..."
            print(f"| {name:20} | {len(frame):11,} | {r['cpu']:6.3f} | {r['mb']:8.1f} | {outcome}", flush=True)


if __name__ == "__main__":
    main()
