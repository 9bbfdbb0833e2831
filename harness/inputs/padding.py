"""Ragged padding masks: each batch row keeps a different number of real keys, the mean padded fraction as asked."""

from __future__ import annotations

import torch
from torch import Tensor


def padded_lengths(B: int, M: int, fraction: float, *, seed: int) -> list[int]:
    """Real tokens per batch row: padded fractions spread evenly around `fraction` (mean = fraction), shuffled by `seed`.

    Row fractions run from fraction - s to fraction + s with s = min(fraction, 1 - fraction) / 2, so
    every row keeps at least one token and B >= 2 rows differ. fraction 0 gives M for every row.
    """
    if not 0 <= fraction < 1:
        raise ValueError(f"padding fraction must be in [0, 1), got {fraction}")
    if fraction == 0:
        return [M] * B
    spread = min(fraction, 1 - fraction) / 2
    steps = [(2 * b / (B - 1) - 1) if B > 1 else 0.0 for b in range(B)]
    order = torch.randperm(B, generator=torch.Generator().manual_seed(int(seed) + 17)).tolist()
    return [max(1, M - round((fraction + spread * steps[i]) * M)) for i in order]


def padding_mask(B: int, M: int, fraction: float, *, seed: int, device: torch.device | str = "cpu") -> Tensor | None:
    """kv_mask (B, M), True = real token, padding on the left (so decoded tokens follow the real ones); None for 0."""
    if fraction == 0:
        return None
    lengths = torch.tensor(padded_lengths(B, M, fraction, seed=seed), device=device)  # (B,)
    positions = torch.arange(M, device=device)  # (M,)
    return positions[None, :] >= (M - lengths)[:, None]  # (B, M)
