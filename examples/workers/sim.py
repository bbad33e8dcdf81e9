"""A simulated Sedna worker: reports to its LocalController like upstream's Python library.

Run by the dev cluster's process runtime in place of the example images, with the env the
GM injects. The role comes from that env alone (no image name, no extra setting), by the
first rule that matches, in this order:

| env the GM sets                          | worker                         | what it does |
|------------------------------------------|--------------------------------|--------------|
| `HEM_NAME`, no `SERVICE_NAME`           | IL inference worker            | stays up; with `MODEL_HOT_UPDATE_CONFIG`, polls that file every `MODEL_POLL_PERIOD_SECONDS` and reports `deploy`/`completed` each time its `model_update_time` changes |
| `BASE_MODEL_URL`                         | IL train worker                | writes `model.pb` under `MODEL_URL` (an `s3://` one too, with the `S3_ENDPOINT_URL`, `ACCESS_KEY_ID` and `SECRET_ACCESS_KEY` the GM gives it), reports `train`/`completed` with it (pb and ckpt) and exits 0 |
| `HAS_COMPLETED_INITIAL_TRAINING`         | LL train worker                | writes `index.pkl` under `OUTPUT_URL`, reports `train`/`completed` with it and exits 0 |
| `TEST_DATASET_URL`, `OUTPUT_URL`         | LL eval worker                 | reports `eval`/`completed` with per-task metrics and classes for each of `MODEL_URLS`, exits 0 |
| `TEST_DATASET_URL`                       | IL eval worker                 | reports `eval`/`completed` with precision and recall lists for each of `MODEL_URLS` (the first, newly trained, better), exits 0 |
| `MODEL_URLS`, `OUTPUT_URL`               | LL inference worker            | stays up |
| `HEM_NAME`                               | JI edge worker                 | a joint-inference stats report (cumulative inference and hard-example counts) every `SIM_PERIOD` s, forever |
| `AGG_PORT`                               | FL trainer                     | `SIM_ROUNDS` round reports (`status: running`, the last `completed`), one per `SIM_PERIOD` s, then exits 0 |
| `AGG_BIND_PORT`                          | FL aggregator                  | waits out the rounds, then exits 0 |
| `EDGEMESH_URL`                           | ObjectSearch/ObjectTracking tracking worker | stays up (nothing it reports is read) |
| `JOB_NAME`, `LC_SERVER`, `MODEL_URL`, no `SERVICE_NAME` | VideoAnalyticsJob worker | `SIM_ROUNDS` progress reports (frames, detections), the last `completed`, then exits 0 |
| `JOB_NAME`, `LC_SERVER`, no `SERVICE_NAME` | ReidJob worker               | `SIM_ROUNDS` progress reports (queries, matches), the last `completed`, then exits 0 |
| `SERVICE_NAME`, `MODEL_URL`, `LC_SERVER` | FeatureExtractionService worker | a metrics report (cumulative frame and feature counts) every `SIM_PERIOD` s, forever |
| anything else                            | JI cloud worker, ObjectSearch user worker, reid workers of ObjectSearch/ObjectTracking | stays up |

The order matters where env overlaps: a JI edge worker also has SERVICE_NAME, MODEL_URL and
LC_SERVER, an FL trainer JOB_NAME and LC_SERVER, an IL train worker JOB_NAME, LC_SERVER and
MODEL_URL; a JI cloud worker gets no LC_SERVER. Reports are the bodies of upstream-lc.md
§2.6 (`ownerKind` the lower-case kind, `default` for an FL trainer as the library sends,
`ownerName` = JOB_NAME, else SERVICE_NAME), POSTed to
`$LC_SERVER/sedna/workers/$WORKER_NAME/info` with the library's retry policy (5 attempts,
`SIM_RETRY_WAIT` s apart).

Paths: the learning workers get their model and data paths as container paths under
`DATA_PATH_PREFIX`; in the dev cluster's process runtime those env values arrive rewritten
to the node's host directories (the mount table is in `DEVCLUSTER_MOUNTS`). A worker writes
its files at the path it was given and reports the URL as the library does: the container
path with `DATA_PATH_PREFIX` stripped, i.e. the node's own path (`/output/train/1/model.pb`),
which is where the LocalController of the node reads it.
`SIM_LC_PORTS=edge-node-1=9100,edge-node-2=9101` picks the LC port by `NODE_NAME` when
several LCs share one host (the dev run). Standard library only, like a minimal worker.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import random
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from urllib.parse import quote, urlsplit, urlunsplit


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def role(environ: Mapping[str, str]) -> str:
    """Which worker this process plays, by the rules of the module docstring."""
    has = {name for name, value in environ.items() if value}
    job_worker = {"JOB_NAME", "LC_SERVER"} <= has and "SERVICE_NAME" not in has
    rules = (
        ("il-inference", "HEM_NAME" in has and "SERVICE_NAME" not in has),
        ("il-train", "BASE_MODEL_URL" in has),
        ("ll-train", "HAS_COMPLETED_INITIAL_TRAINING" in has),
        ("ll-eval", {"TEST_DATASET_URL", "OUTPUT_URL"} <= has),
        ("il-eval", "TEST_DATASET_URL" in has),
        ("ll-inference", {"MODEL_URLS", "OUTPUT_URL"} <= has),
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


def report(owner_kind: str, *, kind: str, owner_info: dict | None, status: str | None = None,
           results: list | None = None) -> bool:
    """POST a report in the library's key order; `status`, `results` and `ownerInfo` only
    when given (a learning worker's completion has no ownerInfo)."""
    body = {"name": env("WORKER_NAME"), "namespace": env("NAMESPACE", "default"),
            "ownerName": env("JOB_NAME") or env("SERVICE_NAME"), "ownerKind": owner_kind,
            "kind": kind}
    if status is not None:
        body["status"] = status
    if results is not None:
        body["results"] = results
    if owner_info is not None:
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


def node_path(value: str) -> str:
    """The URL the library reports for a path it was given: the container path (a host
    directory of the process runtime mapped back through `DEVCLUSTER_MOUNTS`) without
    `DATA_PATH_PREFIX`."""
    try:
        mounts = json.loads(env("DEVCLUSTER_MOUNTS") or "{}")
    except ValueError:
        mounts = {}
    for target, host in sorted(mounts.items(), key=lambda kv: len(kv[1]), reverse=True):
        host = host.rstrip("/")
        if value == host or value.startswith(host + "/"):
            value = target.rstrip("/") + value[len(host):]
            break
    prefix = env("DATA_PATH_PREFIX").rstrip("/")
    if prefix and value.startswith(prefix + "/"):
        value = value[len(prefix):]
    return value


def write_model(directory: str, name: str, content: str) -> str:
    """Write a model file in the output directory the worker was given; its reported URL."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
        f.write(content)
    return f"{node_path(directory.rstrip('/'))}/{name}"


def put_s3(url: str, data: bytes) -> str:
    """PUT `data` as the object `s3://bucket/key` on `S3_ENDPOINT_URL` (path style, signed
    with AWS Signature V4 from `ACCESS_KEY_ID` and `SECRET_ACCESS_KEY`); the URL."""
    endpoint = env("S3_ENDPOINT_URL").rstrip("/")
    bucket, _, key = url.removeprefix("s3://").partition("/")
    path = f"/{bucket}/{quote(key, safe='/~')}"
    stamp_ = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    scope = f"{stamp_[:8]}/us-east-1/s3/aws4_request"
    headers = {"host": urlsplit(endpoint).netloc, "x-amz-content-sha256": hashlib.sha256(data).hexdigest(),
               "x-amz-date": stamp_}
    names = ";".join(sorted(headers))
    request = "\n".join(["PUT", path, "", *(f"{k}:{headers[k]}" for k in sorted(headers)), "", names,
                         headers["x-amz-content-sha256"]])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp_, scope, hashlib.sha256(request.encode()).hexdigest()])
    key_ = ("AWS4" + env("SECRET_ACCESS_KEY")).encode()
    for part in scope.split("/"):
        key_ = hmac.new(key_, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key_, to_sign.encode(), hashlib.sha256).hexdigest()
    auth = f"AWS4-HMAC-SHA256 Credential={env('ACCESS_KEY_ID')}/{scope}, SignedHeaders={names}, Signature={signature}"
    req = urllib.request.Request(endpoint + path, data=data, method="PUT",
                                 headers={**headers, "Authorization": auth})
    with urllib.request.urlopen(req, timeout=30) as resp:
        resp.read()
    return url


def model_urls() -> list[str]:
    return [u for u in env("MODEL_URLS").split(";") if u]


def finish(owner_kind: str, kind: str, results: list) -> None:
    """The library's completion report at the end of training or evaluation."""
    time.sleep(float(env("SIM_PERIOD", "2")))
    ok = report(owner_kind, kind=kind, status="completed", results=results, owner_info=None)
    print(f"{kind} completed reported={ok} models={[r['url'] for r in results]}", flush=True)


def il_train(period: float, rounds: int) -> None:
    out = env("MODEL_URL")
    content = f"trained by {env('WORKER_NAME')} from {env('BASE_MODEL_URL')}\n"
    if out.startswith("s3://"):
        trained = put_s3(f"{out.rstrip('/')}/model.pb", content.encode())
    else:
        trained = write_model(out, "model.pb", content)
    metrics = {"loss": round(random.uniform(0.2, 0.9), 4)}
    finish("incrementallearningjob", "train", [{"format": "pb", "url": trained, "metrics": metrics},
                                               {"format": "ckpt", "url": node_path(out.rstrip("/")),
                                                "metrics": metrics}])


def il_eval(period: float, rounds: int) -> None:
    """[new, deployed] metrics in MODEL_URLS order; the new model is better by 0.2 on every
    class, so the example's deploy trigger, `precision_delta > 0.1`, fires."""
    results = []
    for i, url in enumerate(model_urls()):
        base = 0.8 if i == 0 else 0.6
        fmt = url.rsplit(".", 1)[-1] if "." in os.path.basename(url) else "ckpt"
        results.append({"format": fmt, "url": node_path(url),
                        "metrics": {"recall": [round(base + 0.01 * k, 2) for k in range(4)],
                                    "precision": [round(base + 0.02 * k, 2) for k in range(4)]}})
    finish("incrementallearningjob", "eval", results)


def il_inference(period: float, rounds: int) -> None:
    """Stays up; with hot update, reports each reload of the model config file."""
    config = env("MODEL_HOT_UPDATE_CONFIG")
    if env("MODEL_HOT_UPDATE") != "true" or not config:
        idle(period, rounds)
    poll = float(env("MODEL_POLL_PERIOD_SECONDS", "60"))
    seen = _update_time(config)  # the model loaded at start: not a reload
    while True:
        time.sleep(poll)
        updated = _update_time(config)
        if updated is not None and updated != seen:
            ok = report("incrementallearningjob", kind="deploy", status="completed", owner_info=None)
            print(f"model reloaded ({updated}) reported={ok}", flush=True)
            seen = updated


def _update_time(config: str) -> str | None:
    try:
        with open(config, encoding="utf-8") as f:
            return str(json.load(f)["model_config"]["model_update_time"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def ll_train(period: float, rounds: int) -> None:
    index = write_model(env("OUTPUT_URL"), "index.pkl", f"knowledge base of {env('WORKER_NAME')}\n")
    finish("lifelonglearningjob", "train", [{"format": "pkl", "url": index, "metrics": None}])


def ll_eval(period: float, rounds: int) -> None:
    results = [{"format": "pkl", "url": node_path(url),
                "metrics": {"precision_score": [round(random.uniform(0.6, 0.9), 4)]},
                "current_metric": {f"task{i}": {"precision_score": round(random.uniform(0.6, 0.9), 4)}
                                   for i in range(2)},
                "classes": ["comfortable", "neutral", "uncomfortable"],
                "number_of_labeled_unseen_sample": 0} for url in model_urls()]
    finish("lifelonglearningjob", "eval", results)


def idle(period: float, rounds: int) -> None:
    """A worker with nothing to report: stays up until the pod is deleted."""
    while True:
        time.sleep(3600)


ROLES: dict[str, Callable[[float, int], None]] = {
    "il-inference": il_inference,
    "il-train": il_train,
    "il-eval": il_eval,
    "ll-train": ll_train,
    "ll-eval": ll_eval,
    "ll-inference": idle,
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
