"""A fixed reference kernel that the baseline's own cells are paired with: what compare judges the baseline by.

Two quiet runs of one commit moved every absolute latency by 20-26% (issue 44): the machine's state, not the code.
A variant's cells are judged across runs by their paired speed-up over the baseline (the pairing cancels the machine
inside the cell); the baseline's own cells have no partner, so they are timed in alternation with this kernel, whose
code never changes with the project's (torch's SDPA at one fixed shape, float32, on the cell's device and thread
count), and compare judges the baseline by that paired ratio (row field reference_speedup; harness.report.normalize).
The kernel is torch's own function, not the dense variant: a regression of our dense is not cancelled; a new torch
moves it (compare notes the torch versions of both runs).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

SHAPE = (1, 8, 512, 64)  # (B, H, N, D) of q, k and v
KERNEL = f"torch.nn.functional.scaled_dot_product_attention, q k v {SHAPE} float32, non-causal"


def reference_step(device: torch.device | str) -> Callable[[], Any]:
    """The reference kernel as a step on `device`: SDPA over fixed seeded q, k, v of SHAPE (made here, once)."""
    generator = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(SHAPE, generator=generator, device=device) for _ in range(3))

    def step() -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    return step
