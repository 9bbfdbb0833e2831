"""Paired timing: a variant and its baseline timed in alternating blocks (ABBA...), so drifting load hits both.

Pure over its inputs: the steps and the block timer are arguments, so tests drive them with a fake
clock. A *block* is `number` back-to-back calls of one step, timed as a whole (harness.measure.timer.Block); its
per-call seconds are one sample. Pair i is (variant block i, baseline block i), run next to each other, in
the order AB, BA, AB, ... so neither step always runs second. The speed-up of a pair is
baseline / variant. The pairs are grouped in consecutive *rounds* of equally many pairs (pair_plan);
harness.measure.rounds gives the interval over rounds. A cell timed in one round keeps
the median over pairs with a bootstrap interval over pairs (fixed seed, so a run is reproducible).

Before the pairs, `warm_up` times blocks of a step until its per-call rate is stable (two blocks in a row within
WARM_TOLERANCE), rather than a fixed count of calls: a variant's first blocks after its accuracy check run slow
while the allocator and caches settle, by a different amount on each run.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from harness.measure.timer import Block, quantile

Step = Callable[[], Any]
BlockTimer = Callable[[Step, int], Block]  # (step, number) -> the block of `number` back-to-back calls
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95
WARM_TOLERANCE = 0.05  # a step is warm when two consecutive blocks' per-call seconds agree within this share
WARM_MAX_BLOCKS = 8  # ... or after this many blocks (a step whose rate never settles: its pairs say so)
# pairs a cell aims for within its time budget (at least settings.repeats, at most this when calls are fast)
TARGET_PAIRS = 16
ROUNDS = 4  # rounds of two or more pairs each the pairs are split into, fewer when fewer pairs fit
MIN_ROUNDS = 3  # fewer pairs than this: one round, the bootstrap over pairs (two rounds give a t of 12.7)
SLOW_PAIRS = 3  # pairs when one call of either step already exceeds the budget...
SLOWEST_PAIRS = 2  # ... and when one pair takes longer than SLOW_PAIR_S
SLOW_PAIR_S = 1.0  # seconds


@dataclass(frozen=True)
class PairedTimes:
    """The timed blocks: variant[i] and baseline[i] ran next to each other (baseline empty when unpaired)."""

    variant: list[Block]
    baseline: list[Block]
    rounds: int = 1  # consecutive groups of equally many pairs (harness.measure.rounds)

    @property
    def variant_s(self) -> list[float]:
        """Per-call seconds of each of the variant's blocks."""
        return [b.per_call_s for b in self.variant]

    @property
    def baseline_s(self) -> list[float]:
        """Per-call seconds of each of the baseline's blocks."""
        return [b.per_call_s for b in self.baseline]

    @property
    def variant_calls(self) -> int:
        """Timed calls of the variant over all blocks."""
        return sum(b.calls for b in self.variant)

    @property
    def ratios(self) -> list[float]:
        """baseline / variant per pair: the speed-up each pair measured."""
        return [b / a for a, b in zip(self.variant_s, self.baseline_s) if a > 0]

    def by_round(self, ratios: Sequence[float]) -> list[list[float]]:
        """Per-pair values (one per pair, in order) split into this timing's rounds."""
        size = len(ratios) // self.rounds
        return [list(ratios[i * size : (i + 1) * size]) for i in range(self.rounds)]


def time_pairs(
    variant: Step,
    baseline: Step | None,
    timer: BlockTimer,
    *,
    pairs: int,
    number_variant: int = 1,
    number_baseline: int = 1,
    rounds: int = 1,
) -> PairedTimes:
    """Time `pairs` blocks of each step in alternation (AB, BA, AB, ...); `baseline` None times the variant alone.

    Args:
        variant, baseline: the two steps (already warm).
        timer: times a block (harness.measure.timer.StepTimer.block: wall and CPU time on CPU, CUDA events on CUDA).
        pairs: blocks of each step.
        number_variant, number_baseline: calls per block of each, so both blocks take about as long.
        rounds: how many consecutive groups of equally many pairs they form (`pairs` a multiple of it).
    """
    if pairs % rounds:
        raise ValueError(f"time_pairs: pairs={pairs} do not split into {rounds} rounds of equally many pairs")
    a_times: list[Block] = []
    b_times: list[Block] = []
    for i in range(pairs):
        order = ((variant, number_variant, a_times), (baseline, number_baseline, b_times))
        for step, number, out in order if i % 2 == 0 else order[::-1]:
            if step is not None:
                out.append(timer(step, number))
    return PairedTimes(a_times, b_times, rounds)


