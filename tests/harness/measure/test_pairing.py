"""Paired timing with a fake clock: steps whose cost the test sets, slowdowns injected in alternate blocks."""

from __future__ import annotations

import os

import statistics

import pytest

from harness.measure import noise, roofline
from harness.measure.pairing import bootstrap_interval, calls_per_block, spread, time_pairs
from harness.measure.speedup import Baseline, paired_speedup, timed_fields
from harness.measure.settings import MeasureSettings
from harness.measure.timer import Block
from tests.helpers.synthetic_run import timed_row


class FakeClock:
    """A clock advanced only by the fake steps; `load` multiplies every cost while it is set."""

    def __init__(self):
        self.now = 0.0
        self.load = 1.0

    def step(self, cost: float):
        def call():
            self.now += cost * self.load

        return call

    def timer(self, step, number) -> Block:
        start = self.now
        for _ in range(number):
            step()
        return Block(number, self.now - start)  # no CPU time: the fake clock has no second clock


def test_paired_speedup_survives_load_in_alternate_pairs():
    clock = FakeClock()
    variant, baseline = clock.step(1.0), clock.step(3.0)  # true speed-up 3
    blocks = []

    def timer(step, number):  # load doubles for pairs 1, 3, 5...: both blocks of a pair see it
        pair = len(blocks) // 2
        clock.load = 2.0 if pair % 2 else 1.0
        blocks.append(step)
        return clock.timer(step, number)

    times = time_pairs(variant, baseline, timer, pairs=10)
    assert times.ratios == pytest.approx([3.0] * 10)
    assert max(times.variant_s) / min(times.variant_s) == pytest.approx(
        2.0
    )  # unpaired latency is off by 2x across blocks
    fields = paired_speedup(times)
    assert fields["speedup"] == pytest.approx(3.0) and fields["speedup_low"] == pytest.approx(3.0)
    assert fields["speedup_high"] == pytest.approx(3.0)


