"""The FLOPs of a timed call and its TFLOP/s: one formula for prefill, decode and layer cells (their tail).

FlashAttention's convention: the attention's analytic forward FLOPs (the variant's own count), and in
train mode forward + backward at 3.5x (variants.train_flops); a layer cell adds its projections and MLP
(dense matmuls: backward 2x forward, so 3x in train mode).
"""

from __future__ import annotations

from typing import Any


def flops_fields(attention_flops: int, latency_s: float, *, training: bool, linear_flops: int = 0) -> dict[str, Any]:
    """flops and tflops of one timed call of `latency_s` seconds.

    Args: attention_flops, the variant's forward FLOPs for the call; linear_flops, forward FLOPs of the
    matmuls around it (a layer cell's block; 0 for the attention alone); training, whether the call is
    forward + backward. tflops is None when the latency is not positive.
    """
    from variants import train_flops

    attention, linear = int(attention_flops), int(linear_flops)
    flops = train_flops(attention) + 3 * linear if training else attention + linear
    return {"flops": flops, "tflops": flops / latency_s / 1e12 if latency_s > 0 else None}
