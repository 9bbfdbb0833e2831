"""The one timer's numbers on hand-made blocks, and its CUDA path on CPU: a fake do_bench that behaves as Triton's does.

Triton's do_bench estimates a call from a few warm calls and runs int(rep / estimate) of them; older releases
refuse return_mode="all" with an AssertionError (older still: a TypeError, no such argument).
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from harness.measure import timer
from harness.measure.settings import MeasureSettings
from harness.measure.timer import Block, Measurement, StepTimer

CUDA = torch.device("cuda")


def time_cuda(step, settings, *, first_call_s):
    """The CUDA path of the one timer (no device is touched while do_bench is faked)."""
    measured = StepTimer(CUDA).measure(
        step, budget_s=settings.time_budget_s, repeats=settings.repeats, first_call_s=first_call_s
    )
    return measured.times, measured.repeats


class FakeDoBench:
    """do_bench for a call of `call_ms`: int(rep / call_ms) samples (at least one), as Triton counts them."""

    def __init__(self, call_ms: float, *, refuse: type[Exception] | None = None):
        self.call_ms, self.refuse, self.reps = call_ms, refuse, []

    def __call__(self, fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
        self.reps.append(rep)
        if self.refuse is not None:
            raise self.refuse("return_mode must be one of min, max, mean, median")
        return [self.call_ms] * max(1, int(rep / self.call_ms))


@pytest.fixture
def fake_triton(monkeypatch):
    """Install a fake triton.testing; return a setter for its do_bench and the list of CUDA-event fallbacks."""
    testing = types.ModuleType("triton.testing")
    triton = types.ModuleType("triton")
    triton.testing = testing
    monkeypatch.setitem(sys.modules, "triton", triton)
    monkeypatch.setitem(sys.modules, "triton.testing", testing)
    fallbacks = []
    monkeypatch.setattr(
        StepTimer,
        "_measure_cuda_events",
        lambda self, step, budget_s, repeats: fallbacks.append(1) or Measurement((Block(1, 1.0),)),
    )

    def install(bench: FakeDoBench) -> list:
        testing.do_bench = bench
        return fallbacks

    return install


def test_a_measurement_is_the_per_call_seconds_of_its_blocks():
    measured = Measurement((Block(2, 2.0, 1.0), Block(4, 2.0), Block(1, 3.0)))  # 1.0, 0.5 and 3.0 s per call
    assert measured.times == [1.0, 0.5, 3.0] and measured.repeats == 7
    fields = measured.latency_fields()
    assert fields == {
        "latency_s": 1.0,
        "latency_p20_s": pytest.approx(0.7),
        "latency_p80_s": pytest.approx(2.2),
        "repeats": 7,
    }
    assert measured.latency_fields(per=4)["latency_s"] == 0.25  # a decode generation of 4 tokens: per token
    assert Block(4, 2.0, 1.0).cpu_per_call_s == 0.25 and Block(4, 2.0).cpu_per_call_s is None


def test_a_setup_builds_each_timed_call_s_argument_outside_the_timed_region(monkeypatch):
    now, built, seen = [0.0], [], []

    class FakeTime:
        @staticmethod
        def perf_counter() -> float:
            return now[0]

        thread_time = perf_counter

    def setup():
        now[0] += 100.0  # set-up is slow, and must not be timed
        built.append(len(built))
        return built[-1]

    def step(state):
        seen.append(state)
        now[0] += 0.5

    monkeypatch.setattr(timer, "time", FakeTime)
    measured = StepTimer("cpu").measure(step, setup=setup, budget_s=2.0, repeats=3, first_call_s=0.5)
    assert measured.times == [0.5] * 4 and seen == built == [0, 1, 2, 3]  # budget / first call: 4 fresh calls
    assert all(b.cpu_s == 0.5 for b in measured.blocks)


def test_a_call_slower_than_the_budget_gets_its_repeats_from_one_do_bench_call(fake_triton):
    settings = MeasureSettings(time_budget_s=0.1, repeats=10)
    bench = FakeDoBench(call_ms=40.0)  # four times slower than a tenth of the budget
    fallbacks = fake_triton(bench)
    times, calls = time_cuda(lambda: None, settings, first_call_s=0.040)
    assert calls == len(times) >= settings.repeats
    assert times[0] == pytest.approx(0.040)
    assert fallbacks == [] and len(bench.reps) == 1
    assert bench.reps[0] >= settings.repeats * 40.0  # rep sized from the first estimate, not the 100 ms budget


def test_rep_stays_the_budget_for_fast_calls_and_covers_a_slower_bench_estimate():
    settings = MeasureSettings(time_budget_s=0.1, repeats=10)
    assert timer.bench_rep_ms(settings.time_budget_s, settings.repeats, first_call_s=1e-4) == 100
    rep = timer.bench_rep_ms(settings.time_budget_s, settings.repeats, first_call_s=0.5)
    # do_bench's own estimate may read slower than our first call, up to REP_MARGIN: still `repeats` samples
    assert int(rep / (0.5e3 * timer.REP_MARGIN)) >= settings.repeats


def test_the_budget_alone_gave_too_few_samples(fake_triton):
    """The defect this guards against: rep = budget gives 2 samples of a 40 ms call, and the cell is timed again."""
    settings = MeasureSettings(time_budget_s=0.1, repeats=10)
    fallbacks = fake_triton(FakeDoBench(call_ms=40.0))
    time_cuda(lambda: None, settings, first_call_s=0.0)  # no estimate: rep is the budget
    assert fallbacks == [1]


@pytest.mark.parametrize("refusal", [AssertionError, TypeError], ids=["assert-return_mode", "no-return_mode"])
def test_an_older_triton_refusing_return_mode_all_falls_back_to_cuda_events(fake_triton, refusal):
    fallbacks = fake_triton(FakeDoBench(call_ms=1.0, refuse=refusal))
    assert time_cuda(lambda: None, MeasureSettings(), first_call_s=0.001) == ([1.0], 1)
    assert fallbacks == [1]


@pytest.mark.cuda
def test_cuda_do_bench_times_a_call_slower_than_the_budget_once(monkeypatch):
    """A ~20 ms kernel against a 10 ms budget: do_bench alone returns the repeats (the real Triton, on the GPU)."""
    pytest.importorskip("triton")
    monkeypatch.setattr(StepTimer, "_measure_cuda_events", lambda *args: pytest.fail("the cell was timed again"))

    def seconds(call) -> float:
        call()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3

    cycles = int(1e6 * 0.02 / seconds(lambda: torch.cuda._sleep(1_000_000)))  # a spin of ~20 ms

    def step():
        torch.cuda._sleep(cycles)

    first_call_s = seconds(step)
    settings = MeasureSettings(device="cuda", time_budget_s=0.01, repeats=5)
    times, calls = time_cuda(step, settings, first_call_s=first_call_s)
    assert calls == len(times) >= settings.repeats
    assert sorted(times)[len(times) // 2] > settings.time_budget_s
