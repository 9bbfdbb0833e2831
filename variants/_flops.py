"""Analytic attention FLOPs, FlashAttention's convention: what achieved TFLOP/s are computed from.

A variant counts two things (variants.base): ``flops``, the useful work of its algorithm (what a paper's
complexity is about), and ``executed_flops``, what its backend really runs (a banded kernel's blocks reach
past the band; a chunked causal pass computes whole tiles on the diagonal). Both take the K/V head count
``H_kv`` as a keyword (default H). `count_flops` calls either on any variant, a plugin whose ``flops`` predates
H_kv included.
"""

from __future__ import annotations

import inspect
from typing import Any

# FlashAttention's convention: backward costs 2.5x the forward, so forward+backward is 3.5x.
BACKWARD_FLOPS_FACTOR = 2.5


def dense_flops(B: int, H: int, N: int, M: int, D: int, causal: bool) -> int:
    """FLOPs of exact attention's two matmuls: 2*N*M*D each; causal (bottom-right, M >= N) leaves out half of the last
    N x N block, N * (M - N/2) pairs: half of N x M when N == M."""
    total = 4 * B * H * N * M * D
    return total - 2 * B * H * N * N * D if causal else total


def train_flops(forward_flops: int) -> int:
    """Forward + backward FLOPs under FlashAttention's convention (backward = 2.5x forward)."""
    return int(round(forward_flops * (1 + BACKWARD_FLOPS_FACTOR)))


def count_flops(
    variant: Any,
    B: int,
    H: int,
    N: int,
    M: int,
    D: int,
    causal: bool,
    *,
    H_kv: int | None = None,
    executed: bool = False,
    backend: str | None = None,
) -> int:
    """The variant's forward FLOPs for a call shaped (B, H, N, D) x (B, H_kv, M, D): useful (`flops`) or, with
    `executed`, what `backend` runs (`executed_flops`). A plugin's method without the H_kv or backend keyword is
    called without it (its count then assumes H_kv = H)."""
    method = variant.executed_flops if executed else variant.flops
    keywords = {"H_kv": H if H_kv is None else H_kv, "backend": backend if executed else None}
    accepted = _keywords(method)
    return int(method(B, H, N, M, D, causal, **{k: v for k, v in keywords.items() if k in accepted and v is not None}))


def _keywords(method: Any) -> set[str]:
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return set()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return {"H_kv", "backend"}
    return {p.name for p in parameters}
