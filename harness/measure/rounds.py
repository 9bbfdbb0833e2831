"""The interval of a paired speed-up timed in rounds: where the next run of the same cell should land.

A paired cell is timed in R rounds, each a few ABBA pairs (harness.measure.pairing.time_pairs). Pairs inside one round
share that round's machine state (the frequency, the allocator, what else ran), so a bootstrap over pairs measures the
spread of one window; across processes the speed-up moved by more than that (docs/timing.md, issue 44). The rounds are
the unit that repeats: the interval is over them.

- Each round's speed-up is the median of its pair ratios (robust to one slow block); the cell's speed-up is the
  geometric mean of the round medians (ratios average on a log scale: 2x and 0.5x cancel).
- The spread is the between-round standard deviation s_b of log(round medians), floored by what the pairs inside the
  rounds alone imply for a round median (1.2533 x their robust s.d. / sqrt(pairs per round): the s.e. of a median).
  The floor keeps three rounds that agree by chance from claiming more than their pairs can; the between-round term
  takes in every drift slower than a round.
- The interval is a Student-t *prediction* interval for the next run's value: log(speed-up) +/- t(R-1) x s x
  sqrt(2 / R), since this run's mean and the next one's each carry s^2 / R. A confidence interval of the mean would
  hold the next run's value in only about 83% of runs at a stated 95%; the prediction interval is what a reader
  who reruns the sweep checks (scripts/repro_check.py counts it).

One process is not enough: its rounds share the state the process landed in, and four quiet processes spread a
speed-up by 11% where four repeats inside one spread 1.6% (docs/timing.md). A sweep with --processes P >= 3 times each
paired cell in P processes (harness.runner.processes) and process_interval gives the same prediction interval one
level up, over the processes' speed-ups, each process's own interval its floor.

Chosen over a hierarchical bootstrap (resample rounds, then pairs within them): with 3-6 rounds a bootstrap's
percentiles come from a handful of distinct values and are too narrow by about sqrt((R-1)/R) before any prediction
widening; the t quantile pays for the few rounds honestly.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

# Student's t, two-sided 95% (0.975 quantile), by degrees of freedom 1..10; beyond, the normal 1.96 is within 4%.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
NORMAL975 = 1.96
MEDIAN_SE = math.sqrt(math.pi / 2)  # the s.e. of a sample median is this times sigma / sqrt(n) (normal data)
MAD_TO_SD = 1.4826  # a normal sample's s.d. from its median absolute deviation


@dataclass(frozen=True)
class RoundInterval:
    """A speed-up timed in rounds, its 95% prediction interval and the spread between rounds."""

    speedup: float  # geometric mean of the round medians
    low: float
    high: float
    rounds: int
    between_sd: float  # s.d. of log(round median) across rounds (0 for one round)


def t975(df: int) -> float:
    """Student's t 0.975 quantile at `df` degrees of freedom (>= 1)."""
    if df < 1:
        raise ValueError(f"t975: df={df}; needs at least one degree of freedom (two rounds)")
    return T975[df - 1] if df <= len(T975) else NORMAL975


def round_interval(rounds: Sequence[Sequence[float]]) -> RoundInterval:
    """The speed-up and its 95% prediction interval from per-round pair ratios (baseline / variant), at least two
    rounds of at least one positive ratio each (see the module doc)."""
    kept = [[r for r in ratios if r > 0] for ratios in rounds]
    if len(kept) < 2 or any(not ratios for ratios in kept):
        raise ValueError(
            f"round_interval: {len(kept)} round(s), sizes {[len(r) for r in kept]}; needs two or more rounds with "
            "a positive ratio each (time one round with pairing.bootstrap_interval instead)"
        )
    logs = [math.log(statistics.median(ratios)) for ratios in kept]
    center = statistics.fmean(logs)
    between = statistics.stdev(logs)
    spread = max(between, within_se(kept))
    half = t975(len(logs) - 1) * spread * math.sqrt(2 / len(logs))
    return RoundInterval(math.exp(center), math.exp(center - half), math.exp(center + half), len(logs), between)


def within_se(rounds: Sequence[Sequence[float]]) -> float:
    """What the pairs inside the rounds alone imply for the s.d. of a round's log median: MEDIAN_SE x the pooled
    robust s.d. of log ratios around their round's median / sqrt(mean pairs per round)."""
    deviations = []
    for ratios in rounds:
        logs = [math.log(r) for r in ratios]
        middle = statistics.median(logs)
        deviations += [abs(x - middle) for x in logs]
    sd = MAD_TO_SD * statistics.median(deviations)
    per_round = len(deviations) / len(rounds)
    return MEDIAN_SE * sd / math.sqrt(per_round)


@dataclass(frozen=True)
class ProcessTiming:
    """One process's paired speed-up of a cell and its interval (round_interval's, or one round's bootstrap)."""

    speedup: float
    low: float
    high: float
    rounds: int | None  # the rounds it was timed in (1 or None: the interval is a bootstrap over pairs)

    def own_se(self) -> float:
        """The s.e. of this process's log(speed-up) that its own interval implies: a rounds' prediction interval is
        t(R-1) x s x sqrt(2 / R) wide on each side, so s / sqrt(R) = half / (t(R-1) x sqrt(2)); one round's bootstrap
        interval of the median is about 1.96 s.e. wide on each side."""
        half = math.log(self.high / self.low) / 2
        if self.rounds and self.rounds > 1:
            return half / (t975(self.rounds - 1) * math.sqrt(2))
        return half / NORMAL975


@dataclass(frozen=True)
class ProcessInterval:
    """A speed-up timed in several processes and its 95% prediction interval (process_interval)."""

    speedup: float  # geometric mean of the processes' speed-ups
    low: float
    high: float
    processes: int
    process_sd: float  # s.d. of log(speed-up) across the processes
    rounds: int  # rounds over all processes


def process_interval(timings: Sequence[ProcessTiming]) -> ProcessInterval:
    """The speed-up of a cell timed in P >= 2 processes and where the next run's P-process value should fall.

    The same prediction interval as round_interval's, one level up: the processes are the unit that repeats (the spread
    between processes is the largest term on a shared machine; docs/timing.md). log(speed-up) +/- t(P-1) x s x
    sqrt(2 / P), s the s.d. of the processes' log speed-ups, floored by the root mean square of what each process's
    own interval implies for its value (ProcessTiming.own_se): processes that agree by chance claim no more than their
    rounds can."""
    kept = [t for t in timings if t.speedup > 0 and t.low > 0 and t.high >= t.low]
    if len(kept) < 2:
        raise ValueError(f"process_interval: {len(kept)} usable process timing(s) of {len(timings)}; needs two or more")
    logs = [math.log(t.speedup) for t in kept]
    center, between = statistics.fmean(logs), statistics.stdev(logs)
    own = math.sqrt(statistics.fmean([t.own_se() ** 2 for t in kept]))
    half = t975(len(kept) - 1) * max(between, own) * math.sqrt(2 / len(kept))
    rounds = sum(t.rounds or 1 for t in kept)
    return ProcessInterval(
        math.exp(center), math.exp(center - half), math.exp(center + half), len(kept), between, rounds
    )