def warm_up(step: Step, timer: BlockTimer, number: int) -> float:
    """Time blocks of `number` calls until two in a row agree within WARM_TOLERANCE (at most WARM_MAX_BLOCKS) and
    return the last block's per-call seconds: the step's warm rate, from which its blocks are sized."""
    last = timer(step, number).per_call_s
    for _ in range(WARM_MAX_BLOCKS - 1):
        now = timer(step, number).per_call_s
        if abs(now - last) <= WARM_TOLERANCE * max(now, last):
            return now
        last = now
    return last


def pair_plan(call_s: float, base_call_s: float, budget: float, repeats: int, slow: bool) -> tuple[int, int, int, int]:
    """(calls per variant block, calls per baseline block, pairs, rounds) that fill the time budget: blocks of
    budget / (2 x TARGET_PAIRS) seconds, as many pairs as fit (at least `repeats`); when `slow`, SLOW_PAIRS or
    SLOWEST_PAIRS pairs of one call of the slower step and as many of the faster as last as long. Split into rounds:
    up to ROUNDS rounds of two pairs or more (the pairs rounded up to fill them) where MIN_ROUNDS such rounds fit;
    else each pair its own round (each already spans a share of the budget a round would), down to MIN_ROUNDS pairs;
    fewer pairs: one round."""
    if slow:  # the faster step's block lasts the slower's one call (dense at 4K against the reference kernel: 100x)
        longest = max(call_s, base_call_s)
        pairs = SLOWEST_PAIRS if call_s + base_call_s > SLOW_PAIR_S else SLOW_PAIRS
        return _rounds(calls_per_block(call_s, longest), calls_per_block(base_call_s, longest), pairs)
    block_s = budget / (2 * TARGET_PAIRS)
    na, nb = calls_per_block(call_s, block_s), calls_per_block(base_call_s, block_s)
    pair_s = na * call_s + nb * base_call_s
    return _rounds(na, nb, max(repeats, min(TARGET_PAIRS, int(budget / pair_s) if pair_s > 0 else TARGET_PAIRS)))


def _rounds(na: int, nb: int, pairs: int) -> tuple[int, int, int, int]:
    """pair_plan's split of `pairs` into rounds (see there)."""
    if pairs < MIN_ROUNDS:
        return na, nb, pairs, 1
    rounds = min(ROUNDS, pairs // 2) if pairs >= 2 * MIN_ROUNDS else pairs
    return na, nb, rounds * -(-pairs // rounds), rounds


def calls_per_block(call_s: float, block_s: float) -> int:
    """Back-to-back calls that fill a block of `block_s` seconds, given one call's seconds (at least one)."""
    return max(1, int(block_s / call_s)) if call_s > 0 else 1


def bootstrap_interval(
    ratios: Sequence[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> tuple[float, float, float]:
    """(median, low, high): the median of the ratios and its percentile-bootstrap interval over pairs.

    With a single pair the interval is that one value (nothing to resample: the row's noise flag says so).
    """
    if not ratios:
        raise ValueError("bootstrap_interval: no ratios (no pair was timed)")
    median = statistics.median(ratios)
    if len(ratios) == 1:
        return median, median, median
    rng = random.Random(seed)
    n = len(ratios)
    medians = sorted(statistics.median(rng.choices(ratios, k=n)) for _ in range(resamples))
    tail = (1 - confidence) / 2
    low = medians[int(tail * (resamples - 1))]
    high = medians[int(round((1 - tail) * (resamples - 1)))]
    return median, low, high


def spread(values: Sequence[float]) -> float:
    """p80 / p20 of positive values (1.0 for fewer than two): how much the repeated blocks disagree."""
    if len(values) < 2:
        return 1.0
    low = quantile(list(values), 0.2)
    return quantile(list(values), 0.8) / low if low > 0 else float("inf")
