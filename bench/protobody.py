"""Benchmark of protobuf request body decoding (devcluster.server.protobody) on the bodies kubectl sent.

Decodes each captured kubectl body (tests/devcluster/kubectl_protobuf_bodies.yaml) many times and
prints the cost per body next to the cost of parsing the same object from JSON, plus the one-off
cost of building the message classes from the field table. Not a test: prints a table.

    .venv/bin/python bench/protobody.py [--rounds 2000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import orjson
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devcluster.server import protobody  # noqa: E402


def per_call(fn, arg, rounds: int) -> float:
    start = time.perf_counter()
    for _ in range(rounds):
        fn(arg)
    return (time.perf_counter() - start) / rounds * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    cases = yaml.safe_load((ROOT / "tests/devcluster/kubectl_protobuf_bodies.yaml").read_text())
    first = bytes.fromhex(cases[0]["body_hex"])
    start = time.perf_counter()
    protobody.decode_body(first)
    print(f"first decode (descriptor pool and classes): {1000 * (time.perf_counter() - start):.1f} ms")
    print(f"{'command':58} {'bytes':>6} {'protobuf us':>12} {'json us':>8}")
    for case in cases:
        raw = bytes.fromhex(case["body_hex"])
        as_json = orjson.dumps(case["json"])
        pb = per_call(protobody.decode_body, raw, args.rounds)
        js = per_call(orjson.loads, as_json, args.rounds)
        print(f"{case['command'][:58]:58} {len(raw):6} {pb:12.1f} {js:8.1f}")


if __name__ == "__main__":
    main()
