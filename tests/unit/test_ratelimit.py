"""Rate limiter math: token bucket, per-item exponential backoff, max-of combination."""

from __future__ import annotations

import pytest

from gm.kube.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    TokenBucket,
    default_controller_rate_limiter,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_serves_burst_then_spaces_at_qps():
    clock = FakeClock()
    bucket = TokenBucket(10, 3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)  # reservations queue up in order


def test_bucket_refills_with_time_up_to_burst():
    clock = FakeClock()
    bucket = TokenBucket(10, 2, clock=clock)
    bucket.reserve(), bucket.reserve()
    clock.now += 0.1
    assert bucket.reserve() == 0.0
    assert bucket.reserve() == pytest.approx(0.1)
    clock.now += 100.0  # a long idle period refills only to burst
    assert [bucket.reserve() for _ in range(3)] == pytest.approx([0.0, 0.0, 0.1])


def test_bucket_unlimited_when_qps_not_positive():
    bucket = TokenBucket(0, 0)
    assert all(bucket.reserve() == 0.0 for _ in range(1000))


def test_bucket_rejects_zero_burst():
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(5, 0)


async def test_bucket_wait_sleeps_for_reservation():
    bucket = TokenBucket(100, 1)
    assert await bucket.wait() == 0.0
    assert await bucket.wait() == pytest.approx(0.01, abs=0.002)


def test_exponential_doubles_per_item_and_caps():
    lim = ItemExponentialFailureRateLimiter(0.005, 300.0)
    delays = [lim.when("a") for _ in range(5)]
    assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    assert lim.when("b") == pytest.approx(0.005)  # keys back off independently
    assert lim.num_requeues("a") == 5
    for _ in range(30):
        last = lim.when("a")
    assert last == 300.0
    lim.forget("a")
    assert lim.num_requeues("a") == 0
    assert lim.when("a") == pytest.approx(0.005)


def test_exponential_survives_huge_failure_counts():
    lim = ItemExponentialFailureRateLimiter(0.005, 300.0)
    lim._failures["x"] = 5000
    assert lim.when("x") == 300.0


@pytest.mark.parametrize("base,cap", [pytest.param(0, 1, id="zero-base"),
                                      pytest.param(2, 1, id="cap-below-base")])
def test_exponential_rejects_bad_bounds(base, cap):
    with pytest.raises(ValueError):
        ItemExponentialFailureRateLimiter(base, cap)


def test_max_of_takes_longest_and_forgets_all():
    clock = FakeClock()
    per_item = ItemExponentialFailureRateLimiter(0.005, 300.0)
    overall = BucketRateLimiter(TokenBucket(10, 1, clock=clock))
    lim = MaxOfRateLimiter(per_item, overall)
    assert lim.when("a") == pytest.approx(0.005)  # bucket has its one token
    assert lim.when("b") == pytest.approx(0.1)  # bucket empty: overall limit dominates
    for _ in range(10):
        lim.when("a")
    assert lim.when("a") == pytest.approx(0.005 * 2**11)  # per-item dominates for a hot key
    assert lim.num_requeues("a") == 12
    lim.forget("a")
    assert lim.num_requeues("a") == 0


def test_default_controller_limiter_shape():
    lim = default_controller_rate_limiter()
    assert lim.when("k") == pytest.approx(0.005)
    assert lim.when("k") == pytest.approx(0.01)
    per_item, overall = lim.limiters
    assert (per_item.base_delay, per_item.max_delay) == (0.005, 300.0)
    assert (overall.bucket.qps, overall.bucket.burst) == (10.0, 100)
