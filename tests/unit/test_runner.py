import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry

from gm.errors import OwnerGone, PermanentError, TemporaryError
from gm.kube.ratelimit import ItemExponentialFailureRateLimiter
from gm.kube.workqueue import WorkQueue
from gm.reconcile.runner import WARN_AFTER, ControllerRunner, ReconcileMetrics, Requeue
from shared.metrics import sample
from tests.conftest import eventually


async def _synced():
    return None


async def run_until(runner, predicate, within=2.0):
    task = asyncio.create_task(runner.run(_synced))
    try:
        await eventually(predicate, within=within, interval=0.005)
    finally:
        runner.queue.shut_down()
        await task


@pytest.mark.expect_log_errors(r"reconcile crashed")
async def test_outcomes_are_counted_and_retried():
    calls: dict[str, int] = {}

    async def reconcile(key):
        calls[key] = calls.get(key, 0) + 1
        if key == "ns/flaky" and calls[key] < 3:
            raise TemporaryError("api said 500")
        if key == "ns/bad":
            raise PermanentError("invalid spec")
        if key == "ns/crash":
            raise RuntimeError("bug")
        if key == "ns/wait" and calls[key] == 1:
            return Requeue(0.01)
        return None

    reg = CollectorRegistry()
    queue = WorkQueue("t", rate_limiter=ItemExponentialFailureRateLimiter(0.001, 0.01))
    runner = ControllerRunner("t", queue, reconcile, workers=2, metrics=ReconcileMetrics(reg))
    for key in ("ns/ok", "ns/flaky", "ns/bad", "ns/crash", "ns/wait"):
        queue.add(key)
    m = runner._metrics
    await run_until(runner, lambda: calls.get("ns/flaky") == 3 and calls.get("ns/wait") == 2
                    and calls.get("ns/crash", 0) >= 2)
    assert calls["ns/ok"] == 1 and calls["ns/bad"] == 1
    assert reconciles(m, "permanent") == 1
    assert reconciles(m, "requeue") == 1
    assert reconciles(m, "error") >= 3
    assert reconciles(m, "success") >= 3


async def test_a_key_is_never_reconciled_concurrently():
    running: set[str] = set()
    overlaps = []
    count = 0

    async def reconcile(key):
        nonlocal count
        if key in running:
            overlaps.append(key)
        running.add(key)
        await asyncio.sleep(0.005)
        running.discard(key)
        count += 1

    queue = WorkQueue("t")
    runner = ControllerRunner("t", queue, reconcile, workers=4, metrics=ReconcileMetrics(CollectorRegistry()))
    task = asyncio.create_task(runner.run(_synced))
    for _ in range(20):
        queue.add("ns/a")
        await asyncio.sleep(0.002)
    await eventually(lambda: not len(queue) and count >= 2, within=2, interval=0.005)
    queue.shut_down()
    await task
    assert overlaps == []


async def test_owner_gone_ends_quietly_without_retry(log_guard):
    calls: list[str] = []

    async def reconcile(key):
        calls.append(key)
        raise OwnerGone("deleted mid-reconcile")

    queue = WorkQueue("t", rate_limiter=ItemExponentialFailureRateLimiter(0.001, 0.01))
    runner = ControllerRunner("t", queue, reconcile, workers=1, metrics=ReconcileMetrics(CollectorRegistry()))
    queue.add("ns/gone")
    queue.add("ns/other")
    await run_until(runner, lambda: len(calls) == 2)
    assert reconciles(runner._metrics, "gone") == 2
    assert reconciles(runner._metrics, "error") == 0
    assert queue.num_requeues("ns/gone") == 0 and len(queue) == 0


async def test_a_failure_that_keeps_coming_back_becomes_a_warning(caplog):
    calls = 0

    async def reconcile(key):
        nonlocal calls
        calls += 1
        raise TemporaryError("api said 500")

    queue = WorkQueue("t", rate_limiter=ItemExponentialFailureRateLimiter(0.0001, 0.0005))
    runner = ControllerRunner("t", queue, reconcile, workers=1, metrics=ReconcileMetrics(CollectorRegistry()))
    queue.add("ns/flaky")
    with caplog.at_level(logging.INFO, logger="gm.controllers"):
        await run_until(runner, lambda: calls >= WARN_AFTER + 2)
    retries = [r for r in caplog.records if r.getMessage() == "reconcile will retry"]
    levels = [r.levelno for r in retries]
    assert levels[:WARN_AFTER - 1] == [logging.INFO] * (WARN_AFTER - 1)
    assert logging.WARNING in levels[WARN_AFTER - 1:]
    assert all(r.key == "ns/flaky" and r.controller == "t" and r.error == "api said 500" for r in retries)


def reconciles(metrics: ReconcileMetrics, result: str) -> float:
    return sample(metrics.registry, "sedna_gm_reconcile_total", controller="t", result=result)
