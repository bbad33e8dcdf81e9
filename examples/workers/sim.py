"""A simulated Sedna worker: reports to its LocalController like upstream's Python library.

Run by the dev cluster's process runtime in place of the example images, with the env the
GM injects. The role comes from that env:

- JI edge worker (`HEM_NAME` set): every `SIM_PERIOD` s, a joint-inference stats report
  (cumulative inference and hard-example counts), forever;
- JI cloud worker (`BIG_MODEL_BIND_PORT`): idles, forever;
- FL trainer (`AGG_PORT`): `SIM_ROUNDS` round reports (`status: running`, the last
  `completed`), one per `SIM_PERIOD` s, then exits 0;
- FL aggregator (`AGG_BIND_PORT`): waits out the rounds, then exits 0.

Reports are the bodies of upstream-lc.md §2.6, POSTed to `$LC_SERVER/sedna/workers/
$WORKER_NAME/info` with the library's retry policy (5 attempts, `SIM_RETRY_WAIT` s apart).
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
from urllib.parse import urlsplit, urlunsplit


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


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


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def joint_inference_edge(period: float) -> None:
    inferences = hard = 0
    while True:
        start = stamp()
        time.sleep(period)
        n = random.randint(20, 40)
        inferences, hard = inferences + n, hard + random.randint(1, n // 4)
        post({"name": env("WORKER_NAME"), "namespace": env("NAMESPACE", "default"),
              "ownerName": env("JOB_NAME") or env("SERVICE_NAME"), "ownerKind": "jointinferenceservice",
              "kind": "inference", "results": [],
              "ownerInfo": {"startTime": start, "updateTime": stamp(), "inferenceNumber": inferences,
                            "hardExampleNumber": hard, "uploadCloudRatio": hard / inferences}})
        print(f"reported {inferences} inferences, {hard} hard examples", flush=True)


def federated_trainer(period: float, rounds: int) -> None:
    started = stamp()
    loss, acc = 0.9, 0.5
    for rnd in range(1, rounds + 1):
        time.sleep(period)
        loss, acc = round(loss * 0.8, 4), round(min(0.99, acc + 0.1), 4)
        metrics = {"loss": [loss], "accuracy": [acc]}
        ok = post({"name": env("WORKER_NAME"), "namespace": env("NAMESPACE", "default"),
                   "ownerName": env("JOB_NAME"), "ownerKind": "default", "kind": "train",
                   "status": "completed" if rnd == rounds else "running",
                   "results": [{"format": "pb", "url": "/model/model.pb", "metrics": metrics}],
                   "ownerInfo": {"currentRound": rnd, "sampleCount": 1200, "startTime": started,
                                 "updateTime": stamp()}})
        print(f"round {rnd}/{rounds} reported={ok} loss={loss}", flush=True)


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    period = float(env("SIM_PERIOD", "2"))
    rounds = int(env("SIM_ROUNDS", "3"))
    if env("HEM_NAME"):
        joint_inference_edge(period)
    elif env("AGG_PORT"):
        federated_trainer(period, rounds)
    elif env("AGG_BIND_PORT"):
        time.sleep(period * (rounds + 1))
        print("aggregation finished", flush=True)
    else:
        while True:  # a cloud inference worker: nothing to report
            time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
