"""Job metrics: what each Sedna object's status says, read from the informer caches at scrape time.

Nothing here is counted or kept: a scrape walks the cached CRs of every reconciled kind (and the
Datasets, and the Models an FL job aggregates into) and turns their status into gauges. A series
exists while its object is in the cache and goes with it, so it can never go stale, and a GM
that is not leading still shows what the cluster says.

Cardinality is bounded by the objects, never by the reports: every series is per object, per
object and node (`status.lastReports` keeps at most 64 nodes, a Dataset has one), or per object
and reported key. The keys workers report are user input, so:

- the well-known keys get families of their own (a JointInferenceService's `inferenceNumber`,
  `hardExampleNumber`, `uploadCloudRatio`; the FL round; the learning cycle and deploys; the
  LL knowledge base's counts);
- every other numeric key goes to one family with a `metric` label, at most `MAX_KEYS` per
  object (the first by key), the key cut to `[A-Za-z0-9_]` and `MAX_KEY` characters (two keys
  that read the same after the cut keep the first); a list of numbers is its mean, anything
  else that is not a finite number is left out;
- every label value is at most `MAX_LABEL` characters: a longer one keeps its start and ends
  with `~` and a hash of the whole, so two long names never share a series. prometheus_client
  escapes what is left (quotes, backslashes, newlines).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gm.edge.order import parse_time, records
from gm.kube.informer import InformerFactory
from gm.kube.resources import sedna_gvr
from gm.reports import TRAINING, round_of
from shared import apis

Obj = Mapping[str, Any]
Lister = Callable[[], Iterable[Obj]]

MAX_LABEL = 128  # characters of a label value
MAX_KEY = 64  # characters of a reported metric's key
MAX_KEYS = 16  # reported keys per object (and per evaluated model)
MAX_MODELS = 4  # evaluated models per learning job
MAX_VALUE = 256  # characters of a reported value that is parsed at all
JOB = ["namespace", "name", "kind"]
# status.metrics keys of a JointInferenceService with a family of their own
JI_KEYS = {"inferenceNumber": "sedna_gm_ji_inferences", "hardExampleNumber": "sedna_gm_ji_hard_examples",
           "uploadCloudRatio": "sedna_gm_ji_upload_cloud_ratio"}
WORKERS = {"active": "sedna_gm_job_workers_active", "failed": "sedna_gm_job_workers_failed",
           "succeeded": "sedna_gm_job_workers_succeeded"}
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


class JobCollector(Collector):
    """The job families; empty until `watch` is given the caches."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.jobs: Mapping[str, Lister] = {}
        self.datasets: Lister | None = None
        self.model: Callable[[str, str], Obj | None] | None = None
        self.clock = clock

    def watch(self, *, jobs: Mapping[str, Lister], datasets: Lister,
              model: Callable[[str, str], Obj | None]) -> None:
        """`jobs`: kind -> its cached objects; `model(namespace, name)`: a cached Model."""
        self.jobs, self.datasets, self.model = jobs, datasets, model

    def watch_informers(self, informers: InformerFactory, kinds: Iterable[apis.SednaKind]) -> None:
        """Read the shared informers' caches of `kinds`, the Datasets and the Models (made here
        if no one made them yet, so call it before the factory starts)."""
        models = informers.informer(sedna_gvr(apis.MODEL)).store
        self.watch(jobs={k.kind: informers.informer(sedna_gvr(k)).store.list for k in kinds},
                   datasets=informers.informer(sedna_gvr(apis.DATASET)).store.list,
                   model=models.get_by_name)

    def collect(self) -> Iterable[Metric]:
        out = Families()
        now = self.clock()
        for kind, listed in self.jobs.items():
            for obj in listed():
                job_series(out, kind, obj, now=now, model=self.model)
        for dataset in self.datasets() if self.datasets is not None else ():
            dataset_series(out, dataset)
        yield from out.all()


