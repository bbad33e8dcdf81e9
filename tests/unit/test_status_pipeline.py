"""The edge status pipeline (gm/edge/pipeline.py) over the real StatusWriter and an in-memory API.

The API here keeps one object per key, answers merge patches of `/status` with the
resourceVersion precondition a real server applies, and can be told to fail the next writes
with given errors, so each error class the GM must retry (or must not) is exercised exactly.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from gm.edge.order import ReportStamp, SeqLedger
from gm.edge.pipeline import StatusPipeline
from gm.kube.apierrors import (
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    Unavailable,
    error_from_status,
)
from gm.kube.resources import GVR
from gm.kube.statuswriter import StatusWriter, merge_patch
from gm.reports import ReportInvalid, ReportRefused

JI = GVR("sedna.io", "v1alpha1", "jointinferenceservices")
DS = GVR("sedna.io", "v1alpha1", "datasets")
NS = "default"
EPOCH = "0123456789abcdef"


class MemApi:
    """Objects by (plural, name); `fail` holds errors the next patches raise, in order."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.rv = 0
        self.fail: list[ApiError] = []
        self.refuse_key: str | None = None  # a status patch naming this key is refused with 413
        self.calls: list[str] = []

    def put(self, gvr: GVR, name: str, status: dict[str, Any] | None = None) -> None:
        self.rv += 1
        self.objects[(gvr.plural, name)] = {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                                                         "resourceVersion": str(self.rv)},
                                            "status": status or {}}

    async def get(self, gvr: GVR, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        self.calls.append("get")
        obj = self.objects.get((gvr.plural, name))
        if obj is None:
            raise NotFound(404, "NotFound", f"{gvr.plural} {name} not found")
        return copy.deepcopy(obj)

    async def patch(self, gvr: GVR, name: str, body: Any, **kw: Any) -> dict[str, Any]:
        self.calls.append("patch")
        await asyncio.sleep(0)
        if self.fail:
            raise self.fail.pop(0)
        if self.refuse_key is not None and self.refuse_key in body["status"]:
            raise error_from_status(413, {"reason": "RequestEntityTooLarge", "message": "too large"})
        obj = self.objects.get((gvr.plural, name))
        if obj is None:
            raise NotFound(404, "NotFound", f"{gvr.plural} {name} not found")
        if body["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "the object has been modified")
        _merge(obj["status"], body["status"])
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(obj)


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


@pytest.fixture
def api() -> MemApi:
    api = MemApi()
    api.put(JI, "ji")
    api.put(DS, "ds")
    return api


@pytest.fixture
def pipeline(api: MemApi) -> StatusPipeline:
    return StatusPipeline(StatusWriter(api), base_delay=0.001, max_delay=0.01)  # type: ignore[arg-type]


def stamp(seq: int, node: str = "edge-node-1") -> ReportStamp:
    return ReportStamp(node, EPOCH, seq)


def set_count(n: int):
    def mutate(status: dict[str, Any]) -> dict[str, Any]:
        status["count"] = n
        return status
    return mutate


@pytest.mark.parametrize("error", [
    pytest.param(Unavailable(503, "ServiceUnavailable", "down"), id="5xx"),
    pytest.param(Unavailable(429, "TooManyRequests", "slow down", retry_after=0.0), id="429"),
    pytest.param(Unavailable(0, "Timeout", "PATCH: TimeoutError"), id="timeout"),
    pytest.param(Unavailable(0, "TransportError", "connection reset"), id="connection"),
    pytest.param(Forbidden(403, "Forbidden", "RBAC not there yet"), id="403"),
])
async def test_a_transient_failure_is_retried_by_the_gm(api: MemApi, pipeline: StatusPipeline, error: ApiError):
    api.fail = [error, error]
    verdict = await asyncio.wait_for(pipeline.submit(JI, NS, "ji", stamp(1), set_count(5)), 5)
    assert verdict.applied and api.objects[("jointinferenceservices", "ji")]["status"]["count"] == 5
    assert pipeline.stats.retries == 2 and pipeline.stats.writes == 1


async def test_conflicts_beyond_the_writers_rereads_are_retried_too(api: MemApi, pipeline: StatusPipeline):
    api.fail = [Conflict(409, "Conflict", "modified")] * 6  # the writer re-reads 4 times, then gives up
    verdict = await asyncio.wait_for(pipeline.submit(JI, NS, "ji", stamp(1), set_count(5)), 5)
    assert verdict.applied and pipeline.stats.retries == 1


async def test_reports_queued_during_a_write_share_the_next_one(api: MemApi, pipeline: StatusPipeline):
    futures = [pipeline.submit(JI, NS, "ji", stamp(seq), set_count(seq)) for seq in range(1, 101)]
    verdicts = await asyncio.gather(*futures)
    assert all(v.applied for v in verdicts)
    assert api.objects[("jointinferenceservices", "ji")]["status"]["count"] == 100
    assert pipeline.stats.writes <= 2 and api.calls.count("get") <= 1  # one read, no 409 round trips
    [record] = api.objects[("jointinferenceservices", "ji")]["status"]["lastReports"]
    assert record["seq"] == 100


async def test_a_resend_of_a_queued_report_joins_it(api: MemApi, pipeline: StatusPipeline):
    api.fail = [Unavailable(503, "ServiceUnavailable", "down")]
    first = pipeline.submit(DS, NS, "ds", stamp(3), set_count(3))
    again = pipeline.submit(DS, NS, "ds", stamp(3), set_count(3))
    assert again is first
    await asyncio.wait_for(first, 5)
    assert pipeline.stats.reports == 1


@pytest.mark.parametrize("error", [
    pytest.param(error_from_status(413, {"reason": "RequestEntityTooLarge", "message": "limit is 3145728"}), id="413"),
    pytest.param(Invalid(422, "Invalid", "status.count: Invalid value"), id="422"),
    pytest.param(BadRequest(400, "BadRequest", "bad patch"), id="400"),
])
async def test_a_write_that_can_never_succeed_refuses_its_report_and_others_flow(
        api: MemApi, pipeline: StatusPipeline, error: ApiError):
    api.fail = [error]
    refused = pipeline.submit(JI, NS, "ji", stamp(1), set_count(10**6))
    other = pipeline.submit(DS, NS, "ds", stamp(2), set_count(2))
    expected = ReportInvalid if error.code in (400, 422) else ReportRefused
    with pytest.raises(expected, match=f"refused the status of jointinferenceservices default/ji: {error.code}"):
        await asyncio.wait_for(refused, 5)
    assert (await asyncio.wait_for(other, 5)).applied
    later = await asyncio.wait_for(pipeline.submit(JI, NS, "ji", stamp(3), set_count(3)), 5)
    assert later.applied and pipeline.stats.refused == 1


async def test_a_refused_batch_is_split_so_only_the_bad_report_is_refused(api: MemApi, pipeline: StatusPipeline):
    api.fail = [Unavailable(503, "ServiceUnavailable", "down")]  # holds the first write so the rest queue up
    api.refuse_key = "huge"
    first = pipeline.submit(JI, NS, "ji", stamp(1), set_count(1))
    await asyncio.sleep(0)
    bad = pipeline.submit(JI, NS, "ji", stamp(2), lambda s: {**s, "huge": "x"})
    good = pipeline.submit(JI, NS, "ji", stamp(3), set_count(3))
    with pytest.raises(ReportRefused):
        await asyncio.wait_for(bad, 5)
    assert (await first).applied and (await good).applied
    status = api.objects[("jointinferenceservices", "ji")]["status"]
    assert "huge" not in status and status["count"] == 3 and pipeline.stats.refused == 1


@pytest.mark.expect_log_errors(r"^sedna.gm.edge.pipeline: status write crashed ")
async def test_a_report_its_mutation_cannot_take_is_refused_for_good_and_others_flow(
        api: MemApi, pipeline: StatusPipeline):
    """A mutation that raises would raise again on every resend: refused (the LC dead-letters
    it), not left unacked; the reports written with it in one batch are applied without it."""
    def cannot(status: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("a condition needs a reason and a message")
    api.fail = [Unavailable(503, "ServiceUnavailable", "down")]  # holds the first write so the rest queue up
    first = pipeline.submit(JI, NS, "ji", stamp(1), set_count(1))
    await asyncio.sleep(0)
    bad = pipeline.submit(JI, NS, "ji", stamp(2), cannot)
    good = pipeline.submit(JI, NS, "ji", stamp(3), set_count(3))
    with pytest.raises(ReportRefused, match="cannot apply this report.*ValueError: a condition needs"):
        await asyncio.wait_for(bad, 5)
    assert (await first).applied and (await good).applied
    assert api.objects[("jointinferenceservices", "ji")]["status"]["count"] == 3
    assert pipeline.stats.refused == 1


async def test_a_missing_object_refuses_its_reports(pipeline: StatusPipeline):
    with pytest.raises(ReportRefused, match="does not exist"):
        await asyncio.wait_for(pipeline.submit(JI, NS, "gone", stamp(1), set_count(1)), 5)


async def test_older_and_replayed_reports_are_settled_without_a_write(api: MemApi, pipeline: StatusPipeline):
    assert (await pipeline.submit(DS, NS, "ds", stamp(5), set_count(5))).applied
    writes = pipeline.stats.writes
    assert not (await pipeline.submit(DS, NS, "ds", stamp(5), set_count(5))).applied
    assert not (await pipeline.submit(DS, NS, "ds", stamp(4), set_count(4))).applied
    assert pipeline.stats.writes == writes and pipeline.stats.stale == 2


async def test_a_far_future_seq_is_refused_and_not_recorded(api: MemApi, pipeline: StatusPipeline):
    await pipeline.submit(DS, NS, "ds", stamp(5), set_count(5))
    with pytest.raises(ReportRefused, match="beyond any its LC could have reached"):
        await pipeline.submit(DS, NS, "ds", stamp(2**63 - 1), set_count(0))
    assert (await pipeline.submit(DS, NS, "ds", stamp(6), set_count(6))).applied
    status = api.objects[("datasets", "ds")]["status"]
    assert status["count"] == 6 and status["lastReports"][0]["seq"] == 6


def test_the_seq_ceiling_grows_with_time_since_the_anchor():
    now = [1000.0]
    ledger = SeqLedger(clock=lambda: now[0])
    ledger.applied(stamp(10))
    assert ledger.implausible(stamp(10 + 100_000), None) == ""
    assert "beyond" in ledger.implausible(stamp(10 + 100_001), None)
    now[0] += 60  # a minute later an LC may have counted 600,000 more
    assert ledger.implausible(stamp(10 + 700_000), None) == ""
    other_epoch = ReportStamp("edge-node-1", "ffff", 2**62)
    assert ledger.implausible(other_epoch, None) == ""  # a new outbox: nothing to measure against


def test_merge_patch_sends_only_what_changed():
    old = {"a": 1, "b": {"x": 1, "y": 2}, "c": [1], "gone": True}
    new = {"a": 1, "b": {"x": 1, "y": 3}, "c": [1, 2], "d": "new"}
    assert merge_patch(old, new) == {"gone": None, "b": {"y": 3}, "c": [1, 2], "d": "new"}


async def test_the_time_to_apply_each_report_is_measured(api: MemApi, pipeline: StatusPipeline):
    """`sedna_gm_status_pipeline_apply_seconds`: per report settled (applied or stale), the time
    from its submit to the commit that settled it, retries included; a refused one is not."""
    from prometheus_client import CollectorRegistry

    from gm.edge.metrics import EdgeCollector

    api.fail = [Unavailable(503, "ServiceUnavailable", "down")]  # one retry: >= base_delay
    applied = await asyncio.gather(*(pipeline.submit(JI, NS, "ji", stamp(seq), set_count(seq)) for seq in (1, 2)))
    stale = await pipeline.submit(JI, NS, "ji", stamp(1), set_count(1))  # a replay: settled, not newer
    with pytest.raises(ReportRefused):
        await pipeline.submit(DS, NS, "gone", stamp(1), set_count(1))
    assert all(v.applied for v in applied) and not stale.applied
    assert sum(pipeline.stats.apply_counts) == 3
    registry = CollectorRegistry()
    collector = EdgeCollector()
    collector.pipeline = pipeline
    registry.register(collector)
    name = "sedna_gm_status_pipeline_apply_seconds"
    assert registry.get_sample_value(f"{name}_count") == 3
    assert registry.get_sample_value(f"{name}_bucket", {"le": "+Inf"}) == 3
    assert 0.001 <= registry.get_sample_value(f"{name}_sum") < 5  # the first two waited out a retry
    assert registry.get_sample_value(f"{name}_bucket", {"le": "30"}) == 3
