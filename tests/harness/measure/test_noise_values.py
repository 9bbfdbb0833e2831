"""harness.measure.noise and the noisy flag by value: the load per CPU from planted /proc readings and a planted
load average, and the thresholds of noise_fields at and around their edges."""

from __future__ import annotations

import pytest

from harness.measure import noise
from harness.measure.roofline import WIDE_INTERVAL, WIDE_SPREAD, noise_fields
from tests.helpers.synthetic_run import timed_row


@pytest.fixture
def four_cpus(monkeypatch):
    monkeypatch.setattr(noise, "usable_cpus", lambda: 4)
    monkeypatch.setattr(noise.time, "sleep", lambda seconds: None)


def test_the_load_is_the_mean_of_other_processes_runnable_threads_per_cpu(four_cpus, monkeypatch):
    readings = iter([(9, 2), (7, 2), (5, 2)])  # (runnable threads, ours): 7, 5 and 3 others
    monkeypatch.setattr(noise, "_runnable_threads", lambda: next(readings))
    assert noise.SAMPLES == 3 and noise.load_per_cpu() == pytest.approx((7 + 5 + 3) / 3 / 4)
    monkeypatch.setattr(noise, "_runnable_threads", lambda: (1, 3))  # ours counted between the two reads: no others
    assert noise.load_per_cpu() == 0.0


def test_without_proc_the_load_average_less_our_threads_per_cpu(four_cpus, monkeypatch):
    monkeypatch.setattr(noise, "_runnable_threads", lambda: None)
    monkeypatch.setattr(noise.os, "getloadavg", lambda: (6.0, 1.0, 1.0))
    assert noise.load_per_cpu(own_threads=2) == pytest.approx((6.0 - 2) / 4)
    assert noise.load_per_cpu(own_threads=8) == 0.0
    assert noise.larger(None, 0.3) == 0.3 and noise.larger(0.5, 0.3) == 0.5 and noise.larger(None, None) is None


def test_the_noisy_flag_at_its_thresholds():
    timed = {"latency_s": 1.0}
    assert noise_fields(timed_row(**timed), noise.HIGH_LOAD_PER_CPU)["noisy"] is True  # at the threshold: loaded
    assert noise_fields(timed_row(**timed), noise.HIGH_LOAD_PER_CPU - 0.01) == {"noisy": False, "noise_reason": None}
    wide = {**timed, "speedup_low": 1.0, "speedup_high": WIDE_INTERVAL * 1.01}
    assert (
        noise_fields(timed_row(**wide), 0.0)["noise_reason"] == f"speed-up interval wide (1-{WIDE_INTERVAL * 1.01:.3g})"
    )
    assert noise_fields(timed_row(**{**wide, "speedup_high": WIDE_INTERVAL}), 0.0)["noisy"] is False
    dense = {**timed, "reference_speedup_low": 0.5, "reference_speedup_high": 0.5 * WIDE_INTERVAL * 1.01}
    assert (
        noise_fields(timed_row(**dense), 0.0)["noise_reason"]
        == f"reference speed-up interval wide (0.5-{0.5 * WIDE_INTERVAL * 1.01:.3g})"
    )
    spread = {**timed, "latency_p20_s": 1.0, "latency_p80_s": WIDE_SPREAD * 1.01}
    assert noise_fields(timed_row(**spread), 0.0)["noisy"] is True
    assert noise_fields(timed_row(**{**spread, "latency_p80_s": WIDE_SPREAD}), 0.0)["noisy"] is False
    assert noise_fields(timed_row(**{"latency_s": None}), 9.0) == {"noisy": None}