class Families:
    """Every job family (so each shows on the page, with or without series)."""

    def __init__(self) -> None:
        gauge = GaugeMetricFamily
        self.phase = gauge("sedna_gm_job_phase", "1 for the job's phase (status.phase, else its "
                           "current condition).", labels=[*JOB, "phase"])
        self.stage = gauge("sedna_gm_job_stage", "1 for a learning job's current stage.",
                           labels=[*JOB, "stage"])
        self.stage_seconds = gauge(
            "sedna_gm_job_stage_seconds", "Seconds since the job entered its current stage (learning "
            "jobs) or its current condition (others), from the conditions' lastTransitionTime.",
            labels=[*JOB, "stage"])
        self.workers = {field: gauge(name, f"The job's {field} workers (status.{field}).", labels=JOB)
                        for field, name in WORKERS.items()}
        self.ji = {key: gauge(name, f"A JointInferenceService's reported {key}.", labels=JOB)
                   for key, name in JI_KEYS.items()}
        self.reported = gauge("sedna_gm_job_reported_metric", "A numeric metric the job's workers "
                              "reported (status.metrics; an FL job's aggregation Model's), by key.",
                              labels=[*JOB, "metric"])
        self.last_report = gauge("sedna_gm_job_last_report_time_seconds", "Unix time the GM applied "
                                 "the newest report from the node to the object.", labels=[*JOB, "node"])
        self.round = gauge("sedna_gm_fl_round", "The newest training round an FL job reported.",
                           labels=JOB)
        self.cycle = gauge("sedna_gm_learning_cycle", "Train rounds a learning job started.", labels=JOB)
        self.deploys = gauge("sedna_gm_learning_deploys", "Models a learning job deployed.", labels=JOB)
        self.eval = gauge("sedna_gm_learning_eval_metric", "A metric of an evaluated model in the "
                          "learning job's last completed Eval stage, by model index and key.",
                          labels=[*JOB, "model", "metric"])
        self.kb_tasks = gauge("sedna_gm_ll_kb_tasks", "Task models in a lifelong learning job's "
                              "knowledge base.", labels=JOB)
        self.kb_classes = gauge("sedna_gm_ll_kb_classes", "Classes in a lifelong learning job's "
                                "knowledge base.", labels=JOB)
        self.kb_samples = gauge("sedna_gm_ll_kb_labeled_unseen_samples", "Labeled unseen samples "
                                "in a lifelong learning job's knowledge base.", labels=JOB)
        self.samples = gauge("sedna_gm_dataset_samples", "Samples the node's LC counted in the "
                             "Dataset's index.", labels=["namespace", "name", "node"])

    def all(self) -> list[Metric]:
        return [self.phase, self.stage, self.stage_seconds, *self.workers.values(), *self.ji.values(),
                self.reported, self.last_report, self.round, self.cycle, self.deploys, self.eval,
                self.kb_tasks, self.kb_classes, self.kb_samples, self.samples]


# -- one object (pure) --------------------------------------------------------------------


def job_series(out: Families, kind: str, obj: Obj, *, now: float,
               model: Callable[[str, str], Obj | None] | None = None) -> None:
    """Add the series of one cached job of `kind` to `out`."""
    meta, status = _map(obj.get("metadata")), _map(obj.get("status"))
    namespace, name = meta.get("namespace"), meta.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str):
        return
    job = [bounded(namespace), bounded(name), bounded(kind)]
    api = apis.by_kind(kind)
    current = current_condition(status)
    out.phase.add_metric([*job, bounded(phase_of(status, current))], 1)
    if api is not None and api.stages:
        learning_series(out, job, status, current, now=now, learning_kb=api is apis.LIFELONG_LEARNING)
    elif current is not None and (since := _time(current.get("lastTransitionTime"))) is not None:
        out.stage_seconds.add_metric([*job, bounded(str(current.get("type")))], max(0.0, now - since))
    for field, family in out.workers.items():
        if (count := _count(status.get(field))) is not None:
            family.add_metric(job, count)
    metrics = _metric_list(status.get("metrics"))
    if kind == apis.JOINT_INFERENCE.kind:
        for key, family in out.ji.items():
            if (value := number(metrics.pop(key, None))) is not None:
                family.add_metric(job, value)
    if kind == apis.FEDERATED_LEARNING.kind:
        fl_series(out, job, obj, status, model)
    else:
        reported(out.reported, job, metrics)
    for record in records(status):
        at = _time(record.get("appliedAt")) or _time(record.get("time"))
        if at is not None:
            out.last_report.add_metric([*job, bounded(record["node"])], at)


def fl_series(out: Families, job: list[str], obj: Obj, status: Obj,
              model: Callable[[str, str], Obj | None] | None) -> None:
    """The round (the Training condition) and the training metrics (the aggregation Model's)."""
    training = next((c for c in _conditions(status) if c.get("type") == TRAINING), None)
    rnd = round_of(training)
    if rnd:
        out.round.add_metric(job, rnd)
    name = _map(_map(_map(obj.get("spec")).get("aggregationWorker")).get("model")).get("name")
    if model is not None and isinstance(name, str) and name:
        found = model(job[0], name)
        if found is not None:
            reported(out.reported, job, _metric_list(_map(found.get("status")).get("metrics")))


def learning_series(out: Families, job: list[str], status: Obj, current: Obj | None, *, now: float,
                    learning_kb: bool) -> None:
    """Stage, time in it, cycle, deploys, the last evaluation and (LL) the knowledge base."""
    for field, family in (("cycle", out.cycle), ("deploys", out.deploys)):
        family.add_metric(job, _count(status.get(field)) or 0)
    if current is not None:
        stage = bounded(str(current.get("stage") or ""))
        out.stage.add_metric([*job, stage], 1)
        since = stage_start(_conditions(status), current)
        if since is not None:
            out.stage_seconds.add_metric([*job, stage], max(0.0, now - since))
    for index, metrics in enumerate(evaluation(status)):
        for key, value in metrics:
            out.eval.add_metric([*job, str(index), key], value)
    if learning_kb:
        kb = _map(status.get("knowledgeBase"))
        for family, part, field in ((out.kb_tasks, "AIModels", "numberOfAIModels"),
                                    (out.kb_classes, "AIClasses", "numberOfAIClasses"),
                                    (out.kb_samples, "samples", "numberOfLabeledUnseenSample")):
            if (count := _count(_map(kb.get(part)).get(field))) is not None:
                family.add_metric(job, count)


