"""Exact softmax attention in any dtype (float64 by default): the gold every variant is scored against.

Causal queries are the last N of the M key positions (bottom-right: query row i sits at position M - N + i, as
FlashAttention >= 2.1 and torch's causal_lower_right align them); N == M is the plain case.
`rows=` computes only a subset of query rows, so the harness gets a float64 answer at large N
without an N x M float64 matrix; `pattern=` applies a variant's sparsity pattern (e.g. a band).
The model features `softcap=` and `sink_logits=` (variants/_model_features.py) are applied as defined there.
k and v may have H_kv heads dividing q's H (GQA/MQA): query heads are grouped onto their K/V head,
never K/V repeated.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from variants._checks import check_qkv, query_offset, softmax_scale
from variants._model_features import check_model_features, softcapped, softmax_with_sinks

# (query_idx (R,), key_idx (M,)) -> bool (R, M): which keys each query may see; None = all.
PatternFn = Callable[[Tensor, Tensor], "Tensor | None"]


def visibility(
    query_idx: Tensor,
    M: int,
    *,
    causal: bool = False,
    kv_mask: Tensor | None = None,
    pattern: PatternFn | None = None,
) -> Tensor | None:
    """Bool mask of visible keys, broadcastable to (B, 1, R, M), or None when every key is visible.

    query_idx: the queries' positions among the M keys (under causal, row r of N sits at r + query_offset(N, M, causal)).
    Combines causality (key j <= query i), padding (kv_mask (B, M), True = real) and a pattern.
    """
    key_idx = torch.arange(M, device=query_idx.device)
    mask = None
    if causal:
        mask = key_idx[None, :] <= query_idx[:, None]  # (R, M)
    if pattern is not None:
        allowed = pattern(query_idx, key_idx)
        if allowed is not None:
            mask = allowed if mask is None else mask & allowed
    if mask is not None:
        mask = mask[None, None]  # (1, 1, R, M)
    if kv_mask is not None:
        padding = kv_mask[:, None, None, :]  # (B, 1, 1, M)
        mask = padding if mask is None else mask & padding
    return mask


def reference_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    kv_mask: Tensor | None = None,
    pattern: PatternFn | None = None,
    rows: Tensor | None = None,
    dtype: torch.dtype | None = torch.float64,
    softcap: float | None = None,
    sink_logits: Tensor | None = None,
) -> Tensor:
    """softmax(q k^T / sqrt(D) + mask) v, computed in `dtype` (None: q's dtype).

    Args:
        q: (B, H, N, D); k, v: (B, H_kv, M, D), H % H_kv == 0 (head h reads K/V head h // (H // H_kv)).
        causal: query row i sees keys j <= i + M - N (the queries are the last N positions; M >= N).
        kv_mask: bool (B, M), True = real key.
        pattern: extra visibility, e.g. ``variant.pattern``.
        rows: optional (R,) query indices; only those rows are computed.
        dtype: compute dtype; float64 for a gold answer.
        softcap: scores s -> softcap * tanh(s / softcap) before the mask and softmax (Gemma 2).
        sink_logits: (H,), one logit per query head in the softmax's denominator, with no value (gpt-oss's s_aux).
    Returns:
        (B, H, R, D) in `dtype` (R = N without rows). A query that sees no key gets zeros.
    """
    check_qkv(q, k, v, causal=causal, kv_mask=kv_mask)
    check_model_features(q, softcap=softcap, sink_logits=sink_logits)
    N = q.shape[2]
    if rows is None:
        rows = torch.arange(N, device=q.device)
    else:
        rows = torch.as_tensor(rows, device=q.device, dtype=torch.long)
        if rows.dim() != 1 or (rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= N)):
            raise ValueError(f"rows must be 1-D query indices in [0, {N}), got {rows.tolist()[:8]}...")
    dtype = dtype or q.dtype
    positions = rows + query_offset(N, k.shape[2], causal)
    qr, features = q[:, :, rows].to(dtype), {"softcap": softcap, "sink_logits": sink_logits}
    weights = _weights(qr, k.to(dtype), positions, causal=causal, kv_mask=kv_mask, pattern=pattern, **features)
    B, H, R, M = weights.shape
    Hkv = k.shape[1]
    grouped = weights.view(B, Hkv, H // Hkv, R, M)  # (B, H_kv, G, R, M)
    return torch.einsum("bkgrm,bkmd->bkgrd", grouped, v.to(dtype)).reshape(B, H, R, -1)  # (B, H, R, D)


def _weights(
    qr: Tensor,
    k: Tensor,
    positions: Tensor,
    *,
    causal: bool,
    kv_mask: Tensor | None,
    pattern: PatternFn | None,
    softcap: float | None = None,
    sink_logits: Tensor | None = None,
) -> Tensor:
    """softmax over visible keys for query rows qr (B, H, R, D) at `positions` (R,) among the keys: (B, H, R, M).
    softcap caps the scaled scores before the mask; sink_logits join each head's denominator (rows sum below 1)."""
    B, H, R, D = qr.shape
    Hkv, M = k.shape[1], k.shape[2]
    grouped = qr.reshape(B, Hkv, H // Hkv, R, D)  # (B, H_kv, G, R, D): head h = kv * G + g
    scores = torch.einsum("bkgrd,bkmd->bkgrm", grouped, k).reshape(B, H, R, M) * softmax_scale(D)  # (B, H, R, M)
    scores = softcapped(scores, softcap)
    mask = visibility(positions, M, causal=causal, kv_mask=kv_mask, pattern=pattern)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    # Softmax in at least float32 so float16/bfloat16 references stay meaningful.
    promoted = torch.promote_types(qr.dtype, torch.float32)
    weights = softmax_with_sinks(scores.to(promoted), sink_logits, dtype=promoted)
    if mask is not None and not bool(mask.any(-1).all()):  # a row with no visible key: softmax's NaN -> 0
        weights = weights.nan_to_num(0.0)  # only then (a pass over R x M); not in place: softmax's backward reads it
    return weights.to(qr.dtype)


def attention_weights(
    q: Tensor,
    k: Tensor,
    *,
    causal: bool = False,
    kv_mask: Tensor | None = None,
    pattern: PatternFn | None = None,
    dtype: torch.dtype = torch.float64,
    rows: Tensor | None = None,
) -> Tensor:
    """The exact attention matrix softmax(q k^T / sqrt(D) + mask): (B, H, N, M) in `dtype`, or only the query
    rows `rows` (R,): (B, H, R, M).

    k may have H_kv heads dividing H (GQA); the result has a row block per query head.
    """
    N = q.shape[2]
    check_qkv(q, k, k, causal=causal, kv_mask=kv_mask)
    rows = torch.arange(N, device=q.device) if rows is None else rows.to(q.device)
    positions = rows + query_offset(N, k.shape[2], causal)
    return _weights(q[:, :, rows].to(dtype), k.to(dtype), positions, causal=causal, kv_mask=kv_mask, pattern=pattern)


class PatternWeights:
    """attention_weights for a variant exact to its pattern (dense, chunked, sliding_window): the reference's float64
    softmax weights over the keys its pattern, causality and padding leave visible."""

    def attention_weights(
        self, q: Tensor, k: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None, rows: Tensor | None = None
    ) -> Tensor:
        pattern = getattr(self, "pattern", None)
        return attention_weights(q, k, causal=causal, kv_mask=kv_mask, pattern=pattern, rows=rows)
