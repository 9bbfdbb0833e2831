"""Analytic attention FLOPs, FlashAttention's convention: what achieved TFLOP/s are computed from."""

from __future__ import annotations

# FlashAttention's convention: backward costs 2.5x the forward, so forward+backward is 3.5x.
BACKWARD_FLOPS_FACTOR = 2.5


def dense_flops(B: int, H: int, N: int, M: int, D: int, causal: bool) -> int:
    """FLOPs of exact attention's two matmuls: 2*N*M*D each, halved when causal (N == M)."""
    total = 4 * B * H * N * M * D
    return total // 2 if causal else total


def train_flops(forward_flops: int) -> int:
    """Forward + backward FLOPs under FlashAttention's convention (backward = 2.5x forward)."""
    return int(round(forward_flops * (1 + BACKWARD_FLOPS_FACTOR)))