def dataset_series(out: Families, dataset: Obj) -> None:
    meta, status = _map(dataset.get("metadata")), _map(dataset.get("status"))
    node = _map(dataset.get("spec")).get("nodeName")
    count = _count(status.get("numberOfSamples"))
    if count is None or not isinstance(node, str):
        return
    out.samples.add_metric([bounded(str(meta.get("namespace", ""))), bounded(str(meta.get("name", ""))),
                            bounded(node)], count)


def reported(family: GaugeMetricFamily, job: list[str], metrics: Mapping[str, Any]) -> None:
    for key, value in _keys(metrics):
        family.add_metric([*job, key], value)


# -- reading a status ---------------------------------------------------------------------


def evaluation(status: Obj) -> list[list[tuple[str, float]]]:
    """A learning job's last completed Eval stage: per evaluated model (the one just trained
    first, at most MAX_MODELS), its numeric metrics (`_keys`); empty before any evaluation."""
    evaluated = next((c for c in _conditions(status)
                      if c.get("type") == "Completed" and c.get("stage") == "Eval"), None)
    models = _data(evaluated).get("output", {}).get("models") if evaluated else None
    return [_keys(_map(_map(model).get("metrics")))
            for model in (models[:MAX_MODELS] if isinstance(models, list) else ())]


def current_condition(status: Obj) -> Obj | None:
    """The last True condition that states where the job is (not a side condition such as
    `Waiting` of FL and the job kinds, which holds beside the phase)."""
    for cond in reversed(_conditions(status)):
        if cond.get("status") == "True" and (cond.get("type") != "Waiting" or cond.get("stage")):
            return cond
    return None


def phase_of(status: Obj, current: Obj | None) -> str:
    phase = status.get("phase")
    if isinstance(phase, str) and phase:
        return phase
    if current is not None and isinstance(current.get("type"), str):
        return current["type"]
    return "Unknown"


def stage_start(conditions: list[Obj], current: Obj) -> float | None:
    """When a learning job's current stage began: the moment the newest condition of another
    stage stopped being current (the transition into this stage), else the current's own."""
    own = _time(current.get("lastTransitionTime"))
    stage = current.get("stage")
    left = [t for c in conditions if c.get("stage") != stage and c.get("status") != "True"
            and (t := _time(c.get("lastTransitionTime"))) is not None]
    if not left:
        return own
    return max(left) if own is None else min(max(left), own)


def number(value: Any) -> float | None:
    """A reported value as a number: a number, a string holding one (status.metrics values are
    strings), or the mean of a non-empty list of numbers; None for anything else."""
    if isinstance(value, str):
        if len(value) > MAX_VALUE:
            return None
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, list) and value and len(value) <= MAX_VALUE:
        parts = [number(v) if not isinstance(v, list | str) else None for v in value]
        return None if None in parts else _finite(sum(parts) / len(parts))  # type: ignore[arg-type]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return _finite(float(value))


def bounded(value: str, limit: int = MAX_LABEL) -> str:
    """`value`, or when longer than `limit` its start, `~` and a hash of the whole."""
    if len(value) <= limit:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{value[:limit - 9]}~{digest}"


def metric_key(key: str) -> str:
    """A reported key as a label value: `[A-Za-z0-9_]`, at most MAX_KEY characters."""
    return _UNSAFE.sub("_", key)[:MAX_KEY]


def _keys(metrics: Mapping[str, Any]) -> list[tuple[str, float]]:
    """At most MAX_KEYS (key, value) pairs of numeric values, by key, keys made safe and unique."""
    out: dict[str, float] = {}
    for key in sorted(k for k in metrics if isinstance(k, str)):
        safe, value = metric_key(key), number(metrics[key])
        if value is None or not safe or safe in out:
            continue
        out[safe] = value
        if len(out) == MAX_KEYS:
            break
    return list(out.items())


def _metric_list(value: Any) -> dict[str, Any]:
    """`status.metrics` (`[{"key", "value"}]`) as a dict."""
    if not isinstance(value, list):
        return {}
    return {m["key"]: m.get("value") for m in value if isinstance(m, Mapping) and isinstance(m.get("key"), str)}


def _data(cond: Obj) -> dict[str, Any]:
    data = cond.get("data")
    if not isinstance(data, str) or not data or len(data) > 1 << 20:
        return {}
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) and isinstance(value.get("output", {}), dict) else {}


def _conditions(status: Obj) -> list[Obj]:
    value = status.get("conditions")
    return [c for c in value if isinstance(c, Mapping)] if isinstance(value, list) else []


def _time(value: Any) -> float | None:
    at: datetime | None = parse_time(value)
    return at.timestamp() if at is not None and at.tzinfo is not None else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
