"""The FLOPs of a timed call and its TFLOP/s: one formula for prefill, decode and layer cells (their tail).

FlashAttention's convention: the attention's analytic forward FLOPs (the variant's own count), and in
train mode forward + backward at 3.5x (variants.train_flops); a layer cell adds its projections and MLP
(dense matmuls: backward 2x forward, so 3x in train mode).
"""

from __future__ import annotations

from typing import Any


def flops_fields(
    attention_flops: int,
    latency_s: float,
    *,
    training: bool,
    linear_flops: int = 0,
    executed_attention_flops: int | None = None,
) -> dict[str, Any]:
    """flops, tflops and executed_flops of one timed call of `latency_s` seconds.

    Args: attention_flops, the variant's forward FLOPs for the call; linear_flops, forward FLOPs of the
    matmuls around it (a layer cell's block; 0 for the attention alone); training, whether the call is
    forward + backward; executed_attention_flops, the forward FLOPs its backend executes
    (AttentionVariant.executed_flops; None: attention_flops). tflops is None when the latency is not positive.
    """
    from variants import train_flops

    def total(attention: int) -> int:
        return train_flops(attention) + 3 * int(linear_flops) if training else attention + int(linear_flops)

    flops = total(int(attention_flops))
    executed = total(int(attention_flops if executed_attention_flops is None else executed_attention_flops))
    return {"flops": flops, "tflops": flops / latency_s / 1e12 if latency_s > 0 else None, "executed_flops": executed}
