"""The second clock on CPU: whether the machine took the cores away while a cell was timed.

harness.measure.timer reads each timed block on wall time and on the timing thread's CPU time at the same moments;
this module judges those blocks: a cell is contended when the machine took the cores away while it ran.

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

import statistics
from typing import Any, Sequence

from harness.measure.timer import Block

CONTENDED_SHARE = 0.5  # cpu_share below this: the timing thread waited for a core more than it ran (contended)


def cpu_share(cpu_s: float, wall_s: float) -> float | None:
    """The timing thread's CPU seconds per wall second over the timed blocks (about 1 on a quiet machine); None
    when nothing was timed."""
    return cpu_s / wall_s if wall_s > 0 else None


def is_contended(share: float | None) -> bool | None:
    """Whether a cell's CPU share says the machine took the cores away (None when unknown)."""
    return None if share is None else share < CONTENDED_SHARE


def contention_fields(variant: Sequence[Block], others: Sequence[Block] = (), *, per: int = 1) -> dict[str, Any]:
    """cpu_latency_s (median CPU seconds per call over the variant's blocks, divided by `per`: the tokens of a decode
    generation), cpu_share and contended, from the variant's kept blocks and the blocks timed beside them (a paired
    cell's baseline); {} when nothing was timed or a block has no CPU time (CUDA)."""
    every = list(variant) + list(others)
    if not variant or any(b.cpu_s is None for b in every):
        return {}
    share = cpu_share(sum(b.cpu_s for b in every), sum(b.wall_s for b in every))
    return {
        "cpu_latency_s": statistics.median(b.cpu_per_call_s for b in variant) / per,
        "cpu_share": share,
        "contended": is_contended(share),
    }
