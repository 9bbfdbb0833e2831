"""The FLOPs of a timed call and its TFLOP/s: one formula for prefill, decode and layer cells (their tail).

FlashAttention's convention: the attention's analytic forward FLOPs, and in train mode forward + backward at 3.5x
(variants.train_flops); a layer cell adds its projections and MLP (dense matmuls: backward 2x forward, so 3x in train
mode). Two counts of the attention (variants.count_flops): what its backend executes (`flops`, what TFLOP/s divides)
and the algorithm's useful work (`useful_flops`; a band's visible pairs, where a banded kernel scores whole blocks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from variants import count_flops, train_flops


@dataclass(frozen=True)
class Flops:
    """The FLOPs of one timed call and its TFLOP/s (row fields)."""

    flops: int  # what the backend executes (masked work it does not skip included)
    useful_flops: int  # the algorithm's useful work
    tflops: float | None  # flops / latency / 1e12; None when the latency is not positive


def attention_flops(
    attn: Any, cell: Any, *, backend: str | None, N: int | None = None, M: int | None = None, causal: bool | None = None
) -> tuple[int, int]:
    """(executed, useful) forward FLOPs of the variant on the cell's shape (N, M, causal overridable: a decode step),
    K/V heads included (GQA)."""
    shape = (
        cell.batch,
        cell.heads,
        cell.seq_len if N is None else N,
        cell.kv_len if M is None else M,
        cell.head_dim,
        cell.causal if causal is None else causal,
    )
    return (
        count_flops(attn, *shape, H_kv=cell.kv_heads, executed=True, backend=backend),
        count_flops(attn, *shape, H_kv=cell.kv_heads),
    )


def flops_fields(
    attention_flops: int,
    latency_s: float,
    *,
    training: bool,
    linear_flops: int = 0,
    useful_attention_flops: int | None = None,
) -> Flops:
    """flops, useful_flops and tflops of one timed call of `latency_s` seconds.

    Args: attention_flops, the variant's executed forward FLOPs for the call; useful_attention_flops, its useful ones
    (default: the same); linear_flops, forward FLOPs of the matmuls around it (a layer cell's block; 0 for the attention
    alone); training, whether the call is forward + backward. tflops (from the executed count) is None when the latency
    is not positive.
    """

    def total(attention: int) -> int:
        attention, linear = int(attention), int(linear_flops)
        return train_flops(attention) + 3 * linear if training else attention + linear

    flops = total(attention_flops)
    useful = total(attention_flops if useful_attention_flops is None else useful_attention_flops)
    return Flops(flops, useful, flops / latency_s / 1e12 if latency_s > 0 else None)
