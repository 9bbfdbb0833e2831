"""The second clock on CPU: each timed block on wall and on CPU time; whether the machine took the cores away.

Each block is timed on wall time and on the timing thread's CPU time, and a cell is contended when the machine
took the cores away while it ran.

The clock is the timing thread's CPU time (time.thread_time), not the process's: the thread that runs the step is on
its critical path (it runs the serial parts and a share of every parallel region, and spins at its barriers), so on a
quiet machine its CPU time is about the block's wall time at any thread count; the process's CPU time would also count
intra-op workers spinning idle and the sweep's other threads, and need a thread count to divide by.

The cell's CPU share is its CPU seconds over its wall seconds across every kept timed block (the baseline's blocks of
a paired cell too). Below CONTENDED_SHARE the timing thread was off a core for more than half of the time it was timed:
the cell is `contended` and its wall times measure the machine's other jobs as much as the code (a variant made of many
small ops loses more to preemption than one fused call, a bias pairing does not remove). The row keeps its numbers;
`cpu_latency_s` is the CPU-time latency the report answers from under `--clock cpu`.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

CONTENDED_SHARE = 0.5  # cpu_share below this: the timing thread waited for a core more than it ran (contended)

Step = Callable[[], Any]


def cpu_share(cpu_s: float, wall_s: float) -> float | None:
    """The timing thread's CPU seconds per wall second over the timed blocks (about 1 on a quiet machine); None
    when nothing was timed."""
    return cpu_s / wall_s if wall_s > 0 else None


def is_contended(share: float | None) -> bool | None:
    """Whether a cell's CPU share says the machine took the cores away (None when unknown)."""
    return None if share is None else share < CONTENDED_SHARE


@dataclass
class ThreadClock:
    """Wall and CPU seconds of each timed block, on the timing thread.

    Two ways in: `timer` is a wall clock for torch.utils.benchmark.Timer that notes the CPU clock at each reading
    (timeit reads it once before and once after each block, so readings pair up into blocks); calling the clock as a
    block timer (harness.measure.pairing's BlockTimer) times `number` calls of a step and notes whose block it was.
    """

    readings: list[tuple[float, float]] = field(default_factory=list)  # (wall, cpu) of each timer() reading
    blocks: list[tuple[Step, float, float]] = field(default_factory=list)  # (step, wall s, cpu s) of each block

    def timer(self) -> float:
        cpu = time.thread_time()
        wall = time.perf_counter()
        self.readings.append((wall, cpu))
        return wall

    def __call__(self, step: Step, number: int) -> float:
        """Seconds per call of `number` back-to-back calls of `step` (wall), its CPU seconds noted."""
        cpu, wall = time.thread_time(), time.perf_counter()
        for _ in range(number):
            step()
        wall_s, cpu_s = time.perf_counter() - wall, time.thread_time() - cpu
        self.blocks.append((step, wall_s, cpu_s))
        return wall_s / number

    def timer_blocks(self, block_s: list[float]) -> list[tuple[float, float]]:
        """(wall s, cpu s) of the blocks read through `timer` that lasted `block_s` (the kept blocks' wall seconds, in
        order): torch's Timer.timeit runs an untimed warm-up block before each timed one, read on this clock too, so
        the kept blocks are found by their wall seconds (exact: Timer computes them from these readings). [] when one
        is not found."""
        pairs = [(end[0] - start[0], end[1] - start[1]) for start, end in zip(self.readings[::2], self.readings[1::2])]
        found, i = [], len(pairs) - 1
        for target in reversed(block_s):
            while i >= 0 and not math.isclose(pairs[i][0], target, rel_tol=1e-9, abs_tol=1e-12):
                i -= 1
            if i < 0:
                return []
            found.append(pairs[i])
            i -= 1
        return found[::-1]

    def step_blocks(self, step: Step, last: int) -> list[tuple[float, float]]:
        """(wall s, cpu s) of the last `last` blocks of `step` timed as a block timer."""
        mine = [(w, c) for s, w, c in self.blocks if s is step]
        return mine[-last:] if last > 0 else []


def contention_fields(
    variant: list[tuple[float, float]], calls_per_block: int, others: list[tuple[float, float]] = ()
) -> dict[str, Any]:
    """cpu_latency_s (median CPU seconds per call over the variant's blocks), cpu_share and contended, from the
    (wall s, cpu s) of the variant's kept blocks of `calls_per_block` calls and of the blocks timed beside them."""
    if not variant or calls_per_block < 1:
        return {}
    every = list(variant) + list(others)
    share = cpu_share(sum(c for _, c in every), sum(w for w, _ in every))
    return {
        "cpu_latency_s": statistics.median(c / calls_per_block for _, c in variant),
        "cpu_share": share,
        "contended": is_contended(share),
    }
