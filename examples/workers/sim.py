"""A simulated Sedna worker: reports to its LocalController like upstream's Python library.

Run by the dev cluster's process runtime in place of the example images, with the env the
GM injects. The role comes from that env alone (no image name, no extra setting), by the
first rule that matches, in this order:

| env the GM sets                          | worker                         | what it does |
|------------------------------------------|--------------------------------|--------------|
| `HEM_NAME`                               | JI edge worker                 | a joint-inference stats report (cumulative inference and hard-example counts) every `SIM_PERIOD` s, forever |
| `AGG_PORT`                               | FL trainer                     | `SIM_ROUNDS` round reports (`status: running`, the last `completed`), one per `SIM_PERIOD` s, then exits 0 |
| `AGG_BIND_PORT`                          | FL aggregator                  | waits out the rounds, then exits 0 |
| `EDGEMESH_URL`                           | ObjectSearch/ObjectTracking tracking worker | stays up (nothing it reports is read) |
| `JOB_NAME`, `LC_SERVER`, `MODEL_URL`, no `SERVICE_NAME` | VideoAnalyticsJob worker | `SIM_ROUNDS` progress reports (frames, detections), the last `completed`, then exits 0 |
| `JOB_NAME`, `LC_SERVER`, no `SERVICE_NAME` | ReidJob worker               | `SIM_ROUNDS` progress reports (queries, matches), the last `completed`, then exits 0 |
| `SERVICE_NAME`, `MODEL_URL`, `LC_SERVER` | FeatureExtractionService worker | a metrics report (cumulative frame and feature counts) every `SIM_PERIOD` s, forever |
| anything else                            | JI cloud worker, ObjectSearch user worker, reid workers of ObjectSearch/ObjectTracking | stays up |

The order matters where env overlaps: a JI edge worker also has SERVICE_NAME, MODEL_URL and
LC_SERVER, an FL trainer JOB_NAME and LC_SERVER; a JI cloud worker gets no LC_SERVER.
IncrementalLearning and LifelongLearning workers are not simulated (`make run` maps no
image of theirs). Reports are the bodies of upstream-lc.md §2.6 (`ownerKind` the
lower-case kind, `default` for an FL trainer as the library sends, `ownerName` = JOB_NAME,
else SERVICE_NAME), POSTed to `$LC_SERVER/sedna/workers/$WORKER_NAME/info` with the
library's retry policy (5 attempts, `SIM_RETRY_WAIT` s apart).
`SIM_LC_PORTS=edge-node-1=9100,edge-node-2=9101` picks the LC port by `NODE_NAME` when
several LCs share one host (the dev run). Standard library only, like a minimal worker.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit, urlunsplit


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def role(environ: Mapping[str, str]) -> str:
    """Which worker this process plays, by the rules of the module docstring."""
    has = {name for name, value in environ.items() if value}
    job_worker = {"JOB_NAME", "LC_SERVER"} <= has and "SERVICE_NAME" not in has
    rules = (
        ("ji-edge", "HEM_NAME" in has),
        ("fl-train", "AGG_PORT" in has),
        ("fl-aggregation", "AGG_BIND_PORT" in has),
        ("tracking", "EDGEMESH_URL" in has),
        ("videoanalytics", job_worker and "MODEL_URL" in has),
        ("reid", job_worker),
        ("fe", {"SERVICE_NAME", "MODEL_URL", "LC_SERVER"} <= has),
    )
    return next((name for name, matches in rules if matches), "idle")


def lc_server() -> str:
    server = env("LC_SERVER", "http://localhost:9100")
    ports = dict(p.split("=", 1) for p in env("SIM_LC_PORTS").split(",") if "=" in p)
    port = ports.get(env("NODE_NAME"))
    if port:
        parts = urlsplit(server)
        server = urlunsplit((parts.scheme, f"{parts.hostname}:{port}", parts.path, "", ""))
    return server.rstrip("/")


def post(body: dict) -> bool:
    """POST one report; True on HTTP 200. Retries like the upstream library."""
    url = f"{lc_server()}/sedna/workers/{body['name']}/info"
    data = json.dumps(body).encode()
    for _ in range(5):
        req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                if resp.status == 200:
                    return True
        except (urllib.error.URLError, OSError) as exc:
            print(f"report to {url} failed: {exc}", flush=True)
        time.sleep(float(env("SIM_RETRY_WAIT", "3")))
    return False


def report(owner_kind: str, *, kind: str, owner_info: dict, status: str | None = None,
           results: list | None = None) -> bool:
    """POST a report in the library's key order; `status` and `results` only when given."""
    body = {"name": env("WORKER_NAME"), "namespace": env("NAMESPACE", "default"),
            "ownerName": env("JOB_NAME") or env("SERVICE_NAME"), "ownerKind": owner_kind,
            "kind": kind}
    if status is not None:
        body["status"] = status
    if results is not None:
        body["results"] = results
    body["ownerInfo"] = owner_info
    return post(body)


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def report_counts(owner_kind: str, period: float, step, **extra) -> None:
    """Cumulative counts every `period`, as the library's stats reports: each one supersedes
    the one before. `step(counts)` returns the new counts from the last ones."""
    counts: dict = {}
    while True:
        start = stamp()
        time.sleep(period)
        counts = step(counts)
        report(owner_kind, kind="inference", owner_info={"startTime": start, "updateTime": stamp(), **counts},
               **extra)
        print(f"reported {counts}", flush=True)


