"""The reference kernel (harness.measure.yardstick) and the baseline's own cells paired with it, on a fake clock."""

from __future__ import annotations

import pytest
import torch

from harness.measure.settings import MeasureSettings
from harness.measure.speedup import Baseline, timed_fields
from harness.measure.timer import Block
from harness.measure.yardstick import SHAPE, reference_step


def test_the_reference_kernel_is_fixed():
    one, two = reference_step("cpu")(), reference_step(torch.device("cpu"))()
    assert one.shape == SHAPE and torch.equal(one, two)  # the same seeded inputs in every run


class Costs:
    """A fake clock: each step returns its name; a block costs its calls times the name's cost."""

    def __init__(self, **costs: float):
        self.costs = costs

    def timer(self, step, number) -> Block:
        return Block(number, self.costs[step()] * number)


def test_the_baseline_own_cell_is_paired_with_the_reference_kernel():
    clock = Costs(dense=0.004, reference=0.001)
    cache: dict = {}
    own = Baseline(None, cache_key=("dense",), known_call_s=cache, reference=lambda: "reference")
    fields = timed_fields(
        lambda: "dense",
        own,
        MeasureSettings(time_budget_s=0.05, repeats=3),
        torch.device("cpu"),
        first_call_s=0.004,
        timer=clock.timer,
    )
    assert fields.speedup is None and fields.baseline_latency_s is None  # not a ratio to itself
    assert fields.reference_speedup == pytest.approx(0.25) and fields.reference_speedup_low == pytest.approx(0.25)
    assert fields.reference_speedup_high == pytest.approx(0.25) and fields.rounds == 4
    assert fields.latency_s == pytest.approx(0.004) and cache[("dense",)] == pytest.approx(0.004)  # the warm time


def test_a_failing_reference_kernel_leaves_the_cell_timed_alone():
    def broken():
        raise RuntimeError("reference exploded")

    own = Baseline(None, cache_key=("dense",), reference=broken)
    fields = timed_fields(
        lambda: None, own, MeasureSettings(time_budget_s=0.01), torch.device("cpu"), first_call_s=1e-6
    )
    assert fields.reference_speedup is None and fields.latency_s is not None
    assert (
        fields.noise_reason.startswith("no paired speed-up: reference kernel error")
        and "exploded" in fields.noise_reason
    )
