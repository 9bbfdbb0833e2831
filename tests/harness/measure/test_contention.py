"""The second clock: CPU share and `contended` from given wall/CPU seconds, and the clock reading real blocks.

A sleeping step stands in for a thread the machine took off its core (wall time passes, no CPU time): deterministic,
no load needed. Assertions are generous ratios, never wall-clock limits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from harness.measure import timer
from harness.measure.contention import CONTENDED_SHARE, contention_fields, cpu_share, is_contended
from harness.measure.settings import MeasureSettings
from harness.measure.speedup import Baseline, timed_fields
from harness.measure.timer import Block, StepTimer


def test_cpu_share_and_contended_from_given_numbers():
    # two blocks of 2 calls: 1.0 s wall, 0.9 s CPU each; a baseline block beside them 1.0 s wall, 0.1 s CPU
    quiet = contention_fields([Block(2, 1.0, 0.9), Block(2, 1.0, 0.9)])
    assert quiet["cpu_share"] == pytest.approx(0.9) and quiet["contended"] is False
    assert quiet["cpu_latency_s"] == pytest.approx(0.45)  # per call, not per block
    assert contention_fields([Block(2, 1.0, 0.9)], per=3)["cpu_latency_s"] == pytest.approx(0.15)  # per decoded token
    mixed = contention_fields([Block(1, 1.0, 0.9)], [Block(1, 1.0, 0.1)])  # the share is over every kept block
    assert mixed["cpu_share"] == pytest.approx(0.5) and mixed["contended"] is False
    loaded = contention_fields([Block(1, 1.0, 0.07)], [Block(1, 3.0, 0.2)])  # load 14 per CPU: 1 s in 15 on a core
    assert loaded["cpu_share"] == pytest.approx(0.0675) and loaded["contended"] is True
    assert is_contended(CONTENDED_SHARE - 0.01) is True and is_contended(CONTENDED_SHARE + 0.01) is False
    assert is_contended(None) is None and cpu_share(1.0, 0.0) is None and contention_fields([]) == {}
    assert contention_fields([Block(1, 1.0)]) == {}  # CUDA blocks carry no CPU time: no second clock


def _busy(seconds: float):
    def call():
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    return call


def _asleep(seconds: float):
    return lambda: time.sleep(seconds)


def test_the_clock_reads_cpu_time_beside_wall_time_in_torch_timer_blocks(monkeypatch):
    kept = []  # what torch's blocked_autorange itself measured
    autorange = timer.Timer.blocked_autorange
    monkeypatch.setattr(
        timer.Timer, "blocked_autorange", lambda self, **kw: kept.append(autorange(self, **kw)) or kept[-1]
    )
    cases = [(_asleep(0.002), True, False), (_busy(0.002), None, False), (_asleep(0.002), True, True)]
    for step, expect_contended, slow in cases:  # slow: `repeats` single timed calls, no blocked_autorange
        kept.clear()
        measured = StepTimer("cpu").measure(step, budget_s=0.05, repeats=3, first_call_s=1.0 if slow else 0.002)
        times, blocks = measured.times, measured.blocks
        assert all(b.cpu_s is not None for b in blocks) and measured.repeats >= 3
        if slow:
            assert kept == [] and [b.calls for b in blocks] == [1, 1, 1]
        else:  # the blocks are the ones torch timed (its callback, right after each): the same wall seconds per call
            assert len(blocks) == len(kept[0].times) and blocks[0].calls == kept[0].number_per_run
            assert times == pytest.approx(list(kept[0].times), rel=1e-9)
        fields = contention_fields(blocks)
        if expect_contended:  # asleep: wall time passed without CPU time, as when the cores were taken away
            assert fields["contended"] is True and fields["cpu_share"] < 0.2
            assert fields["cpu_latency_s"] < 0.2 * min(times)
        else:  # busy: CPU time accrues with wall time (at least half of it even on a busy machine: a ratio, not a limit)
            assert fields["cpu_latency_s"] >= 0.0019


def test_a_paired_cell_gets_contention_and_a_cpu_time_speed_up():
    # the variant sleeps 3 ms and computes 1 ms; dense computes 2 ms: on wall dense is faster, on CPU time the variant
    settings = MeasureSettings(time_budget_s=0.1, repeats=3)

    def variant():
        time.sleep(0.003)
        _busy(0.001)()

    fields = timed_fields(variant, Baseline(_busy(0.002)), settings, torch.device("cpu"), first_call_s=0.004)
    assert fields.cpu_speedup > 1.4  # 2 ms / 1 ms of CPU, however busy the machine is (wall: dense wins when quiet)
    assert fields.cpu_speedup_low <= fields.cpu_speedup <= fields.cpu_speedup_high
    assert fields.cpu_latency_s < fields.latency_s
    alone = timed_fields(_asleep(0.002), Baseline(None), settings, torch.device("cpu"), first_call_s=0.002)
    assert alone.contended is True and alone.cpu_speedup is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
@pytest.mark.serial  # its spinners would slow another worker's test, which is measuring too
def test_real_contention_made_here_is_contended():
    """Three busy processes pinned to this test's one CPU: the kernel shares it, so the timing thread gets at most about
    a quarter of it (other jobs only lower that). Bounded: the competitors stop themselves after 20 s and are killed."""
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    spin = f"import os, time\nos.sched_setaffinity(0, {{{cpu}}})\nend = time.time() + 20\nwhile time.time() < end: pass"
    competitors = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(3)]
    try:
        os.sched_setaffinity(0, {cpu})
        time.sleep(0.5)  # they are running
        measured = StepTimer("cpu").measure(_busy(0.002), budget_s=0.3, repeats=3, first_call_s=0.002)
        fields = contention_fields(measured.blocks)
    finally:
        os.sched_setaffinity(0, before)
        for p in competitors:
            p.kill()
            p.wait()
    assert fields["contended"] is True and fields["cpu_share"] < CONTENDED_SHARE, fields
