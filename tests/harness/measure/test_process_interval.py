"""The interval over timing processes (harness.measure.rounds.process_interval) by its value on hand-made timings,
the within-process s.e. it recovers from a round interval, and its coverage of the next run on a simulated machine
whose processes differ (the term no interval inside one process can see)."""

from __future__ import annotations

import math
import random

import pytest

from harness.measure.rounds import ProcessTiming, process_interval, round_interval, within_se


def _tight(speedup: float, rounds: int = 4) -> ProcessTiming:
    return ProcessTiming(speedup, speedup * 0.999, speedup / 0.999, rounds)


def test_processes_that_differ_set_the_t_prediction_interval():
    # processes at e^-0.1, e^0, e^0.1 with tight own intervals: s.d. 0.1; half t(2) x 0.1 x sqrt(2/3) = 0.35133
    got = process_interval([_tight(math.exp(-0.1)), _tight(1.0), _tight(math.exp(0.1))])
    half = 4.303 * 0.1 * math.sqrt(2 / 3)
    assert (got.speedup, got.processes, got.process_sd, got.rounds) == pytest.approx((1.0, 3, 0.1, 12))
    assert (got.low, got.high) == pytest.approx((math.exp(-half), math.exp(half)))


def test_four_processes_take_t3():
    logs = [-0.1, 0.0, 0.0, 0.1]  # s.d. sqrt(0.02 / 3)
    got = process_interval([_tight(math.exp(x)) for x in logs])
    half = 3.182 * math.sqrt(0.02 / 3) * math.sqrt(2 / 4)
    assert math.log(got.high) == pytest.approx(half) and math.log(got.low) == pytest.approx(-half)


def test_processes_that_agree_by_chance_are_floored_by_their_own_intervals():
    # three processes at exactly 2.0, each with a 4-round interval 2 e^(+/-0.2): own s.e. 0.2 / (t(3) sqrt 2)
    own = ProcessTiming(2.0, 2.0 * math.exp(-0.2), 2.0 * math.exp(0.2), 4)
    assert own.own_se() == pytest.approx(0.2 / (3.182 * math.sqrt(2)))
    got = process_interval([own] * 3)
    half = 4.303 * own.own_se() * math.sqrt(2 / 3)
    assert got.process_sd == 0.0 and (got.low, got.high) == pytest.approx((2 * math.exp(-half), 2 * math.exp(half)))


def test_own_se_inverts_the_round_interval():
    """A process's interval from round_interval gives back max(between-round s.d., the pairs' floor) / sqrt(R)."""
    rounds = [[1.9, 2.1, 2.0], [2.2, 2.3, 2.25], [1.8, 1.85, 1.9], [2.05, 2.0, 2.1]]
    got = round_interval(rounds)
    own = ProcessTiming(got.speedup, got.low, got.high, got.rounds).own_se()
    assert own == pytest.approx(max(got.between_sd, within_se(rounds)) / math.sqrt(4))


def test_a_bootstrap_interval_of_one_round_reads_as_1_96_se():
    assert ProcessTiming(1.0, math.exp(-0.196), math.exp(0.196), 1).own_se() == pytest.approx(0.1)
    assert ProcessTiming(1.0, math.exp(-0.196), math.exp(0.196), None).own_se() == pytest.approx(0.1)


def test_process_interval_refuses_fewer_than_two_usable_timings():
    with pytest.raises(ValueError, match="1 usable process timing"):
        process_interval([_tight(2.0), ProcessTiming(0.0, 0.0, 0.0, 4)])


def _process(rng: random.Random, *, between: float, rounds: int = 4, pairs: int = 3) -> ProcessTiming:
    """One simulated process: true speed-up 1.5, the process off by N(0, between) in log, its rounds by N(0, 0.02),
    its pairs by N(0, 0.02) more: a round interval as the harness computes it."""
    shift = rng.gauss(0.0, between)
    ratios = [
        [1.5 * math.exp(shift + r + rng.gauss(0.0, 0.02)) for _ in range(pairs)]
        for r in (rng.gauss(0.0, 0.02) for _ in range(rounds))
    ]
    got = round_interval(ratios)
    return ProcessTiming(got.speedup, got.low, got.high, got.rounds)


def test_the_next_run_of_p_processes_falls_inside_about_as_often_as_claimed():
    """Processes that differ by s.d. 0.08 in log while rounds inside each agree to 0.02 (this machine's picture):
    one process's round interval holds the next process's value far less often than 95%; the interval over four
    processes holds the next four-process run's value in about 95% of trials."""
    rng = random.Random(5)
    trials, one, four = 300, 0, 0
    for _ in range(trials):
        a = [_process(rng, between=0.08) for _ in range(4)]
        b = [_process(rng, between=0.08) for _ in range(4)]
        one += a[0].low <= b[0].speedup <= a[0].high
        got = process_interval(a)
        four += got.low <= process_interval(b).speedup <= got.high
    assert one / trials < 0.6, one
    assert 0.88 <= four / trials <= 0.995, four
