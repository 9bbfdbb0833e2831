"""A fixed reference kernel timed at the start of every run: what compare divides the baseline's latency by.

Two quiet runs of one commit moved every absolute latency by 20-26% (issue 44): the machine's state, not the code.
A variant's cells are judged across runs by their paired speed-up over the baseline (the pairing cancels the machine
inside the cell); the baseline's own cells have no partner, so each run also times this kernel, whose code never
changes with the project's (torch's SDPA at one fixed shape, float32, on the run's device and thread count), and
compare judges the baseline by its latency over this kernel's (harness.report.normalize). env.json's `reference`
holds it. The kernel is torch's own function, not the dense variant: a regression of our dense is not cancelled.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.measure.noise import larger, load_per_cpu
from harness.measure.pairing import calls_per_block, warm_up
from harness.measure.timer import Measurement, StepTimer

SHAPE = (1, 8, 512, 64)  # (B, H, N, D) of q, k and v
BUDGET_S = 0.5  # seconds of timing
BLOCKS = 20  # blocks the budget is split into; the median block's per-call seconds is the reference
KERNEL = "torch.nn.functional.scaled_dot_product_attention, q k v {shape} float32, non-causal"


def time_reference(device: str, *, budget_s: float = BUDGET_S) -> dict[str, Any]:
    """The reference kernel's median per-call seconds on `device` (after a warm-up to a stable rate), with what it is
    and the load per CPU it was timed under: env.json's `reference`."""
    load_before = load_per_cpu()
    generator = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(SHAPE, generator=generator, device=device) for _ in range(3))

    def step() -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    timer = StepTimer(device)
    step()
    once = timer.block(step, 1).per_call_s
    number = calls_per_block(once, budget_s / BLOCKS)
    warm_up(step, timer.block, number)
    blocks = Measurement(tuple(timer.block(step, number) for _ in range(BLOCKS)))
    return {
        "kernel": KERNEL.format(shape=SHAPE),
        "seconds": blocks.latency_fields()["latency_s"],
        "threads": torch.get_num_threads(),
        "load_per_cpu": larger(load_before, load_per_cpu()),
    }
