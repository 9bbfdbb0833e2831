"""Grouped-query attention helpers: the refusal without GQA, SDPA with enable_gqa, q heads grouped onto their K/V head.

Convention: q has H heads, k and v have H_kv heads with G = H // H_kv; query head h reads K/V
head h // G, so viewing q as (B, H_kv, G, N, D) puts each group beside its K/V head.
"""

from __future__ import annotations

import functools
import inspect

import torch.nn.functional as F
from torch import Tensor


def gqa_reasons(supported: bool, H: int, H_kv: int) -> list[str]:
    """Why a variant without GQA (Capabilities.gqa False: `supported`) refuses H_kv < H K/V heads ([] if it does not)."""
    if H_kv == H or supported:
        return []
    return [
        f"does not support grouped-query attention (H={H} query heads, H_kv={H_kv} K/V heads; "
        f"Capabilities.gqa is False): repeat K/V to H heads with k.repeat_interleave({H // max(H_kv, 1)}, dim=1)"
    ]


@functools.lru_cache(maxsize=None)
def _sdpa_has_enable_gqa() -> bool:
    """torch >= 2.5: F.scaled_dot_product_attention takes enable_gqa (checked once, when first needed)."""
    try:
        return "enable_gqa" in inspect.signature(F.scaled_dot_product_attention).parameters
    except (TypeError, ValueError):  # a builtin without a signature: parse the docstring instead
        return "enable_gqa" in (F.scaled_dot_product_attention.__doc__ or "")


def sdpa(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """F.scaled_dot_product_attention for q (..., H, N, D) and k, v (..., H_kv, M, D), H % H_kv == 0.

    Uses enable_gqa (no K/V copy) where torch has it; older torch gets K/V repeated to H heads.
    """
    H, Hkv = q.shape[-3], k.shape[-3]
    if H == Hkv:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale)
    if _sdpa_has_enable_gqa():
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale, enable_gqa=True
        )
    k, v = (t.repeat_interleave(H // Hkv, dim=-3) for t in (k, v))  # torch < 2.5: materialised
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale)


def group(x: Tensor, kv_heads: int) -> Tensor:
    """(B, H, N, D) -> (B, H_kv, G, N, D): the G query heads that read each K/V head."""
    B, H, N, D = x.shape
    return x.reshape(B, kv_heads, H // kv_heads, N, D)


def ungroup(x: Tensor) -> Tensor:
    """(B, H_kv, G, N, D) -> (B, H, N, D), the inverse of group."""
    B, Hkv, G, N, D = x.shape
    return x.reshape(B, Hkv * G, N, D)


def weighted_values(weights: Tensor, v: Tensor) -> Tensor:
    """Weights (B, H, R, M) applied to v (B, H_kv, M, D), each query head to its K/V head's v: (B, H, R, D).

    What an attention_weights(rows=...) gives is turned into the output on those rows without the N-row call."""
    return ungroup(group(weights, v.shape[1]) @ v[:, :, None].to(weights.dtype))


def xformers_layout(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v in xformers' layout: (B, N, H, D), or BMGHK (B, N, H_kv, G, D) for GQA.

    For GQA, k and v are expanded over G with stride 0 (xformers' documented GQA input; no copy).
    """
    H, Hkv = q.shape[1], k.shape[1]
    if H == Hkv:
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    G = H // Hkv
    q5 = group(q, Hkv).permute(0, 3, 1, 2, 4)  # (B, N, H_kv, G, D)
    k5, v5 = (t[:, :, None].expand(-1, -1, G, -1, -1).permute(0, 3, 1, 2, 4) for t in (k, v))  # (B, M, H_kv, G, D)
    return q5, k5, v5


def from_xformers_layout(out: Tensor) -> Tensor:
    """xformers' output (B, N, H, D) or (B, N, H_kv, G, D) -> (B, H, N, D)."""
    if out.dim() == 4:
        return out.transpose(1, 2)
    B, N, Hkv, G, D = out.shape
    return out.permute(0, 2, 3, 1, 4).reshape(B, Hkv * G, N, D)
