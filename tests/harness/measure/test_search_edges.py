"""Edges of the error-budget search that the main tests do not reach: a range whose top is not a power-of-two multiple
of its bottom, NaN errors mixed with finite ones, and carrying an unreachable verdict to longer N when two ranges
differ only at their low end."""

from __future__ import annotations

import math

import pytest

from harness.measure.tuning import TOLERANCE, search_knob
from harness.runner.blocked import unreachable_carries_over
from tests.harness.measure.test_tuning import counting, matched


@pytest.mark.parametrize("low, high", [(16, 1000), (16, 300), (10, 77), (3, 1000)])
@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.7, 0.99, 1.0])
def test_a_range_whose_top_is_no_power_of_two_multiple_of_its_bottom(low, high, fraction):
    """The threshold anywhere in [low, high]: the value found meets it, never exceeds high, is within the tolerance of
    the cheapest value that meets, and no value is evaluated outside the range or twice."""
    threshold = round(low * (high / low) ** fraction)
    evaluate, calls = counting(lambda v: 0.0 if v >= threshold else 1.0)
    found = search_knob(evaluate, 0.5, low, high)
    assert found is not None and threshold <= found <= high
    assert found <= max(threshold * TOLERANCE, threshold + 1)
    assert all(low <= v <= high for v in calls) and len(calls) == len(set(calls))
    assert len(calls) <= 2 + math.ceil(math.log2(high / low)) + 4


def test_the_top_of_an_odd_range_is_tried_when_doubling_overshoots_it():
    """16, 32, ..., 512 all miss and 1024 would be past the top 1000: the top itself (known to meet) is the answer."""
    evaluate, calls = counting(lambda v: 0.0 if v >= 990 else 1.0)
    found = search_knob(evaluate, 0.5, 16, 1000)
    assert 990 <= found <= 1000 and max(calls) == 1000


@pytest.mark.parametrize("nan_below", [32, 100, 500])
def test_nan_errors_below_some_value_count_as_misses_among_finite_ones(nan_below):
    """A variant that overflows (NaN) at small knob values and meets the budget from some value on: NaNs are misses,
    never a pass, and the answer is still the cheapest value that meets within the tolerance."""
    threshold = 600

    def error(v: int) -> float:
        if v < nan_below:
            return float("nan")
        return 0.01 if v >= threshold else 0.9

    evaluate, _ = counting(error)
    found = search_knob(evaluate, 0.1, 16, 4096)
    assert threshold <= found <= threshold * TOLERANCE
    assert not math.isnan(error(found))


def test_nan_between_finite_errors_is_never_taken_as_meeting():
    """Finite misses, then a NaN band, then passes: the NaN band is below the answer."""
    evaluate, _ = counting(lambda v: 0.9 if v < 200 else (float("nan") if v < 400 else 0.01))
    found = search_knob(evaluate, 0.1, 16, 4096)
    assert 400 <= found <= 400 * TOLERANCE


def test_an_unreachable_verdict_is_not_carried_over_a_range_that_differs_only_at_its_low_end(monkeypatch):
    cell = matched("sliding_window", 0.1, N=512)
    ranges = {512: ("window", 8, 256, "x"), 256: ("window", 16, 256, "x")}  # same top, lower bottom at the longer N
    import harness.runner.blocked as blocked  # where unreachable_carries_over reads the range

    monkeypatch.setattr(blocked, "knob_range", lambda c: ranges[c.seq_len])
    assert unreachable_carries_over(cell, 256) is None
    ranges[256] = ranges[512]
    assert unreachable_carries_over(cell, 256)