def _inference_counts(last: dict) -> dict:
    n = random.randint(20, 40)
    inferences = last.get("inferenceNumber", 0) + n
    hard = last.get("hardExampleNumber", 0) + random.randint(1, n // 4)
    return {"inferenceNumber": inferences, "hardExampleNumber": hard, "uploadCloudRatio": hard / inferences}


def _feature_counts(last: dict) -> dict:
    n = random.randint(20, 40)
    return {"frameNumber": last.get("frameNumber", 0) + n,
            "featureNumber": last.get("featureNumber", 0) + random.randint(n // 2, n)}


def joint_inference_edge(period: float, rounds: int) -> None:
    report_counts("jointinferenceservice", period, _inference_counts, results=[])


def federated_trainer(period: float, rounds: int) -> None:
    started = stamp()
    loss, acc = 0.9, 0.5
    for rnd in range(1, rounds + 1):
        time.sleep(period)
        loss, acc = round(loss * 0.8, 4), round(min(0.99, acc + 0.1), 4)
        metrics = {"loss": [loss], "accuracy": [acc]}
        ok = report("default", kind="train", status="completed" if rnd == rounds else "running",
                    results=[{"format": "pb", "url": "/model/model.pb", "metrics": metrics}],
                    owner_info={"currentRound": rnd, "sampleCount": 1200, "startTime": started,
                                "updateTime": stamp()})
        print(f"round {rnd}/{rounds} reported={ok} loss={loss}", flush=True)


def federated_aggregator(period: float, rounds: int) -> None:
    time.sleep(period * (rounds + 1))
    print("aggregation finished", flush=True)


def feature_extraction(period: float, rounds: int) -> None:
    report_counts("featureextractionservice", period, _feature_counts)


def job_worker(owner_kind: str, counters: tuple[str, str]) -> Callable[[float, int], None]:
    """A Reid/VA worker: `rounds` progress reports, the last `completed`; then it ends (exit 0)."""
    def run(period: float, rounds: int) -> None:
        started = stamp()
        seen = found = 0
        for rnd in range(1, rounds + 1):
            time.sleep(period)
            n = random.randint(20, 40)
            seen, found = seen + n, found + random.randint(0, n // 4)
            ok = report(owner_kind, kind="inference",
                        status="completed" if rnd == rounds else "running",
                        owner_info={"startTime": started, "updateTime": stamp(),
                                    counters[0]: seen, counters[1]: found})
            print(f"progress {rnd}/{rounds} reported={ok} {counters[0]}={seen}", flush=True)
    return run


def idle(period: float, rounds: int) -> None:
    """A worker with nothing to report: stays up until the pod is deleted."""
    while True:
        time.sleep(3600)


ROLES: dict[str, Callable[[float, int], None]] = {
    "ji-edge": joint_inference_edge,
    "fl-train": federated_trainer,
    "fl-aggregation": federated_aggregator,
    "tracking": idle,
    "videoanalytics": job_worker("videoanalyticsjob", ("frameNumber", "detectionNumber")),
    "reid": job_worker("reidjob", ("queryNumber", "matchNumber")),
    "fe": feature_extraction,
    "idle": idle,
}


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    name = role(os.environ)
    print(f"simulated worker role={name} worker={env('WORKER_NAME')}", flush=True)
    ROLES[name](float(env("SIM_PERIOD", "2")), int(env("SIM_ROUNDS", "3")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
