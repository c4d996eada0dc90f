"""timing.py on the host clock: medians of a known-duration callable, the CI stopping rule,
the sample cap and time budget, rotation over input sets, and the summary statistics."""

from __future__ import annotations

import math
import time

import pytest

from cuda_agent.sandbox.timing import Recipe, ci_halfwidth, measure, summarize

FAST = dict(warmup_ms=10.0, sample_ms=1.0, round_size=10)


def sleeper(ms: float, seen: list[int] | None = None):
    def call(i: int) -> None:
        if seen is not None:
            seen.append(i)
        time.sleep(ms / 1e3)
    return call


def true_median_ms(ms: float, n: int = 15) -> float:
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        time.sleep(ms / 1e3)
        xs.append((time.perf_counter() - t) * 1e3)
    return sorted(xs)[n // 2]


def test_median_of_sleep_within_tolerance_of_true_time():
    ms = 4.0
    r = measure(sleeper(ms), 3, "cpu", Recipe(**FAST, min_samples=10, max_samples=60, target=0.02, budget_s=3))
    truth = true_median_ms(ms)
    assert r["median_ms"] >= ms  # sleep never returns early
    assert r["median_ms"] == pytest.approx(truth, rel=0.15), (r["median_ms"], truth)
    assert r["calls_per_sample"] == 1  # a 4 ms call is longer than a 1 ms sample
    assert r["min_ms"] <= r["median_ms"]
    assert r["n"] == len(r["samples_ms"])
    assert r["method"].startswith("host-clock")


def test_ci_stopping_rule_stops_early_when_stable():
    rec = Recipe(**FAST, min_samples=10, max_samples=400, target=0.05, budget_s=10)
    t = time.perf_counter()
    r = measure(sleeper(2.0), 2, "cpu", rec)
    assert r["n"] < 400, "a stable callable must stop on the CI rule, not on the cap"
    assert r["n"] >= rec.min_samples and r["n"] % rec.round_size == 0
    assert ci_halfwidth(sorted(r["samples_ms"])) <= rec.target
    assert time.perf_counter() - t < 5


def test_sample_cap_when_target_unreachable():
    rec = Recipe(**FAST, min_samples=10, max_samples=30, target=0.0, budget_s=30)
    r = measure(sleeper(0.5), 2, "cpu", rec)
    assert r["n"] == 30


def test_time_budget_caps_the_measurement():
    rec = Recipe(**FAST, min_samples=10, max_samples=100_000, target=0.0, budget_s=0.3)
    t = time.perf_counter()
    r = measure(sleeper(1.0), 2, "cpu", rec)
    took = time.perf_counter() - t
    assert r["n"] < 100_000
    assert took < 2.0, took


def test_rotates_over_input_sets_and_batches_fast_calls():
    seen: list[int] = []

    def call(i: int) -> None:
        seen.append(i)

    r = measure(call, 3, "cpu", Recipe(**FAST, min_samples=10, max_samples=20, target=0.5, budget_s=2))
    assert set(seen) == {0, 1, 2}
    assert all(b == (a + 1) % 3 for a, b in zip(seen, seen[1:]))  # strict rotation
    assert r["calls_per_sample"] > 1  # a no-op call is batched so a sample lasts ~sample_ms
    assert r["calls_per_sample"] <= 1000


def test_ci_halfwidth():
    assert ci_halfwidth([1.0, 1.0, 1.0, 1.0]) == math.inf  # too few samples
    assert ci_halfwidth([2.0] * 50) == 0.0
    xs = sorted([1.0 + 0.01 * i for i in range(101)])  # 1.00 .. 2.00, median 1.5
    h = ci_halfwidth(xs)
    assert 0 < h < 0.1
    wide = sorted([1.0 + 0.1 * i for i in range(101)])
    assert ci_halfwidth(wide) > h  # more spread -> wider interval
    assert ci_halfwidth(sorted([1.0 + 0.01 * i for i in range(401)])) < ci_halfwidth(
        sorted([1.0 + 0.01 * i for i in range(41)])) * 1.5  # more samples do not widen it


def test_summarize_median_and_spread():
    s = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s["median_ms"] == 3.0 and s["min_ms"] == 1.0 and s["n"] == 5
    assert s["spread"] == pytest.approx((4.0 - 2.0) / 3.0)  # (q3 - q1) / median
    even = summarize([1.0, 2.0, 3.0, 4.0])
    assert even["median_ms"] == 2.5
    assert summarize([7.0] * 10)["spread"] == 0.0
    noisy = summarize([1.0] * 10 + [10.0] * 10)
    assert noisy["spread"] > 1.0


def test_recipe_describe():
    r = Recipe()
    assert r.describe("cpu").startswith("host-clock")
    assert "L2 flushed" not in r.describe("cpu")
    assert r.describe("cuda").startswith("cuda-events") and "L2 flushed" in r.describe("cuda")
