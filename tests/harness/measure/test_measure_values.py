"""The harness's own numbers against independent ones: the accuracy path per causal setting, the timer's call count and seconds."""

from __future__ import annotations

import time

import pytest
import torch

from harness.measure import MeasureSettings, RunInfo, measure_cell
from harness.measure.timer import StepTimer
from harness.schema import Cell

RUN = RunInfo(run_id="test", device_name="cpu", host="h", threads=torch.get_num_threads())
FAST = MeasureSettings(time_budget_s=0.01, repeats=2, error_rows=16)


def _cell(*, causal: bool, mode: str = "forward", N: int = 64) -> Cell:
    from variants import build_config

    return Cell(
        variant="dense",
        config=build_config("dense").to_dict(),
        seq_len=N,
        kv_len=N,
        batch=1,
        heads=2,
        head_dim=16,
        dtype="float32",
        device="cpu",
        causal=causal,
        mode=mode,
        inputs="gaussian",
        seed=0,
    )


@pytest.mark.parametrize("mode", ["forward", "train"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_exact_dense_scores_as_exact_in_each_causal_setting(causal, mode):
    # An exact variant must score float32 rounding (~1e-7) against the reference of its own causal
    # setting; a reference computed with the other setting gives ~1 (half the keys differ).
    row = measure_cell(_cell(causal=causal, mode=mode), FAST, RUN)
    assert row.status == "ok", row.reason
    assert row.rel_l2_error < 1e-5 and row.cosine > 1 - 1e-9 and row.max_abs_error < 1e-5
    if mode == "train":
        assert max(row.grad_rel_l2_q, row.grad_rel_l2_k, row.grad_rel_l2_v) < 1e-5


def test_timer_makes_at_least_the_minimum_number_of_calls():
    calls = []
    measured = StepTimer("cpu").measure(lambda: calls.append(1), budget_s=1e-4, repeats=7, first_call_s=1.0)  # slow
    times, repeats = measured.times, measured.repeats
    assert repeats >= 7 and len(calls) >= 7 and len(times) * 1 >= 7


def test_timer_seconds_agree_with_perf_counter_on_a_known_workload():
    a = torch.randn(192, 192)

    def step():
        for _ in range(8):
            a @ a

    for _ in range(3):
        step()  # warm

    def independent() -> list[float]:
        samples = []
        for _ in range(7):
            start = time.perf_counter()
            step()
            samples.append(time.perf_counter() - start)
        return samples

    def attempt() -> tuple[float, list[float]]:
        before = independent()
        measured = StepTimer("cpu").measure(step, budget_s=0.05, repeats=3, first_call_s=0.0)
        assert measured.repeats >= 3
        samples = sorted(before + independent())  # timed on both sides, so a burst of load cannot fall on one side only
        return sorted(measured.times)[len(measured.times) // 2], samples

    # Within the independent samples' range, widened 4x each way: a units bug (ms for s) is 1000x in every attempt;
    # a burst of load on the timer's blocks alone (CI once saw 100 ms against 0.6 ms beside it) passes on a retry.
    tries = [attempt() for _ in range(1)]
    while len(tries) < 3 and not tries[-1][1][0] / 4 < tries[-1][0] < tries[-1][1][-1] * 4:
        tries.append(attempt())
    median, samples = tries[-1]
    assert samples[0] / 4 < median < samples[-1] * 4, tries