def test_unpaired_ratio_would_be_off_by_2x_where_pairing_is_right():
    """Variant timed on a loaded stretch, baseline on a quiet one: the naive ratio is 1.5, the paired one 3."""
    clock = FakeClock()
    variant, baseline = clock.step(1.0), clock.step(3.0)
    clock.load = 2.0
    solo_variant = time_pairs(variant, None, clock.timer, pairs=5).variant_s
    clock.load = 1.0
    solo_baseline = time_pairs(baseline, None, clock.timer, pairs=5).variant_s
    assert statistics.median(solo_baseline) / statistics.median(solo_variant) == pytest.approx(1.5)
    paired = []

    def timer(step, number):  # load switches every block: AB, BA ordering keeps each pair on one side
        clock.load = 2.0 if (len(paired) // 2) % 2 else 1.0
        paired.append(1)
        return clock.timer(step, number)

    assert paired_speedup(time_pairs(variant, baseline, timer, pairs=6))["speedup"] == pytest.approx(3.0)


def test_blocks_alternate_ab_ba():
    order = []
    a, b = (lambda: order.append("a")), (lambda: order.append("b"))
    time_pairs(a, b, lambda step, n: (step(), Block(n, 1.0))[1], pairs=4)
    assert "".join(order) == "abbaabba"


def test_bootstrap_interval_contains_true_ratio():
    import random

    rng = random.Random(1)
    ratios = [2.0 * rng.uniform(0.9, 1.1) for _ in range(20)]
    median, low, high = bootstrap_interval(ratios)
    assert low <= 2.0 <= high and low <= median <= high and high / low < 1.2
    assert bootstrap_interval(ratios) == (median, low, high)  # fixed seed: reproducible
    assert bootstrap_interval([1.5]) == (1.5, 1.5, 1.5)
    with pytest.raises(ValueError, match="no ratios"):
        bootstrap_interval([])


def test_bootstrap_interval_covers_the_true_median_at_its_stated_confidence():
    """Against a known distribution: the 95% interval holds the true median in about 95% of independent samples,
    and its width is what the median's sampling spread predicts (wrong percentiles move one or the other)."""
    import math
    import random

    rng = random.Random(7)
    n, trials, sigma = 41, 120, 0.1
    covered, widths = 0, []
    for _ in range(trials):
        ratios = [rng.gauss(1.0, sigma) for _ in range(n)]  # true median 1.0
        _, low, high = bootstrap_interval(ratios, seed=rng.randrange(10**6))
        covered += low <= 1.0 <= high
        widths.append(high - low)
    predicted = 2 * 1.96 * math.sqrt(math.pi / 2) * sigma / math.sqrt(n)  # normal theory for a sample median
    assert 0.85 <= covered / trials <= 0.995, covered
    assert 0.6 < sorted(widths)[trials // 2] / predicted < 1.6, (sorted(widths)[trials // 2], predicted)


def test_calls_per_block_and_spread():
    assert calls_per_block(0.001, 0.0125) == 12 and calls_per_block(1.0, 0.0125) == 1 and calls_per_block(0.0, 1.0) == 1
    assert spread([1.0]) == 1.0 and spread([1.0, 1.0, 2.0, 2.0, 2.0]) > 1.5


def test_timed_fields_pairs_and_keeps_a_failing_baseline_out_of_the_row():
    clock = FakeClock()
    settings = MeasureSettings(time_budget_s=0.05, repeats=3)
    import torch

    fields = timed_fields(
        clock.step(0.001),
        Baseline(clock.step(0.002)),
        settings,
        torch.device("cpu"),
        first_call_s=0.001,
        timer=clock.timer,
    )
    assert (
        fields.speedup == pytest.approx(2.0)
        and fields.repeats >= 3
        and fields.baseline_latency_s == pytest.approx(0.002)
    )

    def broken():
        raise RuntimeError("baseline exploded")

    fields = timed_fields(lambda: None, Baseline(broken), settings, torch.device("cpu"), first_call_s=1e-6)
    assert fields.speedup is None and fields.speedup_low is None
    assert "baseline dense error" in fields.noise_reason and "exploded" in fields.noise_reason
    assert fields.latency_s is not None


def test_load_per_cpu_counts_other_processes_running_now(monkeypatch):
    monkeypatch.setattr(noise, "usable_cpus", lambda: 2)
    monkeypatch.setattr(noise, "_others_running", lambda: 3.0)
    assert noise.load_per_cpu() == pytest.approx(1.5)
    if os.path.exists("/proc/loadavg"):  # this test's own running thread is not counted: a real reading is small here
        assert noise._others_running() is not None


def test_load_per_cpu_from_a_monkeypatched_loadavg(monkeypatch):
    monkeypatch.setattr(noise, "_others_running", lambda: None)  # no /proc: the load average, less our own threads
    monkeypatch.setattr(noise.os, "getloadavg", lambda: (3.0, 0.0, 0.0))
    monkeypatch.setattr(noise, "usable_cpus", lambda: 4)
    assert noise.load_per_cpu(own_threads=0) == pytest.approx(0.75)
    assert noise.load_per_cpu(own_threads=1) == pytest.approx(0.5)  # the sweep's own busy threads are not load
    assert noise.load_per_cpu(own_threads=4) == 0.0  # never negative
    assert noise.larger(0.2, None) == 0.2 and noise.larger(None, None) is None and noise.larger(0.2, 0.9) == 0.9


def test_noisy_flags_name_their_reason():
    quiet = {"latency_s": 1.0, "latency_p20_s": 0.99, "latency_p80_s": 1.01, "speedup_low": 1.9, "speedup_high": 2.1}
    assert roofline.noise_fields(timed_row(**quiet), 0.1) == {"noisy": False, "noise_reason": None}
    loaded = roofline.noise_fields(timed_row(**quiet), noise.HIGH_LOAD_PER_CPU)
    assert loaded["noisy"] and "load 0.60 per CPU" in loaded["noise_reason"]
    wide = roofline.noise_fields(timed_row(**{**quiet, "speedup_low": 1.0, "speedup_high": 2.0}), None)
    assert wide["noisy"] and "interval wide" in wide["noise_reason"]
    spread_out = roofline.noise_fields(timed_row(**{**quiet, "latency_p80_s": 2.0}), 0.0)
    assert spread_out["noisy"] and "spread" in spread_out["noise_reason"]
    assert roofline.noise_fields(timed_row(**{"latency_s": None}), 5.0) == {"noisy": None}
    kept = roofline.noise_fields(timed_row(**{**quiet, "noise_reason": "no paired speed-up: baseline dense oom"}), 0.0)
    assert kept == {"noisy": False, "noise_reason": "no paired speed-up: baseline dense oom"}


def test_blocks_that_disagree_badly_are_timed_once_more():
    import torch

    clock = FakeClock()
    calls = []

    def timer(
        step, number
    ):  # calls 1-2 estimate, 3-6 warm both steps up (two agreeing blocks each); the 16 pairs (calls 7-38) see 3x
        # load in every other pair; then quiet
        calls.append(1)
        n = len(calls)
        clock.load = 3.0 if 7 <= n <= 38 and ((n - 7) // 2) % 2 == 0 else 1.0
        return clock.timer(step, number)

    settings = MeasureSettings(time_budget_s=0.05, repeats=3)
    fields = timed_fields(
        clock.step(0.001), Baseline(clock.step(0.002)), settings, torch.device("cpu"), first_call_s=0.001, timer=timer
    )
    assert fields.noise_reason == "re-timed once: the first blocks disagreed"
    assert len(calls) == 70 and fields.speedup == pytest.approx(2.0) and fields.rounds == 4
    assert fields.latency_p80_s == pytest.approx(fields.latency_p20_s)  # the quiet second timing was kept


@pytest.mark.skipif(not os.path.exists("/proc/loadavg"), reason="needs Linux /proc")
def test_this_process_own_running_threads_are_not_load(monkeypatch):
    """Our own busy threads are counted as ours (whatever the neighbours do), and subtracted from the machine's."""
    import threading

    import torch

    stop = threading.Event()
    a = torch.randn(256, 256)

    def spin() -> None:
        while not stop.is_set():
            a @ a  # releases the GIL: the thread stays runnable

    threads = [threading.Thread(target=spin) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        own = [noise._runnable_threads()[1] for _ in range(20)]
    finally:
        stop.set()
        for t in threads:
            t.join()
    # Runnable ('R') counts a thread waiting for a CPU too, so a loaded machine does not hide ours.
    assert max(own) >= 2, own
    monkeypatch.setattr(noise, "_runnable_threads", lambda: (7, 3))  # the kernel's 7 include our 3
    assert noise._others_running() == 4.0
    assert noise.load_per_cpu() == 4.0 / noise.usable_cpus()
